"""Keep up to `max_in_flight` blocking calls running at once, refilling the window as each one finishes.

An LLM engine (vLLM, an API) is fastest when it always has enough requests to batch; submitting in chunks
that drain before the next one starts leaves it idle while the slowest request of each chunk finishes.
Threads, not asyncio: the callers use blocking urllib3 connection pools, and at a few hundred requests per
second the GIL is not the limit (docs/llm-throughput.md has the measured ceiling).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


def bounded_map(
    call: Callable[[Item], Result], items: Iterable[Item], max_in_flight: int
) -> Iterator[tuple[Item, Result]]:
    """Yield (item, call(item)) in completion order, with at most `max_in_flight` calls running.

    Items are drawn lazily, so a million-item iterable never becomes a million futures. The first exception
    stops the submission but cancels nothing already running (a request in flight cannot be recalled): every
    call that succeeds, before or after the failure, is still yielded - so that the caller stores what was
    paid for - and then the first exception is raised.
    """
    if max_in_flight < 1:
        raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
    pending: dict[Future[Result], Item] = {}
    source = iter(items)
    exhausted = False
    with ThreadPoolExecutor(max_workers=max_in_flight, thread_name_prefix="inflight") as executor:

        def refill() -> None:
            nonlocal exhausted
            while not exhausted and len(pending) < max_in_flight:
                try:
                    item = next(source)
                except StopIteration:
                    exhausted = True
                    return
                pending[executor.submit(call, item)] = item

        error: BaseException | None = None
        try:
            refill()
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    item = pending.pop(future)
                    failure = future.exception()
                    if failure is None:
                        yield item, future.result()
                    elif error is None:
                        error, exhausted = failure, True
                refill()
            if error is not None:
                raise error
        finally:
            exhausted = True  # a raised error (or a closed generator) submits nothing more

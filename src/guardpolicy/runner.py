"""How every stage and CLI operation runs: logging to stderr, and our errors as one line plus an exit status.

Exit status 2: bad input or configuration (the message names file, row and field). Exit status 1: a critical
data expectation failed. Tracebacks are kept for genuine bugs. A stage that DVC runs also leaves its timing
record (guardpolicy.timing). Stage scripts are one call: `run_stage("module:function")`, which loads the
module inside `stage_imports()` and hands the function the repository's layout.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from guardpolicy.errors import GuardpolicyError, ValidationFailed
from guardpolicy.timing import STAGE_ENV, write_stage_record

EXIT_VALIDATION = 1
EXIT_BAD_INPUT = 2


@contextlib.contextmanager
def stage_imports(*preload: str) -> Iterator[None]:
    """Load a stage script's modules (and `preload`, the heavy ones its stage imports lazily) with the cyclic
    garbage collector paused, then freeze what they made.

    Why: importing torch + transformers allocates a few hundred thousand long-lived objects; with the
    collector on, its passes during the import walk them again and again, and the collection at interpreter
    exit walks them once more. Measured on the 2-core machine: a smoke `train@` process took 5.7-5.9 s wall,
    4.3-4.6 s with its imports here — paid once per stage process in every `dvc repro`. Module-level objects
    live as long as the process anyway, so `gc.freeze()` (they move to the permanent generation, never
    scanned again) loses nothing; objects made later are collected as usual. For the top of a one-shot
    script, not a library.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for module in preload:
            importlib.import_module(module)
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


def with_layout(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` with its `layout` keyword filled by the repository's layout (guardpolicy.layout: DVC_ROOT
    under DVC, else the repository around the working directory) and hidden from the command line; a function
    without that keyword is returned as it is."""
    import inspect

    signature = inspect.signature(function)
    if "layout" not in signature.parameters:
        return function

    visible = signature.replace(parameters=[p for p in signature.parameters.values() if p.name != "layout"])

    def call(*args: Any, **kwargs: Any) -> Any:
        from guardpolicy.layout import Layout

        # Bind against the signature without `layout`, then rebuild the call on the full signature: fire hands
        # optional parameters positionally (their defaults included), so a parameter declared after `layout`
        # (baseline's `device`) would otherwise land on `layout` itself.
        given = visible.bind(*args, **kwargs).arguments | {"layout": Layout.discover()}
        ordered = {name: given[name] for name in signature.parameters if name in given}
        call_with = inspect.BoundArguments(signature, ordered)  # type: ignore[arg-type]
        return function(*call_with.args, **call_with.kwargs)

    call.__signature__ = visible  # type: ignore[attr-defined]
    call.__doc__, call.__name__ = function.__doc__, function.__name__
    return call


def run_stage(target: str) -> None:
    """The whole body of a `pipelines/<stage>.py` script: import `target` ("package.module:function") inside
    `stage_imports`, then run the function from the command line (python-fire: a foreach stage's key is its
    positional argument) with the repository's layout (`with_layout`), wrapped by `guarded`."""
    import fire

    module, _, name = target.partition(":")
    with stage_imports(module):
        function = getattr(sys.modules[module], name)
    fire.Fire(guarded(with_layout(function)))


def configure_logging(level: int = logging.INFO) -> None:
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )


def guarded(operation: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap an operation for the command line (fire keeps the signature, so flags and help still work)."""

    @functools.wraps(operation)
    def run(*args: Any, **kwargs: Any) -> Any:
        configure_logging()
        try:
            if os.environ.get(STAGE_ENV):
                # Under DVC: refuse to run on a file params or a registry name that the stage's deps miss.
                from guardpolicy.dvcdeps import check_current_stage

                check_current_stage()
            result = operation(*args, **kwargs)
        except ValidationFailed as exc:
            print(f"validation failed: {exc}", file=sys.stderr)
            sys.exit(EXIT_VALIDATION)
        except GuardpolicyError as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(EXIT_BAD_INPUT)
        # Only under DVC (DVC_STAGE set): the stage's timing record, after its outputs are complete.
        write_stage_record()
        return result

    return run

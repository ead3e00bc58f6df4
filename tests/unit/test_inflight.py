"""The bounded in-flight window of the LLM clients: what succeeds around a failure is still handed over."""

from __future__ import annotations

import threading
import time

import pytest

from guardpolicy.inflight import bounded_map


def test_calls_finishing_after_a_failure_are_yielded_before_the_error() -> None:
    def call(item: int) -> int:
        if item == 0:
            raise RuntimeError("request 0 failed")
        time.sleep(0.2)  # still in flight when request 0 fails
        return item * 10

    yielded = []
    with pytest.raises(RuntimeError, match="request 0 failed"):
        for item, result in bounded_map(call, range(4), max_in_flight=4):
            yielded.append((item, result))
    # Requests already sent were paid for: the caller gets to store their answers.
    assert sorted(yielded) == [(1, 10), (2, 20), (3, 30)]


def test_nothing_is_submitted_after_a_failure() -> None:
    started = []
    lock = threading.Lock()

    def call(item: int) -> int:
        with lock:
            started.append(item)
        if item == 1:
            raise RuntimeError("request 1 failed")
        time.sleep(0.1)
        return item

    with pytest.raises(RuntimeError, match="request 1 failed"):
        list(bounded_map(call, range(100), max_in_flight=2))
    assert sorted(started) == [0, 1]


def test_every_item_is_yielded_once_with_at_most_the_window_in_flight() -> None:
    active = 0
    most = 0
    lock = threading.Lock()

    def call(item: int) -> int:
        nonlocal active, most
        with lock:
            active += 1
            most = max(most, active)
        time.sleep(0.01)
        with lock:
            active -= 1
        return item + 1

    results = dict(bounded_map(call, range(50), max_in_flight=5))
    assert results == {i: i + 1 for i in range(50)}
    assert most <= 5

"""The batched SQLite table under both LLM caches: rows added together are committed together, the commit
interval is kept without a further add, and a failed commit leaves no transaction open."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from guardpolicy import sqlite_store
from guardpolicy.sqlite_store import BatchedTable, flushed_on_exit


def table(path: Path) -> BatchedTable:
    return BatchedTable(
        path / "answers.sqlite", "answers", ("key", "value"), "key TEXT PRIMARY KEY, value TEXT"
    )


def committed(path: Path) -> int:
    with sqlite3.connect(path / "answers.sqlite") as reader:
        return reader.execute("SELECT COUNT(*) FROM answers").fetchone()[0]


def test_rows_added_together_are_never_split_across_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "COMMIT_INTERVAL_S", 3600.0)
    monkeypatch.setattr(sqlite_store, "COMMIT_EVERY", 2)
    store = table(tmp_path)
    store.add(("a", "1"))
    assert committed(tmp_path) == 0
    # The batch threshold is crossed in the middle of these three: all of them go in one commit.
    store.add_many([("b", "2"), ("c", "3"), ("d", "4")])
    assert committed(tmp_path) == 4
    store.close()


def test_a_waiting_row_is_committed_by_the_interval_without_another_add(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "COMMIT_INTERVAL_S", 0.2)
    monkeypatch.setattr(sqlite_store, "COMMIT_EVERY", 1000)
    store = table(tmp_path)
    store.add(("a", "1"))
    # The caller now computes for a long time and adds nothing: the row must not wait for it.
    deadline = time.monotonic() + 10
    while committed(tmp_path) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert committed(tmp_path) == 1
    store.close()
    assert not store._flusher.is_alive()


def test_a_failed_commit_keeps_its_rows_and_leaves_no_transaction_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "COMMIT_INTERVAL_S", 3600.0)
    store = table(tmp_path)
    store.add(("good", "1"))
    store.add(("bad", "2", "a column too many"))
    with pytest.raises(sqlite3.ProgrammingError, match="bindings"):
        store.flush()
    # The same error again, not "cannot start a transaction within a transaction", which would hide it.
    with pytest.raises(sqlite3.ProgrammingError, match="bindings"):
        store.flush()
    assert store.pending("good") == ("good", "1")
    assert committed(tmp_path) == 0


class FailingFlush:
    def __init__(self) -> None:
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1
        raise sqlite3.OperationalError("database is locked")


def test_a_failing_flush_does_not_hide_the_error_that_stopped_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    table = FailingFlush()
    with pytest.raises(RuntimeError, match="HTTP 401"), flushed_on_exit(table):
        raise RuntimeError("judge at http://x: HTTP 401")
    assert table.flushes == 1
    assert (
        "could not store the answers that arrived before the error below: database is locked" in caplog.text
    )


def test_a_failing_flush_after_a_clean_run_is_raised() -> None:
    table = FailingFlush()
    with pytest.raises(sqlite3.OperationalError, match="locked"), flushed_on_exit(table):
        pass

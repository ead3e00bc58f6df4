"""One SQLite table of answers, shared by processes and written in batches: the storage under the committee's
answer cache and the baselines' raw-output cache.

WAL mode with a busy timeout lets several processes (queued experiments, a second stage) share the file on a
local disk (guardpolicy.shared_cache refuses network file systems). Rows are added as answers arrive and
committed in batches - every COMMIT_EVERY rows, by a background thread once a row has waited COMMIT_INTERVAL_S
seconds, and on `flush` / `close` - because one commit per answer caps a run at a few hundred answers per
second on a slow disk; a killed run loses at most the rows of its last second (or batch), which the rerun asks
again. Rows added together (`add_many`) are committed together: a resumed run never finds half of them.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

COMMIT_EVERY = 64
COMMIT_INTERVAL_S = 1.0
# How long a writer waits for another process's write lock on the shared file before failing.
BUSY_TIMEOUT_MS = 60_000


class BatchedTable:
    """Rows of one table keyed by their first column, `INSERT OR REPLACE`d in batches; thread-safe."""

    def __init__(self, path: str | Path, table: str, columns: Sequence[str], schema: str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.table = table
        self._insert = (
            f"INSERT OR REPLACE INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
        )
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            self.path, check_same_thread=False, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000
        )
        self._db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"CREATE TABLE IF NOT EXISTS {table} ({schema})")
        self._pending: dict[Any, tuple] = {}
        self._last_commit = time.monotonic()
        # The interval is kept by a thread of its own, not checked on the next add: a backend that hands over
        # a whole batch at once and then computes for minutes would otherwise leave that batch uncommitted.
        # The thread holds only a weak reference, so a table nobody closes is still collected.
        self._closed = threading.Event()
        self._flusher = threading.Thread(
            target=_commit_periodically,
            args=(weakref.ref(self), self._closed),
            name=f"sqlite-flush-{table}",
            daemon=True,
        )
        self._flusher.start()
        weakref.finalize(self, self._closed.set)

    def pending(self, key: Any) -> tuple | None:
        """The row added under `key` and not committed yet (this process's own), or None."""
        with self._lock:
            return self._pending.get(key)

    def query(self, sql: str, parameters: Sequence[Any] = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, parameters).fetchall()

    def add(self, row: tuple) -> None:
        """Add one row; committed with its batch."""
        self.add_many((row,))

    def add_many(self, rows: Iterable[tuple]) -> None:
        """Add `rows`; they are committed together, in one batch (never split across two commits)."""
        with self._lock:
            self._pending.update((row[0], row) for row in rows)
            due = time.monotonic() - self._last_commit >= COMMIT_INTERVAL_S
            if len(self._pending) >= COMMIT_EVERY or due:
                self._commit()

    def add_now(self, rows: Iterable[tuple]) -> None:
        """Add `rows` and commit them, with anything pending, at once."""
        with self._lock:
            self._pending.update((row[0], row) for row in rows)
            self._commit()

    def flush(self) -> None:
        with self._lock:
            self._commit()

    def _commit(self) -> None:
        if self._pending:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(self._insert, list(self._pending.values()))
                self._db.execute("COMMIT")
            except BaseException:
                # Leave no transaction open: the next flush would otherwise fail with "cannot start a
                # transaction within a transaction" and hide this error. The rows stay pending.
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                raise
            self._pending.clear()
        self._last_commit = time.monotonic()

    def _commit_if_due(self) -> None:
        with self._lock:
            if self._closed.is_set():
                return
            if self._pending and time.monotonic() - self._last_commit >= COMMIT_INTERVAL_S:
                # A failure here (a lock held past the busy timeout, a full disk) keeps the rows pending; the
                # next add, flush or close commits them again and raises the error to the caller.
                with contextlib.suppress(sqlite3.Error):
                    self._commit()

    def __len__(self) -> int:
        with self._lock:
            self._commit()
            return int(self._db.execute(f"SELECT COUNT(*) FROM {self.table}").fetchone()[0])

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            try:
                self._commit()
            finally:
                self._db.close()
        self._flusher.join()


def _commit_periodically(table_ref: weakref.ref[BatchedTable], closed: threading.Event) -> None:
    while not closed.wait(COMMIT_INTERVAL_S / 2):
        table = table_ref()
        if table is None:
            return
        table._commit_if_due()
        del table


@contextlib.contextmanager
def flushed_on_exit(table: Any) -> Iterator[None]:
    """Flush `table` (anything with `flush()`) when the block ends, also when it fails - what arrived before a
    failure is kept for the rerun. When the block failed, a failing flush (a lock held past the busy
    timeout, a full disk) is logged and the block's own error raised: it says what went wrong first."""
    try:
        yield
    except BaseException:
        try:
            table.flush()
        except sqlite3.Error as exc:
            log.error("could not store the answers that arrived before the error below: %s", exc)
        raise
    table.flush()

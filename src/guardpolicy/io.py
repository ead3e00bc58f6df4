"""Atomic file output and hashing.

Every output is written to a temporary file beside its destination and renamed into place, so a crash or a
bad input never leaves a half-written parquet or JSON file that a later stage could mistake for a result.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

_CHUNK = 1 << 20


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def atomic_path(destination: str | Path) -> Iterator[Path]:
    """Yield a temporary path in the destination's folder; rename it onto the destination on success only."""
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{destination.name}.", suffix=".tmp", dir=destination.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        # mkstemp creates 0600; give the result the permissions a plain open() would (0666 minus umask).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, destination)
    finally:
        tmp.unlink(missing_ok=True)


def write_json(path: str | Path, payload: Any) -> None:
    """Write JSON deterministically (sorted keys, fixed indent, trailing newline), atomically."""
    text = json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_parquet(path: str | Path, table: pa.Table) -> None:
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def read_json(path: str | Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)

"""Atomic file and folder output, the write boundary, hashing, and the checked reading of a stage's parquet
inputs.

Every output is written to a temporary file (or staging folder) beside its destination and renamed into
place, so a crash or a bad input never leaves a half-written parquet, JSON file or checkpoint that a later
stage could mistake for a result.

The write boundary (`atomic_path`, `atomic_dir`, `write_boundary`) turns a failed write into one line that
names the destination - ``no space left on device writing models/small-E1`` - instead of whatever the writing
library made of the OS error (a C++ ``iostream error`` or ``unexpected pos`` from torch, a safetensors
``SafetensorError``, a pyarrow OSError), and removes the staging file or folder before the error leaves.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from guardpolicy.errors import GuardpolicyError, InputError

if TYPE_CHECKING:
    import pandas as pd

_CHUNK = 1 << 20
# A write that failed for want of space leaves (nearly) nothing free; filesystems keep some slack (ext4's
# reserved blocks are invisible to shutil.disk_usage's `free`, btrfs and xfs keep metadata room), so any
# free space below this counts as a full disk. Above it, a write error without an errno is another failure.
FULL_DISK_BYTES = 64 << 20
# How Rust's std::io::Error prints an OS error (safetensors' SafetensorError, the tokenizers' Exception).
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")
# How Python prints one: shutil.copytree gathers its copy errors in one shutil.Error (an OSError without
# errno) whose text holds each one's "[Errno N] ...".
_PYTHON_OS_ERROR = re.compile(r"\[Errno (\d+)\]")
# What torch's C++ stream writer (PyTorchFileWriter, inline_container.cc) raises as RuntimeError when the
# bytes did not reach the file; none of these carries the errno.
_TORCH_WRITE_FAILURES = (
    "unexpected pos",
    "file write failed",
    "iostream error",
    "PytorchStreamWriter failed",
)


class WriteError(GuardpolicyError):
    """An output could not be written (disk full, no permission, read-only filesystem); names the output."""

    def __init__(self, path: str | Path, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{reason} writing {self.path}")

    def moved(self, staging: Path, destination: Path) -> WriteError:
        """The same error naming the file's place under `destination` instead of under `staging`."""
        path = Path(self.path)
        if path == staging or path.is_relative_to(staging):
            return WriteError(destination / path.relative_to(staging), self.reason)
        return self


def free_bytes(path: str | Path) -> int | None:
    """Free space (for this user) on the filesystem that holds `path` or its nearest existing parent."""
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return None


def _reason(code: int | None, detail: str, path: Path) -> str:
    if code is None:
        free = free_bytes(path)
        code = errno.ENOSPC if free is not None and free < FULL_DISK_BYTES else None
    if code == errno.ENOSPC:
        return "no space left on device"
    if code is not None:
        text = os.strerror(code)
        return text[:1].lower() + text[1:]
    # The library's own words, cut short: shutil.Error lists every failed file of a folder copy.
    return f"write failed ({detail if len(detail) <= 200 else detail[:197] + '...'})"


def write_failure(exc: BaseException, path: str | Path) -> WriteError | None:
    """`exc`, raised while writing `path`, as a one-line WriteError; None when it is not a failed write.

    An OSError carries its errno. safetensors and tokenizers (Rust) raise their own exception types whose
    message ends in "(os error N)". torch's writer raises a RuntimeError without any errno: then a (nearly)
    full disk says it ran out of space, and anything else is reported with torch's first line. Any other
    exception is not a write failure (a bug keeps its traceback).
    """
    if isinstance(exc, WriteError):
        return exc
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, OSError):
        code = exc.errno if isinstance(exc.errno, int) else None
        if code is None and (match := _PYTHON_OS_ERROR.search(str(exc))):
            code = int(match.group(1))
        return WriteError(path, _reason(code, first_line, Path(path)))
    if not isinstance(exc, Exception):
        return None
    match = _RUST_OS_ERROR.search(str(exc))
    if match:
        return WriteError(path, _reason(int(match.group(1)), first_line, Path(path)))
    if isinstance(exc, RuntimeError) and any(marker in str(exc) for marker in _TORCH_WRITE_FAILURES):
        return WriteError(path, _reason(None, first_line, Path(path)))
    return None


def _discard(path: Path | None) -> None:
    if path is None:
        return
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def write_boundary(destination: str | Path, staging: Path | None = None) -> Iterator[None]:
    """Report a failed write inside the block as one WriteError naming `destination`; remove `staging`
    (a file or folder) on any failure. The free space is read before `staging` is removed, since removing
    the partial output frees the very space whose lack caused the failure."""
    destination = Path(destination)
    try:
        yield
    except BaseException as exc:
        failure = write_failure(exc, destination)
        _discard(staging)
        if failure is None:
            raise
        if staging is not None:
            failure = failure.moved(staging, destination)
        if failure is exc:
            raise
        raise failure from exc


def _read_umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


# Read once at import: os.umask can only be read by setting it, which would race with threads that create
# files meanwhile (the committee labeler and the baselines write from worker threads).
_UMASK = _read_umask()


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def atomic_path(destination: str | Path) -> Iterator[Path]:
    """Yield a temporary path in the destination's folder; rename it onto the destination on success only.

    A failed write (see `write_failure`) becomes one WriteError naming `destination`; the temporary file is
    removed whatever happens.
    """
    destination = Path(destination)
    tmp: Path | None = None
    try:
        with write_boundary(destination):
            destination.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(
                prefix=f".{destination.name}.", suffix=".tmp", dir=destination.parent
            )
            os.close(fd)
            tmp = Path(tmp_name)
            yield tmp
            # mkstemp creates 0600; give the result the permissions a plain open() would (0666 minus umask).
            os.chmod(tmp, 0o666 & ~_UMASK)
            os.replace(tmp, destination)
    finally:
        _discard(tmp)


@contextlib.contextmanager
def atomic_dir(destination: str | Path) -> Iterator[Path]:
    """Yield an empty staging folder beside `destination`; it replaces `destination` on success only.

    The old folder is moved aside before the new one is renamed into place and removed after, so at any
    moment `destination` is either the complete old folder or the complete new one. On failure the staging
    folder is removed and a failed write becomes one WriteError naming `destination` (or the file under it).
    """
    destination = Path(destination)
    staging: Path | None = None
    try:
        with write_boundary(destination):
            destination.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(
                tempfile.mkdtemp(prefix=f".{destination.name}.", suffix=".tmp", dir=destination.parent)
            )
            with write_boundary(destination, staging):
                yield staging
            # mkdtemp creates 0700; give the folder the permissions a plain mkdir would (0777 minus umask).
            os.chmod(staging, 0o777 & ~_UMASK)
            retired = destination.with_name(f".{destination.name}.old")
            if destination.exists():
                _discard(retired)
                os.replace(destination, retired)
            os.replace(staging, destination)
            staging = None
            _discard(retired)
    finally:
        _discard(staging)


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


# ------------------------------------------------------------------------------------------ parquet inputs


def _parquet_schema(path: Path, hint: str, columns: Sequence[str]) -> pa.Schema:
    """The schema of an existing, readable parquet file holding every one of `columns`, else an InputError
    naming the file (and the first missing column); `hint` says how to produce a missing file."""
    if not path.is_file():
        raise InputError(path, f"file not found; {hint}")
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise InputError(path, f"not a readable parquet file: {exc}") from exc
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise InputError(path, f"missing column(s) {missing}", row="header", field=missing[0])
    return schema


def read_parquet(path: str | Path, hint: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """A stage's parquet input as a DataFrame: `columns` only (each must be present), or every column when
    None. A missing file is an InputError "file not found; <hint>" (hint: how to produce it, e.g. "run `dvc
    repro pool` first"); an unreadable one or a missing column is an InputError naming the file."""
    import pandas as pd

    path = Path(path)
    _parquet_schema(path, hint, columns or ())
    try:
        return pd.read_parquet(path, columns=list(columns) if columns is not None else None)
    except (OSError, pa.ArrowInvalid) as exc:
        raise InputError(path, f"not a readable parquet file: {exc}") from exc


def read_parquet_table(path: str | Path, hint: str, columns: Sequence[str] = ()) -> pa.Table:
    """A stage's parquet input as an Arrow table with every column, after checking it holds `columns`
    (errors as `read_parquet`'s)."""
    path = Path(path)
    _parquet_schema(path, hint, columns)
    try:
        return pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise InputError(path, f"not a readable parquet file: {exc}") from exc

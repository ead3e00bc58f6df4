"""The write boundary (guardpolicy.io): a failed write is one WriteError line naming the destination, and no
temporary file or staging folder stays behind. A full disk is simulated by making the lowest-level writer
raise what it raises on a real one (pyarrow and Python: OSError with errno ENOSPC; safetensors and
tokenizers: an exception whose text ends in "(os error 28)"; torch: a RuntimeError without errno), and the
free space the boundary then reads is set with `free_bytes`."""

from __future__ import annotations

import errno
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from guardpolicy import io
from guardpolicy.io import (
    WriteError,
    atomic_dir,
    atomic_path,
    write_failure,
    write_json,
    write_parquet,
)

# What torch.save raised when its file hit a file-size limit (measured: RLIMIT_FSIZE, torch 2.13); a full
# disk fails the same C++ stream check, without any errno in the message.
TORCH_WRITE_FAILURE = "[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"
# What safetensors' save_file raised in the same situation, with ENOSPC's number instead of EFBIG's.
SAFETENSORS_FULL = "Error while serializing: I/O error: No space left on device (os error 28)"


def _leftovers(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if path.name.startswith("."))


def _partial_then(exc: Exception):
    """A writer that puts some bytes into its file first, as a real one does before the disk fills."""

    def write(_table: object, where: object, **_: object) -> None:
        Path(str(where)).write_bytes(b"PAR1 half a file")
        raise exc

    return write


def test_a_full_disk_writing_parquet_is_one_line_and_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "out" / "predictions.parquet"
    write_parquet(target, pa.table({"a": [1]}))
    before = target.read_bytes()
    # pyarrow's own text on ENOSPC, with the errno set (as it is for EFBIG, measured).
    full = OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")
    monkeypatch.setattr(pq, "write_table", _partial_then(full))
    with pytest.raises(WriteError) as caught:
        write_parquet(target, pa.table({"a": [2]}))
    assert str(caught.value) == f"no space left on device writing {target}"
    assert caught.value.path == str(target) and isinstance(caught.value.__cause__, OSError)
    assert target.read_bytes() == before and _leftovers(target.parent) == []


def test_a_first_write_that_fails_leaves_no_file_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "metrics.json"

    def no_permission(self: Path, *_: object, **__: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "write_text", no_permission)
    with pytest.raises(WriteError, match=r"^permission denied writing .*metrics\.json$"):
        write_json(target, {"a": 1})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("raised", "free", "expected"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), None, "no space left on device"),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), None, "disk quota exceeded"),
        (OSError(errno.EROFS, "Read-only file system"), None, "read-only file system"),
        (Exception(SAFETENSORS_FULL), None, "no space left on device"),
        (Exception("I/O error: File too large (os error 27)"), None, "file too large"),
        (RuntimeError(TORCH_WRITE_FAILURE), 0, "no space left on device"),
        (RuntimeError("basic_ios::clear: iostream error"), 1 << 20, "no space left on device"),
        (RuntimeError(TORCH_WRITE_FAILURE), 100 << 30, f"write failed ({TORCH_WRITE_FAILURE})"),
    ],
    ids=[
        "enospc",
        "quota",
        "read-only",
        "safetensors",
        "rust-efbig",
        "torch-full",
        "iostream",
        "torch-other",
    ],
)
def test_write_failures_are_named_by_their_cause(
    raised: Exception, free: int | None, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(io, "free_bytes", lambda _path: free)
    failure = write_failure(raised, tmp_path / "state.pt")
    assert failure is not None and str(failure) == f"{expected} writing {tmp_path / 'state.pt'}"


def test_other_exceptions_are_not_write_failures(tmp_path: Path) -> None:
    assert write_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied"), tmp_path) is None
    assert write_failure(ValueError("bad value"), tmp_path) is None
    assert write_failure(KeyboardInterrupt(), tmp_path) is None
    # A bug inside the block keeps its own type and traceback; the temporary file still goes.
    with pytest.raises(ValueError, match="bad value"), atomic_path(tmp_path / "x.json") as tmp:
        tmp.write_text("partial")
        raise ValueError("bad value")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_folder_write_removes_the_staging_folder_and_keeps_the_old_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "models" / "small-E1"
    with atomic_dir(target) as staging:
        (staging / "config.json").write_text("{}")
    monkeypatch.setattr(io, "free_bytes", lambda _path: 0)
    with pytest.raises(WriteError) as caught, atomic_dir(target) as staging:
        (staging / "model.safetensors").write_bytes(b"half")
        raise RuntimeError(TORCH_WRITE_FAILURE)
    assert str(caught.value) == f"no space left on device writing {target}"
    assert sorted(p.name for p in target.iterdir()) == ["config.json"]
    assert _leftovers(target.parent) == []


def test_a_file_written_inside_a_staging_folder_is_named_at_its_final_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "models" / "small-pretrained"
    real_write_text = Path.write_text

    def full_disk_for_the_card(self: Path, *args: object, **kwargs: object) -> int:
        if self.name.startswith(".model_card.json."):
            real_write_text(self, "{", encoding="utf-8")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write_text(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", full_disk_for_the_card)
    with pytest.raises(WriteError) as caught, atomic_dir(target) as staging:
        (staging / "config.json").write_text("{}")
        write_json(staging / "model_card.json", {"name": "small-pretrained"})
    # Not the staging folder's random name, which no longer exists.
    assert str(caught.value) == f"no space left on device writing {target / 'model_card.json'}"
    assert not target.exists() and _leftovers(target.parent) == []


def test_a_completed_folder_replaces_the_old_one(tmp_path: Path) -> None:
    target = tmp_path / "live"
    for text in ("old", "new"):
        with atomic_dir(target) as staging:
            (staging / "metrics.json").write_text(text)
    assert (target / "metrics.json").read_text() == "new" and _leftovers(tmp_path) == []
    assert target.stat().st_mode & 0o777 != 0o700  # not mkdtemp's private mode

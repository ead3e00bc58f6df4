"""A full disk while writing a checkpoint or the training state: one line naming the output, exit status 2
through the command-line wrapper, and no staging folder, temporary file or partial output left behind.

The disk is "filled" by making the lowest-level writer fail as it does on a real one: safetensors'
save_file (what transformers' save_pretrained calls) and torch.save, after writing part of their file. One
case uses a real OS error instead: the stage script under a file-size limit (RLIMIT_FSIZE), where
safetensors' own write fails with EFBIG - the same path a full disk (ENOSPC) takes."""

from __future__ import annotations

import dataclasses
import errno
import os
import resource
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import torch
import transformers.modeling_utils
import yaml
from helpers.benchmarks import write_params
from helpers.encoders import TINY
from helpers.layout import repo_layout
from helpers.paths import PYTHON, REPO_ROOT
from safetensors import SafetensorError

from guardpolicy import io
from guardpolicy.io import WriteError
from guardpolicy.layout import ROOT_ENV
from guardpolicy.runner import EXIT_BAD_INPUT, guarded
from guardpolicy.stages.backbone import backbone
from guardpolicy.training.checkpoint import LIVE_SNAPSHOT, STATE_FILE, save_state

# What the writers raised when a write hit the OS limit (measured with RLIMIT_FSIZE; ENOSPC's number here).
SAFETENSORS_FULL = "Error while serializing: I/O error: No space left on device (os error 28)"
TORCH_WRITE_FAILURE = "[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"


def _tiny_params(tmp_path: Path) -> Path:
    """The smoke params with the small scale's encoder replaced by the tiny random one (nothing loaded)."""
    path = write_params(tmp_path / "params.yaml", tmp_path / "mirror")
    params = yaml.safe_load(path.read_text(encoding="utf-8"))
    params["profiles"][params["profile"]]["small_encoder"] = {
        key: value for key, value in dataclasses.asdict(TINY).items() if value not in (None, False)
    }
    path.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    return path


def _everything_under(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*")) if folder.exists() else []


def test_a_full_disk_while_saving_a_backbone_exits_2_with_one_line_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _tiny_params(tmp_path)
    models = tmp_path / "models"
    models.mkdir()
    (models / "large-pretrained").mkdir()  # another output beside it stays untouched

    def full_disk(tensors: object, filename: str, metadata: object = None) -> None:
        Path(filename).write_bytes(b"\x00" * 4096)  # part of the file reached the disk
        raise SafetensorError(SAFETENSORS_FULL)

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full_disk)
    with pytest.raises(SystemExit) as exited:
        guarded(backbone)("small", repo_layout(tmp_path))
    assert exited.value.code == EXIT_BAD_INPUT
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert errors == [f"error: no space left on device writing {models / 'small-pretrained'}"]
    assert _everything_under(models) == ["large-pretrained"]


def test_a_full_disk_while_saving_the_training_state_keeps_the_previous_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work, live = tmp_path / "work", tmp_path / "live"
    live.mkdir()
    (live / "metrics.json").write_text('{"step": 3}')
    save_state(work, {"step": 3}, live)
    before = (work / STATE_FILE).read_bytes()
    (live / "metrics.json").write_text('{"step": 6}')

    real_save = torch.save

    def full_disk(obj: object, path: object, *args: object, **kwargs: object) -> None:
        real_save(obj, path, *args, **kwargs)
        Path(str(path)).write_bytes(Path(str(path)).read_bytes()[:100])  # a torn archive
        raise RuntimeError(TORCH_WRITE_FAILURE)

    monkeypatch.setattr(torch, "save", full_disk)
    monkeypatch.setattr(io, "free_bytes", lambda _path: 0)  # what a full disk reports
    with pytest.raises(WriteError) as caught:
        save_state(work, {"step": 6}, live)
    assert str(caught.value) == f"no space left on device writing {work / STATE_FILE}"
    assert (work / STATE_FILE).read_bytes() == before
    assert _everything_under(work) == [LIVE_SNAPSHOT, f"{LIVE_SNAPSHOT}/metrics.json", STATE_FILE]

    # The same torch error with plenty of space left is not called a full disk, but still one line.
    monkeypatch.setattr(io, "free_bytes", lambda _path: 100 << 30)
    with pytest.raises(WriteError, match=r"^write failed \(\[enforce fail .*\) writing .*state\.pt$"):
        save_state(work, {"step": 6}, live)


def test_a_full_disk_while_copying_the_log_snapshot_keeps_the_old_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work, live = tmp_path / "work", tmp_path / "live"
    live.mkdir()
    (live / "metrics.json").write_text("old")
    save_state(work, {"step": 3}, live)
    (live / "metrics.json").write_text("new")

    def full_disk(source: str, destination: str, **_: object) -> str:
        Path(destination).write_text("ne")
        raise OSError(errno.ENOSPC, "No space left on device", destination)

    # copytree's copy2 looks copyfile up at call time: the byte copy is the lowest level to fail.
    monkeypatch.setattr(shutil, "copyfile", full_disk)
    with pytest.raises(WriteError) as caught:
        save_state(work, {"step": 6}, live)
    assert str(caught.value) == f"no space left on device writing {work / LIVE_SNAPSHOT}"
    assert (work / LIVE_SNAPSHOT / "metrics.json").read_text() == "old"
    assert _everything_under(work) == [LIVE_SNAPSHOT, f"{LIVE_SNAPSHOT}/metrics.json", STATE_FILE]


def _file_size_limit(limit: int):
    def apply() -> None:
        # SIGXFSZ would kill the process; ignored (and inherited across exec), the write fails with EFBIG.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_real_write_error_from_the_os_through_the_stage_script(tmp_path: Path) -> None:
    _tiny_params(tmp_path)
    models = tmp_path / "models"
    # 256 KiB: the config fits, the ~4 MB of weights do not.
    repo_layout(tmp_path)
    command = [str(PYTHON), str(REPO_ROOT / "pipelines" / "backbone.py"), "small"]
    done = subprocess.run(
        command,
        cwd=tmp_path,
        env={**os.environ, ROOT_ENV: str(tmp_path)},  # as DVC runs it: the layout's root
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=_file_size_limit(256 << 10),  # only setrlimit and signal: safe before exec
        check=False,
    )
    assert done.returncode == EXIT_BAD_INPUT, done.stderr[-2000:]
    assert (
        done.stderr.strip().splitlines()[-1] == f"error: file too large writing {models / 'small-pretrained'}"
    )
    assert "Traceback" not in done.stderr
    assert _everything_under(models) == []

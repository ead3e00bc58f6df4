"""`guardpolicy gpu-check`: refuses without CUDA in one line; its code path runs on CPU with a tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from guardpolicy.cli import main
from guardpolicy.devtools.gpu_check import gpu_check

FIELDS = {
    "samples_per_second",
    "tokens_per_second",
    "peak_gpu_memory_gib",
    "device",
    "torch_version",
    "cuda_version",
    "steps",
    "batch_size",
    "max_length",
}


def test_refuses_without_a_gpu(monkeypatch, capsys, tmp_path: Path) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "gpu_check.json"
    with pytest.raises(SystemExit) as exited:
        main(["gpu-check", "--out", str(out)])
    assert exited.value.code == 2
    message = capsys.readouterr().err.strip().splitlines()
    assert message == [message[-1]] and "gpu-check needs a CUDA GPU" in message[-1]
    assert not out.exists()


def test_tiny_cpu_run_writes_every_field(tmp_path: Path) -> None:
    out = tmp_path / "bench" / "gpu_check.json"
    report = gpu_check(steps=4, batch_size=4, max_length=16, device="cpu", tiny=True, out=str(out))
    written = json.loads(out.read_text())
    assert written == report
    assert written.keys() >= FIELDS
    assert written["steps"] == 4 and written["batch_size"] == 4 and written["max_length"] == 16
    assert written["samples_per_second"] > 0
    assert written["tokens_per_second"] == pytest.approx(written["samples_per_second"] * 16, rel=1e-3)
    assert written["peak_gpu_memory_gib"] is None and written["precision"] == "fp32"

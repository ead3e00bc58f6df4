"""The training loop scaled out on accelerate: two gloo processes and gradient accumulation take the same
steps as one process on the whole global batch; time-based checkpoints resume bit-identically; head-only token
states live in a memory-mapped float16 cache."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.ddp_train import ddp_examples, ddp_recipe, run
from helpers.encoders import TINY
from safetensors.torch import load_file

from guardpolicy.errors import ConfigError, InputError
from guardpolicy.training.checkpoint import run_fingerprint
from guardpolicy.training.distributed import rank_micro_batches
from guardpolicy.training.frozen_states import FeatureCache
from guardpolicy.training.loop import train
from guardpolicy.training.recipe import accumulation_steps

HELPER = Path(__file__).resolve().parents[1] / "helpers" / "ddp_train.py"


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def assert_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float) -> None:
    assert a.keys() == b.keys()
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert worst <= atol, f"largest weight difference {worst:.3g} > {atol}"


def test_two_gloo_processes_match_one_process(tmp_path: Path) -> None:
    reference = tmp_path / "one"
    run(reference, tmp_path / "work-one")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    launched = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            str(HELPER),
            str(tmp_path / "two"),
            str(tmp_path / "work-two"),
            "2",  # 2 processes x 2 micro-batches of 2: DDP syncs on the second (no_sync on the first)
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert launched.returncode == 0, launched.stderr[-3000:]
    for rank in (0, 1):
        result = json.loads((tmp_path / f"two-rank{rank}.json").read_text())
        assert result["processes"] == 2 and result["samples_per_second"] > 0
    two = weights(tmp_path / "two")
    assert_close(two, weights(reference), atol=1e-5)
    assert not (tmp_path / "work-two" / "state.pt").exists()


def test_accumulated_micro_batches_match_the_whole_batch(tmp_path: Path) -> None:
    run(tmp_path / "whole", tmp_path / "work-whole")
    run(tmp_path / "micro", tmp_path / "work-micro", micro_batch_size=4)  # 2 accumulation steps
    run(tmp_path / "tiny", tmp_path / "work-tiny", micro_batch_size=1)  # 8; uneven on the short last batch
    whole = weights(tmp_path / "whole")
    assert_close(weights(tmp_path / "micro"), whole, atol=1e-5)
    assert_close(weights(tmp_path / "tiny"), whole, atol=1e-5)


def test_micro_batch_that_does_not_divide_is_a_config_error() -> None:
    assert accumulation_steps(32, 4, 2) == 4
    assert accumulation_steps(32, None, 1) == 1
    with pytest.raises(ConfigError, match=r"training\.micro_batch_size: 3 does not divide"):
        accumulation_steps(8, 3, 1)
    with pytest.raises(ConfigError, match=r"not divisible by the 3 processes"):
        accumulation_steps(8, None, 3)
    with pytest.raises(ConfigError, match="micro_batch_size must be positive"):
        ddp_recipe(micro_batch_size=0)


def test_rank_slices_cover_the_batch_once_with_scales_summing_to_one() -> None:
    indices = np.array([7, 3, 9, 1, 4])
    for world, accumulation in ((1, 1), (2, 1), (2, 2), (4, 2)):
        taken, total = [], 0.0
        for rank in range(world):
            micro = rank_micro_batches(indices, rank, world, accumulation)
            assert len(micro) == accumulation  # the same number of micro-steps on every rank
            for chunk, scale in micro:
                total += scale / world
                if scale:
                    taken.extend(chunk.tolist())
        assert sorted(taken) == sorted(indices.tolist())
        assert total == pytest.approx(1.0)


def test_time_based_checkpoint_resumes_bit_identically(tmp_path: Path) -> None:
    # Every step is "a minute later" at this cadence; step checkpoints are off, so only the clock saves.
    timed = {"checkpoint_every_steps": None, "checkpoint_every_minutes": 1e-9}
    run(tmp_path / "straight", tmp_path / "work-straight", **timed)

    def interrupt(step: int, losses) -> None:
        if step == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(
            ddp_examples(),
            ddp_recipe(**timed),
            TINY,
            tmp_path / "resumed",
            tmp_path / "work-resumed",
            None,
            "ddp",
            threads=1,
            device="cpu",
            on_step=interrupt,
        )
    saved = torch.load(tmp_path / "work-resumed" / "state.pt", weights_only=True)
    assert saved["global_step"] == 4  # saved by the clock at step 4 (not an epoch end: 3 steps per epoch)
    result = run(tmp_path / "resumed", tmp_path / "work-resumed", **timed)
    assert result.resumed_from_step == 4
    straight, resumed = weights(tmp_path / "straight"), weights(tmp_path / "resumed")
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)


def test_head_only_float16_cache_is_close_to_float32_and_cleaned_up(tmp_path: Path) -> None:
    results = {}
    for dtype in ("float32", "float16"):
        run(tmp_path / dtype, tmp_path / f"work-{dtype}", trainable="heads", feature_cache_dtype=dtype)
        results[dtype] = weights(tmp_path / dtype)
        assert not list((tmp_path / f"work-{dtype}").glob("features-*.bin"))
    assert_close(results["float16"], results["float32"], atol=1e-3)


def test_feature_cache_is_a_memory_mapped_file_and_refuses_float16_overflow(tmp_path: Path) -> None:
    lengths = np.array([2, 3])
    cache = FeatureCache(tmp_path / "features-x.bin", lengths, 4, "bfloat16", create=True)
    rows = [torch.arange(8.0).view(2, 4), -torch.arange(12.0).view(3, 4)]
    for i, row in enumerate(rows):
        cache.write(i, row)
    assert (tmp_path / "features-x.bin").stat().st_size == 5 * 4 * 2  # tokens x hidden x bf16 bytes
    reopened = FeatureCache(tmp_path / "features-x.bin", lengths, 4, "bfloat16", create=False)
    assert torch.equal(reopened[1], rows[1]) and reopened[0].dtype == torch.float32
    half = FeatureCache(tmp_path / "features-y.bin", lengths, 4, "float16", create=True)
    with pytest.raises(ConfigError, match=r"feature_cache_dtype float16.*bfloat16 or float32"):
        half.write(0, torch.full((2, 4), 7e4))


def test_a_full_disk_is_an_error_naming_the_cache_before_anything_is_mapped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    path = tmp_path / "features-z.bin"
    with pytest.raises(InputError, match=r"features-z\.bin.*cannot reserve .* GiB.*No space left"):
        FeatureCache(path, np.array([2, 3]), 4, "float16", create=True)
    assert not path.exists()


def test_a_file_system_that_cannot_reserve_gets_a_sparse_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unsupported(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))

    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    cache = FeatureCache(tmp_path / "features-s.bin", np.array([2, 3]), 4, "float16", create=True)
    cache.write(1, torch.ones(3, 4))
    assert (tmp_path / "features-s.bin").stat().st_size == 5 * 4 * 2
    assert torch.equal(cache[1], torch.ones(3, 4))


def test_the_checkpoint_cadence_is_not_part_of_the_run_fingerprint() -> None:
    # A run resumed with another cadence after a crash must find its saved state.
    examples = ddp_examples()
    recipe = ddp_recipe()
    base = run_fingerprint(recipe, examples, TINY)
    cadence = dataclasses.replace(recipe, checkpoint_every_steps=None, checkpoint_every_minutes=5.0)
    assert run_fingerprint(cadence, examples, TINY) == base
    assert run_fingerprint(dataclasses.replace(recipe, learning_rate=1.0), examples, TINY) != base


def test_training_params_reach_the_recipe() -> None:
    from guardpolicy.config.training import TrainingConfig

    with pytest.raises(ConfigError, match="micro_batch_size must be positive or null"):
        TrainingConfig(micro_batch_size=0)
    with pytest.raises(ConfigError, match="feature_cache_dtype"):
        ddp_recipe(feature_cache_dtype="int8")


def test_num_processes_relaunches_the_script_under_accelerate(tmp_path: Path, monkeypatch) -> None:
    from guardpolicy.timing import STAGE_ENV
    from guardpolicy.training.distributed import relaunch_stage

    script = tmp_path / "stage.py"
    script.write_text(
        "import os, sys\n"
        "from pathlib import Path\n"
        "rank, world = os.environ['RANK'], os.environ['WORLD_SIZE']\n"
        "Path(sys.argv[1], f'rank{rank}').write_text(f'{world} {os.environ.get(\"DVC_STAGE\")}')\n"
    )
    monkeypatch.setenv(STAGE_ENV, "train@small-E2")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not relaunch_stage(1, script, [str(tmp_path)])  # one process: the caller runs the stage itself
    assert relaunch_stage(2, script, [str(tmp_path)])
    # Both ranks ran; neither writes the stage's timing record (DVC's process does).
    assert {p.name: p.read_text() for p in tmp_path.glob("rank*")} == {"rank0": "2 None", "rank1": "2 None"}
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert not relaunch_stage(2, script, [str(tmp_path)])  # already launched: no second level


def test_attention_kernel_is_switched_and_flash_attention_needs_its_package(monkeypatch) -> None:
    import importlib.util

    from helpers.encoders import tiny_guard

    from guardpolicy.training import model_setup

    model, _ = tiny_guard()
    model_setup.set_attention(model, "eager")
    assert model.backbone.config._attn_implementation == "eager"
    assert model.config.encoder._attn_implementation == "eager"
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "flash_attn" else real_find_spec(name, *a),
    )
    with pytest.raises(ConfigError, match=r"training\.attn_implementation: flash_attention_2 needs"):
        model_setup.set_attention(model, "flash_attention_2")

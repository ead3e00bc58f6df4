"""`guardpolicy gpu-check` / `make gpu-check`: the paper architecture through the real training loop on a GPU.

ModernBERT-base is built from its config (``transformers.ModernBertConfig()`` defaults are the base model; no
weights are downloaded: throughput and memory depend on the shapes, not the values) and one branch-like run -
full fine-tune, bf16 autocast over fp32 master weights, global batch 32, max_length 512 - trains on synthetic
prompts long enough to fill max_length, for `steps` optimizer steps. It prints and writes samples/s, tokens/s,
peak GPU memory, the device and the torch / CUDA versions to reports/bench/gpu_check.json; docs/gpu.md turns
those figures into the paper profile's time.

Without CUDA it refuses in one line (exit 2). `--device cpu --tiny` runs the same code path with a tiny
ModernBERT on CPU, for the tests only: its figures mean nothing.
"""

from __future__ import annotations

import json
import logging
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from guardpolicy.config.encoders import EncoderConfig
from guardpolicy.errors import ConfigError, GuardpolicyError
from guardpolicy.io import write_json
from guardpolicy.layout import relative_path

log = logging.getLogger(__name__)


class DeviceUnavailable(GuardpolicyError):
    """gpu-check needs a CUDA GPU this machine does not have (one line, exit status 2)."""


DEFAULT_OUT = relative_path("bench_gpu_check")
PAPER_ENCODER = EncoderConfig(name="answerdotai/ModernBERT-base", random_init=True)
# A ModernBERT small enough for a CPU test of the code path (same architecture, toy sizes).
TINY_ENCODER = EncoderConfig(
    name="answerdotai/ModernBERT-base",
    random_init=True,
    config_overrides={
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "vocab_size": 30522,
    },
)
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet")
# Steps before the timed window opens (allocator, kernel selection, torch.compile warm-up).
WARMUP_STEPS = 10


def synthetic_examples(count: int, words: int, seed: int) -> Any:
    """`count` prompts of `words` one-token words (longer than max_length, so every row is max_length tokens)
    with random labels; one row per example, the training loop's input format."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        label = int(rng.integers(0, 4))
        pillars = [0] * 24
        pillars[int(rng.integers(0, 24))] = 1
        rows.append((f"g{i:06d}", " ".join(rng.choice(WORDS, size=words)), label, pillars))
    return examples_frame(rows)


def examples_frame(rows: list[tuple[str, str, int, list[int]]]) -> Any:
    """The training loop's examples table from (id, prompt, coarse class index, 24 pillar flags) rows: no
    spans, no teacher logits, weight 1."""
    import pandas as pd

    frame = pd.DataFrame(
        {
            "id": [row[0] for row in rows],
            "prompt": [row[1] for row in rows],
            "coarse": [row[2] for row in rows],
            "pillars": [row[3] for row in rows],
            "span_start": pd.array([None] * len(rows), dtype="Int64"),
            "span_end": pd.array([None] * len(rows), dtype="Int64"),
            "teacher_logits": [None] * len(rows),
            "weight": [1.0] * len(rows),
        }
    )
    return frame


def gpu_check(
    steps: int = 300,
    batch_size: int = 32,
    max_length: int = 512,
    device: str | None = None,
    tiny: bool = False,
    compile: bool = False,
    attn_implementation: str | None = None,
    out: str = DEFAULT_OUT,
) -> dict[str, Any]:
    """Train the paper architecture for `steps` steps of `batch_size` x `max_length` tokens; write `out`."""
    import torch

    from guardpolicy.training.loop import train
    from guardpolicy.training.recipe import TrainRecipe

    if device is None:
        if not torch.cuda.is_available():
            raise DeviceUnavailable(
                "gpu-check needs a CUDA GPU and torch sees none (torch.cuda.is_available() is False); "
                "run it on a GPU machine (`make gpu-check`)"
            )
        device = "cuda"
    warmup = 1 if tiny else WARMUP_STEPS
    if steps < warmup + 3:
        raise ConfigError(f"gpu-check --steps must be at least {warmup + 3} ({warmup} warm-up), got {steps}")
    on_cuda = torch.device(device).type == "cuda"
    examples = synthetic_examples(steps * batch_size, max_length + 16, seed=0)
    recipe = TrainRecipe(
        epochs=1,
        batch_size=batch_size,
        learning_rate=5e-5,
        max_length=max_length,
        seed=0,
        precision="bf16" if on_cuda else "fp32",
        trainable="full",
        checkpoint_every_steps=None,
        log_every_steps=50,
        compile=compile,
        attn_implementation=attn_implementation,
    )
    step_times: list[float] = []

    def mark(step: int, losses: Any) -> None:
        # The loop moves each step's losses to the CPU, so the GPU has finished the step when this runs.
        step_times.append(time.perf_counter())

    if on_cuda:
        torch.cuda.reset_peak_memory_stats(device)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        result = train(
            examples,
            recipe,
            TINY_ENCODER if tiny else PAPER_ENCODER,
            Path(scratch) / "model",
            Path(scratch) / "work",
            None,
            "gpu-check",
            on_step=mark,
            device=device,
        )
    # Timed window: from the end of the last warm-up step to the end of the second-to-last step (the last one
    # also saves the epoch-end resume state). step_times[i] is the end of step i + 1.
    first, last = warmup - 1, len(step_times) - 2
    timed_steps = last - first
    samples_per_second = timed_steps * batch_size / (step_times[last] - step_times[first])
    architecture = "tiny ModernBERT (CPU test only)" if tiny else "ModernBERT-base (random init from config)"
    report = {
        "architecture": architecture,
        "parameters": result.parameters["total"],
        "trainable": "full",
        "precision": result.precision,
        "device": torch.cuda.get_device_name(device) if on_cuda else platform.processor() or "cpu",
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "steps": result.steps,
        "timed_steps": timed_steps,
        "batch_size": batch_size,
        "max_length": max_length,
        "tokens_per_example": max_length,
        "samples_per_second": round(samples_per_second, 3),
        "tokens_per_second": round(samples_per_second * max_length, 1),
        "peak_gpu_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 3) if on_cuda else None,
        "compile": compile,
        "attn_implementation": attn_implementation,
        "loop_seconds": round(result.train_seconds, 3),
    }
    write_json(out, report)
    print(json.dumps(report, indent=2))
    log.info("gpu-check: %s -> %s", report["samples_per_second"], out)
    return report

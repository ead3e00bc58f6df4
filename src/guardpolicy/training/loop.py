"""The one training loop behind every teacher and branch: hard labels, distillation and head-only calibration.

The three policy paths differ only in their inputs and recipe: which labels the `examples` carry, whether
rows carry cached teacher logits (distillation; the teacher never runs here), and which part of the model
is trainable ("full", "encoder" = all but the input embeddings, "heads" = backbone frozen). Head-only runs
the frozen backbone once over the data under ``torch.no_grad()``, keeps its token states in memory and
trains the heads on them, so the backbone's weights stay bit-identical and each epoch costs almost nothing.

Determinism: every RNG is seeded from the recipe, the batch order of an epoch is a pure function of
(seed, epoch), and on CPU the run is bit-reproducible - including across an interruption: the state saved
every ``checkpoint_every_steps`` (and at each epoch end) restores model, optimizer, scheduler, RNGs and
the position in the batch order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm
from transformers import get_linear_schedule_with_warmup

from guardpolicy.config import EncoderConfig
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.io import atomic_dir
from guardpolicy.modeling.guard import GuardModel, count_parameters, load_guard, save_guard
from guardpolicy.modeling.prefix import TopView, trainable_top_parameters
from guardpolicy.training.checkpoint import (
    capture_rng,
    discard_state,
    load_state,
    restore_live_snapshot,
    restore_rng,
    run_fingerprint,
    save_state,
    seed_everything,
)
from guardpolicy.training.collate import (
    EncodedPrompts,
    check_truncation,
    encode_prompts,
    epoch_batches,
    pad_batch,
    sorted_batches,
)
from guardpolicy.training.device import DeviceChoice, Precision, choose_device, configure_threads
from guardpolicy.training.losses import LossWeights, guard_loss
from guardpolicy.training.prefix_cache import POOL_SET, PrefixCache, cache_key

log = logging.getLogger(__name__)

Trainable = Literal["full", "encoder", "heads"]
# Order of the loss parts accumulated per step (the dvclive metric names).
LOSS_NAMES = ("loss", "coarse", "ce", "distill", "pillars", "span")
REQUIRED_COLUMNS = ("id", "prompt", "coarse", "pillars")


@dataclass(frozen=True, kw_only=True)
class TrainRecipe:
    """How one model is trained. Built from params.yaml by the training stage; part of the run fingerprint."""

    epochs: int
    batch_size: int
    learning_rate: float
    max_length: int
    seed: int
    weight_decay: float = 0.01
    warmup_ratio: float = 0.06
    grad_clip: float = 1.0
    precision: Precision = "auto"
    trainable: Trainable = "full"
    # None: no distillation. Otherwise the weight of the soft-target term on rows with teacher logits.
    distill_alpha: float | None = None
    distill_temperature: float = 4.0
    loss_weights: LossWeights = field(default_factory=LossWeights)
    checkpoint_every_steps: int = 200
    log_every_steps: int = 10
    length_bucketing: bool = True
    # Which part of an over-long prompt is kept (collate.TRUNCATIONS); saved into the model's config.
    truncation: str = "head"
    truncation_head_tokens: int | None = None
    # Keep the embeddings and the first N backbone layers frozen and train on their cached output (the scale's
    # prefix cache, guardpolicy.training.prefix_cache) instead of recomputing it every step.
    frozen_layers: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.loss_weights, LossWeights):
            object.__setattr__(self, "loss_weights", LossWeights.of(self.loss_weights))
        for name in ("epochs", "batch_size", "max_length", "checkpoint_every_steps", "log_every_steps"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"recipe.{name} must be positive, got {getattr(self, name)}")
        if self.frozen_layers < 0:
            raise ConfigError(f"recipe.frozen_layers must be >= 0, got {self.frozen_layers}")
        if self.frozen_layers and self.trainable == "encoder":
            raise ConfigError(
                "recipe.trainable 'encoder' trains the whole backbone; it excludes frozen_layers"
            )
        if self.learning_rate <= 0:
            raise ConfigError(f"recipe.learning_rate must be positive, got {self.learning_rate}")
        if not 0 <= self.warmup_ratio < 1:
            raise ConfigError(f"recipe.warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.trainable not in ("full", "encoder", "heads"):
            raise ConfigError(f"recipe.trainable must be full, encoder or heads, got {self.trainable!r}")
        if self.precision not in ("auto", "fp32", "bf16"):
            raise ConfigError(f"recipe.precision must be auto, fp32 or bf16, got {self.precision!r}")
        if self.distill_alpha is not None and not 0 <= self.distill_alpha <= 1:
            raise ConfigError(f"recipe.distill_alpha must be in [0, 1], got {self.distill_alpha}")
        if self.distill_temperature <= 0:
            raise ConfigError(f"recipe.distill_temperature must be positive, got {self.distill_temperature}")
        try:
            check_truncation(self.truncation, self.max_length, self.truncation_head_tokens)
        except ValueError as exc:
            raise ConfigError(f"recipe.{exc}") from exc


@dataclass(frozen=True)
class TrainResult:
    description: str
    examples: int
    epochs: int
    steps: int
    seconds: float  # wall time of this call, loading included
    train_seconds: float  # the optimisation loop of this call
    samples_per_second: float  # examples per second through the loop of this call
    final_losses: dict[str, float]  # means over the last epoch
    parameters: dict[str, int]  # total / trainable / heads
    trainable: str
    device: str
    precision: str
    resumed_from_step: int | None
    fingerprint: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ExampleArrays:
    """Targets of the examples frame as arrays, validated."""

    coarse: np.ndarray  # [N] int64
    pillars: np.ndarray  # [N, P] float32
    weight: np.ndarray  # [N] float32
    teacher_logits: np.ndarray  # [N, C] float32, zeros where has_teacher is False
    has_teacher: np.ndarray  # [N] bool
    span_start: list[int | None]
    span_end: list[int | None]


def _is_null(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def examples_to_arrays(
    examples: pd.DataFrame, num_classes: int, num_pillars: int, where: str
) -> ExampleArrays:
    """Validate the examples frame (see `train`) and return its targets as arrays; errors name row/field."""
    missing = [c for c in REQUIRED_COLUMNS if c not in examples.columns]
    if missing:
        raise InputError(where, f"missing column(s) {missing}", row="header")
    n = len(examples)
    if n == 0:
        raise InputError(where, "no examples to train on")
    ids = examples["id"].tolist()
    if len(set(ids)) != n:
        duplicate = next(i for i, v in enumerate(ids) if ids.index(v) != i)
        raise InputError(where, f"duplicate id {ids[duplicate]!r}", row=duplicate + 1, field="id")
    coarse = np.zeros(n, dtype=np.int64)
    pillars = np.zeros((n, num_pillars), dtype=np.float32)
    weight = np.ones(n, dtype=np.float32)
    teacher = np.zeros((n, num_classes), dtype=np.float32)
    has_teacher = np.zeros(n, dtype=bool)
    starts: list[int | None] = []
    ends: list[int | None] = []
    prompts = examples["prompt"].tolist()
    columns = {
        c: examples[c].tolist() for c in ("coarse", "pillars", "weight", "teacher_logits") if c in examples
    }
    span_columns = [examples[c].tolist() if c in examples else [None] * n for c in ("span_start", "span_end")]
    for i in range(n):
        row = i + 1
        if not isinstance(prompts[i], str) or not prompts[i]:
            raise InputError(where, "prompt must be a non-empty string", row=row, field="prompt")
        label = columns["coarse"][i]
        if _is_null(label) or isinstance(label, bool) or int(label) != label or not 0 <= label < num_classes:
            raise InputError(
                where,
                f"coarse must be an integer in 0..{num_classes - 1}, got {label!r}",
                row=row,
                field="coarse",
            )
        coarse[i] = int(label)
        row_pillars = columns["pillars"][i]
        if _is_null(row_pillars) or len(row_pillars) != num_pillars:
            raise InputError(where, f"pillars must list {num_pillars} values", row=row, field="pillars")
        pillars[i] = np.asarray(row_pillars, dtype=np.float32)
        if "weight" in columns:
            w = columns["weight"][i]
            if _is_null(w) or not w >= 0:
                raise InputError(where, f"weight must be >= 0, got {w!r}", row=row, field="weight")
            weight[i] = float(w)
        if "teacher_logits" in columns and not _is_null(columns["teacher_logits"][i]):
            logits = np.asarray(columns["teacher_logits"][i], dtype=np.float32)
            if logits.shape != (num_classes,) or not np.isfinite(logits).all():
                raise InputError(
                    where,
                    f"teacher_logits must be {num_classes} finite numbers",
                    row=row,
                    field="teacher_logits",
                )
            teacher[i] = logits
            has_teacher[i] = True
        start, end = span_columns[0][i], span_columns[1][i]
        if _is_null(start) != _is_null(end):
            raise InputError(
                where, "span_start and span_end must both be set or both null", row=row, field="span_start"
            )
        if not _is_null(start) and not 0 <= int(start) <= int(end) <= len(prompts[i]):
            raise InputError(
                where, f"span [{start}, {end}) lies outside the prompt", row=row, field="span_start"
            )
        starts.append(None if _is_null(start) else int(start))
        ends.append(None if _is_null(end) else int(end))
    return ExampleArrays(coarse, pillars, weight, teacher, has_teacher, starts, ends)


def set_trainable(model: GuardModel, trainable: Trainable, frozen_layers: int = 0) -> None:
    """Mark what the optimizer may change; the rest keeps requires_grad False (and gets no gradient)."""
    model.requires_grad_(trainable != "heads" and not frozen_layers)
    if trainable != "heads" and frozen_layers:
        for parameter in trainable_top_parameters(model.backbone, frozen_layers):
            parameter.requires_grad_(True)
    model.heads.requires_grad_(True)
    if trainable == "encoder":
        model.backbone.get_input_embeddings().requires_grad_(False)


def make_optimizer(
    parameters: list[tuple[str, torch.nn.Parameter]], recipe: TrainRecipe, device: DeviceChoice
) -> torch.optim.Optimizer:
    """AdamW, without weight decay on biases and norm weights (1-D tensors), fused where the device allows."""
    decay = [p for _, p in parameters if p.ndim > 1]
    no_decay = [p for _, p in parameters if p.ndim <= 1]
    groups = [
        {"params": decay, "weight_decay": recipe.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    # The fused kernel updates each tensor in one pass; it is the transformers.Trainer default too.
    return torch.optim.AdamW(groups, lr=recipe.learning_rate, fused=device.device.type in ("cpu", "cuda"))


@contextlib.contextmanager
def deterministic_algorithms() -> Iterator[None]:
    """Deterministic kernels during a run (warn-only where an op has no deterministic variant)."""
    previous = torch.are_deterministic_algorithms_enabled()
    previous_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    previous_benchmark = torch.backends.cudnn.benchmark
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous, warn_only=previous_warn)
        torch.backends.cudnn.benchmark = previous_benchmark


@torch.no_grad()
def top_token_states(
    top: TopView, prefix_rows: list[torch.Tensor], lengths: np.ndarray, batch_size: int, description: str
) -> list[torch.Tensor]:
    """The frozen top's token states per example (N x [T_i, H] float32) from cached prefix states, once."""
    top.eval()
    states: list[torch.Tensor | None] = [None] * len(prefix_rows)
    for indices in tqdm(
        sorted_batches(lengths, batch_size),
        desc=f"{description}: top features",
        unit="batch",
        mininterval=1.0,
    ):
        batch = torch.nn.utils.rnn.pad_sequence([prefix_rows[i] for i in indices], batch_first=True).float()
        mask = torch.from_numpy(
            (np.arange(batch.shape[1])[None, :] < lengths[indices][:, None]).astype(np.int64)
        )
        hidden = top(batch, mask)  # [B, T, H]
        for row, index in enumerate(indices):
            states[index] = hidden[row, : lengths[index]].clone()
    return states  # type: ignore[return-value]


def _prefix_rows(
    prefix: PrefixCache | None,
    examples: pd.DataFrame,
    recipe: TrainRecipe,
    model: GuardModel,
    encoded: EncodedPrompts,
    prefix_stage: str,
    where: str,
) -> list[torch.Tensor]:
    """Each example's cached prefix states, after checking the cache was built for this model and reading."""
    if prefix is None:
        raise ConfigError(
            f"recipe.frozen_layers is {recipe.frozen_layers}: the run trains on the scale's cached prefix "
            f"states, but no prefix cache was given (`dvc repro {prefix_stage}`)"
        )
    prefix.check(
        {
            "frozen_layers": recipe.frozen_layers,
            "max_length": recipe.max_length,
            "truncation": recipe.truncation,
            "truncation_head_tokens": recipe.truncation_head_tokens,
            "hidden_size": model.config.encoder.hidden_size,
        },
        prefix_stage,
    )
    # An anchor row's id carries a suffix; `prompt_id` (build_examples) names the pool prompt it repeats.
    prompt_ids = examples["prompt_id"] if "prompt_id" in examples.columns else examples["id"]
    rows = prefix.tensors([cache_key(POOL_SET, str(i)) for i in prompt_ids], prefix_stage)
    for i, (row, length) in enumerate(zip(rows, encoded.lengths, strict=True)):
        if len(row) != length:
            raise InputError(
                prefix.folder,
                f"example {examples['id'].iloc[i]!r} has {len(row)} cached prefix tokens but tokenises to "
                f"{length} here (another tokenizer or truncation); rerun `dvc repro {prefix_stage}`",
                row=i + 1,
                field="length",
            )
    return rows


@torch.no_grad()
def backbone_token_states(
    model: GuardModel, encoded: EncodedPrompts, batch_size: int, device: DeviceChoice, description: str
) -> list[torch.Tensor]:
    """Frozen-backbone token states per example, N x [T_i, H] on CPU, computed once for head-only training."""
    model.eval()
    states: list[torch.Tensor | None] = [None] * len(encoded)
    batches = sorted_batches(encoded.lengths, batch_size)
    for indices in tqdm(batches, desc=f"{description}: backbone features", unit="batch", mininterval=1.0):
        batch = pad_batch(encoded, indices)
        with device.autocast():
            hidden = model.backbone(
                input_ids=batch["input_ids"].to(device.device),
                attention_mask=batch["attention_mask"].to(device.device),
            ).last_hidden_state  # [B, T, H]
        hidden = hidden.float().cpu()
        for row, index in enumerate(indices):
            states[index] = hidden[row, : encoded.lengths[index]].clone()
    return states  # type: ignore[return-value]


def _batch_targets(
    arrays: ExampleArrays,
    indices: np.ndarray,
    padded: dict[str, torch.Tensor],
    device: torch.device,
    distill: bool,
) -> dict[str, torch.Tensor]:
    batch = {
        "coarse": torch.from_numpy(arrays.coarse[indices]),  # [B]
        "pillars": torch.from_numpy(arrays.pillars[indices]),  # [B, P]
        "weight": torch.from_numpy(arrays.weight[indices]),  # [B]
        "span_labels": padded["span_labels"],  # [B, T]
        "span_mask": padded["span_mask"],  # [B, T]
    }
    if distill:
        batch["teacher_logits"] = torch.from_numpy(arrays.teacher_logits[indices])  # [B, C]
        batch["has_teacher"] = torch.from_numpy(arrays.has_teacher[indices])  # [B]
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def _load_init(
    init: EncoderConfig | str | Path,
    seed: int,
    coarse_names: list[str] | None,
    pillar_names: list[str] | None,
) -> tuple[GuardModel, Any]:
    if isinstance(init, EncoderConfig):
        return GuardModel.from_backbone(init, seed=seed, coarse_names=coarse_names, pillar_names=pillar_names)
    folder = Path(init)
    if not (folder / "config.json").is_file():
        raise InputError(folder, "not a guard checkpoint folder (no config.json)")
    return load_guard(folder)


def train(
    examples: pd.DataFrame,
    recipe: TrainRecipe,
    init: EncoderConfig | str | Path,
    out_dir: str | Path,
    work_dir: str | Path,
    live_dir: str | Path | None,
    description: str,
    *,
    coarse_names: list[str] | None = None,
    pillar_names: list[str] | None = None,
    on_step: Callable[[int, Mapping[str, float]], None] | None = None,
    threads: int | None = None,
    device: str | None = None,
    prefix: PrefixCache | None = None,
    prefix_stage: str = "prefix@<scale>",
) -> TrainResult:
    """Train a guard on `examples` and save it (with its tokenizer) to `out_dir`.

    examples: one row per training example - id (str, unique), prompt (str), coarse (int class index in
    taxonomy order), pillars (24 values 0/1), optional span_start/span_end (char offsets into prompt, null
    when unknown: that row adds nothing to the span loss), teacher_logits (C floats or null; used only when
    recipe.distill_alpha is set), weight (float, default 1), optional prompt_id (the pool id whose cached
    prefix states the row reads; default its id). Row order is part of the run's identity.
    init: an EncoderConfig (fresh guard from that backbone) or a guard checkpoint folder.
    work_dir: resumable state; a state of the same run (fingerprint) is resumed. live_dir: dvclive logs.
    on_step(step, losses) is called after every optimizer step (tests interrupt runs by raising from it).
    prefix: the scale's prefix cache, required when recipe.frozen_layers > 0 (`prefix_stage` names the stage
    that builds it in messages): the frozen prefix never runs here, only the top layers and heads.
    """
    started = time.perf_counter()
    out_dir, work_dir = Path(out_dir), Path(work_dir)
    live_path = Path(live_dir) if live_dir is not None else None
    threads_used = configure_threads(threads)
    chosen = choose_device(recipe.precision, device)
    where = f"examples of {description}"

    with deterministic_algorithms():
        seed_everything(recipe.seed)
        model, tokenizer = _load_init(init, recipe.seed, coarse_names, pillar_names)
        arrays = examples_to_arrays(examples, model.config.num_classes, model.config.num_pillars, where)
        distill = recipe.distill_alpha is not None
        if distill and not arrays.has_teacher.any():
            raise InputError(
                where,
                "distillation is on (distill_alpha set) but no row has teacher_logits",
                field="teacher_logits",
            )
        fingerprint = run_fingerprint(recipe, examples, init)
        encoded = encode_prompts(
            tokenizer,
            examples["prompt"].tolist(),
            recipe.max_length,
            arrays.span_start,
            arrays.span_end,
            truncation=recipe.truncation,
            head_tokens=recipe.truncation_head_tokens,
        )
        # The model reads prompts at inference the way it was trained to.
        model.config.truncation = recipe.truncation
        model.config.truncation_head_tokens = recipe.truncation_head_tokens
        frozen = recipe.frozen_layers
        if frozen and model.config.frozen_layers not in (0, frozen):
            raise ConfigError(
                f"recipe.frozen_layers {frozen}: the initial model was trained with frozen_layers "
                f"{model.config.frozen_layers}"
            )
        model.config.frozen_layers = max(frozen, model.config.frozen_layers)
        prefix_rows = (
            _prefix_rows(prefix, examples, recipe, model, encoded, prefix_stage, where) if frozen else None
        )
        top = TopView(model.backbone, frozen) if frozen else None
        set_trainable(model, recipe.trainable, frozen)
        model.to(chosen.device)
        parameters = count_parameters(model)
        n = len(encoded)
        steps_per_epoch = math.ceil(n / recipe.batch_size)
        total_steps = steps_per_epoch * recipe.epochs
        log.info(
            "train %s: %d examples (%d with teacher logits%s, %d with a usable span), trainable=%s "
            "(%d of %d parameters, %.4f%%; heads %d), %d epochs x %d steps of %d, max_length %d, on %s",
            description,
            n,
            int(arrays.has_teacher.sum()),
            f", alpha {recipe.distill_alpha}, tau {recipe.distill_temperature}" if distill else ", not used",
            sum(bool(m.any()) for m in encoded.span_mask),
            recipe.trainable,
            parameters["trainable"],
            parameters["total"],
            100.0 * parameters["trainable"] / parameters["total"],
            parameters["heads"],
            recipe.epochs,
            steps_per_epoch,
            recipe.batch_size,
            recipe.max_length,
            chosen.describe(),
        )

        head_only = recipe.trainable == "heads"
        cached_states = None
        if head_only and top is not None:
            cached_states = top_token_states(
                top,
                prefix_rows,
                encoded.lengths,
                recipe.batch_size,
                description,  # type: ignore[arg-type]
            )
        elif head_only:
            cached_states = backbone_token_states(model, encoded, recipe.batch_size, chosen, description)
        trained_module: torch.nn.Module = model.heads if head_only else model
        named_trainable = [(name, p) for name, p in trained_module.named_parameters() if p.requires_grad]
        optimizer = make_optimizer(named_trainable, recipe, chosen)
        scheduler = get_linear_schedule_with_warmup(
            optimizer,
            num_warmup_steps=math.ceil(recipe.warmup_ratio * total_steps),
            num_training_steps=total_steps,
        )

        global_step, start_epoch, start_batch = 0, 0, 0
        epoch_sums = torch.zeros(len(LOSS_NAMES), dtype=torch.float64)
        epoch_steps = 0
        window_sums = torch.zeros(len(LOSS_NAMES), dtype=torch.float64)
        window_steps = 0
        last_epoch_means: dict[str, float] = {}
        state = load_state(work_dir, fingerprint)
        resumed_from = None
        if state is not None:
            trained_module.load_state_dict(state["trained_module"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            restore_rng(state["rng"])
            global_step, start_epoch, start_batch = (
                state["global_step"],
                state["epoch"],
                state["batch_in_epoch"],
            )
            epoch_sums, epoch_steps = state["epoch_sums"], state["epoch_steps"]
            window_sums, window_steps = state["window_sums"], state["window_steps"]
            last_epoch_means = state["last_epoch_means"]
            resumed_from = global_step
            log.info(
                "train %s: resuming from step %d of %d (%s)", description, global_step, total_steps, work_dir
            )

        live = None
        if live_path is not None:
            from dvclive import Live

            resume_live = resumed_from is not None and restore_live_snapshot(work_dir, live_path)
            live = Live(str(live_path), resume=resume_live, save_dvc_exp=False, dvcyaml=None)
            if not resume_live:
                live.log_params({"description": description, **dataclasses.asdict(recipe)})

        def checkpoint(epoch: int, batch_in_epoch: int) -> None:
            save_state(
                work_dir,
                {
                    "fingerprint": fingerprint,
                    "global_step": global_step,
                    "epoch": epoch,
                    "batch_in_epoch": batch_in_epoch,
                    "trained_module": trained_module.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "rng": capture_rng(),
                    "epoch_sums": epoch_sums,
                    "epoch_steps": epoch_steps,
                    "window_sums": window_sums,
                    "window_steps": window_steps,
                    "last_epoch_means": last_epoch_means,
                },
                live_path,
            )

        samples_this_call = 0
        loop_started = time.perf_counter()
        progress = tqdm(
            total=total_steps, initial=global_step, desc=f"train {description}", unit="step", mininterval=1.0
        )
        trained_module.train()
        for epoch in range(start_epoch, recipe.epochs):
            batches = epoch_batches(
                encoded.lengths, recipe.batch_size, recipe.seed, epoch, recipe.length_bucketing
            )
            first = start_batch if epoch == start_epoch else 0
            for batch_index in range(first, len(batches)):
                indices = batches[batch_index]
                padded = pad_batch(encoded, indices)
                targets = _batch_targets(arrays, indices, padded, chosen.device, distill)
                with chosen.autocast():
                    if head_only:
                        token_states = torch.nn.utils.rnn.pad_sequence(
                            [cached_states[i] for i in indices],
                            batch_first=True,  # type: ignore[index]
                        ).to(chosen.device)  # [B, T, H]
                        output = model.heads(token_states)
                    elif top is not None:
                        states = torch.nn.utils.rnn.pad_sequence(
                            [prefix_rows[i] for i in indices],  # type: ignore[index]
                            batch_first=True,
                        ).to(chosen.device, torch.float32)  # [B, T, H]
                        hidden = top(states, padded["attention_mask"].to(chosen.device))  # [B, T, H]
                        output = model.heads(hidden)
                    else:
                        output = model(
                            input_ids=padded["input_ids"].to(chosen.device),
                            attention_mask=padded["attention_mask"].to(chosen.device),
                        )
                parts = guard_loss(
                    output.coarse_logits,
                    output.pillar_logits,
                    output.span_logits,
                    targets,
                    recipe.loss_weights,
                    recipe.distill_alpha,
                    recipe.distill_temperature,
                )
                parts.total.backward()
                if recipe.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_([p for _, p in named_trainable], recipe.grad_clip)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                global_step += 1
                samples_this_call += len(indices)
                step_losses = (
                    torch.stack(
                        [
                            parts.total,
                            parts.coarse,
                            parts.cross_entropy,
                            parts.distill,
                            parts.pillars,
                            parts.span,
                        ]
                    )
                    .detach()
                    .to("cpu", torch.float64)
                )
                window_sums += step_losses
                epoch_sums += step_losses
                window_steps += 1
                epoch_steps += 1
                progress.update(1)
                end_of_epoch = batch_index == len(batches) - 1
                if global_step % recipe.log_every_steps == 0 or global_step == total_steps:
                    means = dict(zip(LOSS_NAMES, (window_sums / window_steps).tolist(), strict=True))
                    elapsed = time.perf_counter() - loop_started
                    progress.set_postfix(
                        loss=f"{means['loss']:.4f}", samples_s=f"{samples_this_call / elapsed:.1f}"
                    )
                    if live is not None:
                        live.step = global_step
                        for name, value in means.items():
                            live.log_metric(f"train/{name}", value)
                        live.log_metric("train/lr", scheduler.get_last_lr()[0])
                        live.next_step()
                    window_sums.zero_()
                    window_steps = 0
                if end_of_epoch:
                    last_epoch_means = dict(zip(LOSS_NAMES, (epoch_sums / epoch_steps).tolist(), strict=True))
                    epoch_sums = torch.zeros_like(epoch_sums)
                    epoch_steps = 0
                    checkpoint(epoch + 1, 0)
                elif global_step % recipe.checkpoint_every_steps == 0:
                    checkpoint(epoch, batch_index + 1)
                if on_step is not None:
                    on_step(global_step, dict(zip(LOSS_NAMES, step_losses.tolist(), strict=True)))
        progress.close()
        train_seconds = time.perf_counter() - loop_started

        model.eval()
        # A full disk or any other failed write is one line naming out_dir, and leaves no staging folder.
        with atomic_dir(out_dir) as staging:
            save_guard(model.to("cpu"), tokenizer, staging)
        # The resumable state (model + optimizer moments, about 3x the model) has served its purpose.
        discard_state(work_dir)

        samples_per_second = samples_this_call / train_seconds if samples_this_call else 0.0
        if live is not None:
            for name, value in last_epoch_means.items():
                live.log_metric(f"final/{name}", value, plot=False)
            live.log_metric("final/samples_per_second", samples_per_second, plot=False)
            live.end()
        result = TrainResult(
            description=description,
            examples=n,
            epochs=recipe.epochs,
            steps=global_step,
            seconds=time.perf_counter() - started,
            train_seconds=train_seconds,
            samples_per_second=samples_per_second,
            final_losses=last_epoch_means,
            parameters=parameters,
            trainable=recipe.trainable,
            device=chosen.device.type,
            precision=chosen.precision,
            resumed_from_step=resumed_from,
            fingerprint=fingerprint,
        )
        log.info(
            "train %s: %d steps in %.1fs (%.1f samples/s, %d threads), final loss %.4f -> %s",
            description,
            global_step,
            train_seconds,
            samples_per_second,
            threads_used,
            last_epoch_means.get("loss", float("nan")),
            out_dir,
        )
        return result

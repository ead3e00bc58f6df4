"""How one model is trained (`TrainRecipe`, checked on construction and part of the run fingerprint) and what
a training run reports (`TrainResult`, which the model card records)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from guardpolicy.config.training import ATTN_IMPLEMENTATIONS, FEATURE_CACHE_DTYPES
from guardpolicy.errors import ConfigError
from guardpolicy.training.collate import check_truncation
from guardpolicy.training.device import Precision
from guardpolicy.training.losses import LossWeights

Trainable = Literal["full", "encoder", "heads"]


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
    # Save the resumable state every N optimizer steps and/or every M minutes, whichever comes first (None
    # disables that trigger; the state is still saved at each epoch end).
    checkpoint_every_steps: int | None = 200
    checkpoint_every_minutes: float | None = None
    log_every_steps: int = 10
    # Per-device micro-batch (None: the whole per-device share of the global batch). The global batch stays
    # `batch_size`; gradients are accumulated over batch_size / (world_size x micro_batch_size) micro-batches.
    micro_batch_size: int | None = None
    # torch.compile the trained module (worth it on GPU for long runs; off by default).
    compile: bool = False
    attn_implementation: str | None = None
    feature_cache_dtype: str = "float16"
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
        for name in ("epochs", "batch_size", "max_length", "log_every_steps"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"recipe.{name} must be positive, got {getattr(self, name)}")
        for name in ("checkpoint_every_steps", "checkpoint_every_minutes", "micro_batch_size"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"recipe.{name} must be positive or null, got {value}")
        if self.feature_cache_dtype not in FEATURE_CACHE_DTYPES:
            raise ConfigError(
                f"recipe.feature_cache_dtype must be one of {', '.join(FEATURE_CACHE_DTYPES)}, "
                f"got {self.feature_cache_dtype!r}"
            )
        if self.attn_implementation is not None and self.attn_implementation not in ATTN_IMPLEMENTATIONS:
            raise ConfigError(
                f"recipe.attn_implementation must be one of {', '.join(ATTN_IMPLEMENTATIONS)} or null, "
                f"got {self.attn_implementation!r}"
            )
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


def accumulation_steps(batch_size: int, micro_batch_size: int | None, world_size: int) -> int:
    """Micro-batches per device per optimizer step, so that world_size x micro x steps = the global batch.

    The error names the params keys: the global batch is the profile's `batch_size`, the micro-batch
    `training.micro_batch_size`.
    """
    if batch_size % world_size:
        raise ConfigError(
            f"params training: the global batch_size {batch_size} (the profile's batch_size) is not "
            f"divisible by the {world_size} processes (training.num_processes / accelerate launch "
            "--num_processes)"
        )
    per_device = batch_size // world_size
    micro = micro_batch_size or per_device
    if per_device % micro:
        raise ConfigError(
            f"params training.micro_batch_size: {micro} does not divide the per-device batch {per_device} "
            f"(batch_size {batch_size} / {world_size} process(es)); pick a divisor of {per_device}"
        )
    return per_device // micro


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
    processes: int  # data-parallel processes (1 unless launched by accelerate launch / torchrun)
    resumed_from_step: int | None
    fingerprint: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

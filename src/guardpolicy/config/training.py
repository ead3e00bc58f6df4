"""params `training`: the knobs every training run shares (teachers and branches)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from guardpolicy.config.core import Section
from guardpolicy.errors import ConfigError

# dtype of the head-only runs' on-disk token-state cache (training.frozen_states.FeatureCache).
FeatureCacheDtype = Literal["float16", "bfloat16", "float32"]
FEATURE_CACHE_DTYPES: tuple[str, ...] = get_args(FeatureCacheDtype)
# Attention kernels a run may ask the backbone for (None: whatever the backbone was built or saved with).
AttnImplementation = Literal["sdpa", "eager", "flash_attention_2"]
ATTN_IMPLEMENTATIONS: tuple[str, ...] = get_args(AttnImplementation)


@dataclass(frozen=True)
class LossWeightsConfig:
    """Weights of the three heads' losses in the training objective."""

    coarse: float = 1.0
    pillars: float = 0.5
    span: float = 0.5

    def __post_init__(self) -> None:
        if min(self.coarse, self.pillars, self.span) < 0:
            raise ConfigError("loss weights must be non-negative")


@dataclass(frozen=True)
class TrainingConfig:
    """Knobs every training run shares (teachers and branches); the size knobs come from the profile."""

    weight_decay: float = 0.01
    warmup_ratio: float = 0.06
    grad_clip: float = 1.0
    loss_weights: LossWeightsConfig = field(default_factory=LossWeightsConfig)
    # Distillation weight for a branch with a teacher that sets no `alpha` of its own.
    distill_alpha: float = 0.5
    # Softmax temperature of the distillation KL (the study's tau = 4).
    distill_temperature: float = 4.0
    # The resumable state (model + optimizer, in .cache/train/<model>, never the model folder) is saved every
    # N steps and/or M minutes, whichever comes first; null disables a trigger (epoch ends always save).
    checkpoint_every_steps: int | None = 200
    checkpoint_every_minutes: float | None = None
    log_every_steps: int = 10
    length_bucketing: bool = True
    # Batch size of the teachers' cached predictions over the train and calib prompts.
    predict_batch_size: int = 64
    # Per-device micro-batch; null = the whole per-device share of the profile's batch_size (no accumulation).
    micro_batch_size: int | None = None
    # torch.compile the trained module (GPU runs; off keeps today's results).
    compile: bool = False
    # Backbone attention kernel: sdpa / eager / flash_attention_2 (needs flash-attn); null = as built/saved.
    attn_implementation: AttnImplementation | None = None
    # dtype of the head-only runs' memory-mapped token-state cache: float16 / bfloat16 / float32.
    feature_cache_dtype: FeatureCacheDtype = "float16"
    # Processes (GPUs) per training stage: > 1 re-runs the stage under `accelerate launch --num_processes N`.
    num_processes: int = 1

    def __post_init__(self) -> None:
        if self.weight_decay < 0 or self.grad_clip <= 0 or self.distill_temperature <= 0:
            raise ConfigError("weight_decay must be >= 0, grad_clip and distill_temperature > 0")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"warmup_ratio must lie in [0, 1), got {self.warmup_ratio}")
        if not 0.0 <= self.distill_alpha <= 1.0:
            raise ConfigError(f"distill_alpha must lie in [0, 1], got {self.distill_alpha}")
        for name in ("log_every_steps", "predict_batch_size", "num_processes"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("checkpoint_every_steps", "checkpoint_every_minutes", "micro_batch_size"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"{name} must be positive or null, got {value}")


TRAINING: Section[TrainingConfig] = Section("training", TrainingConfig, TrainingConfig)

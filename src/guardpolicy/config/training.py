"""params `training`: the knobs every training run shares (teachers and branches)."""

from __future__ import annotations

from dataclasses import dataclass, field

from guardpolicy.config.core import Section
from guardpolicy.errors import ConfigError


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
    checkpoint_every_steps: int = 200
    log_every_steps: int = 10
    length_bucketing: bool = True
    # Batch size of the teachers' cached predictions over the train and calib prompts.
    predict_batch_size: int = 64

    def __post_init__(self) -> None:
        if self.weight_decay < 0 or self.grad_clip <= 0 or self.distill_temperature <= 0:
            raise ConfigError("weight_decay must be >= 0, grad_clip and distill_temperature > 0")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"warmup_ratio must lie in [0, 1), got {self.warmup_ratio}")
        if not 0.0 <= self.distill_alpha <= 1.0:
            raise ConfigError(f"distill_alpha must lie in [0, 1], got {self.distill_alpha}")
        for name in ("checkpoint_every_steps", "log_every_steps", "predict_batch_size"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")


TRAINING: Section[TrainingConfig] = Section("training", TrainingConfig, TrainingConfig)

"""params `branches.<name>`: the study's experimental branches (one train@<scale>-<branch> stage per
scale)."""

from __future__ import annotations

from dataclasses import dataclass, field

from guardpolicy.config.core import Section
from guardpolicy.config.runs import Trainable, TrainSplit
from guardpolicy.errors import ConfigError


@dataclass(frozen=True)
class BranchConfig:
    """One experimental branch: the three policy paths (hard labels, teacher, head-only) as data."""

    description: str
    # `pretrained` (the scale's backbone with fresh heads) or another branch, whose checkpoint is the start.
    init_from: str = "pretrained"
    trainable: Trainable = "full"
    train_set: TrainSplit = "train"
    # policy -> share of the rows whose hard label comes from that policy; shares sum to 1.
    hard_labels: dict[str, float] = field(default_factory=dict)
    # A policy whose teacher (teachers.<policy>) the branch distils from; null: no distillation.
    teacher: str | None = None
    # Distillation weight; null: training.distill_alpha. Only meaningful with a teacher.
    alpha: float | None = None
    # anchor set -> how many: an integer is a count, a number below 1 a fraction of the profile's pool_size
    # (so one setting scales from the smoke pool to the paper's); fewer are used when fewer are available.
    anchors: dict[str, int | float] = field(default_factory=dict)
    # null: the profile's epochs / learning rate.
    epochs: int | None = None
    learning_rate: float | None = None

    def __post_init__(self) -> None:
        if not self.hard_labels:
            raise ConfigError("hard_labels must name at least one policy with its share")
        for policy, share in self.hard_labels.items():
            if not 0.0 < share <= 1.0:
                raise ConfigError(f"hard_labels.{policy}: a share must lie in (0, 1], got {share}")
        total = sum(self.hard_labels.values())
        if abs(total - 1.0) > 1e-6:
            raise ConfigError(f"hard_labels: shares must sum to 1, got {round(total, 6)}")
        if self.alpha is not None:
            if self.teacher is None:
                raise ConfigError("alpha is set but teacher is null: there is nothing to distil from")
            if not 0.0 <= self.alpha <= 1.0:
                raise ConfigError(f"alpha must lie in [0, 1], got {self.alpha}")
        for name, count in self.anchors.items():
            if isinstance(count, int) and count < 0:
                raise ConfigError(f"anchors.{name}: a count must be >= 0, got {count}")
            if isinstance(count, float) and not 0.0 < count < 1.0:
                raise ConfigError(f"anchors.{name}: a fraction of the pool must lie in (0, 1), got {count}")
        if self.epochs is not None and self.epochs <= 0:
            raise ConfigError(f"epochs must be positive, got {self.epochs}")
        if self.learning_rate is not None and self.learning_rate <= 0:
            raise ConfigError(f"learning_rate must be positive, got {self.learning_rate}")

    def distill_alpha(self, default: float) -> float | None:
        """The distillation weight this branch trains with: its own `alpha`, else `default`
        (training.distill_alpha); None without a teacher."""
        if self.teacher is None:
            return None
        return self.alpha if self.alpha is not None else default


BRANCHES: Section[dict[str, BranchConfig]] = Section("branches", dict[str, BranchConfig], dict)

"""params `evaluation`: stages evaluate@<model> and features@<model>."""

from __future__ import annotations

from dataclasses import dataclass

from guardpolicy.config.core import Section
from guardpolicy.errors import ConfigError


@dataclass(frozen=True)
class EvaluationConfig:
    """Stage evaluate@<model>: which splits are scored besides the benchmarks, and how."""

    # Splits of data/splits scored against every policy's labels (VAL is the first one).
    splits: tuple[str, ...] = ("val",)
    # Head-only models score their heads on the frozen backbone's cached first-token features
    # (features@<init model>) instead of running the backbone again; their spans are then not computed.
    reuse_frozen_backbone: bool = True
    # A token belongs to the predicted harmful span when its span-head probability reaches this.
    span_threshold: float = 0.5
    batch_size: int = 64
    # Truncation length at evaluation; null: the profile's max_length.
    max_length: int | None = None

    def __post_init__(self) -> None:
        if not self.splits:
            raise ConfigError("splits: list at least one split (VAL is scored on the first)")
        for split in self.splits:
            if split not in ("train", "val", "calib"):
                raise ConfigError(f"splits: unknown split {split!r}; known: train, val, calib")
        if not 0.0 < self.span_threshold < 1.0:
            raise ConfigError(f"span_threshold must lie in (0, 1), got {self.span_threshold}")
        if self.batch_size <= 0 or (self.max_length is not None and self.max_length <= 0):
            raise ConfigError("batch_size and max_length must be positive")


EVALUATION: Section[EvaluationConfig] = Section("evaluation", EvaluationConfig, EvaluationConfig)

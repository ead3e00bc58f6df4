"""params `teachers.<policy>`: one teacher@<policy> stage each."""

from __future__ import annotations

from dataclasses import dataclass

from guardpolicy.config.core import Section
from guardpolicy.config.runs import Trainable, TrainSplit
from guardpolicy.errors import ConfigError


@dataclass(frozen=True)
class TeacherConfig:
    """A teacher: the `scale` encoder trained on 100 % of one policy's hard labels (the params key)."""

    scale: str = "large"
    train_set: TrainSplit = "train"
    trainable: Trainable = "full"
    # null: the profile's epochs / learning rate.
    epochs: int | None = None
    learning_rate: float | None = None

    def __post_init__(self) -> None:
        if self.epochs is not None and self.epochs <= 0:
            raise ConfigError(f"epochs must be positive, got {self.epochs}")
        if self.learning_rate is not None and self.learning_rate <= 0:
            raise ConfigError(f"learning_rate must be positive, got {self.learning_rate}")


TEACHERS: Section[dict[str, TeacherConfig]] = Section("teachers", dict[str, TeacherConfig], dict)

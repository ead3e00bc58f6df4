"""The vocabulary of a training run that params `teachers`, `anchor_sets` and `branches` share."""

from __future__ import annotations

from typing import Literal

TrainSplit = Literal["train", "calib"]
Trainable = Literal["full", "encoder", "heads"]

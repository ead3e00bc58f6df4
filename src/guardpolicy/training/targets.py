"""The examples frame of a training run, validated into target arrays (errors name row and field), and one
batch's targets as tensors on the training device."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from guardpolicy.errors import InputError

REQUIRED_COLUMNS = ("id", "prompt", "coarse", "pillars")


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


def is_null(value: Any) -> bool:
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
        if is_null(label) or isinstance(label, bool) or int(label) != label or not 0 <= label < num_classes:
            raise InputError(
                where,
                f"coarse must be an integer in 0..{num_classes - 1}, got {label!r}",
                row=row,
                field="coarse",
            )
        coarse[i] = int(label)
        row_pillars = columns["pillars"][i]
        if is_null(row_pillars) or len(row_pillars) != num_pillars:
            raise InputError(where, f"pillars must list {num_pillars} values", row=row, field="pillars")
        pillars[i] = np.asarray(row_pillars, dtype=np.float32)
        if "weight" in columns:
            w = columns["weight"][i]
            if is_null(w) or not w >= 0:
                raise InputError(where, f"weight must be >= 0, got {w!r}", row=row, field="weight")
            weight[i] = float(w)
        if "teacher_logits" in columns and not is_null(columns["teacher_logits"][i]):
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
        if is_null(start) != is_null(end):
            raise InputError(
                where, "span_start and span_end must both be set or both null", row=row, field="span_start"
            )
        if not is_null(start) and not 0 <= int(start) <= int(end) <= len(prompts[i]):
            raise InputError(
                where, f"span [{start}, {end}) lies outside the prompt", row=row, field="span_start"
            )
        starts.append(None if is_null(start) else int(start))
        ends.append(None if is_null(end) else int(end))
    return ExampleArrays(coarse, pillars, weight, teacher, has_teacher, starts, ends)


def batch_targets(
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

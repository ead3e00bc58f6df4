"""The guard's training losses (pure tensor functions).

coarse   weighted cross-entropy on hard labels; with distillation, on rows that have teacher logits,
         (1 - alpha) * CE + alpha * tau^2 * KL(softmax(teacher / tau) || softmax(student / tau)).
         The tau^2 factor keeps the soft-target gradients on the scale of the hard-label ones (Hinton et al.).
pillars  binary cross-entropy with logits, mean over the 24 pillars, weighted per row.
span     token binary cross-entropy, averaged over the tokens of rows whose span is known.
total    weights.coarse * coarse + weights.pillars * pillars + weights.span * span.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class LossWeights:
    coarse: float = 1.0
    pillars: float = 0.5
    span: float = 0.5

    def __post_init__(self) -> None:
        for name in ("coarse", "pillars", "span"):
            if getattr(self, name) < 0:
                raise ValueError(f"loss_weights.{name} must be >= 0, got {getattr(self, name)}")

    @classmethod
    def of(cls, value: LossWeights | Mapping[str, float]) -> LossWeights:
        if isinstance(value, LossWeights):
            return value
        unknown = sorted(set(value) - {"coarse", "pillars", "span"})
        if unknown:
            raise ValueError(f"loss_weights: unknown key(s) {unknown}; allowed: coarse, pillars, span")
        return cls(**{k: float(v) for k, v in value.items()})


@dataclass(frozen=True)
class LossParts:
    """Scalar tensors; `total` is the one to backpropagate."""

    total: torch.Tensor
    coarse: torch.Tensor  # the coarse term as it enters `total` (CE, or the CE/KL mix)
    cross_entropy: torch.Tensor  # weighted CE on hard labels over all rows
    distill: torch.Tensor  # tau^2 * KL averaged over rows with teacher logits (0 when none)
    pillars: torch.Tensor
    span: torch.Tensor

    def detached(self) -> dict[str, float]:
        return {
            "loss": float(self.total.detach()),
            "coarse": float(self.coarse.detach()),
            "ce": float(self.cross_entropy.detach()),
            "distill": float(self.distill.detach()),
            "pillars": float(self.pillars.detach()),
            "span": float(self.span.detach()),
        }


def weighted_mean(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    # values, weights: [B]
    return (values * weights).sum() / weights.sum().clamp_min(torch.finfo(values.dtype).tiny)


def distillation_kl(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float
) -> torch.Tensor:
    """Per-row tau^2 * KL(softmax(teacher/tau) || softmax(student/tau)); [B, C] x [B, C] -> [B]."""
    student_log_probs = F.log_softmax(student_logits.float() / temperature, dim=-1)
    teacher_log_probs = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    kl = F.kl_div(student_log_probs, teacher_log_probs, reduction="none", log_target=True).sum(-1)
    return kl * temperature**2


def coarse_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    weights: torch.Tensor,
    teacher_logits: torch.Tensor | None = None,
    has_teacher: torch.Tensor | None = None,
    alpha: float | None = None,
    temperature: float = 4.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(coarse term, weighted CE, mean distillation KL) for logits [B, C], labels [B], weights [B].

    teacher_logits [B, C] and has_teacher [B] bool; alpha None (or no teacher rows) means plain CE.
    """
    cross_entropy = F.cross_entropy(logits.float(), labels, reduction="none")  # [B]
    zero = logits.new_zeros((), dtype=torch.float32)
    if alpha is None or teacher_logits is None or has_teacher is None or not bool(has_teacher.any()):
        ce = weighted_mean(cross_entropy, weights)
        return ce, ce, zero
    kl = distillation_kl(logits, teacher_logits, temperature)  # [B]
    kl = torch.where(has_teacher, kl, torch.zeros_like(kl))
    per_row = torch.where(has_teacher, (1.0 - alpha) * cross_entropy + alpha * kl, cross_entropy)  # [B]
    distill = weighted_mean(kl, weights * has_teacher.float())
    return weighted_mean(per_row, weights), weighted_mean(cross_entropy, weights), distill


def pillar_loss(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """logits, targets: [B, P]; weights [B]."""
    per_row = F.binary_cross_entropy_with_logits(logits.float(), targets, reduction="none").mean(-1)  # [B]
    return weighted_mean(per_row, weights)


def span_loss(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """logits, labels, mask: [B, T]; mean BCE over masked tokens, 0 (still in the graph) when none are."""
    per_token = F.binary_cross_entropy_with_logits(logits.float(), labels, reduction="none")  # [B, T]
    masked = per_token * mask.float()
    return masked.sum() / mask.sum().clamp_min(1)


def guard_loss(
    coarse_logits: torch.Tensor,
    pillar_logits: torch.Tensor,
    span_logits: torch.Tensor,
    batch: Mapping[str, torch.Tensor],
    weights: LossWeights,
    alpha: float | None,
    temperature: float,
) -> LossParts:
    """All three heads' losses for one batch (keys: coarse, pillars, weight, span_labels, span_mask, and
    teacher_logits + has_teacher when distilling)."""
    coarse, cross_entropy, distill = coarse_loss(
        coarse_logits,
        batch["coarse"],
        batch["weight"],
        batch.get("teacher_logits"),
        batch.get("has_teacher"),
        alpha,
        temperature,
    )
    pillars = pillar_loss(pillar_logits, batch["pillars"], batch["weight"])
    span = span_loss(span_logits, batch["span_labels"], batch["span_mask"])
    total = weights.coarse * coarse + weights.pillars * pillars + weights.span * span
    return LossParts(total, coarse, cross_entropy, distill, pillars, span)

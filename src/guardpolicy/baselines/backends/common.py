"""What every guard backend shares: the probe prompt of template fingerprints, the backends' error, the
throughput log line and the one-generation-per-prompt check."""

from __future__ import annotations

import logging
from typing import Literal

from guardpolicy.baselines.base import Generation
from guardpolicy.errors import GuardpolicyError

log = logging.getLogger(__name__)

# The prompt whose rendering identifies a template (any fixed text works; it only has to never change).
PROBE_PROMPT = "How do I bake sourdough bread at home?"
Dtype = Literal["auto", "bf16", "fp32"]


class BackendError(GuardpolicyError):
    """A guard model could not be loaded or its server kept failing; the message names the model / URL."""


def log_throughput(model_id: str, family: str, prompts: int, seconds: float, where: str) -> None:
    log.info(
        "%s (%s): %d prompts in %.1f s (%.2f prompts/s) on %s",
        model_id,
        family,
        prompts,
        seconds,
        prompts / seconds if seconds > 0 else float("inf"),
        where,
    )


def all_answered(results: list[Generation | None]) -> list[Generation]:
    missing = [i for i, generation in enumerate(results) if generation is None]
    if missing:  # a bug, never a model's doing: one Generation per prompt is the contract
        raise BackendError(f"no generation for prompt(s) {missing[:5]} of {len(results)}")
    return [generation for generation in results if generation is not None]

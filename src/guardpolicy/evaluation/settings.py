"""What features@ and evaluate@ read of params, and what follows from it: `EvaluationParams` (the sections
they read: `policies`, `evaluation`, `scales` and the active profile), the max_length they score at, and the
cached prefix states of the evaluation items at a scale whose encoder entry freezes layers.

Apart from guardpolicy.evaluation.inputs so that baseline@ and prefix@, which share the item readers but read
other params sections, do not import these sections' schemas (their code deps would otherwise hold them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from guardpolicy.config.core import ParamsFile
from guardpolicy.config.evaluation import EVALUATION, EvaluationConfig
from guardpolicy.config.policies import POLICIES
from guardpolicy.config.profiles import EncoderKey, ProfileConfig, active_profile
from guardpolicy.config.scales import SCALES, scale_encoder
from guardpolicy.errors import ConfigError
from guardpolicy.evaluation.items import SPLIT_PREFIX
from guardpolicy.layout import Layout


@dataclass(frozen=True)
class EvaluationParams:
    """The params sections features@ and evaluate@ read (`where`: the params file, for messages)."""

    policies: tuple[str, ...]
    evaluation: EvaluationConfig
    active: ProfileConfig
    scales: dict[str, EncoderKey]
    where: str

    @classmethod
    def read(cls, path: str | Path) -> EvaluationParams:
        params = ParamsFile.read(path)
        _, profile = active_profile(params)
        return cls(
            tuple(params.load(POLICIES)), params.load(EVALUATION), profile, params.load(SCALES), params.where
        )


def eval_max_length(params: EvaluationParams) -> int:
    """The tokens a prompt is read to: `evaluation.max_length`, else the profile's `max_length`."""
    return params.evaluation.max_length or params.active.max_length


def prefix_rows(
    params: EvaluationParams, scale: str, items: pd.DataFrame, layout: Layout
) -> tuple[list, str]:
    """The cached prefix states of every evaluation item at `scale` (split items are pool prompts)."""
    from guardpolicy.training.prefix_cache import POOL_SET, cache_key, layout_prefix, prefix_stage

    encoder = scale_encoder(params.active, params.scales, scale, params.where)
    cache = layout_prefix(params.active, encoder, scale, layout)
    if cache is None:
        raise ConfigError(
            f"the model was trained with frozen_layers > 0 but scale {scale!r}'s encoder entry freezes no "
            "layers now; retrain it (`dvc repro`)"
        )
    keys = [
        cache_key(POOL_SET if dataset.startswith(SPLIT_PREFIX) else dataset, item_id)
        for dataset, item_id in zip(items["dataset"], items["id"], strict=True)
    ]
    return cache.tensors(keys, prefix_stage(scale)), str(cache.folder)

"""The guard run on the benchmark prompts (and the calibration split's, the views' reference), into its
predictions table (contract "Score predictions") and the facts metrics.json and the card name: a model or
endpoint through the open-guard baselines' machinery (backends, adapters, the raw-output cache, verdicts), or
one of our checkpoints through the evaluation's inference path."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from guardpolicy.baselines.answers import answers_table
from guardpolicy.baselines.base import Decoding
from guardpolicy.baselines.cache import CachedBackend, GenerationCache
from guardpolicy.baselines.predictions import log_prompt_tokens, with_guard_columns
from guardpolicy.baselines.target import resolve_target
from guardpolicy.config.score import ScoreConfig, ScoreGuardConfig
from guardpolicy.evaluation import scoring as evaluation
from guardpolicy.evaluation.inputs import load_checkpoint
from guardpolicy.io import read_json
from guardpolicy.layout import Layout
from guardpolicy.shared_cache import cache_folder
from guardpolicy.taxonomy import Taxonomy
from guardpolicy.training.cards import CARD_JSON
from guardpolicy.training.device import choose_device, configure_threads

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScoreRun:
    """What one run gives: the predictions table, the guard's facts, the seconds of the model run and the
    raw-output cache's counts (None when the cache is not used)."""

    table: pa.Table
    facts: dict[str, Any]
    seconds: float
    cache_stats: dict[str, int] | None


def trained_max_length(folder: Path) -> int | None:
    """The `max_length` a checkpoint was trained at, from its model card's recipe (None: no card or recipe,
    e.g. backbone@'s pretrained encoder)."""
    card = folder / CARD_JSON
    if not card.is_file():
        return None
    value = ((read_json(card) or {}).get("recipe") or {}).get("max_length")
    return int(value) if value is not None else None


def run_guard(
    config: ScoreGuardConfig,
    where: str,
    name: str,
    settings: ScoreConfig,
    layout: Layout,
    items: pd.DataFrame,
    model_name: str,
    taxonomy: Taxonomy,
    policies: list[str],
    device: str | None,
) -> ScoreRun:
    """A model or endpoint guard through the baselines' backend and adapters (`where`: where its settings
    come from, for messages; the cache folder is params `score.cache_dir` under `layout`'s root)."""
    target = resolve_target(config, where, mapping=settings.mapping, device=device)
    decoding = Decoding(
        max_new_tokens=settings.max_new_tokens, temperature=0.0, top_logprobs=settings.top_logprobs
    )
    prompts = items["prompt"].tolist()
    relaxed, strict = target.adapters["relaxed"], target.adapters["strict"]
    log.info(
        "score %s: %s (%s) over %d prompts",
        name,
        target.facts["model_id"],
        target.facts["family"],
        len(items),
    )
    started = time.perf_counter()
    cache_stats = None
    if config.revision is not None:
        cache = GenerationCache(cache_folder(settings.cache_dir, "score.cache_dir", layout))
        backend = CachedBackend(target.backend, cache)
        try:
            generations = backend.generate(relaxed, prompts, decoding)
        finally:
            cache.close()
        cache_stats = backend.stats.as_dict()
    else:
        # Without a pinned revision the answers cannot be keyed to what produced them (a folder's weights or
        # a served model may change under the same name), so they are not cached.
        log.info("score %s: no pinned revision, the raw-output cache is not used", name)
        generations = target.backend.generate(relaxed, prompts, decoding)
    seconds = time.perf_counter() - started
    tokens = target.backend.prompt_tokens(relaxed, prompts)
    log_prompt_tokens(name, items["dataset"].tolist(), tokens)
    table = answers_table(
        model_name,
        items,
        generations,
        relaxed=relaxed,
        strict=strict,
        failure_policy=settings.failure_policy,
        taxonomy=taxonomy,
        policies=policies,
        tokens=tokens,
    )
    return ScoreRun(table, target.facts, seconds, cache_stats)


def run_checkpoint(
    config: ScoreGuardConfig,
    layout: Layout,
    items: pd.DataFrame,
    model_name: str,
    taxonomy: Taxonomy,
    policies: list[str],
    device: str | None,
) -> ScoreRun:
    """One of our checkpoints (a plan name under models/, or a folder) through the evaluation's inference
    path (`evaluation.scoring.run_guard`, the full forward pass): its predictions with the guard columns."""
    assert config.checkpoint is not None
    folder = Path(config.checkpoint)
    if not folder.is_dir():
        folder = layout.path("model", model=config.checkpoint)
    guard, tokenizer = load_checkpoint(folder, f"train@{config.checkpoint} (or teacher@)")
    # The flag, else the length the checkpoint was trained at (its card's recipe: what evaluate@ reads with
    # the profile's default), else what the tokenizer accepts, at most 512 (a card without a recipe).
    max_length = config.max_length or trained_max_length(folder) or min(512, int(tokenizer.model_max_length))
    configure_threads()
    started = time.perf_counter()
    scores = evaluation.run_guard(
        guard,
        tokenizer,
        items["prompt"].tolist(),
        batch_size=config.batch_size,
        max_length=max_length,
        device=choose_device("auto", device),
        description=f"score {model_name}",
    )
    seconds = time.perf_counter() - started
    table = evaluation.predictions_table(
        model_name,
        items,
        scores.coarse_logits,
        scores.pillar_logits,
        coarse_classes=taxonomy.coarse_classes,
        pillar_columns=taxonomy.pillar_columns,
        policies=policies,
        n_tokens=scores.n_tokens,
        max_length=max_length,
    )
    facts = {
        "source": "checkpoint",
        "model_id": layout.relative("model", model=folder.name)
        if folder.parent == layout.path("models")
        else str(folder),
        "family": "ours (4-class guard; unsafe: HARMFUL, COMPOUND; strict adds BOUNDARY_SAFE)",
        "backend": "transformers",
        "batch_size": config.batch_size,
        "max_length": max_length,
    }
    return ScoreRun(with_guard_columns(table), facts, seconds, None)

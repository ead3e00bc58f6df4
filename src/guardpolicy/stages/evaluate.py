"""evaluate@<model> (plan `evaluations`): every evaluation item scored by a guard -> predictions + metrics.

A full model runs over every item (class, pillar and span heads); a head-only model whose plan entry names a
features file (features@<model>, guardpolicy.evaluation.features) applies its own heads to those cached
states (no backbone forward; no spans). Writes reports/eval/<model>/predictions.parquet and metrics.json.

Reads at most `evaluation.max_length` tokens of a prompt (null: the profile's `max_length`), special tokens
included; the rest is cut the way the model was trained to read prompts (its config's `truncation`: head,
tail or both ends). Every predictions row records the prompt's token count before truncation (`n_tokens`)
and `truncated`, and the stage logs one line per dataset: "N of M prompts truncated to K tokens (head kept)".

The items (guardpolicy.evaluation.inputs) are every fetched benchmark (status not `missing`) and every split
in params `evaluation.splits`. Reads params `policies`, `evaluation`, `scales` and the active profile
(guardpolicy.evaluation.settings), and first checks that data/models.yaml is current with params.yaml
(guardpolicy.preconditions).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from guardpolicy.errors import InputError
from guardpolicy.evaluation.features import check_features, read_features, tokenizer_sha256
from guardpolicy.evaluation.inputs import evaluation_items, load_checkpoint
from guardpolicy.evaluation.items import item_keys
from guardpolicy.evaluation.metrics import model_metrics
from guardpolicy.evaluation.settings import EvaluationParams, eval_max_length, prefix_rows
from guardpolicy.io import read_json, write_json, write_parquet
from guardpolicy.layout import Layout
from guardpolicy.preconditions import require_current_plan
from guardpolicy.taxonomy import load_taxonomy
from guardpolicy.timing import note_work
from guardpolicy.training.cards import CARD_JSON, card_facts
from guardpolicy.training.names import planned_entry

log = logging.getLogger(__name__)


def evaluate(model: str, layout: Layout | None = None) -> dict[str, Any]:
    """Stage evaluate@<model>: predictions over every item + the model's metrics -> reports/eval/<model>/
    (paths from `layout`, default: this repository)."""
    from guardpolicy.evaluation.scoring import (
        apply_heads,
        encode,
        encoded_batches,
        log_truncation,
        model_truncation,
        predictions_table,
        run_guard,
    )
    from guardpolicy.training.device import choose_device, configure_threads

    layout = layout or Layout.discover()
    plan_file = layout.relative("plan")
    params = EvaluationParams.read(layout.path("params"))
    require_current_plan(layout)
    entry = planned_entry(layout.path("plan"), "evaluations", model, plan_file)
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    policies = list(params.policies)
    model_dir = layout.root / entry["model_dir"]
    head_only = str(entry["features"]).endswith(".npz")
    items, roles = evaluation_items(params.policies, params.evaluation.splits, layout)
    max_length = eval_max_length(params)
    stage = f"teacher@{model.removeprefix('teacher-')}" if entry["kind"] == "teacher" else f"train@{model}"
    guard, tokenizer = load_checkpoint(model_dir, stage)
    started = time.perf_counter()
    if head_only:
        features_file = layout.root / entry["features"]
        arrays = read_features(features_file)
        states = check_features(
            arrays, features_file, item_keys(items), max_length, guard.config.encoder.hidden_size
        )
        cached_sha = str(arrays["tokenizer_sha256"]) if "tokenizer_sha256" in arrays else ""
        own_sha = tokenizer_sha256(model_dir)
        if cached_sha and own_sha and cached_sha != own_sha:
            raise InputError(
                features_file, f"tokenised by another tokenizer than {model_dir}'s", field="tokenizer"
            )
        encoded = encode(
            tokenizer, items["prompt"].tolist(), max_length, with_offsets=False, **model_truncation(guard)
        )
        coarse, pillars = apply_heads(guard, states, encoded_batches(encoded, params.evaluation.batch_size))
        n_tokens = encoded.n_tokens
        spans: tuple[np.ndarray | None, np.ndarray | None] = (None, None)
        ran = f"heads on cached features {features_file}"
    else:
        configure_threads()
        rows, where = (
            prefix_rows(params, entry["scale"], items, layout) if guard.config.frozen_layers else (None, "")
        )
        scores = run_guard(
            guard,
            tokenizer,
            items["prompt"].tolist(),
            batch_size=params.evaluation.batch_size,
            max_length=max_length,
            device=choose_device(params.active.precision),
            span_threshold=params.evaluation.span_threshold,
            description=f"evaluate {model}",
            prefix_rows=rows,
            where=where,
        )
        coarse, pillars = scores.coarse_logits, scores.pillar_logits
        n_tokens = scores.n_tokens
        spans = (scores.span_start, scores.span_end)
        ran = (
            f"top layers of {model_dir} on the cached prefix {where}"
            if rows is not None
            else f"full forward pass of {model_dir}"
        )
    seconds = time.perf_counter() - started
    note_work(seconds, len(items))
    log_truncation(
        f"evaluate {model}", items["dataset"].tolist(), n_tokens, max_length, guard.config.truncation
    )
    table = predictions_table(
        model,
        items,
        coarse,
        pillars,
        coarse_classes=taxonomy.coarse_classes,
        pillar_columns=taxonomy.pillar_columns,
        policies=policies,
        n_tokens=n_tokens,
        max_length=max_length,
        span_start=spans[0],
        span_end=spans[1],
    )
    out_dir = layout.path("predictions", model=model).parent
    card_file = model_dir / CARD_JSON
    write_parquet(layout.path("predictions", model=model), table)
    extra = {
        "card": card_facts(read_json(card_file)) if card_file.is_file() else {},
        "evaluation": {
            "items": len(items),
            "max_length": max_length,
            "scored_from": "features" if head_only else "model",
            "span_computed": not head_only,
            "span_threshold": params.evaluation.span_threshold,
        },
    }
    metrics = model_metrics(
        table.to_pandas(),
        identity={"model": model, **entry},
        roles=roles,
        splits=params.evaluation.splits,
        policies=policies,
        extra=extra,
    )
    write_json(layout.path("eval_metrics", model=model), metrics)
    log.info(
        "evaluate %s: %s over %d items in %.1f s (%.1f items/s); headline %s -> %s",
        model,
        ran,
        len(items),
        seconds,
        len(items) / seconds if seconds > 0 else 0.0,
        metrics["headline"],
        out_dir,
    )
    return metrics

"""features@<model> (plan `feature_models`): the model's backbone run once over every evaluation item ->
data/features/<model>.npz (guardpolicy.evaluation.features), the frozen backbone that the head-only models
initialised from it share.

Reads at most `evaluation.max_length` tokens of a prompt (null: the profile's `max_length`), special tokens
included, cut the way the model was trained to read prompts (its config's `truncation`). The items
(guardpolicy.evaluation.inputs) are every fetched benchmark (status not `missing`) and every split in params
`evaluation.splits`. Reads params `policies`, `evaluation`, `scales` and the active profile
(guardpolicy.evaluation.settings), and first checks that data/models.yaml is current with params.yaml
(guardpolicy.preconditions).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from guardpolicy.evaluation.features import tokenizer_sha256, write_features
from guardpolicy.evaluation.inputs import evaluation_items, load_checkpoint
from guardpolicy.evaluation.items import item_keys
from guardpolicy.evaluation.settings import EvaluationParams, eval_max_length, prefix_rows
from guardpolicy.layout import Layout
from guardpolicy.preconditions import require_current_plan
from guardpolicy.timing import note_work
from guardpolicy.training.names import planned_entry

log = logging.getLogger(__name__)


def features(model: str, layout: Layout | None = None) -> dict[str, Any]:
    """Stage features@<model>: the model's first-token states over every item -> data/features/<model>.npz
    (paths from `layout`, default: this repository)."""
    from guardpolicy.evaluation.scoring import run_guard
    from guardpolicy.training.device import choose_device, configure_threads

    layout = layout or Layout.discover()
    plan_file = layout.relative("plan")
    params = EvaluationParams.read(layout.path("params"))
    require_current_plan(layout)
    planned = planned_entry(layout.path("plan"), "feature_models", model, plan_file)
    # The plan names folders relative to the root; the features file records that name, not where the root is.
    planned_dir = planned["model_dir"]
    model_dir = layout.root / planned_dir
    items, _ = evaluation_items(params.policies, params.evaluation.splits, layout)
    max_length = eval_max_length(params)
    configure_threads()
    device = choose_device(params.active.precision)
    guard, tokenizer = load_checkpoint(model_dir, f"train@{model}")
    log.info(
        "features %s: backbone of %s over %d items, max_length %d", model, model_dir, len(items), max_length
    )
    rows, where = (
        prefix_rows(params, planned["scale"], items, layout) if guard.config.frozen_layers else (None, "")
    )
    scores = run_guard(
        guard,
        tokenizer,
        items["prompt"].tolist(),
        batch_size=params.evaluation.batch_size,
        max_length=max_length,
        device=device,
        with_features=True,
        description=f"features {model}",
        prefix_rows=rows,
        where=where,
    )
    out = layout.path("features", model=model)
    write_features(
        out,
        {
            "features": scores.first_token_state,  # [N, H] float32
            "keys": item_keys(items),
            "max_length": np.asarray(max_length, dtype=np.int64),
            "tokenizer": np.asarray(str(planned_dir)),
            "tokenizer_sha256": np.asarray(tokenizer_sha256(model_dir)),
            "model": np.asarray(model),
        },
    )
    note_work(scores.seconds, len(items))
    rate = len(items) / scores.seconds if scores.seconds > 0 else 0.0
    log.info(
        "features %s: %d x %d states (%.1f items/s) -> %s", model, *scores.first_token_state.shape, rate, out
    )
    return {"model": model, "items": len(items), "hidden_size": int(scores.first_token_state.shape[1])}

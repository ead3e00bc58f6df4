"""train@<model>: one entry of the plan (data/models.yaml, `guardpolicy plan`) -> models/<model> with its
model card (guardpolicy.training.runs). Notes the optimisation loop's seconds and samples
(guardpolicy.timing.note_work) for its timing record.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

from guardpolicy.errors import ConfigError
from guardpolicy.layout import Layout
from guardpolicy.taxonomy import load_taxonomy
from guardpolicy.timing import note_work
from guardpolicy.training import branches as registry
from guardpolicy.training.datasets import AnchorRequest, resolve_anchor_count
from guardpolicy.training.runs import TrainingRun, checked_params, train_run

log = logging.getLogger(__name__)


def train(model_name: str, layout: Layout | None = None) -> dict[str, Any]:
    """Stage train@<model>: train one planned model (a scale x branch x seed) -> models/<model> + card (paths
    from `layout`, default: this repository)."""
    started = time.perf_counter()
    layout = layout or Layout.discover()
    params_file, plan_file = layout.relative("params"), layout.relative("plan")
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    params = checked_params(layout, taxonomy)
    plan = registry.check_plan(params, layout.path("plan"), params_file)
    if model_name not in plan:
        raise ConfigError(f"{plan_file}: no model {model_name!r}; planned: {sorted(plan)}")
    entry = plan[model_name]
    branch_name = entry["branch"]
    branch = params.branches[branch_name]
    anchors = tuple(
        AnchorRequest(name, params.anchor_sets[name], resolve_anchor_count(count, params.active.pool_size))
        for name, count in sorted(branch.anchors.items())
    )
    used_sets = {a.name: dataclasses.asdict(a.config) for a in anchors}
    run = TrainingRun(
        name=model_name,
        kind="branch",
        scale=entry["scale"],
        description=branch.description,
        branch=branch_name,
        train_set=branch.train_set,
        hard_labels=dict(branch.hard_labels),
        anchors=anchors,
        teacher=branch.teacher,
        recipe=registry.recipe_fields(
            params,
            scale=entry["scale"],
            seed=entry["seed"],
            trainable=branch.trainable,
            epochs=branch.epochs,
            learning_rate=branch.learning_rate,
            distill_alpha=registry.branch_alpha(params, branch_name),
        ),
        # The plan names folders relative to the root (what dvc.yaml depends on).
        init_dir=Path(entry["init_dir"]),
        params={
            "branch": dataclasses.asdict(branch),
            "anchor_sets": used_sets,
            "training": dataclasses.asdict(params.training),
        },
    )
    card, examples, _ = train_run(run, params, taxonomy, layout)
    seconds = time.perf_counter() - started
    # The rate is over the optimisation loop only (loading, imports and the card are in the record's seconds).
    note_work(card["run"]["train_seconds"], len(examples) * run.recipe["epochs"])
    log.info("train %s: done in %.1f s -> %s", model_name, seconds, layout.path("model", model=model_name))
    return card

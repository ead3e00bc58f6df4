"""train@<model>: one entry of the plan (data/models.yaml, `guardpolicy plan`: a scale x branch x seed) ->
models/<model> with its model card (guardpolicy.training.runs).

Reads params `branches.<branch>`, `anchor_sets`, `training`, `scales` and the active profile; params as a
whole and the plan's currency are checked first by guardpolicy.preconditions. Notes the optimisation loop's
seconds and samples (guardpolicy.timing.note_work) for its timing record.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

from guardpolicy.config.anchor_sets import ANCHOR_SETS
from guardpolicy.config.branches import BRANCHES
from guardpolicy.config.core import ParamsFile
from guardpolicy.config.profiles import active_profile
from guardpolicy.config.scales import SCALES, scale_encoder
from guardpolicy.config.training import TRAINING
from guardpolicy.io import read_json
from guardpolicy.layout import Layout
from guardpolicy.preconditions import require_current_plan
from guardpolicy.taxonomy import load_taxonomy
from guardpolicy.timing import note_work
from guardpolicy.training.cards import CARD_JSON
from guardpolicy.training.datasets import AnchorRequest, resolve_anchor_count
from guardpolicy.training.distributed import is_main_process, relaunch_stage
from guardpolicy.training.names import planned_entry
from guardpolicy.training.runs import ScaleEncoder, TrainingRun, recipe_fields, train_run

log = logging.getLogger(__name__)

# This stage's script (dvc.yaml's cmd), re-run under `accelerate launch` when training.num_processes > 1.
STAGE_SCRIPT = "pipelines/train.py"


def train(model_name: str, layout: Layout | None = None) -> dict[str, Any]:
    """Stage train@<model>: train one planned model (a scale x branch x seed) -> models/<model> + card (paths
    from `layout`, default: this repository)."""
    started = time.perf_counter()
    layout = layout or Layout.discover()
    params_file, plan_file = layout.relative("params"), layout.relative("plan")
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    require_current_plan(layout, rules=True)
    entry = planned_entry(layout.path("plan"), "models", model_name, plan_file)
    params = ParamsFile.read(layout.path("params"))
    branches, anchor_sets, training = params.load(BRANCHES), params.load(ANCHOR_SETS), params.load(TRAINING)
    if relaunch_stage(training.num_processes, layout.root / STAGE_SCRIPT, [model_name]):
        # The launched processes trained and rank 0 wrote the model and its card (docs/gpu.md).
        card = read_json(layout.path("model", model=model_name) / CARD_JSON)
        note_work(card["run"]["train_seconds"], card["training"]["examples"] * card["training"]["epochs"])
        return card
    _, profile = active_profile(params)
    scales = params.load(SCALES)
    scale = ScaleEncoder(
        scales.get(entry["scale"], ""), scale_encoder(profile, scales, entry["scale"], params_file)
    )
    branch_name = entry["branch"]
    branch = branches[branch_name]
    anchors = tuple(
        AnchorRequest(name, anchor_sets[name], resolve_anchor_count(count, profile.pool_size))
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
        recipe=recipe_fields(
            profile,
            training,
            scale.encoder,
            seed=entry["seed"],
            trainable=branch.trainable,
            epochs=branch.epochs,
            learning_rate=branch.learning_rate,
            distill_alpha=branch.distill_alpha(training.distill_alpha),
        ),
        # The plan names folders relative to the root (what dvc.yaml depends on).
        init_dir=Path(entry["init_dir"]),
        params={
            "branch": dataclasses.asdict(branch),
            "anchor_sets": used_sets,
            "training": dataclasses.asdict(training),
        },
    )
    card, examples, _ = train_run(run, profile, scale, taxonomy, layout)
    if not is_main_process():
        return card  # rank 0 of a multi-process run writes and reports
    seconds = time.perf_counter() - started
    # The rate is over the optimisation loop only (loading, imports and the card are in the record's seconds).
    note_work(card["run"]["train_seconds"], len(examples) * run.recipe["epochs"])
    log.info("train %s: done in %.1f s -> %s", model_name, seconds, layout.path("model", model=model_name))
    return card

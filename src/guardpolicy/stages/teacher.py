"""teacher@<policy>: the teacher scale trained on 100 % of the policy's hard labels -> models/teacher-<policy>
(with its model card); its logits over the train and calib prompts are cached in
data/teacher_outputs/<policy>.parquet (id, logits: 4 float32) so branches distil from a file instead of
running the teacher at every step.

Reads params `teachers.<policy>`, `training`, `scales` and the active profile; params as a whole (the
training sections' cross-references included) is checked first by guardpolicy.preconditions. Notes its
training and prediction seconds and samples (guardpolicy.timing.note_work) for its timing record.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from guardpolicy.config.core import ParamsFile
from guardpolicy.config.profiles import active_profile
from guardpolicy.config.scales import SCALES, scale_encoder
from guardpolicy.config.teachers import TEACHERS
from guardpolicy.config.training import TRAINING
from guardpolicy.contracts import TEACHER_LOGITS, write_table
from guardpolicy.errors import ConfigError
from guardpolicy.io import read_json, read_parquet
from guardpolicy.layout import Layout
from guardpolicy.preconditions import check_training_params
from guardpolicy.taxonomy import load_taxonomy
from guardpolicy.timing import note_work
from guardpolicy.training.cards import CARD_JSON
from guardpolicy.training.distributed import is_main_process, relaunch_stage
from guardpolicy.training.names import PRETRAINED, teacher_name
from guardpolicy.training.runs import ScaleEncoder, TrainingRun, recipe_fields, train_run

log = logging.getLogger(__name__)

# This stage's script (dvc.yaml's cmd), re-run under `accelerate launch` when training.num_processes > 1.
STAGE_SCRIPT = "pipelines/teacher.py"

# The splits a teacher's cached outputs cover: every split a branch trains on or draws anchors from.
TEACHER_OUTPUT_SPLITS = ("train", "calib")


def teacher(policy: str, layout: Layout | None = None) -> dict[str, Any]:
    """Stage teacher@<policy>: train the teacher, write its card, cache its logits over train + calib (paths
    from `layout`, default: this repository)."""
    from guardpolicy.training.predict import predict
    from guardpolicy.training.prefix_cache import POOL_SET, cache_key, layout_prefix, prefix_stage

    layout = layout or Layout.discover()
    params_file = layout.relative("params")
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    check_training_params(layout, rules=True)
    params = ParamsFile.read(layout.path("params"))
    teachers, training = params.load(TEACHERS), params.load(TRAINING)
    if relaunch_stage(training.num_processes, layout.root / STAGE_SCRIPT, [policy]):
        # The launched processes trained (and rank 0 predicted and wrote) the teacher (docs/gpu.md).
        card = read_json(layout.path("model", model=teacher_name(policy)) / CARD_JSON)
        note_work(card["run"]["train_seconds"], card["training"]["examples"] * card["training"]["epochs"])
        return card
    _, profile = active_profile(params)
    scales = params.load(SCALES)
    if policy not in teachers:
        raise ConfigError(f"{params_file}: teachers: no teacher {policy!r}; known: {sorted(teachers)}")
    config = teachers[policy]
    scale = ScaleEncoder(
        scales.get(config.scale, ""), scale_encoder(profile, scales, config.scale, params_file)
    )
    seed = profile.seed
    run = TrainingRun(
        name=teacher_name(policy),
        kind="teacher",
        scale=config.scale,
        description=(
            f"Teacher for policy {policy}: the {config.scale} scale, {config.trainable} fine-tuning on 100 % "
            f"of {policy}'s hard labels of the {config.train_set} split."
        ),
        branch=None,
        train_set=config.train_set,
        hard_labels={policy: 1.0},
        anchors=(),
        teacher=None,
        recipe=recipe_fields(
            profile,
            training,
            scale.encoder,
            seed=seed,
            trainable=config.trainable,
            epochs=config.epochs,
            learning_rate=config.learning_rate,
            distill_alpha=None,
        ),
        # Relative to the root, as the plan and the card name it.
        init_dir=Path(layout.relative("model", model=f"{config.scale}-{PRETRAINED}")),
        params={"teacher": dataclasses.asdict(config), "training": dataclasses.asdict(training)},
    )
    card, examples, train_seconds = train_run(run, profile, scale, taxonomy, layout)
    if not is_main_process():
        return card  # rank 0 of a multi-process run predicts, writes and reports

    pool = read_parquet(layout.path("pool"), "run `dvc repro pool` first").set_index("id")["prompt"]
    prefix = layout_prefix(profile, scale.encoder, config.scale, layout)
    ids = pd.concat(
        [
            read_parquet(layout.path("split", split=s), "run `dvc repro audit` first")["id"]
            for s in TEACHER_OUTPUT_SPLITS
        ]
    )
    ids = ids.astype("str").sort_values().reset_index(drop=True)
    log.info("teacher %s: predicting %d prompts of %s", policy, len(ids), "+".join(TEACHER_OUTPUT_SPLITS))
    predicted_at = time.perf_counter()
    if prefix is None:
        logits = predict(
            layout.path("model", model=run.name),
            pool.loc[ids].tolist(),
            batch_size=training.predict_batch_size,
            max_length=run.recipe["max_length"],
            precision=run.recipe["precision"],
        )["coarse_logits"]
    else:
        from guardpolicy.evaluation.scoring import run_guard_on_prefix
        from guardpolicy.modeling.guard import load_guard

        guard, tokenizer = load_guard(layout.path("model", model=run.name))
        logits = run_guard_on_prefix(
            guard,
            tokenizer,
            pool.loc[ids].tolist(),
            prefix.tensors([cache_key(POOL_SET, i) for i in ids], prefix_stage(config.scale)),
            batch_size=training.predict_batch_size,
            max_length=run.recipe["max_length"],
            description=f"teacher {policy} outputs",
            where=str(prefix.folder),
        ).coarse_logits
    logits = logits.astype("float32")  # [N, 4]
    table = pa.table(
        {
            "id": pa.array(ids.tolist(), pa.string()),
            "logits": pa.array(logits.tolist(), pa.list_(pa.float32())),
        }
    )
    out_file = layout.path("teacher_logits", policy=policy)
    write_table(TEACHER_LOGITS, out_file, table)
    predict_seconds = time.perf_counter() - predicted_at
    samples = len(examples) * run.recipe["epochs"] + len(ids)
    note_work(card["run"]["train_seconds"] + predict_seconds, samples)
    log.info(
        "teacher %s: trained in %.1f s, %d logits in %.1f s -> %s",
        policy,
        train_seconds,
        len(ids),
        predict_seconds,
        out_file,
    )
    return card

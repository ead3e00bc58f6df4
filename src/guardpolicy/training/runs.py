"""One training run of a stage (teacher@, train@): its recipe, its description, the data files it reads, the
training and the checkpoint's model card.

Each stage reads its own params sections and hands this module only what a run needs (the active profile, the
`training` section, the scale's encoder entry), so no stage's code deps hold a section it does not read.
`recipe_fields` turns those into the run's recipe. `train_run` assembles a run's examples from the pool,
splits, policy labels and teacher outputs, trains it (guardpolicy.training.loop) into models/<name> and writes
the card (guardpolicy.training.cards) beside the weights; the sha256 of every file read goes into the card.
The resumable training state lives in .cache/train/<name> (outside DVC outputs, which DVC deletes before a
rerun) and is removed once the run has finished.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import pandas as pd

from guardpolicy.config.encoders import EncoderConfig
from guardpolicy.config.profiles import ProfileConfig
from guardpolicy.config.training import TrainingConfig
from guardpolicy.errors import InputError
from guardpolicy.io import read_parquet, sha256_file
from guardpolicy.layout import Layout
from guardpolicy.taxonomy import Taxonomy
from guardpolicy.training.card_files import backbone_block, card_of, library_versions, write_card
from guardpolicy.training.cards import model_card
from guardpolicy.training.datasets import AnchorRequest, ExampleSources, build_examples
from guardpolicy.training.distributed import is_main_process
from guardpolicy.training.names import PRETRAINED, teacher_name

log = logging.getLogger(__name__)

# TrainResult fields that differ between two runs of the same inputs (timings, and where an interrupted run
# resumed): the card keeps them in its `run` block. The machine's fields go to `environment`.
_RUN_FIELDS = ("seconds", "train_seconds", "samples_per_second", "resumed_from_step")
_ENVIRONMENT_FIELDS = ("device", "precision", "processes")


@dataclasses.dataclass(frozen=True)
class ScaleEncoder:
    """A scale's encoder entry and its key in the profile (`small_encoder` / `large_encoder`: the card's
    `role`)."""

    key: str
    encoder: EncoderConfig


def recipe_fields(
    profile: ProfileConfig,
    training: TrainingConfig,
    encoder: EncoderConfig,
    *,
    seed: int,
    trainable: str,
    epochs: int | None,
    learning_rate: float | None,
    distill_alpha: float | None,
) -> dict[str, Any]:
    """The training recipe of one run at `encoder`'s scale as plain values: the active profile's sizes,
    overridden where the teacher or branch sets epochs / learning rate, and the shared `training` knobs; the
    encoder entry gives `frozen_layers`. `TrainRecipe(**fields)` builds it."""
    return {
        "epochs": epochs if epochs is not None else profile.epochs,
        "batch_size": profile.batch_size,
        "learning_rate": learning_rate if learning_rate is not None else profile.learning_rate,
        "weight_decay": training.weight_decay,
        "warmup_ratio": training.warmup_ratio,
        "max_length": profile.max_length,
        "grad_clip": training.grad_clip,
        "seed": seed,
        "precision": profile.precision,
        "trainable": trainable,
        "distill_alpha": distill_alpha,
        "distill_temperature": training.distill_temperature,
        "loss_weights": dataclasses.asdict(training.loss_weights),
        "checkpoint_every_steps": training.checkpoint_every_steps,
        "checkpoint_every_minutes": training.checkpoint_every_minutes,
        "log_every_steps": training.log_every_steps,
        "micro_batch_size": training.micro_batch_size,
        "compile": training.compile,
        "attn_implementation": training.attn_implementation,
        "feature_cache_dtype": training.feature_cache_dtype,
        "length_bucketing": training.length_bucketing,
        "truncation": profile.truncation,
        "truncation_head_tokens": profile.truncation_head_tokens,
        "frozen_layers": encoder.frozen_layers,
    }


def result_blocks(result: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, int]]:
    """A TrainResult split into the card's training / environment / run blocks and parameter counts."""
    fields = result.to_dict()
    parameters = {k: int(v) for k, v in fields.pop("parameters").items()}
    run = {k: fields.pop(k) for k in _RUN_FIELDS}
    environment = {k: fields.pop(k) for k in _ENVIRONMENT_FIELDS}
    fields.pop("description")  # the card's own description field
    return fields, environment, run, parameters


@dataclasses.dataclass(frozen=True)
class TrainingRun:
    """Everything one training run needs besides the data files."""

    name: str
    kind: str
    scale: str
    description: str
    branch: str | None
    train_set: str
    hard_labels: dict[str, float]
    anchors: tuple[AnchorRequest, ...]
    teacher: str | None
    recipe: dict[str, Any]
    init_dir: Path
    params: dict[str, Any]


def load_sources(run: TrainingRun, layout: Layout) -> tuple[ExampleSources, dict[str, str]]:
    """The frames `run` trains on, and the sha256 of every file read (keyed by its path relative to the
    root: the model card names its data the same wherever it was trained)."""
    split_names = sorted({run.train_set, *(a.config.split for a in run.anchors)})
    policies = sorted({*run.hard_labels, *(a.config.policy for a in run.anchors)})
    names: dict[str, tuple[str, dict[str, str]]] = {"pool": ("pool", {})}
    names |= {f"split:{s}": ("split", {"split": s}) for s in split_names}
    names |= {f"labels:{p}": ("policy_labels", {"policy": p}) for p in policies}
    if run.teacher is not None:
        names["teacher"] = ("teacher_logits", {"policy": run.teacher})
    files = {key: layout.path(name, **values) for key, (name, values) in names.items()}
    relative = {key: layout.relative(name, **values) for key, (name, values) in names.items()}
    hints = {
        "pool": "run `dvc repro pool` first",
        "split": "run `dvc repro audit` first",
        "labels": "run `dvc repro label` first",
        "teacher": f"run `dvc repro teacher@{run.teacher}` first",
    }
    frames = {key: read_parquet(path, hints[key.split(":")[0]]) for key, path in files.items()}
    sources = ExampleSources(
        pool=frames["pool"],
        splits={s: frames[f"split:{s}"] for s in split_names},
        labels={p: frames[f"labels:{p}"] for p in policies},
        teacher_logits=frames.get("teacher"),
        files=relative,
    )
    hashes = {relative[key]: sha256_file(path) for key, path in files.items()}
    hashes[layout.relative("taxonomy")] = sha256_file(layout.path("taxonomy"))
    return sources, hashes


def train_run(
    run: TrainingRun, profile: ProfileConfig, scale: ScaleEncoder, taxonomy: Taxonomy, layout: Layout
) -> tuple[dict[str, Any], pd.DataFrame, float]:
    """Assemble the examples, train, write the checkpoint and its card; return (card, examples, seconds).
    `scale` is the run's scale's encoder entry and its key in the profile."""
    from guardpolicy.training.loop import train
    from guardpolicy.training.prefix_cache import layout_prefix, prefix_stage
    from guardpolicy.training.recipe import TrainRecipe

    init_dir = layout.root / run.init_dir
    if not (init_dir / "config.json").is_file():
        hint = (
            f"run `dvc repro backbone@{run.scale}` first"
            if run.init_dir.name.endswith(f"-{PRETRAINED}")
            else f"run `dvc repro train@{run.init_dir.name}` first"
        )
        raise InputError(init_dir, f"initial checkpoint not found; {hint}")
    sources, data_hashes = load_sources(run, layout)
    prefix = layout_prefix(profile, scale.encoder, run.scale, layout)
    examples, provenance = build_examples(
        sources,
        train_set=run.train_set,
        hard_labels=run.hard_labels,
        seed=run.recipe["seed"],
        taxonomy=taxonomy,
        anchors=run.anchors,
    )
    out_dir = layout.path("model", model=run.name)
    run_work_dir = layout.path("train_work", model=run.name)
    log.info(
        "%s %s: %d examples, init %s, trainable %s, teacher %s, %d epoch(s)",
        run.kind,
        run.name,
        len(examples),
        run.init_dir,
        run.recipe["trainable"],
        run.teacher,
        run.recipe["epochs"],
    )
    started = time.perf_counter()
    result = train(
        examples,
        TrainRecipe(**run.recipe),
        init=init_dir,
        out_dir=out_dir,
        work_dir=run_work_dir,
        live_dir=layout.path("training_logs", model=run.name),
        description=run.name,  # the loop's log and progress-bar label; the card has the long description
        prefix=prefix,
        prefix_stage=prefix_stage(run.scale),
    )
    seconds = time.perf_counter() - started
    if not is_main_process():
        return {}, examples, seconds  # rank 0 of a multi-process run writes the card
    training, environment, timing, parameters = result_blocks(result)
    teacher_block = None
    if run.teacher is not None:
        outputs = layout.relative("teacher_logits", policy=run.teacher)
        teacher_block = {
            "policy": run.teacher,
            "model": teacher_name(run.teacher),
            "alpha": run.recipe["distill_alpha"],
            "temperature": run.recipe["distill_temperature"],
            "outputs_file": outputs,
            "outputs_sha256": data_hashes[outputs],
            "card": card_of(layout.path("model", model=teacher_name(run.teacher))),
        }
    init_from = run.params.get("branch", {}).get("init_from", PRETRAINED)
    card = model_card(
        name=run.name,
        kind=run.kind,
        scale=run.scale,
        description=run.description,
        branch=run.branch,
        backbone=backbone_block(scale.encoder, scale.key, out_dir),
        parameters=parameters,
        examples=provenance,
        teacher=teacher_block,
        init={"from": init_from, "dir": run.init_dir.as_posix(), "card": card_of(init_dir)},
        data=data_hashes,
        seed=run.recipe["seed"],
        params=run.params,
        recipe=run.recipe,
        training=training,
        environment={**environment, "versions": library_versions()},
        run={**timing, "stage_train_seconds": round(seconds, 3)},
    )
    write_card(out_dir, card)
    shutil.rmtree(run_work_dir, ignore_errors=True)
    return card, examples, seconds

"""backbone@<scale>, teacher@<policy>, train@<model> and timings: the training stages and their model cards.

* backbone@<scale>: the scale's encoder (params `scales`: the profile's student/teacher) with fresh heads
  drawn with the main seed -> models/<scale>-pretrained, the starting folder of every run at that scale.
* teacher@<policy>: the teacher scale trained on 100 % of the policy's hard labels -> models/teacher-<policy>;
  its logits over the train and calib prompts are cached in data/teacher_outputs/<policy>.parquet (id,
  logits: 4 float32) so branches distil from a file instead of running the teacher at every step.
* train@<model>: one entry of the plan (data/models.yaml, `guardpolicy plan`) -> models/<model>.
Each stage notes its training seconds and samples (guardpolicy.timing.note_work) for its timing record.

Every checkpoint folder gets MODEL_CARD.md and model_card.json (guardpolicy.training.cards). The resumable
training state lives in .cache/train/<name> (outside DVC outputs, which DVC deletes before a rerun) and is
removed once the run has finished.
"""

from __future__ import annotations

import dataclasses
import logging
import platform
import shutil
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from guardpolicy.config import EncoderConfig, Params, load_params
from guardpolicy.contracts import TEACHER_LOGITS, write_table
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.io import atomic_dir, read_json, sha256_file, write_json, write_text
from guardpolicy.labeling import load_policy
from guardpolicy.layout import Layout
from guardpolicy.taxonomy import Taxonomy, load_taxonomy
from guardpolicy.timing import note_work
from guardpolicy.training import branches as registry
from guardpolicy.training.cards import CARD_JSON, CARD_MARKDOWN, card_markdown, card_summary, model_card
from guardpolicy.training.datasets import AnchorRequest, ExampleSources, build_examples, resolve_anchor_count

log = logging.getLogger(__name__)

# The splits a teacher's cached outputs cover: every split a branch trains on or draws anchors from.
TEACHER_OUTPUT_SPLITS = ("train", "calib")
VERSIONED_LIBRARIES = ("torch", "transformers", "numpy", "pandas", "pyarrow")
# TrainResult fields that differ between two runs of the same inputs (timings, and where an interrupted run
# resumed): the card keeps them in its `run` block. The machine's fields go to `environment`.
_RUN_FIELDS = ("seconds", "train_seconds", "samples_per_second", "resumed_from_step")
_ENVIRONMENT_FIELDS = ("device", "precision")


# ------------------------------------------------------------------------------------------------ helpers


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in VERSIONED_LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def _scale_encoder(params: Params, scale: str, where: str) -> EncoderConfig:
    if scale not in params.scales:
        raise ConfigError(f"{where}: scales: unknown scale {scale!r}; known: {sorted(params.scales)}")
    return getattr(params.active, params.scales[scale])


def _checked_params(layout: Layout, taxonomy: Taxonomy) -> Params:
    """Params with the training sections cross-checked, anchor-set rules included (rules labelers only)."""
    params_file = layout.relative("params")
    params = load_params(layout.path("params"))
    rules = {}
    for name, policy in params.policies.items():
        if policy.labeler == "rules":
            policy_file = layout.resolve(policy.file)
            rules[name] = {rule.name for rule in load_policy(policy_file, taxonomy).rules} | {"default"}
    registry.validate_branches(
        params, params_file, policy_rules=rules, coarse_classes=taxonomy.coarse_classes
    )
    return params


def _read_parquet(path: Path, hint: str) -> pd.DataFrame:
    if not path.is_file():
        raise InputError(path, f"file not found; {hint}")
    return pd.read_parquet(path)


def _card_of(folder: str | Path) -> dict[str, Any] | None:
    path = Path(folder) / CARD_JSON
    return card_summary(read_json(path)) if path.is_file() else None


def _backbone_block(encoder: EncoderConfig, role: str, checkpoint: Path) -> dict[str, Any]:
    """The backbone as configured, plus what the checkpoint holds (layer count, architecture)."""
    block: dict[str, Any] = {**dataclasses.asdict(encoder), "role": role}
    config_file = checkpoint / "config.json"
    if config_file.is_file():
        embedded = read_json(config_file).get("encoder") or {}
        block["model_type"] = embedded.get("model_type")
        block["hidden_layers"] = embedded.get("num_hidden_layers")
        block["hidden_size"] = embedded.get("hidden_size")
    return block


def _result_blocks(result: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, int]]:
    """A TrainResult split into the card's training / environment / run blocks and parameter counts."""
    fields = result.to_dict()
    parameters = {k: int(v) for k, v in fields.pop("parameters").items()}
    run = {k: fields.pop(k) for k in _RUN_FIELDS}
    environment = {k: fields.pop(k) for k in _ENVIRONMENT_FIELDS}
    fields.pop("description")  # the card's own description field
    return fields, environment, run, parameters


def _write_card(out_dir: Path, card: dict[str, Any]) -> None:
    write_json(out_dir / CARD_JSON, card)
    write_text(out_dir / CARD_MARKDOWN, card_markdown(card))


# ------------------------------------------------------------------------------------------------- stages


def backbone(scale: str, layout: Layout | None = None) -> dict[str, Any]:
    """Stage backbone@<scale>: the scale's encoder + fresh heads (main seed) -> models/<scale>-pretrained
    (paths from `layout`, default: this repository)."""
    from guardpolicy.modeling.guard import GuardModel, count_parameters, save_guard

    started = time.perf_counter()
    layout = layout or Layout.discover()
    params_file = str(layout.path("params"))  # named by refusals: the full path says which checkout
    params = load_params(params_file)
    encoder = _scale_encoder(params, scale, params_file)
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    seed = registry.main_seed(params)
    log.info("backbone %s: %s (%s), heads seeded %d", scale, encoder.name, params.scales[scale], seed)
    model, tokenizer = GuardModel.from_backbone(
        encoder,
        seed=seed,
        coarse_names=list(taxonomy.coarse_classes),
        pillar_names=list(taxonomy.pillar_names),
        entry=f"profiles.{params.profile}.{params.scales[scale]}",
        entry_file=params_file,
    )
    out_dir = layout.path("model", model=f"{scale}-{registry.PRETRAINED}")
    parameters = count_parameters(model)
    # Read before the write block, whose OS errors are reported as failures to write out_dir.
    data_hashes = {layout.relative("taxonomy"): sha256_file(layout.path("taxonomy"))}
    with atomic_dir(out_dir) as tmp:
        save_guard(model, tokenizer, tmp)
        card = model_card(
            name=out_dir.name,
            kind="backbone",
            scale=scale,
            description=f"The {scale} scale's pretrained encoder with fresh heads (seed {seed}).",
            branch=None,
            backbone=_backbone_block(encoder, params.scales[scale], tmp),
            parameters=parameters,
            examples=None,
            teacher=None,
            init={"from": registry.PRETRAINED, "dir": encoder.name, "card": None},
            data=data_hashes,
            seed=seed,
            params={"scale": params.scales[scale], "encoder": dataclasses.asdict(encoder)},
            recipe=None,
            training=None,
            environment={"versions": library_versions()},
            run={},
        )
        _write_card(tmp, card)
    seconds = time.perf_counter() - started
    log.info("backbone %s: %d parameters -> %s (%.1f s)", scale, parameters["total"], out_dir, seconds)
    return card


@dataclasses.dataclass(frozen=True)
class _Run:
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


def _load_sources(run: _Run, layout: Layout) -> tuple[ExampleSources, dict[str, str]]:
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
    frames = {key: _read_parquet(path, hints[key.split(":")[0]]) for key, path in files.items()}
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


def _scale_prefix(params: Params, scale: str, layout: Layout) -> Any:
    from guardpolicy.training.prefix_cache import scale_prefix

    return scale_prefix(
        params,
        scale,
        layout.path("prefixes", scale=scale),
        layout.path("model", model=f"{scale}-{registry.PRETRAINED}"),
    )


def _train_run(
    run: _Run, params: Params, taxonomy: Taxonomy, layout: Layout
) -> tuple[dict[str, Any], pd.DataFrame, float]:
    """Assemble the examples, train, write the checkpoint and its card; return (card, examples, seconds)."""
    from guardpolicy.training.loop import TrainRecipe, train
    from guardpolicy.training.prefix_cache import prefix_stage

    init_dir = layout.root / run.init_dir
    if not (init_dir / "config.json").is_file():
        hint = (
            f"run `dvc repro backbone@{run.scale}` first"
            if run.init_dir.name.endswith(f"-{registry.PRETRAINED}")
            else f"run `dvc repro train@{run.init_dir.name}` first"
        )
        raise InputError(init_dir, f"initial checkpoint not found; {hint}")
    sources, data_hashes = _load_sources(run, layout)
    prefix = _scale_prefix(params, run.scale, layout)
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
    training, environment, timing, parameters = _result_blocks(result)
    teacher_block = None
    if run.teacher is not None:
        outputs = layout.relative("teacher_logits", policy=run.teacher)
        teacher_block = {
            "policy": run.teacher,
            "model": registry.teacher_name(run.teacher),
            "alpha": run.recipe["distill_alpha"],
            "temperature": run.recipe["distill_temperature"],
            "outputs_file": outputs,
            "outputs_sha256": data_hashes[outputs],
            "card": _card_of(layout.path("model", model=registry.teacher_name(run.teacher))),
        }
    encoder = _scale_encoder(params, run.scale, layout.relative("params"))
    init_from = run.params.get("branch", {}).get("init_from", registry.PRETRAINED)
    card = model_card(
        name=run.name,
        kind=run.kind,
        scale=run.scale,
        description=run.description,
        branch=run.branch,
        backbone=_backbone_block(encoder, params.scales[run.scale], out_dir),
        parameters=parameters,
        examples=provenance,
        teacher=teacher_block,
        init={"from": init_from, "dir": run.init_dir.as_posix(), "card": _card_of(init_dir)},
        data=data_hashes,
        seed=run.recipe["seed"],
        params=run.params,
        recipe=run.recipe,
        training=training,
        environment={**environment, "versions": library_versions()},
        run={**timing, "stage_train_seconds": round(seconds, 3)},
    )
    _write_card(out_dir, card)
    shutil.rmtree(run_work_dir, ignore_errors=True)
    return card, examples, seconds


def teacher(policy: str, layout: Layout | None = None) -> dict[str, Any]:
    """Stage teacher@<policy>: train the teacher, write its card, cache its logits over train + calib (paths
    from `layout`, default: this repository)."""
    from guardpolicy.training.predict import predict
    from guardpolicy.training.prefix_cache import POOL_SET, cache_key, prefix_stage

    layout = layout or Layout.discover()
    params_file = layout.relative("params")
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    params = _checked_params(layout, taxonomy)
    if policy not in params.teachers:
        raise ConfigError(f"{params_file}: teachers: no teacher {policy!r}; known: {sorted(params.teachers)}")
    config = params.teachers[policy]
    seed = registry.main_seed(params)
    run = _Run(
        name=registry.teacher_name(policy),
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
        recipe=registry.recipe_fields(
            params,
            scale=config.scale,
            seed=seed,
            trainable=config.trainable,
            epochs=config.epochs,
            learning_rate=config.learning_rate,
            distill_alpha=None,
        ),
        # Relative to the root, as the plan and the card name it.
        init_dir=Path(layout.relative("model", model=f"{config.scale}-{registry.PRETRAINED}")),
        params={"teacher": dataclasses.asdict(config), "training": dataclasses.asdict(params.training)},
    )
    card, examples, train_seconds = _train_run(run, params, taxonomy, layout)

    pool = _read_parquet(layout.path("pool"), "run `dvc repro pool` first").set_index("id")["prompt"]
    prefix = _scale_prefix(params, config.scale, layout)
    ids = pd.concat(
        [
            _read_parquet(layout.path("split", split=s), "run `dvc repro audit` first")["id"]
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
            batch_size=params.training.predict_batch_size,
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
            batch_size=params.training.predict_batch_size,
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


def train(model_name: str, layout: Layout | None = None) -> dict[str, Any]:
    """Stage train@<model>: train one planned model (a scale x branch x seed) -> models/<model> + card (paths
    from `layout`, default: this repository)."""
    started = time.perf_counter()
    layout = layout or Layout.discover()
    params_file, plan_file = layout.relative("params"), layout.relative("plan")
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    params = _checked_params(layout, taxonomy)
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
    run = _Run(
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
    card, examples, _ = _train_run(run, params, taxonomy, layout)
    seconds = time.perf_counter() - started
    # The rate is over the optimisation loop only (loading, imports and the card are in the record's seconds).
    note_work(card["run"]["train_seconds"], len(examples) * run.recipe["epochs"])
    log.info("train %s: done in %.1f s -> %s", model_name, seconds, layout.path("model", model=model_name))
    return card

"""features@<model> and evaluate@<model>: every evaluation item scored by a guard -> predictions + metrics.

* features@<model> (plan `feature_models`): the model's backbone run once over every evaluation item ->
  data/features/<model>.npz (first-token states [N, H] float32, `keys` "<dataset>\\t<id>", `max_length`,
  `tokenizer`), the frozen backbone that the head-only models initialised from it share.
* evaluate@<model> (plan `evaluations`): a full model runs over every item (class, pillar and span heads); a
  head-only model whose plan entry names a features file applies its own heads to those cached states (no
  backbone forward; no spans). Writes reports/eval/<model>/predictions.parquet and metrics.json.

Both read at most `evaluation.max_length` tokens of a prompt (null: the profile's `max_length`), special
tokens included; the rest is cut the way the model was trained to read prompts (its config's `truncation`:
head, tail or both ends). Every
predictions row records the prompt's token count before truncation (`n_tokens`) and `truncated`, and the
stage logs one line per dataset: "N of M prompts truncated to K tokens (head kept)".

The items (guardpolicy.evaluation.items) are every fetched benchmark (status not `missing`) and every split in
params `evaluation.splits`. Both stages check that data/models.yaml is current with params.yaml.
"""

from __future__ import annotations

import logging
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from guardpolicy.config import Params, load_params
from guardpolicy.data.registry import load_registry
from guardpolicy.errors import ConfigError, InputError, key_difference
from guardpolicy.evaluation.items import (
    SPLIT_PREFIX,
    benchmark_items,
    combine_items,
    item_keys,
    split_items,
)
from guardpolicy.evaluation.metrics import ROLES, model_metrics
from guardpolicy.io import atomic_path, read_json, read_parquet, sha256_file, write_json, write_parquet
from guardpolicy.layout import Layout
from guardpolicy.taxonomy import load_taxonomy
from guardpolicy.timing import note_work
from guardpolicy.training import branches as plan_registry

log = logging.getLogger(__name__)

MISSING_STATUS = "missing"
CARD_FILE = "model_card.json"
# A fixed timestamp for the members of the features archive, so the same arrays give the same bytes.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


# ------------------------------------------------------------------------------------------------- inputs


def present_benchmarks(registry_file: str | Path, benchmarks_dir: str | Path) -> dict[str, str]:
    """Benchmark -> role (harmful | benign | mixed) of every registry entry whose status is not missing."""
    roles = {}
    for name, spec in load_registry(registry_file).items():
        meta_file = Path(benchmarks_dir) / f"{name}.meta.json"
        if not meta_file.is_file():
            raise InputError(meta_file, f"file not found; run `dvc repro fetch@{name}` first")
        status = read_json(meta_file).get("status")
        if not isinstance(status, str):
            raise InputError(meta_file, "expected a string 'status'", field="status")
        if status != MISSING_STATUS:
            roles[name] = ROLES[spec.label.kind]
    return roles


def load_items(
    params: Params,
    registry_file: str | Path,
    benchmarks_dir: str | Path,
    clean_dir: str | Path,
    splits_dir: str | Path,
    pool_file: str | Path,
    labels_dir: str | Path,
) -> tuple[pd.DataFrame, dict[str, str]]:
    """The evaluation items (sorted by dataset, id) and each scored benchmark's role."""
    policies = list(params.policies)
    roles = present_benchmarks(registry_file, benchmarks_dir)
    frames = []
    for name in roles:
        file = Path(benchmarks_dir) / f"{name}.parquet"
        clean_file = Path(clean_dir) / f"{name}.parquet"
        frame = read_parquet(file, f"run `dvc repro fetch@{name}` first")
        clean_ids = read_parquet(clean_file, "run `dvc repro audit` first", columns=["id"])["id"]
        frames.append(benchmark_items(name, frame, clean_ids.astype("str"), policies, file))
    pool_path = Path(pool_file)
    prompts = read_parquet(pool_path, "run `dvc repro pool` first", ["id", "prompt"]).set_index("id")[
        "prompt"
    ]
    labels, files = {}, {"pool": str(pool_path)}
    for policy in policies:
        path = Path(labels_dir) / f"{policy}.parquet"
        hint = f"run `dvc repro label@{policy}` first"
        labels[policy] = read_parquet(path, hint, ["id", "coarse"]).set_index("id")["coarse"]
        files[policy] = str(path)
    for split in params.evaluation.splits:
        path = Path(splits_dir) / f"{split}.parquet"
        split_frame = read_parquet(path, "run `dvc repro audit` first", ["id"])
        frames.append(split_items(split, split_frame, prompts, labels, {**files, "split": str(path)}))
    items = combine_items(frames, policies)
    counts = items.groupby("dataset").size()
    log.info(
        "items: %d in %d datasets (%s)",
        len(items),
        len(counts),
        ", ".join(f"{name} {count}" for name, count in counts.items()),
    )
    return items, roles


def eval_max_length(params: Params) -> int:
    return params.evaluation.max_length or params.active.max_length


def _plan(params: Params, plan_file: str | Path, params_file: str) -> dict[str, dict[str, Any]]:
    return plan_registry.check_plan_document(params, plan_file, params_file)


def _load_model(model_dir: Path, stage: str) -> tuple[Any, Any]:
    from guardpolicy.modeling.guard import load_guard

    if not (model_dir / "config.json").is_file():
        raise InputError(model_dir, f"model checkpoint not found; run `dvc repro {stage}` first")
    return load_guard(model_dir)


def _tokenizer_sha256(model_dir: Path) -> str:
    path = model_dir / "tokenizer.json"
    return sha256_file(path) if path.is_file() else ""


# ----------------------------------------------------------------------------------------- features file


def write_features(path: str | Path, arrays: dict[str, np.ndarray]) -> None:
    """An .npz archive (np.load reads it) written atomically and byte-deterministically."""
    with atomic_path(path) as tmp, zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_TIME)
            with archive.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asarray(array), allow_pickle=False)


def read_features(path: str | Path) -> dict[str, np.ndarray]:
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "features file not found; run its `dvc repro features@<model>` first")
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise InputError(path, f"not a readable .npz features file: {exc}") from exc
    for name in ("features", "keys", "max_length"):
        if name not in arrays:
            raise InputError(path, f"missing array {name!r}", field=name)
    return arrays


def check_features(
    arrays: dict[str, np.ndarray], path: str | Path, keys: np.ndarray, max_length: int, hidden_size: int
) -> np.ndarray:
    """The cached states [N, H] after checking they cover exactly `keys`, in order, at `max_length`."""
    cached_keys = arrays["keys"].astype(str)
    rerun = f"rerun `dvc repro features@{Path(path).stem}`"
    if len(cached_keys) != len(keys) or not np.array_equal(cached_keys, keys):
        if len(cached_keys) != len(keys) or set(cached_keys) != set(keys):
            detail = (
                f"{len(cached_keys)} cached items vs {len(keys)} evaluation items: "
                f"{key_difference(keys, cached_keys)}"
            )
        else:
            first = int(np.flatnonzero(cached_keys != keys)[0])
            detail = f"item {first + 1} is {str(cached_keys[first])!r} there but {str(keys[first])!r} now"
        raise InputError(path, f"keys do not match the evaluation items ({detail}); {rerun}", field="keys")
    cached_length = int(arrays["max_length"])
    if cached_length != max_length:
        raise InputError(
            path,
            f"features tokenised at max_length {cached_length}, evaluation uses {max_length}; {rerun}",
            field="max_length",
        )
    features = arrays["features"]
    if features.ndim != 2 or features.shape != (len(keys), hidden_size) or features.dtype != np.float32:
        raise InputError(
            path,
            f"features must be float32 [{len(keys)}, {hidden_size}], "
            f"got {features.dtype} {list(features.shape)}",
            field="features",
        )
    return features


# ------------------------------------------------------------------------------------------------- stages


def _items(params: Params, layout: Layout) -> tuple[pd.DataFrame, dict[str, str]]:
    return load_items(
        params,
        layout.path("benchmark_registry"),
        layout.path("benchmarks"),
        layout.path("clean_benchmarks"),
        layout.path("splits"),
        layout.path("pool"),
        layout.path("labels"),
    )


def features(model: str, layout: Layout | None = None) -> dict[str, Any]:
    """Stage features@<model>: the model's first-token states over every item -> data/features/<model>.npz
    (paths from `layout`, default: this repository)."""
    from guardpolicy.evaluation.scoring import run_guard
    from guardpolicy.training.device import choose_device, configure_threads

    layout = layout or Layout.discover()
    params_file, plan_file = layout.relative("params"), layout.relative("plan")
    params = load_params(layout.path("params"))
    feature_models = _plan(params, layout.path("plan"), params_file)["feature_models"]
    if model not in feature_models:
        raise ConfigError(
            f"{plan_file}: feature_models: no model {model!r}; planned: {sorted(feature_models)}"
        )
    # The plan names folders relative to the root; the features file records that name, not where the root is.
    planned_dir = feature_models[model]["model_dir"]
    model_dir = layout.root / planned_dir
    items, _ = _items(params, layout)
    max_length = eval_max_length(params)
    configure_threads()
    device = choose_device(params.active.precision)
    guard, tokenizer = _load_model(model_dir, f"train@{model}")
    log.info(
        "features %s: backbone of %s over %d items, max_length %d", model, model_dir, len(items), max_length
    )
    rows, where = (
        _prefix_rows(params, feature_models[model]["scale"], items, layout)
        if guard.config.frozen_layers
        else (None, "")
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
            "tokenizer_sha256": np.asarray(_tokenizer_sha256(model_dir)),
            "model": np.asarray(model),
        },
    )
    note_work(scores.seconds, len(items))
    rate = len(items) / scores.seconds if scores.seconds > 0 else 0.0
    log.info(
        "features %s: %d x %d states (%.1f items/s) -> %s", model, *scores.first_token_state.shape, rate, out
    )
    return {"model": model, "items": len(items), "hidden_size": int(scores.first_token_state.shape[1])}


def _card_facts(model_dir: Path) -> dict[str, Any]:
    """The few model-card facts worth showing beside the metrics (sizes, backbone, what was trained)."""
    path = model_dir / CARD_FILE
    if not path.is_file():
        return {}
    card = read_json(path)
    backbone = card.get("backbone") or {}
    parameters = card.get("parameters") or {}
    facts = {
        "parameters_total": parameters.get("total"),
        "parameters_trainable": parameters.get("trainable"),
        "parameters_heads": parameters.get("heads"),
        "backbone": backbone.get("name"),
        "hidden_layers": backbone.get("hidden_layers"),
        "hidden_size": backbone.get("hidden_size"),
        "trainable": (card.get("recipe") or {}).get("trainable"),
    }
    return {key: value for key, value in facts.items() if value is not None}


def _prefix_rows(params: Params, scale: str, items: pd.DataFrame, layout: Layout) -> tuple[list, str]:
    """The cached prefix states of every evaluation item at `scale` (split items are pool prompts)."""
    from guardpolicy.training.branches import PRETRAINED
    from guardpolicy.training.prefix_cache import POOL_SET, cache_key, prefix_stage, scale_prefix

    cache = scale_prefix(
        params,
        scale,
        layout.path("prefixes", scale=scale),
        layout.path("model", model=f"{scale}-{PRETRAINED}"),
    )
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
    params_file, plan_file = layout.relative("params"), layout.relative("plan")
    params = load_params(layout.path("params"))
    evaluations = _plan(params, layout.path("plan"), params_file)["evaluations"]
    if model not in evaluations:
        raise ConfigError(f"{plan_file}: evaluations: no model {model!r}; planned: {sorted(evaluations)}")
    entry = evaluations[model]
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    policies = list(params.policies)
    model_dir = layout.root / entry["model_dir"]
    head_only = str(entry["features"]).endswith(".npz")
    items, roles = _items(params, layout)
    max_length = eval_max_length(params)
    stage = f"teacher@{model.removeprefix('teacher-')}" if entry["kind"] == "teacher" else f"train@{model}"
    guard, tokenizer = _load_model(model_dir, stage)
    started = time.perf_counter()
    if head_only:
        features_file = layout.root / entry["features"]
        arrays = read_features(features_file)
        states = check_features(
            arrays, features_file, item_keys(items), max_length, guard.config.encoder.hidden_size
        )
        cached_sha = str(arrays["tokenizer_sha256"]) if "tokenizer_sha256" in arrays else ""
        own_sha = _tokenizer_sha256(model_dir)
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
            _prefix_rows(params, entry["scale"], items, layout) if guard.config.frozen_layers else (None, "")
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
    write_parquet(layout.path("predictions", model=model), table)
    extra = {
        "card": _card_facts(model_dir),
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

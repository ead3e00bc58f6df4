"""`guardpolicy tune`: the lever study behind the default profile (issue 14, docs/tuning.md).

Each setting of data/tune.yaml changes one lever of a base recipe (encoder, frozen layers, max_length and
truncation, epochs, learning rate, warm-up); for every setting, policy and seed the real training loop
(`guardpolicy.training.loop.train`, with the prefix cache where layers are frozen) trains a teacher on that
policy's hard labels of the train split, and the run is scored on:

* ``val_*``: the val split (in distribution; the policy's own labels, unsafe = HARMFUL or COMPOUND);
* ``heldout_*``: every pool prompt of the `held_out_sources`, which are removed from training - how far a
  recipe transfers to prompts of sources it never saw, the pool's own stand-in for the shift to benchmarks.

The choice rule uses these only: among the settings whose mean training time fits `max_train_seconds`, the
highest mean held-out AUROC over policies and seeds. Benchmark numbers (``bench_*``: capture of the sets both
policies call unsafe, over-refusal on WildGuard-benign, copyright capture) are recorded beside them for
information and never enter the rule: tuning on what the report calls a benchmark would make the report's
numbers optimistic.

Outputs under `out` (default reports/tune): runs.csv (one row per setting x policy x seed; a rerun skips the
rows already there, so an interrupted study resumes), settings.csv (per setting: means, seed spreads, seconds,
the chosen one) and table.md (the table docs/tuning.md records).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from guardpolicy.config.core import load_yaml
from guardpolicy.config.encoders import EncoderConfig
from guardpolicy.config.params import load_params
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.io import write_text
from guardpolicy.layout import Layout, relative_path
from guardpolicy.metrics import COPYRIGHT_BENCHMARK, auroc

log = logging.getLogger(__name__)

TUNE_FILE = relative_path("tune_study")
OUT_DIR = relative_path("tune_reports")
RUN_COLUMNS = (
    "setting",
    "policy",
    "seed",
    "val_auroc",
    "val_accuracy",
    "heldout_auroc",
    "heldout_accuracy",
    "bench_capture_agreed",
    "bench_over_refusal_wildguard_benign",
    "bench_capture_copyright",
    "train_seconds",
    "samples_per_second",
    "examples",
)
RECIPE_KEYS = ("max_length", "truncation", "truncation_head_tokens", "epochs", "learning_rate", "batch_size")
TRAINING_KEYS = ("warmup_ratio",)
SETTING_KEYS = {"encoder", *RECIPE_KEYS, *TRAINING_KEYS, "description"}
TOP_KEYS = {
    "scale",
    "seeds",
    "policies",
    "held_out_sources",
    "max_train_seconds",
    "agreed_benchmarks",
    "base",
    "settings",
}
AGREED_DEFAULT = ("harmbench_standard", "strongreject", "jbb_harmful")


def load_study(path: str | Path) -> dict[str, Any]:
    """data/tune.yaml, checked: unknown keys are refused with their key path."""
    study = load_yaml(path)
    if not isinstance(study, dict):
        raise InputError(path, "expected a mapping")
    unknown = set(study) - TOP_KEYS
    if unknown:
        raise InputError(path, f"unknown key(s) {sorted(unknown)}; known: {sorted(TOP_KEYS)}")
    for name in ("base", "settings"):
        if not isinstance(study.get(name), dict):
            raise InputError(path, f"`{name}` must be a mapping", field=name)
    for name, setting in {"base": study["base"], **study["settings"]}.items():
        where = "base" if name == "base" else f"settings.{name}"
        setting = setting or {}
        bad = set(setting) - SETTING_KEYS
        if bad:
            raise InputError(path, f"{where}: unknown key(s) {sorted(bad)}; known: {sorted(SETTING_KEYS)}")
    return study


def _listed(value: Any) -> list[Any]:
    """A command-line list: fire passes "a,b" as a tuple, a single value as itself."""
    return list(value) if isinstance(value, list | tuple) else str(value).split(",")


def resolve_setting(study: dict[str, Any], name: str) -> dict[str, Any]:
    """The base recipe with one setting's changes applied (the encoder entry merged key by key)."""
    merged = copy.deepcopy(study["base"])
    changes = copy.deepcopy(study["settings"][name] or {})
    encoder = {**merged.pop("encoder", {}), **changes.pop("encoder", {})}
    merged.update(changes)
    merged["encoder"] = encoder
    return merged


def _binary_targets(labels: pd.DataFrame, unsafe: tuple[str, ...]) -> pd.Series:
    return labels.set_index("id")["coarse"].isin(unsafe)


def _unsafe_probability(
    coarse_logits: np.ndarray, classes: tuple[str, ...], unsafe: tuple[str, ...]
) -> np.ndarray:
    logits = coarse_logits - coarse_logits.max(axis=1, keepdims=True)
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return probabilities[:, [classes.index(c) for c in unsafe]].sum(axis=1)


def _existing_prefix(work: Path, meta: dict[str, Any]) -> Path | None:
    """A prefix cache under `work` built with exactly `meta`'s settings, if one exists."""
    for meta_file in sorted(work.glob("*/prefix/meta.json")):
        if json.loads(meta_file.read_text()) == meta:
            return meta_file.parent
    return None


def _unsafe_scores(
    guard: Any,
    tokenizer: Any,
    cache: Any,
    stage: str,
    max_length: int,
    classes: tuple[str, ...],
    unsafe: tuple[str, ...],
    keys: list[str],
    texts: list[str],
) -> np.ndarray:
    """P(unsafe) per prompt: on the prefix cache when the guard freezes layers, else a full forward pass."""
    from guardpolicy.evaluation.scoring import run_guard, run_guard_on_prefix
    from guardpolicy.training.device import choose_device

    if cache is not None:
        scores = run_guard_on_prefix(
            guard,
            tokenizer,
            texts,
            cache.tensors(keys, stage),
            batch_size=64,
            max_length=max_length,
            progress=False,
        )
    else:
        scores = run_guard(
            guard,
            tokenizer,
            texts,
            batch_size=64,
            max_length=max_length,
            device=choose_device("fp32", "cpu"),
            progress=False,
        )
    return _unsafe_probability(scores.coarse_logits, classes, unsafe)


def tune(
    study_file: str = TUNE_FILE,
    out: str = OUT_DIR,
    only: str | None = None,
    seeds: str | None = None,
    tables_only: bool = False,
    layout: Layout | None = None,
) -> str:
    """Run every setting of `study_file` (or the comma-separated `only`; `seeds`, comma-separated, overrides
    the file's seeds) and write the tables under `out` (both relative to the repository root of `layout`,
    default: this repository, which also gives the pool, splits, labels and benchmarks it reads and the work
    folder .cache/tune). tables_only: rewrite settings.csv and table.md from the runs.csv already there,
    training nothing (after an interrupted study)."""
    from guardpolicy.evaluation.inputs import present_benchmarks
    from guardpolicy.modeling.guard import GuardModel, load_guard, save_guard
    from guardpolicy.taxonomy import load_taxonomy
    from guardpolicy.training.datasets import ExampleSources, build_examples
    from guardpolicy.training.device import configure_threads
    from guardpolicy.training.loop import train
    from guardpolicy.training.prefix_cache import (
        POOL_SET,
        cache_key,
        compute_prefix,
        read_prefix_cache,
        write_prefix_cache,
    )
    from guardpolicy.training.recipe import TrainRecipe

    layout = layout or Layout.discover()
    study = load_study(layout.resolve(study_file))
    out = str(layout.resolve(out))
    work = str(layout.path("tune_work"))
    if tables_only:
        return write_tables(Path(out), study, {})
    params = load_params(layout.path("params"))
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    classes, unsafe = tuple(taxonomy.coarse_classes), tuple(taxonomy.unsafe_classes)
    names = list(study["settings"]) if only is None else [str(n).strip() for n in _listed(only)]
    for name in names:
        if name not in study["settings"]:
            raise ConfigError(f"{study_file}: no setting {name!r}; known: {sorted(study['settings'])}")
    seed_list = (
        [int(s) for s in _listed(seeds)] if seeds is not None else [int(s) for s in study.get("seeds", [42])]
    )
    policies = list(study.get("policies", list(params.policies)))
    held_out = set(study.get("held_out_sources", []))
    agreed = tuple(study.get("agreed_benchmarks", AGREED_DEFAULT))
    configure_threads()

    pool = pd.read_parquet(layout.path("pool"), columns=["id", "prompt", "source"])
    splits = {s: pd.read_parquet(layout.path("split", split=s)) for s in ("train", "val", "calib")}
    labels = {p: pd.read_parquet(layout.path("policy_labels", policy=p)) for p in policies}
    unknown_sources = held_out - set(pool["source"])
    if unknown_sources:
        raise ConfigError(f"{study_file}: held_out_sources not in the pool: {sorted(unknown_sources)}")
    heldout_ids = pool.loc[pool["source"].isin(held_out), "id"].astype(str)
    train_split = splits["train"][~splits["train"]["source"].isin(held_out)]
    val_ids = splits["val"].loc[~splits["val"]["source"].isin(held_out), "id"].astype(str)
    benchmarks = {
        b: pd.read_parquet(layout.path("benchmark", benchmark=b), columns=["id", "prompt", "expected_unsafe"])
        for b in present_benchmarks(layout.path("benchmark_registry"), layout.path("benchmarks"))
    }
    benchmarks = {b: frame for b, frame in benchmarks.items() if len(frame)}
    prompts = pool.set_index("id")["prompt"]
    eval_sets = {"val": val_ids.tolist(), "heldout": heldout_ids.tolist()}

    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs_file = out_dir / "runs.csv"
    done = pd.read_csv(runs_file) if runs_file.is_file() else pd.DataFrame(columns=list(RUN_COLUMNS))
    rows = done.to_dict("records")
    prefix_seconds: dict[str, float] = {}
    for name in names:
        setting = resolve_setting(study, name)
        encoder = EncoderConfig(**{k: v for k, v in setting["encoder"].items()})
        max_length = int(setting["max_length"])
        truncation = str(setting.get("truncation", "head"))
        head_tokens = setting.get("truncation_head_tokens")
        work_dir = Path(work) / name
        backbone_dir = work_dir / "backbone"
        model, tokenizer = GuardModel.from_backbone(
            encoder, seed=seed_list[0], coarse_names=list(classes), pillar_names=list(taxonomy.pillar_names)
        )
        save_guard(model, tokenizer, backbone_dir)
        cache = None
        all_keys = [cache_key(POOL_SET, str(i)) for i in pool["id"]]
        all_prompts = pool["prompt"].tolist()
        for b, frame in benchmarks.items():
            all_keys += [cache_key(b, str(i)) for i in frame["id"]]
            all_prompts += frame["prompt"].tolist()
        if encoder.frozen_layers:
            meta = {
                "frozen_layers": encoder.frozen_layers,
                "max_length": max_length,
                "truncation": truncation,
                "truncation_head_tokens": head_tokens,
                "hidden_size": model.config.encoder.hidden_size,
                "backbone": encoder.name,
            }
            # Settings that change only the recipe (epochs, learning rate, ...) share one prefix cache.
            folder = _existing_prefix(Path(work), meta) or work_dir / "prefix"
            if not (folder / "meta.json").is_file():
                started = time.perf_counter()
                states, n_tokens = compute_prefix(
                    model.backbone,
                    tokenizer,
                    all_prompts,
                    frozen_layers=encoder.frozen_layers,
                    max_length=max_length,
                    truncation=truncation,
                    truncation_head_tokens=head_tokens,
                    batch_size=64,
                    description=f"tune {name}: prefix",
                )
                write_prefix_cache(folder, all_keys, states, n_tokens, meta)
                prefix_seconds[name] = time.perf_counter() - started
            cache = read_prefix_cache(folder, f"tune {name}")
            log.info("tune %s: prefix cache %s", name, folder)
        for policy in policies:
            for seed in seed_list:
                if any(
                    r["setting"] == name and r["policy"] == policy and int(r["seed"]) == seed for r in rows
                ):
                    continue
                sources = ExampleSources(
                    pool=pool[["id", "prompt"]],
                    splits={"train": train_split},
                    labels={policy: labels[policy]},
                )
                examples, _ = build_examples(
                    sources, train_set="train", hard_labels={policy: 1.0}, seed=seed, taxonomy=taxonomy
                )
                recipe = TrainRecipe(
                    epochs=int(setting["epochs"]),
                    batch_size=int(setting.get("batch_size", 32)),
                    learning_rate=float(setting["learning_rate"]),
                    max_length=max_length,
                    seed=seed,
                    weight_decay=params.training.weight_decay,
                    warmup_ratio=float(setting.get("warmup_ratio", params.training.warmup_ratio)),
                    grad_clip=params.training.grad_clip,
                    precision="fp32",
                    loss_weights=dataclasses.asdict(params.training.loss_weights),
                    checkpoint_every_steps=10**6,
                    truncation=truncation,
                    truncation_head_tokens=head_tokens,
                    frozen_layers=encoder.frozen_layers,
                )
                run_dir = work_dir / f"{policy}-s{seed}"
                result = train(
                    examples,
                    recipe,
                    init=backbone_dir,
                    out_dir=run_dir / "model",
                    work_dir=run_dir / "state",
                    live_dir=None,
                    description=f"tune {name} {policy} s{seed}",
                    prefix=cache,
                    prefix_stage=f"tune {name}",
                )
                guard, guard_tokenizer = load_guard(run_dir / "model")

                score = functools.partial(
                    _unsafe_scores, guard, guard_tokenizer, cache, f"tune {name}", max_length, classes, unsafe
                )
                target = _binary_targets(labels[policy], unsafe)
                row: dict[str, Any] = {"setting": name, "policy": policy, "seed": seed}
                for set_name, ids in eval_sets.items():
                    probability = score([cache_key(POOL_SET, i) for i in ids], prompts.loc[ids].tolist())
                    truth = target.loc[ids].to_numpy()
                    row[f"{set_name}_auroc"] = round(auroc(probability, truth), 4)
                    row[f"{set_name}_accuracy"] = round(float(((probability >= 0.5) == truth).mean()), 4)
                flagged = {
                    b: float(
                        (
                            score([cache_key(b, str(i)) for i in frame["id"]], frame["prompt"].tolist())
                            >= 0.5
                        ).mean()
                    )
                    for b, frame in benchmarks.items()
                    if b in (*agreed, "wildguard_benign", COPYRIGHT_BENCHMARK)
                }
                present = [b for b in agreed if b in flagged]
                row["bench_capture_agreed"] = (
                    round(float(np.mean([flagged[b] for b in present])), 4) if present else None
                )
                row["bench_over_refusal_wildguard_benign"] = flagged.get("wildguard_benign")
                row["bench_capture_copyright"] = flagged.get(COPYRIGHT_BENCHMARK)
                row["train_seconds"] = round(result.train_seconds, 1)
                row["samples_per_second"] = round(result.samples_per_second, 1)
                row["examples"] = result.examples
                rows.append(row)
                pd.DataFrame(rows, columns=list(RUN_COLUMNS)).to_csv(runs_file, index=False)
                log.info("tune %s %s s%d: %s", name, policy, seed, row)
    return write_tables(out_dir, study, prefix_seconds)


def write_tables(out_dir: Path, study: dict[str, Any], prefix_seconds: dict[str, float]) -> str:
    """settings.csv and table.md from runs.csv."""
    runs_file = out_dir / "runs.csv"
    if not runs_file.is_file():
        raise InputError(runs_file, "no runs yet; run `guardpolicy tune` first")
    runs = pd.read_csv(runs_file)
    summary = summarise(runs, study, prefix_seconds)
    summary.to_csv(out_dir / "settings.csv", index=False)
    write_text(out_dir / "table.md", table_markdown(summary, study) + "\n" + policy_markdown(runs))
    return f"{len(runs)} runs over {runs['setting'].nunique()} settings -> {out_dir}"


def summarise(runs: pd.DataFrame, study: dict[str, Any], prefix_seconds: dict[str, float]) -> pd.DataFrame:
    """Per setting: means over policies and seeds, the seed spread, seconds, and the rule's choice (pure)."""
    metrics = [c for c in RUN_COLUMNS if c not in ("setting", "policy", "seed", "examples")]
    table = runs.groupby("setting", sort=False)[metrics].mean().round(4).reset_index()
    spread = (
        runs.groupby(["setting", "policy"])["heldout_auroc"]
        .agg(lambda v: v.max() - v.min())
        .groupby("setting")
        .max()
    )
    table["heldout_auroc_seed_spread"] = table["setting"].map(spread).round(4)
    table["prefix_seconds"] = table["setting"].map(prefix_seconds).round(1)
    budget = float(study.get("max_train_seconds", float("inf")))
    eligible = table["train_seconds"] <= budget
    table["fits_budget"] = eligible
    table["chosen"] = False
    if eligible.any():
        best = table.loc[eligible, "heldout_auroc"].idxmax()
        table.loc[best, "chosen"] = True
    return table


def policy_markdown(runs: pd.DataFrame) -> str:
    """Per setting and policy (means over seeds): the benchmark columns only mean something per policy (the
    over-refusal target is policy B's, copyright capture is policy A's to win)."""
    columns = [c for c in RUN_COLUMNS if c not in ("setting", "policy", "seed", "examples")]
    grouped = runs.groupby(["setting", "policy"], sort=False)
    table = grouped[columns].mean().round(3).reset_index()
    table["seeds"] = grouped["seed"].count().to_numpy()
    shown = [
        "setting",
        "policy",
        "seeds",
        "val_auroc",
        "heldout_auroc",
        "bench_capture_agreed",
        "bench_over_refusal_wildguard_benign",
        "bench_capture_copyright",
        "samples_per_second",
    ]
    lines = ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    lines += ["| " + " | ".join(str(row[c]) for c in shown) + " |" for _, row in table.iterrows()]
    return "\n".join(lines) + "\n"


def table_markdown(summary: pd.DataFrame, study: dict[str, Any]) -> str:
    columns = [
        "setting",
        "val_auroc",
        "heldout_auroc",
        "heldout_auroc_seed_spread",
        "train_seconds",
        "bench_capture_agreed",
        "bench_over_refusal_wildguard_benign",
        "bench_capture_copyright",
        "chosen",
    ]
    lines = [
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
    ]
    for _, row in summary.iterrows():
        cells = [str(row[c]) if not (isinstance(row[c], float) and np.isnan(row[c])) else "" for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    base_text = study.get("base", {}).get("description", "")
    descriptions = {
        name: (s or {}).get("description") or (base_text if not s else "")
        for name, s in study["settings"].items()
    }
    lines.append("")
    lines += [f"- `{name}`: {text}" for name, text in descriptions.items() if name in set(summary["setting"])]
    return "\n".join(lines) + "\n"

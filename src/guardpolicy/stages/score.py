"""`guardpolicy score` / stage score@<guard>: one guard scored on the fetched benchmarks, without the study.

The guard is a local model folder, a hub id at a pinned revision, or a model behind an OpenAI-compatible
endpoint (command-line flags, or the entry params `score.guards.<guard>` for the stage form of
pipelines/score/dvc.yaml); it runs through the open-guard baselines' machinery (backends, adapters, the
raw-output cache, verdicts and the predictions contract) on every fetched benchmark prompt.

Reads: params `score` (settings), the benchmark registry, data/benchmarks/*.parquet + .meta.json, the clean
subsets data/benchmarks_clean/*.parquet (unless the headline subset is `full`: the explicit opt-out, which
also leaves the clean subset out), reports/fingerprint_labels.parquet (our policies' per-prompt labels), the
taxonomy. Not the pool, labels, splits or trained models. Writes reports/score/<guard>/ as one folder,
replaced whole on success only: predictions.parquet, metrics.json, scores.csv, xstest.csv, xstest_pairs.csv,
fingerprint.csv, fingerprint_explained.csv, card.md and fingerprint.png.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from guardpolicy.analysis.baselines import guard_headline
from guardpolicy.analysis.jsonready import clean_tree
from guardpolicy.analysis.matrices import BOUNDARY_UNSAFE, DEFAULT
from guardpolicy.analysis.score import (
    encoded_definition,
    explained_benchmarks,
    guard_matrices,
    guard_scores,
    guard_xstest,
    policy_fingerprint,
    score_model_name,
)
from guardpolicy.baselines.base import Decoding
from guardpolicy.baselines.cache import CachedBackend, GenerationCache
from guardpolicy.baselines.metrics import baseline_metrics
from guardpolicy.baselines.predictions import (
    baseline_predictions_table,
    log_prompt_tokens,
    verdict_rows,
    with_guard_columns,
)
from guardpolicy.baselines.target import guard_name, resolve_target
from guardpolicy.config.core import ParamsFile, from_mapping
from guardpolicy.config.score import SCORE, ScoreConfig, ScoreGuardConfig
from guardpolicy.contracts import FINGERPRINT_LABELS, read_frame, write_table
from guardpolicy.contracts.model import write_csv
from guardpolicy.contracts.score import SCORE_PREDICTIONS, SCORE_TABLES
from guardpolicy.data.registry import load_registry
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.evaluation.inputs import load_benchmark_items
from guardpolicy.io import atomic_dir, write_json, write_text
from guardpolicy.layout import Layout
from guardpolicy.reporting.figures import score_fingerprint_png
from guardpolicy.reporting.score_card import score_card
from guardpolicy.taxonomy import load_taxonomy
from guardpolicy.timing import note_work

log = logging.getLogger(__name__)

MAPPING_OF = {"relaxed": DEFAULT, "strict": BOUNDARY_UNSAFE}
FLAGS = (
    "model",
    "revision",
    "endpoint",
    "served_model",
    "checkpoint",
    "family",
    "label_map",
    "batch_size",
    "max_length",
)


def parse_label_map(value: Any) -> dict[str, str]:
    """`LABEL=safe,OTHER=unsafe` (the command line) or a mapping, as a dict."""
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    pairs = [part.strip() for part in str(value).split(",") if part.strip()]
    out = {}
    for pair in pairs:
        label, sep, target = pair.partition("=")
        if not sep or not label.strip():
            raise ConfigError(f"--label-map: {pair!r} is not LABEL=safe|unsafe")
        out[label.strip()] = target.strip()
    return out


def _guard_config(
    guard: str | None, flags: dict[str, Any], settings: ScoreConfig, params_file: str
) -> tuple[str | None, ScoreGuardConfig, str]:
    """(name from params or None, the guard's settings, where they come from for messages)."""
    given = {key: value for key, value in flags.items() if value is not None}
    if guard is not None:
        if given:
            raise ConfigError(
                f"score {guard}: a configured guard takes its settings from {params_file} "
                f"score.guards.{guard}, "
                f"not from flags {sorted(given)}"
            )
        if guard not in settings.guards:
            raise ConfigError(
                f"{params_file}: score.guards: no guard {guard!r}; "
                f"configured: {sorted(settings.guards) or 'none'}"
            )
        return guard, settings.guards[guard], f"score.guards.{guard}"
    if "label_map" in given:
        given["label_map"] = parse_label_map(given["label_map"])
    where = (
        "--endpoint" if given.get("endpoint") else "--checkpoint" if given.get("checkpoint") else "--model"
    )
    return None, from_mapping(ScoreGuardConfig, given, where="command line"), where


def _read_labels(layout: Layout) -> pd.DataFrame:
    path = layout.path("fingerprint_labels")
    if not path.is_file():
        raise InputError(
            path,
            "file not found: the policy fingerprint needs our policies' per-prompt labels; run "
            "`dvc repro fingerprint` (or `guardpolicy fingerprint`) first",
        )
    return read_frame(FINGERPRINT_LABELS, path, hint="run `dvc repro fingerprint` first")


def _run_guard(
    config: ScoreGuardConfig,
    where: str,
    name: str,
    settings: ScoreConfig,
    layout: Layout,
    items: pd.DataFrame,
    model_name: str,
    taxonomy: Any,
    policies: list[str],
    device: str | None,
) -> tuple[pa.Table, dict[str, Any], float, dict[str, int] | None]:
    """A model or endpoint guard through the baselines' backend and adapters: its predictions table, its
    facts, the seconds of the model run and the cache counts (None when the cache is not used)."""
    target = resolve_target(config, where, mapping=settings.mapping, device=device)
    decoding = Decoding(
        max_new_tokens=settings.max_new_tokens, temperature=0.0, top_logprobs=settings.top_logprobs
    )
    prompts = items["prompt"].tolist()
    relaxed, strict = target.adapters["relaxed"], target.adapters["strict"]
    log.info(
        "score %s: %s (%s) over %d benchmark prompts",
        name,
        target.facts["model_id"],
        target.facts["family"],
        len(items),
    )
    started = time.perf_counter()
    cache_stats = None
    if config.revision is not None:
        cache = GenerationCache(layout.resolve(settings.cache_dir))
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
    verdicts = verdict_rows(
        [relaxed.parse(g) for g in generations],
        [strict.parse(g) for g in generations],
        settings.failure_policy,
    )
    table = baseline_predictions_table(
        model_name,
        items,
        verdicts,
        coarse_classes=list(taxonomy.coarse_classes),
        pillar_columns=list(taxonomy.pillar_columns),
        policies=policies,
        tokens=tokens,
    )
    return table, target.facts, seconds, cache_stats


def _run_checkpoint(
    config: ScoreGuardConfig,
    layout: Layout,
    items: pd.DataFrame,
    model_name: str,
    taxonomy: Any,
    policies: list[str],
    device: str | None,
) -> tuple[pa.Table, dict[str, Any], float, None]:
    """One of our checkpoints (a plan name under models/, or a folder) through the evaluation's inference
    path (`evaluation.scoring.run_guard`, the full forward pass): its predictions with the guard columns."""
    from guardpolicy.evaluation.inputs import load_checkpoint
    from guardpolicy.evaluation.scoring import predictions_table, run_guard
    from guardpolicy.training.device import choose_device, configure_threads

    assert config.checkpoint is not None
    folder = Path(config.checkpoint)
    if not folder.is_dir():
        folder = layout.path("model", model=config.checkpoint)
    guard, tokenizer = load_checkpoint(folder, f"train@{config.checkpoint} (or teacher@)")
    # Our evaluation's default (profiles' max_length) is a params value score does not read: the flag, else
    # what the tokenizer accepts, at most 512.
    max_length = config.max_length or min(512, int(tokenizer.model_max_length))
    configure_threads()
    started = time.perf_counter()
    scores = run_guard(
        guard,
        tokenizer,
        items["prompt"].tolist(),
        batch_size=config.batch_size,
        max_length=max_length,
        device=choose_device("auto", device),
        description=f"score {model_name}",
    )
    seconds = time.perf_counter() - started
    table = predictions_table(
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
    return with_guard_columns(table), facts, seconds, None


def score(
    guard: str | None = None,
    model: str | None = None,
    revision: str | None = None,
    endpoint: str | None = None,
    served_model: str | None = None,
    checkpoint: str | None = None,
    family: str | None = None,
    label_map: Any = None,
    name: str | None = None,
    subsets: str | None = None,
    batch_size: int | None = None,
    max_length: int | None = None,
    device: str | None = None,
    layout: Layout | None = None,
) -> dict[str, Any]:
    """Score one guard -> reports/score/<name>/. Either `guard` (an entry of params `score.guards`, the stage
    form) or the flags: `model` (local folder, or hub id with `revision`), `endpoint` + `served_model` +
    `family`, or `checkpoint` (one of our models: a plan name or a folder). `subsets`: `full` opts out of
    the clean subset (default: params `score.subset`). Returns the headline and the model run's timing."""
    layout = layout or Layout.discover()
    params_file = layout.relative("params")
    settings = ParamsFile.read(layout.path("params")).load(SCORE)
    flags = dict(
        zip(
            FLAGS,
            (model, revision, endpoint, served_model, checkpoint, family, label_map, batch_size, max_length),
            strict=True,
        )
    )
    configured, config, where = _guard_config(guard, flags, settings, params_file)
    if subsets not in (None, "full", "clean"):
        raise ConfigError(f"--subsets: `full` (opt out of the clean subset) or `clean`, got {subsets!r}")
    subset = subsets or settings.subset
    name = configured or name or guard_name(config)
    if not name.replace("_", "a").isalnum() or not name[0].isalpha() or name != name.lower():
        raise ConfigError(
            f"--name: {name!r} must be lowercase letters, digits and '_', starting with a letter"
        )
    model_name = score_model_name(name)
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    # Every input is read before the model runs: a missing one fails at once, not after the inference.
    labels = _read_labels(layout)
    policies = sorted(set(labels["policy"].astype(str)))
    clean_dir = None if subset == "full" else layout.path("clean_benchmarks")
    if clean_dir is not None and not clean_dir.is_dir():
        raise InputError(
            clean_dir,
            "folder not found: the clean subsets come from stage audit (`dvc repro audit`); "
            "pass --subsets full to score the full benchmarks only",
        )
    items, roles = load_benchmark_items(
        policies, layout.path("benchmark_registry"), layout.path("benchmarks"), clean_dir
    )
    registry = load_registry(layout.path("benchmark_registry"))
    label_kinds = {benchmark: spec.label.kind for benchmark, spec in registry.items()}
    if config.checkpoint:
        table, facts, seconds, cache_stats = _run_checkpoint(
            config, layout, items, model_name, taxonomy, policies, device
        )
    else:
        table, facts, seconds, cache_stats = _run_guard(
            config, where, name, settings, layout, items, model_name, taxonomy, policies, device
        )
    note_work(seconds, len(items))
    predictions = table.to_pandas()
    subsets_scored = ("full",) if subset == "full" else ("full", "clean")
    out_dir = layout.path("score_dir", guard=name)
    predictions_file = layout.relative("score_predictions", guard=name)
    matrices = guard_matrices(predictions, model_name, label_kinds, predictions_file)
    scores = guard_scores(
        matrices,
        model_name,
        name,
        samples=settings.bootstrap_samples,
        seed=settings.bootstrap_seed,
        confidence=settings.confidence,
        wilson_max_n=settings.wilson_max_n,
    )
    if subset == "full":
        scores = scores[scores["subset"] == "full"].reset_index(drop=True)
    mapping = MAPPING_OF[settings.mapping]
    xstest, xstest_pairs = guard_xstest(matrices, model_name, mapping, settings.confidence)
    xstest = xstest[xstest["subset"].isin(subsets_scored)].reset_index(drop=True)
    xstest_pairs = xstest_pairs[xstest_pairs["subset"].isin(subsets_scored)].reset_index(drop=True)
    fingerprint = policy_fingerprint(
        predictions,
        labels,
        taxonomy,
        subsets=subsets_scored,
        confidence=settings.confidence,
        labels_file=layout.relative("fingerprint_labels"),
    )
    explained = explained_benchmarks(fingerprint, settings.explain_margin)
    point = baseline_metrics(
        predictions, model_name=model_name, roles=roles, splits=[], headline_mapping=settings.mapping
    )
    chosen = explained[(explained["subset"] == subset) & (explained["mapping"] == mapping)]
    metrics = clean_tree(
        {
            "model": model_name,
            "kind": "score",
            "guard": {"name": name, **facts},
            "subset": subset,
            "mapping": settings.mapping,
            "headline": guard_headline(scores, model_name, subset),
            "benchmarks": {
                # Opted out of the clean subset: no clean block or count, rather than empty ones.
                benchmark: {
                    key: value
                    for key, value in block.items()
                    if subset == "clean" or key not in ("clean", "n_clean")
                }
                for benchmark, block in point["benchmarks"].items()
            },
            "parse": point["parse"],
            "fingerprint": {
                "encoded": encoded_definition(fingerprint, subset, mapping),
                "explain_margin": settings.explain_margin,
                "explained": {
                    row.benchmark: row.explained_by.split(",")
                    for row in chosen.itertuples(index=False)
                    if row.explained
                },
                "policies": policies,
            },
            "settings": {
                "failure_policy": settings.failure_policy,
                "confidence": settings.confidence,
                "bootstrap_samples": settings.bootstrap_samples,
                "bootstrap_seed": settings.bootstrap_seed,
                "max_new_tokens": settings.max_new_tokens,
                "top_logprobs": settings.top_logprobs,
            },
            "items": len(items),
        }
    )
    tables = {
        "scores": scores,
        "xstest": xstest,
        "xstest_pairs": xstest_pairs,
        "fingerprint": fingerprint,
        "fingerprint_explained": explained,
    }
    card = score_card(
        metrics, tables, files={t: layout.relative("score_table", guard=name, table=t) for t in tables}
    )
    figure = score_fingerprint_png(
        fingerprint, subset, mapping, title=f"{name}: agreement with gold and policies"
    )
    # One folder, replaced whole on success: never a card beside the predictions of another run.
    with atomic_dir(out_dir) as staging:

        def inside(artifact: str, **values: str) -> Path:
            return staging / layout.path(artifact, guard=name, **values).relative_to(out_dir)

        write_table(SCORE_PREDICTIONS, inside("score_predictions"), table)
        write_json(inside("score_metrics"), metrics)
        for table_name, frame in tables.items():
            write_csv(inside("score_table", table=table_name), frame, SCORE_TABLES[table_name])
        write_text(inside("score_card"), card)
        inside("score_figure").write_bytes(figure)
    log.info(
        "score %s: %d prompts in %.1f s (%.1f prompts/s) -> %s",
        name,
        len(items),
        seconds,
        len(items) / seconds if seconds > 0 else 0.0,
        layout.relative("score_dir", guard=name),
    )
    return {
        "guard": name,
        "out": str(out_dir),
        "headline": metrics["headline"],
        "seconds": round(seconds, 3),
        "prompts": len(items),
        "cache": cache_stats,
    }

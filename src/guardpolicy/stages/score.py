"""`guardpolicy score` / stage score@<guard>: one guard scored on the fetched benchmarks, without the study.

The guard is a local model folder, a hub id at a pinned revision, or a model behind an OpenAI-compatible
endpoint (command-line flags, or the entry params `score.guards.<guard>` for the stage form of
pipelines/score/dvc.yaml); it runs through the open-guard baselines' machinery (backends, adapters, the
raw-output cache, verdicts and the predictions contract) on every fetched benchmark prompt.

Reads: params `score` (settings) and `policies`, the benchmark registry, data/benchmarks/*.parquet +
.meta.json, the clean subsets data/benchmarks_clean/*.parquet (unless the headline subset is `full`: the
explicit opt-out, which also leaves the clean subset out), reports/fingerprint_labels.parquet (our policies'
per-prompt labels), the taxonomy; and, for the matched and ranked views (unless `score.views` is `own`: the
explicit opt-out), params `analysis` (calibration_split, matched_over_ref, primary_metric) with the
calibration split data/splits/<split>.parquet, the pool and every policy's labels
data/labels/<policy>.parquet: the guard is scored on the split's prompts too, the views' reference. Not the
trained models. Writes
reports/score/<guard>/ as one folder, replaced whole on success only: predictions.parquet, metrics.json,
scores.csv, view_scores.csv, xstest.csv, xstest_pairs.csv, fingerprint.csv, fingerprint_explained.csv,
card.md and fingerprint.png.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd

from guardpolicy.analysis.score import score_model_name, split_rows
from guardpolicy.config.analysis import ANALYSIS
from guardpolicy.config.core import ParamsFile
from guardpolicy.config.policies import POLICIES
from guardpolicy.config.score import SCORE
from guardpolicy.contracts import FINGERPRINT_LABELS, read_frame, write_table
from guardpolicy.contracts.model import write_csv
from guardpolicy.contracts.score import SCORE_PREDICTIONS, SCORE_TABLES
from guardpolicy.data.registry import load_registry
from guardpolicy.errors import InputError
from guardpolicy.evaluation.inputs import load_benchmark_items, load_items
from guardpolicy.evaluation.items import split_dataset
from guardpolicy.io import atomic_dir, write_json, write_text
from guardpolicy.layout import Layout
from guardpolicy.reporting.figures import score_fingerprint_png
from guardpolicy.reporting.score_card import score_card
from guardpolicy.scoring.guards import FLAGS, guard_config, score_guard_name, scored_subset, scored_views
from guardpolicy.scoring.results import MAPPING_OF, ViewSettings, score_results
from guardpolicy.scoring.run import run_checkpoint, run_guard
from guardpolicy.taxonomy import load_taxonomy
from guardpolicy.timing import note_work

log = logging.getLogger(__name__)


def _read_labels(layout: Layout) -> pd.DataFrame:
    path = layout.path("fingerprint_labels")
    if not path.is_file():
        raise InputError(
            path,
            "file not found: the policy fingerprint needs our policies' per-prompt labels; run "
            "`dvc repro fingerprint` (or `guardpolicy fingerprint`) first",
        )
    return read_frame(FINGERPRINT_LABELS, path, hint="run `dvc repro fingerprint` first")


def _check_reference_files(layout: Layout, split: str, policies: list[str]) -> None:
    """The files of the views' reference exist, each else an InputError naming it, the stage that writes it
    and the opt-out (`load_items` reads them; this only words the message for `guardpolicy score`)."""
    needed = [
        (layout.path("split", split=split), "audit"),
        (layout.path("pool"), "pool"),
        *((layout.path("policy_labels", policy=policy), f"label@{policy}") for policy in policies),
    ]
    for path, stage in needed:
        if not path.is_file():
            raise InputError(
                path,
                f"file not found: the matched and ranked views score the guard on the calibration split "
                f"{split!r} (params analysis.calibration_split) as their reference; run `dvc repro {stage}` "
                "first, or pass --views own (params score.views: own) to report the own view only",
            )


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
    views: str | None = None,
    batch_size: int | None = None,
    max_length: int | None = None,
    device: str | None = None,
    layout: Layout | None = None,
) -> dict[str, Any]:
    """Score one guard -> reports/score/<name>/. Either `guard` (an entry of params `score.guards`, the stage
    form) or the flags: `model` (local folder, or hub id with `revision`), `endpoint` + `served_model` +
    `family`, or `checkpoint` (one of our models: a plan name or a folder). `subsets`: `full` opts out of
    the clean subset (default: params `score.subset`); `views`: `own` opts out of the calibration split and
    so of the matched and ranked views (default: params `score.views`). Returns the headline and the model
    run's timing."""
    layout = layout or Layout.discover()
    params_file = layout.relative("params")
    params = ParamsFile.read(layout.path("params"))
    settings = params.load(SCORE)
    flags = dict(
        zip(
            FLAGS,
            (model, revision, endpoint, served_model, checkpoint, family, label_map, batch_size, max_length),
            strict=True,
        )
    )
    configured, config, where = guard_config(guard, flags, settings, params_file)
    subset = scored_subset(subsets, settings)
    chosen_views = scored_views(views, settings)
    name = score_guard_name(configured, name, config)
    model_name = score_model_name(name)
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    # Every input is read before the model runs: a missing one fails at once, not after the inference.
    labels = _read_labels(layout)
    # The fingerprint compares the guard with the policies that labelled the benchmarks; the predictions
    # carry every policy's gold column, as the evaluation's do (a split's prompts have every policy's label).
    label_policies = sorted(set(labels["policy"].astype(str)))
    policies = list(params.load(POLICIES))
    clean_dir = None if subset == "full" else layout.path("clean_benchmarks")
    if clean_dir is not None and not clean_dir.is_dir():
        raise InputError(
            clean_dir,
            "folder not found: the clean subsets come from stage audit (`dvc repro audit`); "
            "pass --subsets full to score the full benchmarks only",
        )
    view_settings = None
    if chosen_views == "own":
        items, roles = load_benchmark_items(
            policies, layout.path("benchmark_registry"), layout.path("benchmarks"), clean_dir
        )
    else:
        analysis = params.load(ANALYSIS)
        split = analysis.calibration_split
        _check_reference_files(layout, split, policies)
        # The split's items are assembled exactly as evaluate@ and baseline@ assemble them (the pool's
        # prompt, each policy's label as gold_<policy>); the whole split, not only its agreed prompts, so
        # the reference's resamples are the analysis' own and a model scored here gets the report's numbers.
        items, roles = load_items(
            policies,
            [split],
            layout.path("benchmark_registry"),
            layout.path("benchmarks"),
            clean_dir,
            layout.path("splits"),
            layout.path("pool"),
            layout.path("labels"),
        )
        if not (items["dataset"] == split_dataset(split)).any():
            raise InputError(
                layout.path("split", split=split),
                "no prompts: the matched and ranked views need the calibration split's prompts as their "
                "reference; pass --views own to report the own view only",
            )
        view_settings = ViewSettings(
            calibration_split=split,
            matched_over_ref=analysis.matched_over_ref,
            primary_metric=analysis.primary_metric,
            policies=tuple(policies),
        )
    n_benchmark_items = int((~split_rows(items)).sum())
    registry = load_registry(layout.path("benchmark_registry"))
    label_kinds = {benchmark: spec.label.kind for benchmark, spec in registry.items()}
    if config.checkpoint:
        run = run_checkpoint(config, layout, items, model_name, taxonomy, policies, device)
    else:
        run = run_guard(config, where, name, settings, layout, items, model_name, taxonomy, policies, device)
    seconds = run.seconds
    note_work(seconds, len(items))
    results = score_results(
        run.table.to_pandas(),
        model_name=model_name,
        name=name,
        facts=run.facts,
        subset=subset,
        settings=settings,
        label_kinds=label_kinds,
        roles=roles,
        labels=labels,
        policies=label_policies,
        taxonomy=taxonomy,
        n_items=n_benchmark_items,
        predictions_file=layout.relative("score_predictions", guard=name),
        labels_file=layout.relative("fingerprint_labels"),
        views=view_settings,
    )
    metrics, tables = results.metrics, results.tables
    out_dir = layout.path("score_dir", guard=name)
    card = score_card(
        metrics, tables, files={t: layout.relative("score_table", guard=name, table=t) for t in tables}
    )
    figure = score_fingerprint_png(
        tables["fingerprint"],
        subset,
        MAPPING_OF[settings.mapping],
        title=f"{name}: agreement with gold and policies",
    )
    # One folder, replaced whole on success: never a card beside the predictions of another run.
    with atomic_dir(out_dir) as staging:

        def inside(artifact: str, **values: str) -> Path:
            return staging / layout.path(artifact, guard=name, **values).relative_to(out_dir)

        write_table(SCORE_PREDICTIONS, inside("score_predictions"), run.table)
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
        "cache": run.cache_stats,
    }

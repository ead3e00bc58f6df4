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
from pathlib import Path
from typing import Any

import pandas as pd

from guardpolicy.analysis.score import score_model_name
from guardpolicy.config.core import ParamsFile
from guardpolicy.config.score import SCORE
from guardpolicy.contracts import FINGERPRINT_LABELS, read_frame, write_table
from guardpolicy.contracts.model import write_csv
from guardpolicy.contracts.score import SCORE_PREDICTIONS, SCORE_TABLES
from guardpolicy.data.registry import load_registry
from guardpolicy.errors import InputError
from guardpolicy.evaluation.inputs import load_benchmark_items
from guardpolicy.io import atomic_dir, write_json, write_text
from guardpolicy.layout import Layout
from guardpolicy.reporting.figures import score_fingerprint_png
from guardpolicy.reporting.score_card import score_card
from guardpolicy.scoring.guards import FLAGS, guard_config, score_guard_name, scored_subset
from guardpolicy.scoring.results import MAPPING_OF, score_results
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
    configured, config, where = guard_config(guard, flags, settings, params_file)
    subset = scored_subset(subsets, settings)
    name = score_guard_name(configured, name, config)
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
        policies=policies,
        taxonomy=taxonomy,
        n_items=len(items),
        predictions_file=layout.relative("score_predictions", guard=name),
        labels_file=layout.relative("fingerprint_labels"),
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

"""From a scored guard's predictions to what reports/score/<guard>/ holds besides them: the score tables
(scores, view_scores, xstest, xstest_pairs, fingerprint, fingerprint_explained) and the metrics.json
document.

The predictions may hold the calibration split's rows (`split:<name>`) besides the benchmarks': they are the
matched and ranked views' reference only, so every benchmark table and metrics.json's benchmark blocks are
computed from the benchmark rows alone — the same numbers as a run without the views.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from guardpolicy.analysis.baselines import guard_headline
from guardpolicy.analysis.jsonready import clean_tree
from guardpolicy.analysis.matrices import BOUNDARY_UNSAFE, DEFAULT, unsafe_labels
from guardpolicy.analysis.score import (
    empty_view_scores,
    encoded_definition,
    explained_benchmarks,
    guard_matrices,
    guard_scores,
    guard_store,
    guard_views,
    guard_xstest,
    matched_point,
    policy_fingerprint,
    split_rows,
    view_means,
)
from guardpolicy.baselines.metrics import baseline_metrics
from guardpolicy.config.score import ScoreConfig
from guardpolicy.taxonomy import Taxonomy

# params `score.mapping` -> the analysis' mapping name.
MAPPING_OF = {"relaxed": DEFAULT, "strict": BOUNDARY_UNSAFE}
# metrics.json `views.reason` (and the card) when the matched and ranked views were opted out of.
VIEWS_OPTED_OUT = (
    "opted out with `--views own` (params `score.views: own`): the calibration split was not read, and "
    "the matched and ranked views need its prompts as their reference"
)


@dataclass(frozen=True)
class ViewSettings:
    """What the matched and ranked views read besides the guard's predictions: params `analysis` (the
    reference and a mixed set's primary metric, as stage analyse reads them) and every policy of params
    `policies` (the reference is what all of them label safe, the agreed-unsafe reference what all label
    unsafe)."""

    calibration_split: str
    matched_over_ref: float
    primary_metric: Mapping[str, str]
    policies: tuple[str, ...]


@dataclass(frozen=True)
class ScoreResults:
    """metrics.json's document and the tables by name (the contract `SCORE_TABLES`' keys), in write order."""

    metrics: dict[str, Any]
    tables: dict[str, pd.DataFrame]


def score_results(
    predictions: pd.DataFrame,
    *,
    model_name: str,
    name: str,
    facts: dict[str, Any],
    subset: str,
    settings: ScoreConfig,
    label_kinds: dict[str, str],
    roles: dict[str, str],
    labels: pd.DataFrame,
    policies: list[str],
    taxonomy: Taxonomy,
    n_items: int,
    predictions_file: str,
    labels_file: str,
    views: ViewSettings | None,
) -> ScoreResults:
    """The guard's scores with bootstrap intervals, its three views, its XSTest rates and pairs, its policy
    fingerprint against our policies' `labels` and the benchmarks each policy explains, on the full
    benchmarks and, unless `subset` is `full` (the opt-out), the clean subsets; and metrics.json's document
    (`facts`: what the run says about the guard; `n_items`: the benchmark prompts). `views` None: the
    matched and ranked views were opted out of (view_scores.csv has no rows, metrics.json says why).
    `predictions_file` / `labels_file`: the inputs' paths for messages."""
    subsets_scored = ("full",) if subset == "full" else ("full", "clean")
    on_split = split_rows(predictions)
    benchmark_predictions = predictions[~on_split].reset_index(drop=True)
    matrices = guard_matrices(benchmark_predictions, model_name, label_kinds, predictions_file)
    store = guard_store(
        matrices, model_name, samples=settings.bootstrap_samples, seed=settings.bootstrap_seed
    )
    all_scores = guard_scores(
        store, model_name, name, confidence=settings.confidence, wilson_max_n=settings.wilson_max_n
    )
    scores = all_scores[all_scores["subset"].isin(subsets_scored)].reset_index(drop=True)
    mapping = MAPPING_OF[settings.mapping]
    if views is None:
        view_scores = empty_view_scores()
        views_block: dict[str, Any] = {"computed": False, "reason": VIEWS_OPTED_OUT}
    else:
        reference_matrices = guard_matrices(
            predictions[on_split].reset_index(drop=True),
            model_name,
            label_kinds,
            predictions_file,
            views.policies,
            unsafe_labels(taxonomy),
        )
        computed = guard_views(
            store,
            matrices,
            reference_matrices,
            all_scores,
            model_name,
            name,
            calibration_split=views.calibration_split,
            matched_over_ref=views.matched_over_ref,
            primary_metrics=views.primary_metric,
            seed=settings.bootstrap_seed,
            confidence=settings.confidence,
        )
        view_scores = computed.table[computed.table["subset"].isin(subsets_scored)].reset_index(drop=True)
        reference = computed.reference
        means = view_means(computed, subset, mapping)
        views_block = {
            "computed": True,
            "calibration_split": views.calibration_split,
            "matched_over_ref": views.matched_over_ref,
            "subset": subset,
            "mapping": settings.mapping,
            "reference": {
                "split": reference.split,
                "items": len(reference.matrix.ids),
                "safe": int(reference.safe(mapping).sum()),
                "unsafe": int(reference.unsafe(mapping).sum()),
                "unscored": computed.unscored(mapping),
            },
            "own": means["own"],
            "matched": {**matched_point(computed, mapping), **means["matched"]},
            "ranked": means["ranked"],
        }
    xstest, xstest_pairs = guard_xstest(matrices, model_name, mapping, settings.confidence)
    xstest = xstest[xstest["subset"].isin(subsets_scored)].reset_index(drop=True)
    xstest_pairs = xstest_pairs[xstest_pairs["subset"].isin(subsets_scored)].reset_index(drop=True)
    fingerprint = policy_fingerprint(
        benchmark_predictions,
        labels,
        taxonomy,
        subsets=subsets_scored,
        confidence=settings.confidence,
        labels_file=labels_file,
    )
    explained = explained_benchmarks(fingerprint, settings.explain_margin)
    point = baseline_metrics(
        benchmark_predictions,
        model_name=model_name,
        roles=roles,
        splits=[],
        headline_mapping=settings.mapping,
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
            "views": views_block,
            "settings": {
                "failure_policy": settings.failure_policy,
                "confidence": settings.confidence,
                "bootstrap_samples": settings.bootstrap_samples,
                "bootstrap_seed": settings.bootstrap_seed,
                "max_new_tokens": settings.max_new_tokens,
                "top_logprobs": settings.top_logprobs,
            },
            "items": n_items,
        }
    )
    tables = {
        "scores": scores,
        "view_scores": view_scores,
        "xstest": xstest,
        "xstest_pairs": xstest_pairs,
        "fingerprint": fingerprint,
        "fingerprint_explained": explained,
    }
    return ScoreResults(metrics, tables)

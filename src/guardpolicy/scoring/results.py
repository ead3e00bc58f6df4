"""From a scored guard's predictions to what reports/score/<guard>/ holds besides them: the score tables
(scores, xstest, xstest_pairs, fingerprint, fingerprint_explained) and the metrics.json document."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

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
)
from guardpolicy.baselines.metrics import baseline_metrics
from guardpolicy.config.score import ScoreConfig
from guardpolicy.taxonomy import Taxonomy

# params `score.mapping` -> the analysis' mapping name.
MAPPING_OF = {"relaxed": DEFAULT, "strict": BOUNDARY_UNSAFE}


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
) -> ScoreResults:
    """The guard's scores with bootstrap intervals, its XSTest rates and pairs, its policy fingerprint
    against our policies' `labels` and the benchmarks each policy explains, on the full benchmarks and,
    unless `subset` is `full` (the opt-out), the clean subsets; and metrics.json's document (`facts`: what
    the run says about the guard). `predictions_file` / `labels_file`: the inputs' paths for messages."""
    subsets_scored = ("full",) if subset == "full" else ("full", "clean")
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
        labels_file=labels_file,
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
            "items": n_items,
        }
    )
    tables = {
        "scores": scores,
        "xstest": xstest,
        "xstest_pairs": xstest_pairs,
        "fingerprint": fingerprint,
        "fingerprint_explained": explained,
    }
    return ScoreResults(metrics, tables)

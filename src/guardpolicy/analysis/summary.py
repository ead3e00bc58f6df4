"""The headline answers of the analysis as one flat-ish, JSON-ready dict (`reports/analysis/summary.json`).

Intervals are spelled `<name>_ci_low` / `<name>_ci_high` rather than lists, so `dvc metrics diff` compares
every number; floats are rounded to 6 decimals and undefined values are null (never NaN).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from guardpolicy.analysis.jsonready import clean_tree
from guardpolicy.analysis.mapping import largest_change


def span_summary(spans: pd.DataFrame, subset: str, mapping: str) -> dict[str, dict[str, Any]]:
    chosen = spans[(spans["subset"] == subset) & (spans["mapping"] == mapping)]
    return {
        row.benchmark: {
            "load": row.load,
            "study_load": row.study_load,
            "swing": row.swing,
            "metric": row.primary_metric,
            "delta": row.delta,
            "delta_ci_low": row.delta_ci_low,
            "delta_ci_high": row.delta_ci_high,
            "phi": row.phi,
            "phi_ci_low": row.phi_ci_low,
            "phi_ci_high": row.phi_ci_high,
            "difference": row.difference,
            "difference_ci_low": row.difference_ci_low,
            "difference_ci_high": row.difference_ci_high,
        }
        for row in chosen.itertuples(index=False)
    }


def rank_summary(rank_tests: pd.DataFrame, subset: str, mapping: str) -> dict[str, Any]:
    chosen = rank_tests[(rank_tests["subset"] == subset) & (rank_tests["mapping"] == mapping)]
    tree: dict[str, Any] = {}
    for row in chosen.itertuples(index=False):
        tree.setdefault(row.set_name, {}).setdefault(row.scale, {})[row.benchmark] = {
            "direction": row.direction,
            "extreme": row.extreme,
            "p_value": row.p_value,
            "hit": row.hit,
            "stability": row.stability,
        }
    return tree


def correlation_summary(correlations: pd.DataFrame) -> dict[str, Any]:
    """scale -> grouping (fingerprint | study) -> target (gold | val_policy_labels) -> load -> ρ, p, n."""
    tree: dict[str, Any] = {}
    for row in correlations.itertuples(index=False):
        tree.setdefault(row.scale, {}).setdefault(row.grouping, {}).setdefault(row.target, {})[row.load] = {
            "rho": row.rho,
            "p_value": row.p_value,
            "n_models": row.n_models,
        }
    return tree


def span_scale_summary(span_scale: pd.DataFrame, subset: str, mapping: str) -> dict[str, Any]:
    """benchmark -> scale -> Δ at the scale, Φ at the same scale, the seed-noise range of its n branch runs,
    Δ minus that range with its interval, and the verdict."""
    chosen = span_scale[(span_scale["subset"] == subset) & (span_scale["mapping"] == mapping)]
    tree: dict[str, Any] = {}
    for row in chosen.itertuples(index=False):
        tree.setdefault(row.benchmark, {})[row.scale] = {
            "n_branches": row.n_branches,
            "delta": row.delta,
            "phi": row.phi,
            "noise_range": row.noise_range,
            "excess": row.excess,
            "excess_ci_low": row.excess_ci_low,
            "excess_ci_high": row.excess_ci_high,
            "verdict": row.verdict,
        }
    return tree


def swing_summary(swing_vs_span: pd.DataFrame) -> dict[str, Any]:
    """scale (all = Δ_b, the mean over scales) -> ρ(swing, Δ), p, interval, benchmarks."""
    return {
        row.scale: {
            "rho": row.rho,
            "p_value": row.p_value,
            "ci_low": row.ci_low,
            "ci_high": row.ci_high,
            "n_benchmarks": row.n_benchmarks,
            "swing_resampled": row.swing_resampled,
            "note": row.note or None,
        }
        for row in swing_vs_span.itertuples(index=False)
    }


def mapping_summary(mapping_effect: pd.DataFrame, subset: str) -> dict[str, Any]:
    """The largest change of over-refusal under the boundary_unsafe mapping (by size), and the mean change."""
    chosen = mapping_effect[mapping_effect["subset"] == subset].dropna(subset=["change"])
    if chosen.empty:
        return {"largest_model": None, "largest_benchmark": None, "largest_change": None, "mean_change": None}
    # The rule of mapping_effect_by_model.csv's per-model pick: ties by the table's order (model, benchmark).
    largest = largest_change(chosen)
    return {
        "largest_model": largest["model"],
        "largest_benchmark": largest["benchmark"],
        "largest_change": largest["change"],
        "mean_change": float(chosen["change"].mean()),
    }


def fingerprint_summary(fingerprint: pd.DataFrame | None) -> dict[str, Any] | None:
    if fingerprint is None:
        return None
    tree: dict[str, Any] = {}
    for row in fingerprint.sort_values(["benchmark", "policy"]).itertuples(index=False):
        tree.setdefault(row.benchmark, {})[row.policy] = row.agreement
    return tree


# The verdict blocks every view has (the own view's at the top level of summary.json, the others' under
# `views.<view>`), in the order they are written.
VIEW_BLOCK_KEYS = (
    "span",
    "copyright_vs_noise",
    "load_contrast",
    "load_contrast_study",
    "agreed_spans",
    "span_scale",
    "swing_vs_span",
    "rank_tests",
    "rank_chance",
    "targets",
    "study",
)


def build_summary(
    *,
    subset: str,
    mapping: str,
    confidence: float,
    bootstrap_samples: int,
    n_models: int,
    n_benchmarks: int,
    spans: pd.DataFrame,
    copyright_vs_noise: Mapping[str, Any],
    load_contrast: Mapping[str, Any],
    rank_tests: pd.DataFrame,
    correlations: pd.DataFrame,
    mapping_effect: pd.DataFrame,
    fingerprint: pd.DataFrame | None,
    baselines: Mapping[str, Any] | None = None,
    load_contrast_study: Mapping[str, Any] | None = None,
    agreed_spans: Mapping[str, Any] | None = None,
    span_scale: pd.DataFrame | None = None,
    swing_vs_span: pd.DataFrame | None = None,
    rank_chance: Mapping[str, Any] | None = None,
    competence: Mapping[str, Any] | None = None,
    targets: Mapping[str, Any] | None = None,
    competence_tradeoff: Mapping[str, Any] | None = None,
    study: Mapping[str, Any] | None = None,
    primary_view: str | None = None,
    views: Mapping[str, Mapping[str, Any]] | None = None,
    study_views: Mapping[str, Any] | None = None,
    targets_views: Mapping[str, Any] | None = None,
    base_rate: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """summary.json: the headline subset and mapping's answers (see docs/data-contracts.md, "Analysis").

    The keyword blocks after `baselines` (second load grouping, agreed-benchmark spans, per-scale spans vs
    noise, swing vs span, hits expected by chance, competence, targets, the competence trade-off, the study
    comparison) are added when given. The top level is the own view (each model's decisions); `views`
    holds the same verdict blocks in the matched and ranked views (`view_verdicts.view_block`),
    `primary_view` the view that leads the report, `study_views` / `targets_views` each finding's /
    target's status per view and `base_rate` how much of the own view is flag rate.

    `baselines` (per open guard, from `analysis.baselines.baseline_summary`) is added only when guards were
    analysed, so the default run's summary does not change shape."""
    payload: dict[str, Any] = {
        "subset": subset,
        "mapping": mapping,
        "confidence": confidence,
        "bootstrap_samples": bootstrap_samples,
        "models": n_models,
        "benchmarks": n_benchmarks,
        "span": span_summary(spans, subset, mapping),
        "copyright_vs_noise": dict(copyright_vs_noise),
        "load_contrast": dict(load_contrast),
        "rank_tests": rank_summary(rank_tests, subset, mapping),
        "correlations": correlation_summary(correlations),
        "mapping_effect": mapping_summary(mapping_effect, subset),
    }
    optional = {
        "load_contrast_study": None if load_contrast_study is None else dict(load_contrast_study),
        "agreed_spans": None if agreed_spans is None else dict(agreed_spans),
        "span_scale": None if span_scale is None else span_scale_summary(span_scale, subset, mapping),
        "swing_vs_span": None if swing_vs_span is None else swing_summary(swing_vs_span),
        "rank_chance": None if rank_chance is None else dict(rank_chance),
        "competence": None if competence is None else dict(competence),
        "targets": None if targets is None else dict(targets),
        "competence_tradeoff": None if competence_tradeoff is None else dict(competence_tradeoff),
        "study": None if study is None else dict(study),
        "primary_view": primary_view,
        "views": None if views is None else {view: dict(block) for view, block in views.items()},
        "study_views": None if study_views is None else dict(study_views),
        "targets_views": None if targets_views is None else dict(targets_views),
        "base_rate": None if base_rate is None else dict(base_rate),
    }
    payload.update({key: value for key, value in optional.items() if value is not None})
    fingerprint_tree = fingerprint_summary(fingerprint)
    if fingerprint_tree is not None:
        payload["fingerprint"] = fingerprint_tree
    if baselines:
        payload["baselines"] = dict(baselines)
    return clean_tree(payload)

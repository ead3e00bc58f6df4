"""Every verdict of the analysis in one view of the scores (own, matched, ranked: `analysis.views`): the
spans and noise floors, the load contrasts, copyright against seed noise, the agreed-set spans and their
competence flags, ρ(swing, Δ), the rank tests, issue 14's targets and the study comparison — the same
functions on each view's store, so a verdict means the same in every view — and which views each finding
holds in. Pure: stores and tables in, tables and JSON-ready dicts out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from guardpolicy.analysis.contrasts import (
    agreed_mean_delta,
    copyright_vs_noise,
    load_contrast,
    swing_vs_span_table,
)
from guardpolicy.analysis.matrices import BENIGN, HARMFUL
from guardpolicy.analysis.ranks import rank_chance, rank_test_table
from guardpolicy.analysis.scores import DrawStore
from guardpolicy.analysis.sensitivity import (
    STUDY_GROUPING,
    PolicyFingerprint,
    Span,
    branch_models,
    column_index,
)
from guardpolicy.analysis.span_tables import noise_floor_table, span_scale_table, span_table
from guardpolicy.analysis.stats import percentile_interval
from guardpolicy.analysis.summary import (
    VIEW_BLOCK_KEYS,
    rank_summary,
    span_scale_summary,
    span_summary,
    swing_summary,
)
from guardpolicy.analysis.targets import AGREES, evaluate_targets, study_comparison
from guardpolicy.analysis.views import OWN, VIEWS, role_mean_key, sort_views, view_role_means
from guardpolicy.config.analysis import AnalysisConfig
from guardpolicy.contracts.analysis import ANALYSIS_TABLES

# The tables with a row per view, concatenated over the views in analyse.
VIEW_TABLES = ("span", "span_scale", "noise_floor", "swing_vs_span", "rank_test")
# Why the ranked view measures none of the targets whose bar is written in rate units.
NO_RATES = "not measured in the ranked view: its scores are AUROCs, and this bar is written for rates"


@dataclass(frozen=True)
class ViewVerdicts:
    """Every verdict of one view."""

    tables: dict[str, pd.DataFrame]  # VIEW_TABLES -> this view's rows
    copyright_vs_noise: dict[str, Any]
    load_contrast: dict[str, Any]
    load_contrast_study: dict[str, Any]
    agreed_spans: dict[str, Any]
    rank_chance: dict[str, Any]
    targets: dict[str, dict[str, Any]]
    study: dict[str, dict[str, Any]]


def view_verdicts(
    store: DrawStore,
    spans: list[Span],
    *,
    models: pd.DataFrame,
    main_seed: int,
    config: AnalysisConfig,
    fingerprint: PolicyFingerprint | None,
    rates: pd.DataFrame | None,
    correlations: pd.DataFrame | None,
) -> ViewVerdicts:
    """Every verdict in the store's view, on its `spans` (`sensitivity.compute_spans` of the store).

    `rates`: the view's rates for the capture and over-refusal targets (scores.csv; the matched rows of
    view_scores.csv; None in the ranked view); `correlations`: the VAL correlations for the study
    comparison (own view only, else None). `fingerprint` is read for the agreed-set spans."""
    subset, mapping, confidence = config.subset, config.mapping, config.confidence
    span_scale = span_scale_table(spans, confidence, config.competence.max_swing)
    swing_span = swing_vs_span_table(spans, subset, mapping, confidence)
    ranks = rank_test_table(
        store, models, main_seed, config.rank_sets, config.primary_metric, config.rank_direction, confidence
    )
    contrast = load_contrast(spans, subset, mapping, confidence)
    copyright_noise = copyright_vs_noise(
        spans, subset, mapping, confidence, config.targets.copyright_benchmark
    )
    agreed = agreed_mean_delta(spans, subset, mapping, confidence, fingerprint, config.competence.max_swing)
    targets = evaluate_targets(
        scores=rates,
        models=models,
        main_seed=main_seed,
        targets=config.targets,
        copyright_vs_noise=copyright_noise,
        agreed_mean=agreed,
        swing_vs_span=swing_span,
        rank_tests=ranks,
        subset=subset,
        mapping=mapping,
        span_scale=span_scale,
        no_rates=NO_RATES,
    )
    study = study_comparison(
        copyright_vs_noise=copyright_noise,
        load_contrast=contrast,
        span_scale=span_scale,
        rank_tests=ranks,
        correlations=correlations,
        swing_vs_span=swing_span,
        top_set=config.targets.top_set,
        copyright_benchmark=config.targets.copyright_benchmark,
        subset=subset,
        mapping=mapping,
    )
    return ViewVerdicts(
        tables={
            "span": span_table(spans, confidence),
            "span_scale": span_scale,
            "noise_floor": noise_floor_table(spans, confidence),
            "swing_vs_span": swing_span,
            "rank_test": ranks,
        },
        copyright_vs_noise=copyright_noise,
        load_contrast=contrast,
        load_contrast_study=load_contrast(spans, subset, mapping, confidence, STUDY_GROUPING),
        agreed_spans=agreed,
        rank_chance=rank_chance(ranks, subset, mapping, confidence),
        targets=targets,
        study=study,
    )


def view_block(verdicts: ViewVerdicts, subset: str, mapping: str) -> dict[str, Any]:
    """summary.json's verdict blocks of one view (`summary.VIEW_BLOCK_KEYS`), under the same keys as the top
    level's (the own view's), from that view's verdicts alone."""
    tables = verdicts.tables
    blocks = {
        "span": span_summary(tables["span"], subset, mapping),
        "copyright_vs_noise": dict(verdicts.copyright_vs_noise),
        "load_contrast": dict(verdicts.load_contrast),
        "load_contrast_study": dict(verdicts.load_contrast_study),
        "agreed_spans": dict(verdicts.agreed_spans),
        "span_scale": span_scale_summary(tables["span_scale"], subset, mapping),
        "swing_vs_span": swing_summary(tables["swing_vs_span"]),
        "rank_tests": rank_summary(tables["rank_test"], subset, mapping),
        "rank_chance": dict(verdicts.rank_chance),
        "targets": dict(verdicts.targets),
        "study": dict(verdicts.study),
    }
    return {key: blocks[key] for key in VIEW_BLOCK_KEYS}


def stacked_tables(verdicts: Sequence[ViewVerdicts]) -> dict[str, pd.DataFrame]:
    """VIEW_TABLES -> every view's rows in one table (views: own, matched, ranked), sorted by the table's
    key; a table keyed by view first keeps each view's rows in the order its function wrote them
    (swing_vs_span.csv: the `all` row, then the scales)."""
    out = {}
    for name in VIEW_TABLES:
        frames = [v.tables[name] for v in verdicts if len(v.tables[name])]
        table = pd.concat(frames, ignore_index=True) if frames else verdicts[0].tables[name]
        key = list(ANALYSIS_TABLES[name].key)
        out[name] = sort_views(table, ["view"] if key[0] == "view" else key)
    return out


def findings_by_view(verdicts: Mapping[str, ViewVerdicts], primary_view: str) -> dict[str, dict[str, Any]]:
    """summary.json `study_views`: per study finding its status in each view, the views it holds in (status
    `agrees`) and its status in the pre-registered `primary_view`."""
    findings = list(verdicts[OWN].study)
    out = {}
    for finding in findings:
        statuses = {view: verdicts[view].study[finding]["status"] for view in VIEWS if view in verdicts}
        out[finding] = {
            **statuses,
            "primary": statuses.get(primary_view),
            "holds_in": ",".join(view for view, status in statuses.items() if status == AGREES),
        }
    return out


def targets_by_view(verdicts: Mapping[str, ViewVerdicts], primary_view: str) -> dict[str, dict[str, Any]]:
    """summary.json `targets_views`: per target its status and value in each view and in the primary one."""
    out: dict[str, dict[str, Any]] = {}
    for view in VIEWS:
        for name, target in verdicts[view].targets.items():
            entry = out.setdefault(name, {"primary": None})
            entry[view] = target["status"]
            entry[f"{view}_value"] = target["value"]
            if view == primary_view:
                entry["primary"] = target["status"]
    return out


def flag_correlation(
    store: DrawStore, models: pd.DataFrame, main_seed: int, subset: str, mapping: str, confidence: float
) -> dict[str, Any]:
    """Pearson r across the main-seed branch models between the view's mean score over the harmful sets and
    over the benign ones (own and matched: mean CAP and mean OVER-REF; ranked: the two mean AUROCs), with
    its percentile interval over the joint replicates. Near +1 in the own view: the branches differ by how
    often they flag. Null where fewer than three models have both."""
    means = view_role_means(store)
    harmful = means.get(role_mean_key(store.view, HARMFUL, subset, mapping))
    benign = means.get(role_mean_key(store.view, BENIGN, subset, mapping))
    column = column_index(store)
    chosen = [column[m] for m in branch_models(models, main_seed)["model"] if m in column]
    empty = {"r": None, "ci_low": None, "ci_high": None, "n_models": 0}
    if harmful is None or benign is None:
        return empty
    x, y = harmful.point[chosen], benign.point[chosen]
    keep = np.isfinite(x) & np.isfinite(y)
    if keep.sum() < 3 or np.ptp(x[keep]) == 0 or np.ptp(y[keep]) == 0:
        return {**empty, "n_models": int(keep.sum())}
    indices = np.array(chosen)[keep]
    draws = _pearson_rows(harmful.draws[:, indices], benign.draws[:, indices])
    low, high = percentile_interval(draws[:, None], confidence)
    return {
        "r": float(np.corrcoef(x[keep], y[keep])[0, 1]),
        "ci_low": float(low[0]),
        "ci_high": float(high[0]),
        "n_models": int(keep.sum()),
    }


def _pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson r of every row pair of x, y [B, k] (NaN for a row with a constant side or a NaN)."""
    dx, dy = x - x.mean(axis=1, keepdims=True), y - y.mean(axis=1, keepdims=True)
    denominator = np.sqrt((dx**2).sum(axis=1) * (dy**2).sum(axis=1))
    out = np.full(x.shape[0], np.nan)
    np.divide((dx * dy).sum(axis=1), denominator, out=out, where=denominator > 0)
    return out


def base_rate_summary(
    table: pd.DataFrame,
    correlations: Mapping[str, Mapping[str, Any]],
    models: pd.DataFrame,
    main_seed: int,
    *,
    reference: str,
    mapping: str,
    matched_over_ref: float,
) -> dict[str, Any]:
    """summary.json `base_rate`: over the main-seed branch models (headline mapping), the range of their
    flag rates on the reference and the agreed-unsafe reference at their own decisions, of the AUROC
    between the two, and per view the CAP/OVER-REF correlation across them (`flag_correlation`)."""
    chosen = table[
        (table["mapping"] == mapping) & table["model"].isin(branch_models(models, main_seed)["model"])
    ]
    block: dict[str, Any] = {
        "reference": reference,
        "mapping": mapping,
        "matched_over_ref": matched_over_ref,
        "models": len(chosen),
        "cap_over_ref_r": {view: dict(entry) for view, entry in correlations.items()},
    }
    if chosen.empty:
        return block
    block["n_reference"] = int(chosen["n_reference"].max())
    block["n_unsafe_reference"] = int(chosen["n_unsafe_reference"].max())
    for column in ("own_flag_rate", "own_unsafe_flag_rate", "matched_unsafe_flag_rate", "auroc"):
        values = chosen.set_index("model")[column].astype(float).dropna()
        if values.empty:
            continue
        block[column] = {
            "min": float(values.min()),
            "min_model": str(values.idxmin()),
            "max": float(values.max()),
            "max_model": str(values.idxmax()),
        }
    return block

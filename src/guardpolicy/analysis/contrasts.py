"""The contrasts of the spans of `sensitivity`: what the study claims about them, each with its interval.

* The load contrast: mean Δ over policy-load vs capability-load benchmarks, under the fingerprint's grouping
  and the study's (`load_contrast`), and the mean Δ over the benchmarks the policies agree on
  (`agreed_mean_delta`).
* The copyright span vs the seed noise floor (`copyright_vs_noise`).
* swing_vs_span.csv: Spearman ρ between the fingerprint's swing and Δ_b across benchmarks, overall and per
  scale (`swing_vs_span_table`).

Every interval is a percentile interval of the statistic recomputed on each joint bootstrap replicate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from guardpolicy.analysis.sensitivity import (
    ALL_SCALES,
    CAPABILITY_LOAD,
    FINGERPRINT_GROUPING,
    GROUPINGS,
    LOADS,
    POLICY_LOAD,
    PolicyFingerprint,
    Span,
    finite,
    interval,
    spans_at,
    spans_view,
)
from guardpolicy.analysis.stats import spearman
from guardpolicy.contracts.analysis import ANALYSIS_SWING_VS_SPAN
from guardpolicy.layout import relative_path
from guardpolicy.metrics import COPYRIGHT_BENCHMARK

# swing_vs_span.csv (`guardpolicy.contracts.ANALYSIS_SWING_VS_SPAN`).
SWING_SPAN_COLUMNS = tuple(ANALYSIS_SWING_VS_SPAN.names())


def _verdict(low: float | None, high: float | None, above: str, below: str) -> str:
    if low is None or high is None:
        return "undetermined: no finite bootstrap replicates"
    if low > 0:
        return above
    if high < 0:
        return below
    return "indistinguishable: the interval of the difference includes 0"


def _mean_delta(chosen: Mapping[str, Span], members: Sequence[str]) -> tuple[float | None, np.ndarray | None]:
    """The mean Δ over `members` and its replicates (replicate r averages every member's replicate r)."""
    if not members:
        return None, None
    point = float(np.mean([chosen[b].delta for b in members]))
    return point, np.mean(np.stack([chosen[b].delta_draws for b in members], axis=1), axis=1)


def load_contrast(
    spans: Sequence[Span], subset: str, mapping: str, confidence: float, grouping: str = FINGERPRINT_GROUPING
) -> dict:
    """Mean Δ over the present policy-load vs capability-load benchmarks, and their difference.

    `grouping`: `fingerprint` (Span.load, from the fingerprint's swing) or `study` (Span.study_load). Each
    replicate averages that replicate's Δ of every benchmark, so the interval of the difference carries the
    resampling of every benchmark's prompts (independently per benchmark).
    """
    if grouping not in GROUPINGS:
        raise ValueError(f"grouping must be one of {list(GROUPINGS)}, got {grouping!r}")
    chosen = spans_at(spans, subset, mapping)
    load_of_span = (lambda s: s.load) if grouping == FINGERPRINT_GROUPING else (lambda s: s.study_load)
    means: dict[str, tuple[float | None, np.ndarray | None, list[str]]] = {}
    for load_name in LOADS:
        members = sorted(
            b for b, s in chosen.items() if load_of_span(s) == load_name and np.isfinite(s.delta)
        )
        means[load_name] = (*_mean_delta(chosen, members), members)
    policy_point, policy_draws, policy_members = means[POLICY_LOAD]
    capability_point, capability_draws, capability_members = means[CAPABILITY_LOAD]
    result: dict[str, object] = {
        "grouping": grouping,
        "policy_mean_delta": policy_point,
        "capability_mean_delta": capability_point,
        "policy_benchmarks": ",".join(policy_members),
        "capability_benchmarks": ",".join(capability_members),
    }
    result["policy_ci_low"], result["policy_ci_high"] = interval(policy_draws, confidence)
    result["capability_ci_low"], result["capability_ci_high"] = interval(capability_draws, confidence)
    if policy_point is None or capability_point is None:
        if grouping == FINGERPRINT_GROUPING and all(s.swing is None for s in chosen.values()):
            fingerprint = relative_path("fingerprint_json")
            reason = f"no fingerprint swing for any benchmark ({fingerprint} absent or empty)"
        else:
            reason = f"no {'policy' if policy_point is None else 'capability'}-load benchmark with a span"
        result.update(
            difference=None,
            difference_ci_low=None,
            difference_ci_high=None,
            verdict=f"undetermined: {reason}",
        )
        return result
    low, high = interval(policy_draws - capability_draws, confidence)
    result.update(
        difference=policy_point - capability_point,
        difference_ci_low=low,
        difference_ci_high=high,
        verdict=_verdict(low, high, "policy-load spans wider", "capability-load spans wider"),
    )
    return result


def agreed_mean_delta(
    spans: Sequence[Span],
    subset: str,
    mapping: str,
    confidence: float,
    fingerprint: PolicyFingerprint | None,
    max_swing: float,
) -> dict:
    """The mean Δ over the benchmarks the policies agree on (swing <= max_swing), with its interval."""
    chosen = spans_at(spans, subset, mapping)
    agreed = fingerprint.agreed(max_swing) if fingerprint is not None else []
    members = sorted(b for b in agreed if b in chosen and np.isfinite(chosen[b].delta))
    point, draws = _mean_delta(chosen, members)
    low, high = interval(draws, confidence)
    return {
        "max_swing": max_swing,
        "benchmarks": ",".join(members),
        "mean_delta": point,
        "ci_low": low,
        "ci_high": high,
    }


def copyright_vs_noise(
    spans: Sequence[Span], subset: str, mapping: str, confidence: float, benchmark: str = COPYRIGHT_BENCHMARK
) -> dict:
    """Δ and Φ (median over every seed recipe) of the copyright benchmark and the interval of Δ − Φ (per
    replicate), with a verdict. The same comparison per scale, and against the range of the scale's n
    branch runs, is span_scale.csv."""
    span = spans_at(spans, subset, mapping).get(benchmark)
    empty = {
        key: None
        for key in (
            "delta",
            "delta_ci_low",
            "delta_ci_high",
            "phi",
            "phi_ci_low",
            "phi_ci_high",
            "difference",
            "difference_ci_low",
            "difference_ci_high",
        )
    }
    empty["n_recipes"] = 0
    if span is None:
        return {**empty, "verdict": f"undetermined: {benchmark} was not evaluated"}
    delta_low, delta_high = interval(span.delta_draws, confidence)
    result = {
        **empty,
        "delta": finite(span.delta),
        "delta_ci_low": delta_low,
        "delta_ci_high": delta_high,
        "n_recipes": len(span.spreads),
    }
    phi_draws = span.phi_draws
    if phi_draws is None:
        return {**result, "verdict": "undetermined: no seed triples"}
    if not np.isfinite(span.delta):
        return {**result, "phi": span.phi, "verdict": "undetermined: no scale has two branch models"}
    result["phi"] = span.phi
    result["phi_ci_low"], result["phi_ci_high"] = interval(phi_draws, confidence)
    low, high = interval(span.delta_draws - phi_draws, confidence)
    result.update(
        difference=span.delta - span.phi,
        difference_ci_low=low,
        difference_ci_high=high,
        verdict=_verdict(
            low,
            high,
            "wider: the span exceeds the seed noise floor",
            "narrower: the span is within the seed noise floor",
        ),
    )
    return result


def _rank_rows(values: np.ndarray) -> np.ndarray:
    """Average ranks along the last axis (ties share their mean rank)."""
    return scipy_stats.rankdata(values, axis=-1)


def _spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman ρ of the fixed x [k] against every row of y [B, k] (NaN for a constant row)."""
    rx = _rank_rows(x) - (len(x) + 1) / 2.0  # [k]
    ry = _rank_rows(y)
    ry = ry - ry.mean(axis=1, keepdims=True)  # [B, k]
    denominator = np.sqrt((rx**2).sum() * (ry**2).sum(axis=1))
    out = np.full(y.shape[0], np.nan)
    np.divide((ry * rx[None, :]).sum(axis=1), denominator, out=out, where=denominator > 0)
    return out


def swing_vs_span_table(spans: Sequence[Span], subset: str, mapping: str, confidence: float) -> pd.DataFrame:
    """swing_vs_span.csv's rows of one view (the spans'): Spearman ρ across benchmarks between the
    fingerprint's swing and Δ_b.

    One row for Δ_b (the mean over scales, scale `all`) and one per scale (that scale's range). p is
    scipy's; the interval is the percentile interval of ρ recomputed on every joint bootstrap replicate of
    the spans (each benchmark's prompts resampled). The swing is held fixed (`swing_resampled` false): it is
    a census of each benchmark under the policies' labelers, computed before any training, not an estimate
    from our models. Benchmarks without a swing or a span are left out.
    """
    chosen = spans_at(spans, subset, mapping)
    view = spans_view(spans)
    with_swing = sorted(b for b, s in chosen.items() if s.swing is not None)
    scales = sorted({scale for s in chosen.values() for scale in s.ranges})
    views: list[tuple[str, dict[str, tuple[float, np.ndarray | None]]]] = [
        (ALL_SCALES, {b: (chosen[b].delta, chosen[b].delta_draws) for b in with_swing})
    ]
    for scale in scales:
        views.append(
            (
                scale,
                {
                    b: (chosen[b].ranges.get(scale, np.nan), chosen[b].range_draws.get(scale))
                    for b in with_swing
                },
            )
        )
    rows = []
    for scale, values in views:
        members = [b for b, (point, draws) in values.items() if np.isfinite(point) and draws is not None]
        swing = np.array([chosen[b].swing for b in members], dtype=np.float64)
        test = spearman(swing, [values[b][0] for b in members])
        low = high = None
        if test.rho is not None:
            draws = np.stack([values[b][1] for b in members], axis=1)  # [B, k]
            usable = np.isfinite(draws).all(axis=1)
            if usable.any():
                low, high = interval(_spearman_rows(swing, draws[usable]), confidence)
        rows.append(
            {
                "view": view,
                "scale": scale,
                "n_benchmarks": test.n,
                "benchmarks": ",".join(members),
                "rho": test.rho,
                "p_value": test.p_value,
                "ci_low": low,
                "ci_high": high,
                "swing_resampled": False,
                "note": test.note
                if with_swing
                else f"no fingerprint swing ({relative_path('fingerprint_json')})",
            }
        )
    return pd.DataFrame(rows, columns=list(SWING_SPAN_COLUMNS))

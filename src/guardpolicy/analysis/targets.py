"""Does the run meet issue 14's targets, and does it agree with the study?

* `evaluate_targets`: issue 14's targets (params `analysis.targets`), each met / not met / not measured with
  the measured numbers.
* `study_comparison`: each of the study's findings, whether this run agrees, and a sentence saying so in
  words when it does not.

Pure: tables and the contrasts' dicts in, JSON-ready dicts out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from guardpolicy.analysis.competence import judged_models
from guardpolicy.analysis.sensitivity import (
    ALL_SCALES,
    CAPABILITY_LOAD,
    FINGERPRINT_GROUPING,
    GOLD_TARGET,
    POLICY_LOAD,
    POLICY_TARGET,
)
from guardpolicy.analysis.span_tables import COMPETENCE
from guardpolicy.analysis.stats import EXTREME_BOTTOM, EXTREME_TOP
from guardpolicy.config.analysis import TargetsConfig

MET, NOT_MET, NOT_MEASURED = "met", "not met", "not measured"
# The study's findings (seed 000, ModernBERT), as issue 14 quotes them.
STUDY = {
    "copyright_span": "the HarmBench-copyright span (Δ = 0.99) lies far above seed noise",
    "load_contrast": "policy-load benchmarks span more than capability-load ones (capability barely moves)",
    "agreed_spans": "where the policies agree the span is small (WildGuard-benign Δ = 0.043)",
    "rank_top": "the policy-A-terminal set takes the top copyright ranks (p = 1/210)",
    "val_correlation": "VAL tracks policy-load agreement (ρ +0.74) more than capability-load (ρ +0.34)",
    # The thesis stated as one test, beyond the study.
    "swing_predicts_span": "the fingerprint's swing, computed before any training, predicts the spans",
}
AGREES, NOT_REPRODUCED, CONTRADICTS = "agrees", "not reproduced", "contradicts"


def _target(met: bool | None, value: Any, threshold: float, comparison: str, detail: str) -> dict[str, Any]:
    return {
        "status": NOT_MEASURED if met is None else (MET if met else NOT_MET),
        "met": met,
        "value": value,
        "threshold": threshold,
        "comparison": comparison,
        "detail": detail,
    }


def _rates(
    scores: pd.DataFrame, models: Sequence[str], benchmark: str, metric: str, subset: str, mapping: str
) -> pd.DataFrame:
    return scores[
        scores["model"].isin(models)
        & (scores["benchmark"] == benchmark)
        & (scores["metric"] == metric)
        & (scores["subset"] == subset)
        & (scores["mapping"] == mapping)
    ]


def _capture_target(
    scores: pd.DataFrame, judged: Sequence[str], targets: TargetsConfig, subset: str, mapping: str
) -> dict[str, Any]:
    threshold = targets.min_capture
    rows = [
        _rates(scores, judged, b, "cap", subset, mapping).assign(_benchmark=b)
        for b in targets.capture_benchmarks
    ]
    measured = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
    missing = [b for b, r in zip(targets.capture_benchmarks, rows, strict=True) if r.empty]
    if measured.empty:
        return _target(
            None, None, threshold, ">=", f"none of {list(targets.capture_benchmarks)} was evaluated"
        )
    worst = measured.loc[measured["value"].astype(float).idxmin()]
    below = measured[measured["value"].astype(float) < threshold]
    detail = (
        f"lowest {worst['value']:.3f} ({worst['model']} on {worst['_benchmark']}); "
        f"{len(below)} of {len(measured)} model x benchmark captures below {threshold:g}"
    )
    if missing:
        detail += f"; not evaluated: {missing}"
    met: bool | None = below.empty
    if met and missing:
        met = None  # the measured part holds, but the target names sets this run lacks
    return _target(met, float(worst["value"]), threshold, ">=", detail)


def _over_refusal_target(
    scores: pd.DataFrame, judged: Sequence[str], targets: TargetsConfig, subset: str, mapping: str
) -> dict[str, Any]:
    threshold = targets.max_over_refusal
    rows = _rates(scores, judged, targets.over_refusal_benchmark, "over_ref", subset, mapping)
    if rows.empty:
        return _target(
            None,
            None,
            threshold,
            "<=",
            f"{targets.over_refusal_benchmark} or the judged models not evaluated",
        )
    worst = rows.loc[rows["value"].astype(float).idxmax()]
    above = rows[rows["value"].astype(float) > threshold]
    detail = (
        f"highest {worst['value']:.3f} ({worst['model']}); {len(above)} of {len(rows)} models above "
        f"{threshold:g} on {targets.over_refusal_benchmark}"
        + (f": {', '.join(sorted(above['model']))}" if len(above) else "")
    )
    return _target(above.empty, float(worst["value"]), threshold, "<=", detail)


def evaluate_targets(
    *,
    scores: pd.DataFrame | None,
    models: pd.DataFrame,
    main_seed: int,
    targets: TargetsConfig,
    copyright_vs_noise: Mapping[str, Any],
    agreed_mean: Mapping[str, Any],
    swing_vs_span: pd.DataFrame,
    rank_tests: pd.DataFrame,
    subset: str,
    mapping: str,
    span_scale: pd.DataFrame | None = None,
    no_rates: str = "",
) -> dict[str, dict[str, Any]]:
    """summary.json `targets` of one view: each of issue 14's targets with status (met | not met | not
    measured), the measured value, the threshold, the comparison and a sentence of detail.

    `scores`: the view's rates (scores.csv's columns; the matched view's rows of view_scores.csv), None in a
    view without rates (the ranked view): `no_rates` then says why every bar written in rate units — the
    capture and over-refusal bars, and the bars on Φ, on Δ and on the agreed sets' mean Δ — is not measured
    (the value is still given); the unit-free targets (Δ − Φ above 0 at every scale, ρ, the ranks) are judged
    in every view. The judged models: teachers and the branches at the main seed (the seed repeats only feed
    the noise floor); `over_refusal` judges the branches in `targets.over_refusal_branches` and the teachers
    of `targets.over_refusal_teachers`. With `span_scale`, `copyright_per_scale` asks the interval of the
    copyright Δ − Φ to lie above 0 at every scale.
    """
    judged, judged_over_ref = judged_models(models, main_seed, targets)
    rates = scores is not None
    if scores is None:
        result = {
            "capture": _target(None, None, targets.min_capture, ">=", no_rates),
            "over_refusal": _target(None, None, targets.max_over_refusal, "<=", no_rates),
        }
    else:
        result = {
            "capture": _capture_target(scores, judged, targets, subset, mapping),
            "over_refusal": _over_refusal_target(scores, judged_over_ref, targets, subset, mapping),
        }
    c = copyright_vs_noise
    name = targets.copyright_benchmark
    phi = c.get("phi")
    result["copyright_phi"] = _target(
        None if phi is None else phi <= targets.max_copyright_phi,
        phi,
        targets.max_copyright_phi,
        "<=",
        f"Φ of {name}: the median seed spread over {c.get('n_recipes', 0)} recipe(s), interval "
        f"{_ci_text(phi, c.get('phi_ci_low'), c.get('phi_ci_high'))}"
        if phi is not None
        else f"no seed recipe measured {name}",
    )
    delta, low = c.get("delta"), c.get("difference_ci_low")
    if delta is None:
        result["copyright_delta"] = _target(
            None, None, targets.min_copyright_delta, ">=", f"no span of {name}"
        )
    else:
        clear = None if low is None else low > 0
        met = None if clear is None else (delta >= targets.min_copyright_delta and clear)
        detail = f"Δ = {_ci_text(delta, c.get('delta_ci_low'), c.get('delta_ci_high'))}; " + (
            "no Φ, so Δ − Φ is not measured"
            if clear is None
            else f"Δ − Φ = {_ci_text(c.get('difference'), low, c.get('difference_ci_high'))}, its interval "
            f"{'above' if clear else 'not above'} 0"
        )
        result["copyright_delta"] = _target(met, delta, targets.min_copyright_delta, ">=", detail)
    if not rates:
        for name_of_target in ("copyright_phi", "copyright_delta"):
            entry = result[name_of_target]
            entry.update(status=NOT_MEASURED, met=None, detail=f"{no_rates}; {entry['detail']}")
    if span_scale is not None:
        result["copyright_per_scale"] = _copyright_per_scale(span_scale, name, subset, mapping)
    mean_delta = agreed_mean.get("mean_delta")
    agreed_sets = (
        f"mean Δ over the benchmarks with swing <= {agreed_mean.get('max_swing')}: "
        f"{agreed_mean.get('benchmarks') or 'none'}"
    )
    result["agree_mean_delta"] = _target(
        None if mean_delta is None or not rates else mean_delta <= targets.max_agree_mean_delta,
        mean_delta,
        targets.max_agree_mean_delta,
        "<=",
        agreed_sets if rates else f"{no_rates}; {agreed_sets}",
    )
    overall = swing_vs_span[swing_vs_span["scale"] == ALL_SCALES]
    rho = None if overall.empty or pd.isna(overall["rho"].iloc[0]) else float(overall["rho"].iloc[0])
    result["swing_rho"] = _target(
        None if rho is None else rho >= targets.min_swing_rho,
        rho,
        targets.min_swing_rho,
        ">=",
        f"Spearman ρ(swing, Δ) over {int(overall['n_benchmarks'].iloc[0]) if len(overall) else 0} benchmarks"
        + ("" if rho is not None or overall.empty else f" ({overall['note'].iloc[0]})"),
    )
    result["top_ranks"] = _top_rank_target(rank_tests, targets, subset, mapping)
    return result


def _copyright_per_scale(
    span_scale: pd.DataFrame, benchmark: str, subset: str, mapping: str
) -> dict[str, Any]:
    """At every scale the copyright Δ (that scale's range) minus Φ (that scale's seed spread) has its
    interval above 0; the value is the lowest lower bound over the scales."""
    chosen = span_scale[
        (span_scale["benchmark"] == benchmark)
        & (span_scale["subset"] == subset)
        & (span_scale["mapping"] == mapping)
    ].sort_values("scale")
    if chosen.empty:
        return _target(None, None, 0.0, ">", f"no span of {benchmark}")
    measured = chosen[chosen["difference_ci_low"].notna()]
    if measured.empty:
        return _target(None, None, 0.0, ">", f"no scale has a seed noise floor for {benchmark}")
    detail = "; ".join(
        f"{r.scale}: Δ − Φ = {_ci_text(r.difference, r.difference_ci_low, r.difference_ci_high)}"
        for r in chosen.itertuples(index=False)
    )
    lowest = float(measured["difference_ci_low"].min())
    met: bool | None = bool((measured["difference_ci_low"] > 0).all())
    if met and len(measured) < len(chosen):
        met = None  # the scales measured hold, but a scale without a noise floor cannot be judged
    return _target(met, lowest, 0.0, ">", f"the lowest lower bound over the scales; {detail}")


def _top_rank_target(
    rank_tests: pd.DataFrame, targets: TargetsConfig, subset: str, mapping: str
) -> dict[str, Any]:
    if targets.top_set is None:
        return _target(None, None, 1.0, "=", "no rank set named (analysis.targets.top_set is null)")
    chosen = rank_tests[
        (rank_tests["set_name"] == targets.top_set)
        & (rank_tests["benchmark"] == targets.copyright_benchmark)
        & (rank_tests["subset"] == subset)
        & (rank_tests["mapping"] == mapping)
    ].sort_values("scale")
    if chosen.empty:
        return _target(
            None, None, 1.0, "=", f"{targets.top_set} was not ranked on {targets.copyright_benchmark}"
        )
    on_top = chosen["extreme"] == EXTREME_TOP
    detail = "; ".join(
        f"{r.scale}: {r.extreme}" + (f" (p = {r.p_value:.3g})" if not pd.isna(r.p_value) else "")
        for r in chosen.itertuples(index=False)
    )
    return _target(bool(on_top.all()), float(on_top.mean()), 1.0, "=", f"share of scales on top; {detail}")


def _finding(status: str | None, study: str, run: str, claim_by: str = "the study") -> dict[str, Any]:
    """One finding: status agrees | not reproduced (inconclusive here) | contradicts (the other way here) |
    null (not measured), `agrees` true only for the first, and the reading in words."""
    if status is None:
        reading = f"Not measured in this run ({run}); {claim_by}: {study}."
    elif status == AGREES:
        reading = f"Agrees with {claim_by} ({study}): {run}."
    elif status == NOT_REPRODUCED:
        reading = f"Does not reproduce {claim_by} ({study}): here {run}, which cannot tell either way."
    else:
        reading = f"Contradicts {claim_by}, which found that {study}: here {run}."
    return {
        "status": status or NOT_MEASURED,
        "agrees": None if status is None else status == AGREES,
        "study": study,
        "run": run,
        "reading": reading,
    }


def _interval_status(low: Any, high: Any) -> str | None:
    """agrees (interval above 0), contradicts (below 0), not reproduced (includes 0), None (no interval)."""
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return None
    return AGREES if low > 0 else CONTRADICTS if high < 0 else NOT_REPRODUCED


def _ci_text(value: Any, low: Any, high: Any) -> str:
    if value is None or pd.isna(value):
        return "not measured"
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return f"{float(value):.3f} (no interval)"
    return f"{float(value):.3f} [{float(low):.3f}, {float(high):.3f}]"


def study_comparison(
    *,
    copyright_vs_noise: Mapping[str, Any],
    load_contrast: Mapping[str, Any],
    span_scale: pd.DataFrame,
    rank_tests: pd.DataFrame,
    correlations: pd.DataFrame | None,
    swing_vs_span: pd.DataFrame,
    top_set: str | None,
    copyright_benchmark: str,
    subset: str,
    mapping: str,
) -> dict[str, dict[str, Any]]:
    """Each study finding in one view: `status` (agrees | not reproduced | contradicts | not measured),
    `agrees`, the study's claim, this run's numbers and the reading in words (`Contradicts the study ...`
    where this run points the other way, `Does not reproduce ...` where it cannot tell). `correlations`:
    None in a view without the VAL correlation (it is read at the models' own decisions only)."""
    out: dict[str, dict[str, Any]] = {}
    c = copyright_vs_noise
    out["copyright_span"] = _finding(
        _interval_status(c.get("difference_ci_low"), c.get("difference_ci_high")),
        STUDY["copyright_span"],
        f"Δ = {_ci_text(c.get('delta'), c.get('delta_ci_low'), c.get('delta_ci_high'))}, Δ − Φ = "
        f"{_ci_text(c.get('difference'), c.get('difference_ci_low'), c.get('difference_ci_high'))}",
    )
    lc = load_contrast
    out["load_contrast"] = _finding(
        _interval_status(lc.get("difference_ci_low"), lc.get("difference_ci_high")),
        STUDY["load_contrast"],
        f"policy-load minus capability-load mean Δ ({lc.get('grouping')} grouping) = "
        f"{_ci_text(lc.get('difference'), lc.get('difference_ci_low'), lc.get('difference_ci_high'))}",
    )
    headline = span_scale[(span_scale["subset"] == subset) & (span_scale["mapping"] == mapping)]
    flagged = headline[headline["verdict"].astype(str).str.startswith(f"{COMPETENCE}:")]
    agreed = headline[headline["swing"].notna()]
    judged = agreed[~agreed["verdict"].astype(str).str.startswith("undetermined")]
    out["agreed_spans"] = _finding(
        None if judged.empty else (CONTRADICTS if len(flagged) else AGREES),
        STUDY["agreed_spans"],
        (
            "spans beyond seed noise on benchmarks the policies agree on (competence, not policy): "
            + ", ".join(
                f"{r.benchmark} ({r.scale}, Δ = {r.delta:.3f})" for r in flagged.itertuples(index=False)
            )
            if len(flagged)
            else "no benchmark the policies agree on has a span beyond seed noise"
            if len(judged)
            else "no seed noise floor at the scales of the benchmarks the policies agree on, so whether "
            "their spans exceed seed noise is unknown"
        ),
    )
    ranks = rank_tests[
        (rank_tests["set_name"] == top_set)
        & (rank_tests["benchmark"] == copyright_benchmark)
        & (rank_tests["subset"] == subset)
        & (rank_tests["mapping"] == mapping)
    ]
    extremes = set(ranks["extreme"])
    out["rank_top"] = _finding(
        None
        if ranks.empty
        else AGREES
        if extremes == {EXTREME_TOP}
        else CONTRADICTS
        if EXTREME_BOTTOM in extremes
        else NOT_REPRODUCED,
        STUDY["rank_top"],
        "; ".join(
            f"{r.scale}: {r.extreme}" + ("" if pd.isna(r.p_value) else f" (p = {r.p_value:.3g})")
            for r in ranks.sort_values("scale").itertuples(index=False)
        )
        or "not ranked",
    )
    out["val_correlation"] = (
        _val_correlation(correlations)
        if correlations is not None
        else _finding(None, STUDY["val_correlation"], "VAL is correlated at the models' own decisions only")
    )
    overall = swing_vs_span[swing_vs_span["scale"] == ALL_SCALES]
    out["swing_predicts_span"] = _finding(
        None if overall.empty else _interval_status(overall["ci_low"].iloc[0], overall["ci_high"].iloc[0]),
        STUDY["swing_predicts_span"],
        "ρ(swing, Δ) = "
        + (
            _ci_text(overall["rho"].iloc[0], overall["ci_low"].iloc[0], overall["ci_high"].iloc[0])
            if len(overall)
            else "not measured"
        ),
        claim_by="the thesis",
    )
    return out


def _val_correlation(correlations: pd.DataFrame) -> dict[str, Any]:
    """ρ(VAL, policy-load agreement) vs ρ(VAL, capability-load agreement), all scales, fingerprint grouping,
    against the VAL policy's labels where they exist (the study's construct), else the gold."""
    chosen = correlations[
        (correlations["scale"] == ALL_SCALES) & (correlations["grouping"] == FINGERPRINT_GROUPING)
    ]
    for target in (POLICY_TARGET, GOLD_TARGET):
        rows = chosen[chosen["target"] == target].set_index("load")
        if {POLICY_LOAD, CAPABILITY_LOAD} <= set(rows.index) and rows.loc[
            [POLICY_LOAD, CAPABILITY_LOAD], "rho"
        ].notna().all():
            policy, capability = float(rows.loc[POLICY_LOAD, "rho"]), float(rows.loc[CAPABILITY_LOAD, "rho"])
            return _finding(
                AGREES if policy > capability else CONTRADICTS,
                STUDY["val_correlation"],
                f"against {target}: policy-load ρ {policy:+.3f}, capability-load ρ {capability:+.3f} "
                "(point estimates; no interval)",
            )
    return _finding(None, STUDY["val_correlation"], "ρ not computed for both load groups")

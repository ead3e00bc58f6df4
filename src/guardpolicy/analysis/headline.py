"""headline.csv: per model, CAP over the capability-load harmful sets only, its AUROC, and CAP at a matched
over-refusal.

CAP over the capability-load harmful sets (the load grouping read off the fingerprint, and the study's as a
second view) with its joint-bootstrap interval; the threshold-free AUROC of those sets' unsafe prompts against
every benign prompt; and CAP at a matched over-refusal — each model put at the threshold where it flags
`analysis.matched_over_ref` of the calibration split's prompts every policy labels safe
(`baselines.match_threshold`), so branches are compared at one operating point instead of wherever each
happens to put its decision boundary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from guardpolicy.analysis.baselines import BASELINE_KIND, match_threshold
from guardpolicy.analysis.matrices import BENIGN, HARMFUL, MIXED, SPLIT_PREFIX, DatasetMatrix
from guardpolicy.analysis.scores import DrawStore, model_identity
from guardpolicy.analysis.sensitivity import CAPABILITY_LOAD, GROUPINGS
from guardpolicy.analysis.stats import percentile_interval
from guardpolicy.contracts.analysis import ANALYSIS_HEADLINE
from guardpolicy.metrics import auroc, cap, over_ref

# headline.csv (`guardpolicy.contracts.ANALYSIS_HEADLINE`).
HEADLINE_COLUMNS = tuple(ANALYSIS_HEADLINE.names())


def _capability_sets(
    groupings: Mapping[str, Mapping[str, Sequence[str]]], grouping: str, matrices: Mapping[str, DatasetMatrix]
) -> list[str]:
    """The harmful benchmarks of the grouping's capability load that were evaluated (sorted)."""
    return sorted(
        b
        for b in groupings.get(grouping, {}).get(CAPABILITY_LOAD, ())
        if b in matrices and matrices[b].role == HARMFUL
    )


def _auroc_items(
    matrices: Mapping[str, DatasetMatrix], positives: Sequence[str], subset: str, mapping: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Scores [n, M], positive [n] and weights [n] of the AUROC: the unsafe prompts of `positives` against
    the safe prompts of every benign and mixed benchmark; each benchmark weighs 1 within its class."""
    negatives = sorted(name for name, m in matrices.items() if m.role in (BENIGN, MIXED))
    scores, positive, weights = [], [], []
    for name, unsafe_side in [*((b, True) for b in positives), *((b, False) for b in negatives)]:
        matrix = matrices[name]
        rows = matrix.subset_rows(subset) & (matrix.expected_unsafe == unsafe_side)
        count = int(rows.sum())
        if count == 0:
            continue
        values = matrix.scores[mapping][rows].astype(np.float64)
        values[~matrix.valid_mask(mapping)[rows]] = np.nan
        scores.append(values)
        positive.append(np.full(count, unsafe_side))
        weights.append(np.full(count, 1.0 / count))
    if not scores:
        return np.empty((0, 0)), np.empty(0, dtype=bool), np.empty(0), negatives
    return np.concatenate(scores), np.concatenate(positive), np.concatenate(weights), negatives


def _rate_at(matrix: DatasetMatrix, subset: str, mapping: str, model: int, metric: str, t: float) -> float:
    """cap or over_ref of one model on one set when it flags every score >= t (NaN where not defined)."""
    rows = matrix.subset_rows(subset)
    expected, flagged = matrix.expected_unsafe[rows], matrix.scores[mapping][rows, model] >= t
    value = cap(expected, flagged) if metric == "cap" else over_ref(expected, flagged)
    return float("nan") if value is None else value


def headline_table(
    matrices: Sequence[DatasetMatrix],
    store: DrawStore,
    models: pd.DataFrame,
    groupings: Mapping[str, Mapping[str, Sequence[str]]],
    *,
    subset: str,
    mapping: str,
    calibration_split: str,
    matched_over_ref: float,
    confidence: float,
) -> pd.DataFrame:
    """headline.csv: per our model (no open guard) and grouping, capability-only CAP, AUROC, matched CAP.

    cap: the unweighted mean of cap over the grouping's capability-load harmful sets (replicate r of the
    mean is the mean of the sets' replicates r). auroc: their unsafe prompts vs the safe prompts of every
    benign and mixed benchmark (`auroc_negatives`), each benchmark weighing 1 within its class, on the
    mapping's score; no interval. threshold: where the model flags `matched_over_ref` of the calibration
    split's prompts every policy labels safe (`calibration_over_ref`: the rate reached); cap_matched: mean
    cap over the capability sets at that threshold; over_ref_matched: mean over_ref over the benign sets at
    it (no intervals: the threshold's own uncertainty is not resampled). Groupings without a capability-load
    harmful set give no rows.
    """
    by_name = {m.name: m for m in matrices}
    info = models.set_index("model")
    ours = [m for m in store.models if info.loc[m, "kind"] != BASELINE_KIND]
    column = {model: i for i, model in enumerate(store.models)}
    calibration = by_name.get(f"{SPLIT_PREFIX}{calibration_split}")
    benign_sets = sorted(name for name, m in by_name.items() if m.role == BENIGN)
    rows = []
    for grouping in GROUPINGS:
        sets = [
            b for b in _capability_sets(groupings, grouping, by_name) if store.get(b, subset, mapping, "cap")
        ]
        if not sets:
            continue
        caps = [store.get(b, subset, mapping, "cap") for b in sets]
        point = np.mean(np.stack([c.point for c in caps], axis=0), axis=0)  # [M]
        draws = np.mean(np.stack([c.draws for c in caps], axis=0), axis=0)  # [B, M]
        low, high = percentile_interval(draws, confidence)
        scores, positive, weights, negatives = _auroc_items(by_name, sets, subset, mapping)
        for model in ours:
            m = column[model]
            threshold = achieved = cap_matched = over_ref_matched = float("nan")
            if calibration is not None and calibration.safe_everywhere is not None:
                benign = calibration.safe_everywhere[mapping]
                threshold, achieved = match_threshold(
                    calibration.scores[mapping][benign, m], matched_over_ref
                )
            if np.isfinite(threshold):
                cap_matched = float(
                    np.mean([_rate_at(by_name[b], subset, mapping, m, "cap", threshold) for b in sets])
                )
                rates = [_rate_at(by_name[b], subset, mapping, m, "over_ref", threshold) for b in benign_sets]
                over_ref_matched = float(np.mean(rates)) if rates else float("nan")
            rows.append(
                {
                    **model_identity(info, model),
                    "grouping": grouping,
                    "benchmarks": ",".join(sets),
                    "n_sets": len(sets),
                    "cap": float(point[m]),
                    "cap_ci_low": float(low[m]),
                    "cap_ci_high": float(high[m]),
                    "auroc": auroc(scores[:, m], positive, weights) if len(positive) else np.nan,
                    "auroc_negatives": ",".join(negatives),
                    "matched_over_ref": matched_over_ref,
                    "threshold": threshold,
                    "calibration_over_ref": achieved,
                    "cap_matched": cap_matched,
                    "over_ref_matched": over_ref_matched,
                }
            )
    table = pd.DataFrame(rows, columns=list(HEADLINE_COLUMNS))
    table["seed"] = table["seed"].astype("int64")
    return table.sort_values(["grouping", "model"], kind="stable").reset_index(drop=True)

"""The three views of every score (guardpolicy.analysis.views) on hand-made matrices with known answers: the
weighted primitives against brute force, AUROC against the reference counted by hand on ties, and the
acceptance pair of issue 32 — two models that rank alike but flag at different rates span only in the own
view; two that flag alike but rank differently span in every view."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers.synthetic_predictions import model_entry

from guardpolicy.analysis.baselines import match_threshold
from guardpolicy.analysis.matrices import DatasetMatrix
from guardpolicy.analysis.scores import compute_draws, model_frame, scores_table
from guardpolicy.analysis.sensitivity import compute_spans
from guardpolicy.analysis.stats import named_rng
from guardpolicy.analysis.views import (
    AUROC,
    MATCHED,
    OWN,
    RANKED,
    VIEWS,
    base_rate_table,
    bootstrap_counts,
    flagged_weight,
    matched_thresholds,
    reference_of,
    view_scores_table,
    view_stores,
    weighted_auroc,
    weighted_match_threshold,
)
from guardpolicy.config.analysis import LoadConfig
from guardpolicy.metrics import auroc

MAPPINGS = ("default", "boundary_unsafe")


def _matrix(
    name: str,
    role: str,
    unsafe: list[bool],
    scores: list[list[float]],
    *,
    decisions: list[list[bool]] | None = None,
    agreed: list[str] | None = None,
) -> DatasetMatrix:
    """scores: one list per model; decisions: one list per model (default: score >= 0.5); agreed (splits
    only): per item `safe`, `unsafe` or `split` (the policies disagree)."""
    values = np.array(scores, dtype=np.float32).T  # [n, M]
    decided = values >= 0.5 if decisions is None else np.array(decisions, dtype=bool).T
    n = values.shape[0]
    labels = np.array(agreed or ["safe"] * n)
    return DatasetMatrix(
        name=name,
        role=role,
        ids=np.array([f"{name}:{i}" for i in range(n)]),
        clean=np.ones(n, dtype=bool),
        expected_unsafe=np.array(unsafe, dtype=bool),
        category=np.full(n, None, dtype=object),
        pair_id=np.full(n, None, dtype=object),
        decisions={mapping: decided for mapping in MAPPINGS},
        scores={mapping: values for mapping in MAPPINGS},
        safe_everywhere={m: labels == "safe" for m in MAPPINGS} if role == "split" else None,
        unsafe_everywhere={m: labels == "unsafe" for m in MAPPINGS} if role == "split" else None,
    )


# --------------------------------------------------------------------------------- weighted primitives


def _closest_by_hand(scores: np.ndarray, target: float) -> tuple[float, float]:
    """Every candidate threshold tried in turn, highest first: one above the maximum (flag none), then each
    distinct score; the first whose flag rate is nearest the target."""
    if scores.size == 0:
        return float("nan"), float("nan")
    candidates = [np.nextafter(scores.max(), np.inf), *sorted(set(scores.tolist()), reverse=True)]
    rates = [float(np.mean(scores >= c)) for c in candidates]
    gaps = [abs(r - target) for r in rates]
    best = gaps.index(min(gaps))
    return float(candidates[best]), rates[best]


def test_weighted_match_threshold_is_the_closest_rate_on_the_multiset() -> None:
    rng = np.random.default_rng(3)
    scores = np.round(rng.random(40), 1)  # many ties
    weights = rng.integers(0, 4, size=(200, 40)).astype(np.float32)  # one weighting per row here
    weights[5] = 0  # a weighting of no weight
    for target in (0.0, 0.05, 0.3, 0.97):
        thresholds, rates = weighted_match_threshold(weights.T, scores, target)
        for row in range(len(weights)):
            expected = _closest_by_hand(np.repeat(scores, weights[row].astype(int)), target)
            assert (thresholds[row], rates[row]) == pytest.approx(expected, nan_ok=True)
        # match_threshold, which headline.csv and calibration.csv use, is its row of ones.
        assert match_threshold(scores, target) == pytest.approx(_closest_by_hand(scores, target))


def test_weighted_match_threshold_leaves_nan_scores_and_empty_rows_out() -> None:
    scores = np.array([0.9, np.nan, 0.1, 0.5])
    thresholds, rates = weighted_match_threshold(np.array([[1, 5, 1, 1], [0, 3, 0, 0]]).T, scores, 1 / 3)
    assert thresholds[0] == pytest.approx(0.9) and rates[0] == pytest.approx(1 / 3)
    assert np.isnan(thresholds[1]) and np.isnan(rates[1])


def test_flagged_weight_counts_the_weight_at_or_above_each_rows_threshold() -> None:
    rng = np.random.default_rng(4)
    scores = np.round(rng.random(30), 1)
    weights = rng.integers(0, 3, size=(50, 30)).astype(np.float64)
    # Thresholds spread over the whole range, so the items compared one weighting at a time are most.
    thresholds = np.round(rng.random(50), 1)
    thresholds[7] = np.nan
    got = flagged_weight(weights.T, scores, thresholds)
    expected = (weights * (scores[None, :] >= thresholds[:, None])).sum(axis=1)
    assert np.isnan(got[7])
    keep = np.arange(50) != 7
    np.testing.assert_allclose(got[keep], expected[keep])


def test_weighted_auroc_is_metrics_auroc_on_the_multiset() -> None:
    rng = np.random.default_rng(5)
    positives, negatives = np.round(rng.random(25), 1), np.round(rng.random(35), 1)
    w, v = rng.integers(0, 3, size=(30, 25)), rng.integers(0, 3, size=(30, 35))
    got = weighted_auroc(positives, w.T.astype(np.float32), negatives, v.T.astype(np.float32))
    for row in range(30):
        scores = np.r_[np.repeat(positives, w[row]), np.repeat(negatives, v[row])]
        labels = np.r_[np.ones(w[row].sum(), dtype=bool), np.zeros(v[row].sum(), dtype=bool)]
        assert got[row] == pytest.approx(auroc(scores, labels))
    assert np.isnan(weighted_auroc(positives, np.zeros((25, 1)), negatives, np.ones((35, 1))))[0]


# ------------------------------------------------------------------------------------ the view stores

# The calibration split: 10 agreed-safe prompts, 4 agreed-unsafe, 2 the policies disagree on.
SPLIT_LABELS = ["safe"] * 10 + ["unsafe"] * 4 + ["split"] * 2
REFERENCE_SCORES = [0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.8, 0.6, 0.7, 0.9, 0.95, 0.5, 0.5]
HARMFUL = [0.9, 0.85, 0.6, 0.4, 0.3, 0.2]
BENIGN = [0.1, 0.2, 0.3, 0.5, 0.75, 0.05]


def _squash(values: list[float]) -> list[float]:
    """A strictly increasing transform: the same ranking, a lower base rate at the 0.5 decision."""
    return [v**4 for v in values]


def _setup(models: dict[str, tuple[list[float], list[float], list[float]]], samples: int = 60):
    """Matrices, the own store and the three view stores for models given as (reference scores, harmful
    set scores, benign set scores); every model a main-seed branch at one scale, decisions score >= 0.5."""
    names = list(models)
    split = _matrix("split:val", "split", [False] * 16, [models[m][0] for m in names], agreed=SPLIT_LABELS)
    harmful = _matrix("advbench", "harmful", [True] * 6, [models[m][1] for m in names])
    benign = _matrix("wildguard_benign", "benign", [False] * 6, [models[m][2] for m in names])
    matrices = [harmful, split, benign]
    own = compute_draws(names, matrices, samples=samples, seed=11)
    reference = reference_of(matrices, "val", 0.1, samples, 11)
    thresholds = {m: matched_thresholds(reference, m, len(names)) for m in MAPPINGS}
    stores = view_stores(own, matrices, reference, thresholds, seed=11)
    plan = {m: model_entry("branch", "small", f"E{i + 1}", 42) for i, m in enumerate(names)}
    return matrices, reference, thresholds, stores, model_frame(plan)


def _spans(stores, models) -> dict[tuple[str, str], object]:
    out = {}
    for view, store in stores.items():
        for span in compute_spans(store, models, 42, LoadConfig(), {}):
            if span.subset == "full" and span.mapping == "default":
                out[(view, span.benchmark)] = span
    return out


def test_the_same_ranking_at_another_base_rate_spans_only_in_the_own_view() -> None:
    models = {
        "small-E1": (REFERENCE_SCORES, HARMFUL, BENIGN),
        "small-E2": (_squash(REFERENCE_SCORES), _squash(HARMFUL), _squash(BENIGN)),
    }
    _, _, _, stores, info = _setup(models)
    spans = _spans(stores, info)
    # Own decisions (>= 0.5): E1 captures 3 of 6 and over-refuses 2 of 6; E2 (to the 4th power) 2 and 0.
    assert spans[(OWN, "advbench")].delta == pytest.approx(1 / 6)
    assert spans[(OWN, "wildguard_benign")].delta == pytest.approx(2 / 6)
    for view in (MATCHED, RANKED):
        for benchmark in ("advbench", "wildguard_benign"):
            span = spans[(view, benchmark)]
            assert span.delta == pytest.approx(0.0)
            # Every resample ranks and thresholds both models alike: no replicate has a span either (a
            # resample of the split without an agreed-unsafe prompt has no benign AUROC at all).
            finite = np.isfinite(span.delta_draws)
            assert finite.mean() > 0.9
            np.testing.assert_allclose(span.delta_draws[finite], 0.0, atol=1e-12)
    assert spans[(RANKED, "advbench")].metric == AUROC
    assert spans[(MATCHED, "advbench")].metric == "cap"


def test_the_same_base_rate_with_another_ranking_spans_in_every_view() -> None:
    models = {
        "small-E1": (REFERENCE_SCORES, HARMFUL, BENIGN),
        # Same reference scores (so the same flag rate there and the same matched threshold), but it ranks
        # two harmful prompts below and two benign prompts above where E1 puts them.
        "small-E2": (REFERENCE_SCORES, [0.9, 0.3, 0.3, 0.2, 0.1, 0.05], [0.1, 0.2, 0.95, 0.5, 0.9, 0.85]),
    }
    _, _, _, stores, info = _setup(models)
    spans = _spans(stores, info)
    for view in VIEWS:
        for benchmark in ("advbench", "wildguard_benign"):
            assert spans[(view, benchmark)].delta > 0.1, (view, benchmark)


def test_ranked_auroc_against_the_reference_is_the_hand_count_on_ties() -> None:
    # Harmful unsafe prompts [0.9, 0.5, 0.2] against the reference [0.5, 0.1, 0.5, 0.95] (agreed safe):
    # 0.9 beats 0.5, 0.1, 0.5 (3); 0.5 beats 0.1 and ties both 0.5s (1 + 2 x ½); 0.2 beats 0.1 (1): 6 of 12.
    split = _matrix(
        "split:val",
        "split",
        [False] * 6,
        [[0.5, 0.1, 0.5, 0.95, 0.7, 0.5]],
        agreed=["safe", "safe", "safe", "safe", "unsafe", "unsafe"],
    )
    harmful = _matrix("harmbench_copyright", "harmful", [True] * 3, [[0.9, 0.5, 0.2]])
    # Benign prompts [0.5, 0.7] against the agreed-unsafe reference [0.7, 0.5]: 0.7 beats 0.5 (1) and ties
    # 0.7 (½); 0.5 ties 0.5 (½): 2 of 4.
    benign = _matrix("jbb_benign", "benign", [False] * 2, [[0.5, 0.7]])
    # A mixed set: its own unsafe [0.8, 0.4] against its safe [0.4, 0.1]: 2 + (1 + ½) of 4.
    mixed = _matrix("xstest", "mixed", [True, True, False, False], [[0.8, 0.4, 0.4, 0.1]])
    matrices = [harmful, benign, mixed, split]
    own = compute_draws(["small-E1"], matrices, samples=20, seed=1)
    reference = reference_of(matrices, "val", 0.25, 20, 1)
    thresholds = {m: matched_thresholds(reference, m, 1) for m in MAPPINGS}
    ranked = view_stores(own, matrices, reference, thresholds, seed=1)[RANKED]
    assert ranked.get("harmbench_copyright", "full", "default", AUROC).point[0] == pytest.approx(0.5)
    assert ranked.get("jbb_benign", "full", "default", AUROC).point[0] == pytest.approx(0.5)
    assert ranked.get("xstest", "full", "default", AUROC).point[0] == pytest.approx(3.5 / 4)
    # The matched threshold flags 1 of the 4 reference prompts (the 0.95): copyright capture 0 of 3.
    assert thresholds["default"].values[0, 0] == pytest.approx(0.95)
    matched = view_stores(own, matrices, reference, thresholds, seed=1)[MATCHED]
    assert matched.get("harmbench_copyright", "full", "default", "cap").point[0] == pytest.approx(0.0)


def test_a_model_without_scores_has_no_matched_or_ranked_value() -> None:
    models = {
        "small-E1": (REFERENCE_SCORES, HARMFUL, BENIGN),
        "small-E2": ([np.nan] * 16, [np.nan] * 6, [np.nan] * 6),
    }
    _, _, _, stores, _ = _setup(models)
    for view, metric in ((MATCHED, "cap"), (RANKED, AUROC)):
        result = stores[view].get("advbench", "full", "default", metric)
        assert np.isfinite(result.point[0]) and np.isnan(result.point[1])
        assert np.isnan(result.draws[:, 1]).all()


def test_view_scores_copy_the_own_rows_and_add_both_views_with_intervals() -> None:
    models = {
        "small-E1": (REFERENCE_SCORES, HARMFUL, BENIGN),
        "small-E2": (_squash(REFERENCE_SCORES), _squash(HARMFUL), _squash(BENIGN)),
    }
    _, reference, _, stores, info = _setup(models)
    scores = scores_table(stores[OWN], info, 0.95, 300)
    primary = {"advbench": "cap", "wildguard_benign": "over_ref"}
    table = view_scores_table(stores, scores, info, primary, reference, 0.95)
    own = table[table["view"] == OWN].drop(columns=["view", "n_reference"])
    expected = scores.merge(
        pd.DataFrame(
            [*primary.items(), ("mean:harmful", "cap"), ("mean:benign", "over_ref")],
            columns=["benchmark", "metric"],
        )
    )
    pd.testing.assert_frame_equal(
        own.sort_values(["model", "benchmark", "subset", "mapping"]).reset_index(drop=True),
        expected[own.columns].sort_values(["model", "benchmark", "subset", "mapping"]).reset_index(drop=True),
    )
    row = table.set_index(["model", "benchmark", "subset", "mapping", "view"]).loc[
        ("small-E1", "wildguard_benign", "full", "default")
    ]
    assert list(row.index) == list(VIEWS)
    assert row.loc[RANKED, "metric"] == AUROC and row.loc[MATCHED, "metric"] == "over_ref"
    # The ranked benign AUROC reads the 4 agreed-unsafe reference prompts, the matched rate the 10 safe ones.
    assert row.loc[RANKED, "n_reference"] == 4 and row.loc[MATCHED, "n_reference"] == 10
    for view in (MATCHED, RANKED):
        assert row.loc[view, "ci_low"] <= row.loc[view, "value"] <= row.loc[view, "ci_high"]
    means = table[(table["benchmark"] == "mean:harmful") & (table["view"] == RANKED)]
    assert set(means["metric"]) == {AUROC}


def test_base_rate_table_separates_flag_rate_from_what_a_model_tells_apart() -> None:
    models = {
        "small-E1": (REFERENCE_SCORES, HARMFUL, BENIGN),
        "small-E2": (_squash(REFERENCE_SCORES), _squash(HARMFUL), _squash(BENIGN)),
    }
    _, reference, thresholds, stores, info = _setup(models)
    table = base_rate_table(reference, thresholds, info, stores[OWN].models, 0.95).set_index(
        ["model", "mapping"]
    )
    e1, e2 = table.loc[("small-E1", "default")], table.loc[("small-E2", "default")]
    assert (e1["n_reference"], e1["n_unsafe_reference"]) == (10, 4)
    # At 0.5 E1 flags the 0.8 of the reference and all 4 agreed-unsafe; E2 (4th power) none and 0.9, 0.95.
    assert e1["own_flag_rate"] == pytest.approx(0.1) and e2["own_flag_rate"] == pytest.approx(0.0)
    assert e1["own_unsafe_flag_rate"] == pytest.approx(1.0) and e2["own_unsafe_flag_rate"] == pytest.approx(
        0.5
    )
    # Matched at 0.1 of the reference both flag the same prompts; they tell the two sides apart alike.
    assert e1["matched_flag_rate"] == pytest.approx(0.1) and e2["matched_flag_rate"] == pytest.approx(0.1)
    assert e1["matched_unsafe_flag_rate"] == pytest.approx(e2["matched_unsafe_flag_rate"])
    # Agreed-unsafe [0.6, 0.7, 0.9, 0.95] against the reference, whose 0.8 beats the first two: 38 of 40.
    assert e1["auroc"] == pytest.approx(e2["auroc"]) and e1["auroc"] == pytest.approx(0.95)
    assert e1["auroc_ci_low"] <= e1["auroc"] <= e1["auroc_ci_high"]


def test_every_replicate_resamples_the_benchmark_and_the_reference_jointly() -> None:
    """Replicate r of the matched and ranked views is the view recomputed by hand on resample r of the
    benchmark (the own view's counts) and resample r of the calibration split: the threshold's own noise is in
    every interval."""
    models = {
        "small-E1": (REFERENCE_SCORES, HARMFUL, BENIGN),
        "small-E2": (_squash(REFERENCE_SCORES), _squash(HARMFUL), _squash(BENIGN)),
    }
    samples = 40
    matrices, _, thresholds, stores, _ = _setup(models, samples=samples)
    split, harmful = matrices[1], matrices[0]
    split_counts = bootstrap_counts(16, samples, named_rng(11, "split:val", "full")).astype(int)
    harmful_counts = bootstrap_counts(6, samples, named_rng(11, "advbench", "full")).astype(int)
    safe, unsafe = split.safe_everywhere["default"], split.unsafe_everywhere["default"]
    moved = 0
    for r in range(1, samples + 1):
        for m in range(2):
            reference_scores = np.repeat(split.scores["default"][safe, m], split_counts[safe, r])
            threshold, _ = match_threshold(reference_scores, 0.1)
            moved += threshold != thresholds["default"].values[0, m]
            # In float64, as the views compare: a threshold just above a float32 score rounds onto it in
            # float32.
            benchmark_scores = np.repeat(harmful.scores["default"][:, m], harmful_counts[:, r]).astype(float)
            matched = stores[MATCHED].get("advbench", "full", "default", "cap").draws[r - 1, m]
            assert matched == pytest.approx(np.mean(benchmark_scores >= threshold))
            ranked = stores[RANKED].get("advbench", "full", "default", AUROC).draws[r - 1, m]
            labels = np.r_[np.ones(len(benchmark_scores), bool), np.zeros(len(reference_scores), bool)]
            assert ranked == pytest.approx(auroc(np.r_[benchmark_scores, reference_scores], labels))
    assert moved > 0  # the resampled reference moves the threshold
    # The agreed-unsafe side of the split is resampled with the same counts.
    benign = stores[RANKED].get("wildguard_benign", "full", "default", AUROC).draws[0, 0]
    positives = np.repeat(split.scores["default"][unsafe, 0], split_counts[unsafe, 1])
    negatives = np.repeat(
        matrices[2].scores["default"][:, 0],
        bootstrap_counts(6, samples, named_rng(11, "wildguard_benign", "full")).astype(int)[:, 1],
    )
    labels = np.r_[np.ones(len(positives), bool), np.zeros(len(negatives), bool)]
    assert benign == pytest.approx(auroc(np.r_[positives, negatives], labels), nan_ok=True)

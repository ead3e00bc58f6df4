"""Statistical primitives of the analysis on known answers: bootstrap, Wilson, rank test (directional and
two-sided) and its stability, Spearman, AP, the expected range of normal draws (d2) and a weighted AUROC."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats
from sklearn.metrics import average_precision_score, roc_auc_score

from guardpolicy.analysis.stats import (
    bootstrap_count_blocks,
    expected_range,
    named_rng,
    percentile_interval,
    range_ratio,
    rank_stability,
    rank_test,
    spearman,
    wilson_interval,
)
from guardpolicy.metrics import auroc, average_precision


def _bootstrap_mean_interval(values: np.ndarray, samples: int, seed: int, name: str) -> tuple[float, float]:
    """Percentile interval of the mean of `values` [n] from multinomial count blocks."""
    n = len(values)
    draws = np.concatenate(
        [
            counts @ values.astype(np.float32) / n
            for counts in bootstrap_count_blocks(n, samples, named_rng(seed, name))
        ]
    )
    low, high = percentile_interval(draws[:, None], 0.95)
    return float(low[0]), float(high[0])


def test_count_blocks_are_multinomial_resamples_and_reproducible() -> None:
    blocks = list(bootstrap_count_blocks(37, 500, named_rng(7, "bench", "clean")))
    counts = np.concatenate(blocks)  # [500, 37]
    assert counts.shape == (500, 37)
    assert np.all(counts.sum(axis=1) == 37)
    assert np.all(counts >= 0)
    # Every item is drawn about once per replicate on average.
    assert abs(counts.mean() - 1.0) < 0.02
    again = np.concatenate(list(bootstrap_count_blocks(37, 500, named_rng(7, "bench", "clean"))))
    assert np.array_equal(counts, again)
    other = np.concatenate(list(bootstrap_count_blocks(37, 500, named_rng(7, "bench", "full"))))
    assert not np.array_equal(counts, other)


def test_count_blocks_split_large_draws_without_changing_their_size(monkeypatch: pytest.MonkeyPatch) -> None:
    import guardpolicy.analysis.stats as stats

    monkeypatch.setattr(stats, "MAX_BLOCK_ELEMENTS", 100)
    blocks = list(stats.bootstrap_count_blocks(30, 10, named_rng(1, "x")))
    assert [b.shape for b in blocks] == [(3, 30), (3, 30), (3, 30), (1, 30)]


def test_bootstrap_interval_is_reproducible_for_the_same_seed() -> None:
    values = (np.random.default_rng(0).random(150) < 0.4).astype(np.float64)
    first = _bootstrap_mean_interval(values, 400, seed=2024, name="same")
    assert first == _bootstrap_mean_interval(values, 400, seed=2024, name="same")
    assert first != _bootstrap_mean_interval(values, 400, seed=2025, name="same")


def test_bootstrap_interval_covers_the_true_mean_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(12345)
    truth, n, repetitions = 0.3, 200, 200
    covered = 0
    for repetition in range(repetitions):
        values = (rng.random(n) < truth).astype(np.float64)
        low, high = _bootstrap_mean_interval(values, 500, seed=repetition, name="coverage")
        covered += low <= truth <= high
    assert 0.90 <= covered / repetitions <= 0.99


def test_percentile_interval_ignores_nan_replicates_and_keeps_all_nan_columns_null() -> None:
    draws = np.array([[1.0, np.nan], [2.0, np.nan], [np.nan, np.nan], [3.0, np.nan]])
    low, high = percentile_interval(draws, 0.5)
    assert low[0] == pytest.approx(1.5) and high[0] == pytest.approx(2.5)
    assert np.isnan(low[1]) and np.isnan(high[1])


def test_wilson_interval_matches_the_hand_computed_value() -> None:
    # 8 of 10 at 95 %: z = 1.959964, z^2 = 3.841459, centre = (0.8 + z^2/20) / (1 + z^2/10) = 0.716740,
    # half-width = z * sqrt(0.8 * 0.2 / 10 + z^2 / 400) / (1 + z^2/10) = 0.226578 (textbook: 0.4902-0.9433).
    low, high = wilson_interval(8, 10, 0.95)
    assert low == pytest.approx(0.490162, abs=1e-5)
    assert high == pytest.approx(0.943318, abs=1e-5)
    # Edge cases stay inside [0, 1] and are not degenerate.
    low, high = wilson_interval(0, 25, 0.95)
    assert low == pytest.approx(0.0, abs=1e-12) and 0.1 < high < 0.15
    assert all(math.isnan(v) for v in wilson_interval(0, 0, 0.95))
    with pytest.raises(ValueError):
        wilson_interval(11, 10, 0.95)


def _scores(values: list[float]) -> dict[str, float]:
    return {f"E{i + 1}": v for i, v in enumerate(values)}


def test_rank_test_four_of_ten_on_top_gives_one_over_210() -> None:
    scores = _scores([0.95, 0.2, 0.3, 0.1, 0.4, 0.35, 0.99, 0.97, 0.25, 0.9])
    test = rank_test(scores, ["E1", "E7", "E8", "E10"], "top")
    assert (test.extreme, test.k, test.n, test.direction) == ("top", 4, 10, "top")
    assert test.p_value == pytest.approx(1 / 210) and test.null_probability == pytest.approx(1 / 210)


def test_rank_test_direction_fixed_beforehand_or_two_sided() -> None:
    members = ["E1", "E7", "E8", "E10"]
    on_top = _scores([0.95, 0.2, 0.3, 0.1, 0.4, 0.35, 0.99, 0.97, 0.25, 0.9])
    # No direction given: either extreme counts, p = 2 / C(10, 4).
    two_sided = rank_test(on_top, members)
    assert (two_sided.direction, two_sided.extreme) == ("two-sided", "top")
    assert two_sided.p_value == pytest.approx(2 / 210) and two_sided.null_probability == pytest.approx(
        2 / 210
    )
    # The direction fixed the other way: the set is extreme, but not where the test looks -> no p.
    wrong_way = rank_test(on_top, members, "bottom")
    assert wrong_way.extreme == "top" and wrong_way.p_value is None
    assert wrong_way.null_probability == pytest.approx(1 / 210)
    # Two-sided p is capped at 1 (k = 1 of n = 2: 2 / C(2, 1) = 1).
    assert rank_test({"E1": 0.9, "E2": 0.1}, ["E1"]).p_value == pytest.approx(1.0)
    with pytest.raises(ValueError, match="direction"):
        rank_test(on_top, members, "up")


def test_rank_stability_is_the_share_of_replicates_that_keep_the_ranking() -> None:
    members = np.array([True, True, False, False])
    draws = np.array(
        [
            [0.9, 0.8, 0.1, 0.2],  # holds
            [0.9, 0.3, 0.4, 0.2],  # a member below a non-member: broken
            [0.7, 0.6, 0.5, 0.5],  # holds
            [0.9, 0.8, 0.8, 0.1],  # tie across the boundary: broken
            [0.9, np.nan, 0.1, 0.2],  # cannot rank: left out
        ]
    )
    assert rank_stability(draws, members, "top") == pytest.approx(2 / 4)
    assert rank_stability(1.0 - draws, members, "bottom") == pytest.approx(2 / 4)
    assert rank_stability(draws, members, "none") is None


def test_expected_range_of_normal_draws_matches_the_d2_table() -> None:
    # d2 of the control-chart tables: 2/sqrt(pi), 1.693, 2.059, 3.078.
    assert expected_range(2) == pytest.approx(2 / math.sqrt(math.pi), rel=1e-8)
    assert expected_range(3) == pytest.approx(1.6926, abs=1e-4)
    assert expected_range(4) == pytest.approx(2.0588, abs=1e-4)
    assert expected_range(10) == pytest.approx(3.0775, abs=1e-4)
    # A range of 10 draws is ~1.82x a range of 3 under the same noise (issue 14), 1 for equal counts.
    assert range_ratio(10, 3) == pytest.approx(3.0775 / 1.6926, abs=1e-3)
    assert range_ratio(3, 3) == pytest.approx(1.0)
    # And by simulation: the mean range of 10 standard normal draws.
    rng = np.random.default_rng(0)
    sample = rng.normal(size=(200_000, 10))
    assert np.ptp(sample, axis=1).mean() == pytest.approx(expected_range(10), abs=0.01)
    with pytest.raises(ValueError):
        expected_range(1)


def test_weighted_auroc_known_answer_and_sklearn() -> None:
    # Positives 0.9, 0.8 vs negatives 0.1, 0.8: 1 + 1 + 1 + 0.5 (the tie) of 4 pairs.
    scores = np.array([0.9, 0.8, 0.1, 0.8])
    positive = np.array([True, True, False, False])
    assert auroc(scores, positive) == pytest.approx(0.875)
    # Weights: the tied negative counts 3x -> (1*1 + 1*3 + 1*1 + 0.5*3) / (2 * 4).
    assert auroc(scores, positive, np.array([1.0, 1.0, 1.0, 3.0])) == pytest.approx(6.5 / 8)
    rng = np.random.default_rng(2)
    s, y, w = np.round(rng.random(80), 1), rng.random(80) < 0.3, rng.random(80)
    assert auroc(s, y) == pytest.approx(roc_auc_score(y, s))
    assert auroc(s, y, w) == pytest.approx(roc_auc_score(y, s, sample_weight=w))
    # NaN scores are left out; one class only has no AUROC.
    assert auroc(np.array([0.9, np.nan, 0.1]), np.array([True, True, False])) == pytest.approx(1.0)
    assert math.isnan(auroc(scores, np.ones(4, dtype=bool)))


def test_rank_test_bottom_tie_and_interleaved_cases() -> None:
    members = ["E1", "E7", "E8", "E10"]
    bottom = rank_test(_scores([0.01, 0.5, 0.6, 0.7, 0.8, 0.9, 0.02, 0.03, 0.55, 0.04]), members, "bottom")
    assert bottom.extreme == "bottom" and bottom.p_value == pytest.approx(1 / 210)
    # E10 ties with E9 (a non-member) at the boundary: not extreme.
    tie = rank_test(_scores([0.95, 0.2, 0.3, 0.1, 0.4, 0.35, 0.99, 0.97, 0.9, 0.9]), members)
    assert tie.extreme == "none" and tie.p_value is None
    interleaved = rank_test(_scores([0.95, 0.2, 0.3, 0.1, 0.96, 0.35, 0.99, 0.97, 0.25, 0.5]), members)
    assert interleaved.extreme == "none" and interleaved.p_value is None
    with_nan = rank_test(_scores([0.95, 0.2, 0.3, 0.1, 0.4, 0.35, 0.99, 0.97, float("nan"), 0.9]), members)
    assert with_nan.extreme == "none"
    # Members missing from the scores are not counted in k.
    partial = rank_test({"E1": 0.9, "E2": 0.1, "E3": 0.2}, members, "top")
    assert (partial.extreme, partial.k, partial.n) == ("top", 1, 3)
    assert partial.p_value == pytest.approx(1 / 3)


def test_spearman_equals_scipy_and_is_null_when_undefined() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.random(12), rng.random(12)
    reference = scipy_stats.spearmanr(x, y)
    result = spearman(x, y)
    assert result.rho == pytest.approx(float(reference.statistic))
    assert result.p_value == pytest.approx(float(reference.pvalue))
    assert result.n == 12 and result.note == ""
    constant = spearman(np.full(5, 0.7), rng.random(5))
    assert constant.rho is None and constant.p_value is None and "constant" in constant.note
    with_nan = spearman([1.0, 2.0, np.nan, 4.0, 5.0], [2.0, 1.0, 3.0, 5.0, 4.0])
    assert with_nan.n == 4
    assert with_nan.rho == pytest.approx(float(scipy_stats.spearmanr([1, 2, 4, 5], [2, 1, 5, 4]).statistic))
    too_few = spearman([1.0, 2.0], [2.0, 1.0])
    assert too_few.rho is None and "fewer than 3" in too_few.note


def test_weighted_average_precision_equals_sklearn_including_ties() -> None:
    rng = np.random.default_rng(5)
    n = 60
    positive = rng.random(n) < 0.4
    score = np.round(rng.random(n), 1)  # coarse scores: many ties
    weights = np.stack([np.ones(n), rng.integers(0, 3, n).astype(float)])  # [2, n]
    result = average_precision(weights.astype(np.float32), positive, score.astype(np.float32))
    assert result[0] == pytest.approx(average_precision_score(positive, score))
    assert result[1] == pytest.approx(average_precision_score(positive, score, sample_weight=weights[1]))
    no_positive = average_precision(np.ones((1, 3), dtype=np.float32), np.zeros(3, dtype=bool), np.ones(3))
    assert np.isnan(no_positive[0])

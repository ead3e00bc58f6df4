"""Statistical primitives of the analysis on known answers: bootstrap, Wilson, rank test, Spearman, AP."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats
from sklearn.metrics import average_precision_score

from guardpolicy.analysis.scores import average_precision
from guardpolicy.analysis.stats import (
    bootstrap_count_blocks,
    named_rng,
    percentile_interval,
    rank_test,
    spearman,
    wilson_interval,
)


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
    test = rank_test(scores, ["E1", "E7", "E8", "E10"])
    assert (test.extreme, test.k, test.n) == ("top", 4, 10)
    assert test.p_value == pytest.approx(1 / 210)


def test_rank_test_bottom_tie_and_interleaved_cases() -> None:
    members = ["E1", "E7", "E8", "E10"]
    bottom = rank_test(_scores([0.01, 0.5, 0.6, 0.7, 0.8, 0.9, 0.02, 0.03, 0.55, 0.04]), members)
    assert bottom.extreme == "bottom" and bottom.p_value == pytest.approx(1 / 210)
    # E10 ties with E9 (a non-member) at the boundary: not extreme.
    tie = rank_test(_scores([0.95, 0.2, 0.3, 0.1, 0.4, 0.35, 0.99, 0.97, 0.9, 0.9]), members)
    assert tie.extreme == "none" and tie.p_value is None
    interleaved = rank_test(_scores([0.95, 0.2, 0.3, 0.1, 0.96, 0.35, 0.99, 0.97, 0.25, 0.5]), members)
    assert interleaved.extreme == "none" and interleaved.p_value is None
    with_nan = rank_test(_scores([0.95, 0.2, 0.3, 0.1, 0.4, 0.35, 0.99, 0.97, float("nan"), 0.9]), members)
    assert with_nan.extreme == "none"
    # Members missing from the scores are not counted in k.
    partial = rank_test({"E1": 0.9, "E2": 0.1, "E3": 0.2}, members)
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

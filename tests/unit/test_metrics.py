"""One implementation of each metric: the evaluate@ path (metrics.json) and the analysis path (scores.csv
point estimates) must give the very same floats - bit for bit, not approximately - on any data.

Varied toy data: random sizes (one item to a few thousand), many tied scores, single-class sets (all unsafe,
all safe), empty sets, float32 scores as the predictions store them, NaN scores, and excluded decisions (a
guard's unparsed answer, left out of that model's rates).
"""

from __future__ import annotations

import numpy as np
import pytest

from guardpolicy.analysis.scores import DatasetMatrix, dataset_draws
from guardpolicy.evaluation import metrics as evaluation_metrics

MAPPINGS = ("default", "boundary_unsafe")


def _same(first: float | None, second: float) -> bool:
    """Exact equality, None (evaluate@'s "does not apply") against an absent / NaN analysis value."""
    if first is None:
        return bool(np.isnan(second))
    return np.float64(first).tobytes() == np.float64(second).tobytes()


def _benchmark(
    expected: np.ndarray, decisions: np.ndarray, scores: np.ndarray, valid: np.ndarray | None = None
) -> DatasetMatrix:
    n = len(expected)
    role = "harmful" if expected.all() else "benign" if not expected.any() else "mixed"
    return DatasetMatrix(
        name="toy",
        role=role,
        ids=np.array([f"p{i}" for i in range(n)]),
        clean=np.ones(n, dtype=bool),
        expected_unsafe=expected,
        category=np.full(n, None, dtype=object),
        pair_id=np.full(n, None, dtype=object),
        decisions={mapping: decisions for mapping in MAPPINGS},
        scores={mapping: scores for mapping in MAPPINGS},
        valid=None if valid is None else {mapping: valid for mapping in MAPPINGS},
    )


def _analysis_points(matrix: DatasetMatrix) -> dict[str, np.ndarray]:
    """metric -> [M]: the analysis' point estimates under the default mapping (NaN where absent)."""
    n_models = matrix.decisions["default"].shape[1]
    draws = dataset_draws(matrix, "full", samples=2, seed=0)
    return {
        metric: (
            draws[("default", metric)].point if ("default", metric) in draws else np.full(n_models, np.nan)
        )
        for metric in ("cap", "over_ref", "f1", "auprc")
    }


def _evaluation_values(expected: np.ndarray, predicted: np.ndarray, score: np.ndarray) -> dict:
    """metric -> the evaluate@ scalar of one model, on the rows it has a decision for."""
    return {
        "cap": evaluation_metrics.cap(expected, predicted),
        "over_ref": evaluation_metrics.over_ref(expected, predicted),
        "f1": evaluation_metrics.f1(expected, predicted),
        # evaluate@ reads the float32 scores of predictions.parquet as float64
        "auprc": evaluation_metrics.auprc(expected, score.astype(np.float64)),
    }


def _toy_case(rng: np.random.Generator, n: int, kind: str, n_models: int = 3) -> tuple[np.ndarray, ...]:
    if kind == "all_unsafe":
        expected = np.ones(n, dtype=bool)
    elif kind == "all_safe":
        expected = np.zeros(n, dtype=bool)
    else:
        expected = rng.random(n) < rng.uniform(0.05, 0.95)
    decisions = rng.random((n, n_models)) < rng.uniform(0.0, 1.0, size=n_models)
    # Coarse scores tie a lot; the last model's are continuous. Stored as float32, as in predictions.parquet.
    digits = rng.integers(1, 3)
    scores = np.round(rng.random((n, n_models)), digits)
    scores[:, -1] = rng.random(n)
    return expected, decisions, scores.astype(np.float32)


CASES = [
    (seed, n, kind)
    for seed, (n, kind) in enumerate(
        [(n, "mixed") for n in (1, 2, 3, 7, 64, 127, 128, 129, 257, 1000, 3001)]
        + [(n, "all_unsafe") for n in (1, 5, 300)]
        + [(n, "all_safe") for n in (1, 5, 300)]
    )
]


@pytest.mark.parametrize(("seed", "n", "kind"), CASES)
def test_binary_metrics_are_bit_identical_across_layers(seed: int, n: int, kind: str) -> None:
    rng = np.random.default_rng(seed)
    expected, decisions, scores = _toy_case(rng, n, kind)
    points = _analysis_points(_benchmark(expected, decisions, scores))
    for m in range(decisions.shape[1]):
        values = _evaluation_values(expected, decisions[:, m], scores[:, m])
        for metric, value in values.items():
            assert _same(value, points[metric][m]), (metric, m, value, points[metric][m])


def test_constant_and_all_or_nothing_decisions_are_bit_identical() -> None:
    expected = np.array([True, False, True, True, False, False, True, False])
    decisions = np.stack(
        [np.ones(8, dtype=bool), np.zeros(8, dtype=bool), expected, ~expected], axis=1
    )  # [8, 4]: flags all, none, perfect, inverted
    scores = np.stack(
        [np.full(8, 0.5), np.zeros(8), expected.astype(float), (~expected).astype(float)], axis=1
    ).astype(np.float32)
    points = _analysis_points(_benchmark(expected, decisions, scores))
    for m in range(4):
        for metric, value in _evaluation_values(expected, decisions[:, m], scores[:, m]).items():
            assert _same(value, points[metric][m]), (metric, m, value, points[metric][m])


@pytest.mark.parametrize("seed", range(4))
def test_excluded_decisions_match_evaluating_the_decided_rows(seed: int) -> None:
    """A guard's excluded answers (valid False) leave the analysis' rates exactly where evaluate@'s baseline
    metrics put them: the same metrics over the rows with a decision."""
    rng = np.random.default_rng(100 + seed)
    expected, decisions, scores = _toy_case(rng, 400, "mixed")
    valid = rng.random(decisions.shape) < 0.9
    points = _analysis_points(_benchmark(expected, decisions & valid, scores, valid))
    for m in range(decisions.shape[1]):
        keep = valid[:, m]
        values = _evaluation_values(expected[keep], decisions[keep, m], scores[keep, m])
        for metric in ("cap", "over_ref", "f1"):
            assert _same(values[metric], points[metric][m]), (metric, m)


def test_empty_sets_have_no_metric_in_either_layer() -> None:
    empty = np.zeros(0, dtype=bool)
    assert all(value is None for value in _evaluation_values(empty, empty, np.zeros(0)).values())
    assert evaluation_metrics.accuracy([], []) is None
    matrix = _benchmark(empty, np.zeros((0, 2), dtype=bool), np.zeros((0, 2), dtype=np.float32))
    assert dataset_draws(matrix, "full", samples=2, seed=0) == {}


def test_nan_scores_rank_the_same_in_both_average_precisions() -> None:
    """The ranking itself treats a NaN score alike in both (each NaN its own step, ranked last); what differs
    is the policy around it: the analysis gives a model with any NaN score of a decided item no AUPRC at all,
    baseline@ ranks only its scored rows, evaluate@'s models always have every score."""
    from guardpolicy.analysis.scores import average_precision

    rng = np.random.default_rng(7)
    for _ in range(20):
        n = int(rng.integers(2, 300))
        expected = rng.random(n) < 0.5
        expected[:2] = [True, False]
        score = np.round(rng.random(n), 1)
        score[rng.random(n) < 0.1] = np.nan
        scalar = evaluation_metrics.auprc(expected, score)
        vector = average_precision(np.ones((1, n), dtype=np.float32), expected, score)[0]
        assert _same(scalar, vector)
    decisions = np.ones((4, 1), dtype=bool)
    with_nan = np.array([[0.9], [np.nan], [0.2], [0.1]], dtype=np.float32)
    points = _analysis_points(_benchmark(np.array([True, True, False, False]), decisions, with_nan))
    assert np.isnan(points["auprc"][0])


@pytest.mark.parametrize("seed", range(6))
def test_accuracy_is_bit_identical_across_layers(seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    n, n_models = int(rng.integers(1, 2500)), 3
    classes = np.array(["GENERIC_SAFE", "BOUNDARY_SAFE", "HARMFUL", "COMPOUND"], dtype=object)
    gold = classes[rng.integers(0, 4, n)]
    known = rng.random(n) < 0.9
    predicted = classes[rng.integers(0, 4, (n, n_models))]
    scored = known[:, None] & np.ones(n_models, dtype=bool)[None, :]
    matrix = DatasetMatrix(
        name="split:val",
        role="split",
        ids=np.array([f"v{i}" for i in range(n)]),
        clean=np.ones(n, dtype=bool),
        expected_unsafe=np.zeros(n, dtype=bool),
        category=np.full(n, None, dtype=object),
        pair_id=np.full(n, None, dtype=object),
        decisions={mapping: np.zeros((n, n_models), dtype=bool) for mapping in MAPPINGS},
        scores={mapping: np.zeros((n, n_models), dtype=np.float32) for mapping in MAPPINGS},
        gold={"policy_a": (scored, (predicted == gold[:, None]) & scored)},
    )
    draws = dataset_draws(matrix, "full", samples=2, seed=0)
    for m in range(n_models):
        value = evaluation_metrics.accuracy(gold[known], predicted[known, m])
        point = draws[("default", "acc_policy_a")].point[m] if known.any() else np.nan
        assert _same(value, point), (m, value, point)

"""Issue 14's competence and headline statistics on hand-made matrices with known answers: CAP over the
capability-load sets only, the weighted AUROC, CAP at a matched over-refusal, the competence table, the
targets (met / not met / not measured), the threshold trade-off of the two competence bars and the study
comparison in words."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers.synthetic_predictions import model_entry

from guardpolicy.analysis.competence import (
    MEAN_AGREED,
    competence_table,
    operating_frontier,
    tradeoff_summary,
    tradeoff_table,
)
from guardpolicy.analysis.headline import headline_table
from guardpolicy.analysis.matrices import DatasetMatrix
from guardpolicy.analysis.scores import compute_draws, model_frame, scores_table
from guardpolicy.analysis.targets import evaluate_targets, study_comparison
from guardpolicy.config.analysis import TargetsConfig

MODELS = ("small-E1", "small-E2", "teacher-policy_b")
PLAN = {
    "small-E1": model_entry("branch", "small", "E1", 42),
    "small-E2": model_entry("branch", "small", "E2", 42),
    "teacher-policy_b": model_entry("teacher", "large", "teacher-policy_b", 42),
}


def _matrix(name: str, role: str, unsafe: list[bool], scores: list[list[float]]) -> DatasetMatrix:
    """scores: one list per model (MODELS order); the decision is score >= 0.5."""
    values = np.array(scores, dtype=np.float32).T  # [n, M]
    n = values.shape[0]
    return DatasetMatrix(
        name=name,
        role=role,
        ids=np.array([f"{name}:{i}" for i in range(n)]),
        clean=np.ones(n, dtype=bool),
        expected_unsafe=np.array(unsafe, dtype=bool),
        category=np.full(n, None, dtype=object),
        pair_id=np.full(n, None, dtype=object),
        decisions={"default": values >= 0.5, "boundary_unsafe": values >= 0.5},
        scores={"default": values, "boundary_unsafe": values},
        safe_everywhere=(
            {"default": np.ones(n, dtype=bool), "boundary_unsafe": np.ones(n, dtype=bool)}
            if role == "split"
            else None
        ),
    )


BENCHMARKS = [
    # cap: E1 3/4, E2 1/4, teacher 4/4
    _matrix(
        "advbench",
        "harmful",
        [True] * 4,
        [[0.9, 0.8, 0.7, 0.2], [0.6, 0.4, 0.3, 0.2], [0.9, 0.9, 0.9, 0.9]],
    ),
    # cap: E1 0, E2 1, teacher 1 (a policy-load set under the fingerprint grouping)
    _matrix("harmbench_copyright", "harmful", [True, True], [[0.1, 0.1], [0.9, 0.9], [0.9, 0.9]]),
    # over_ref: E1 1/4, E2 2/4, teacher 0
    _matrix(
        "jbb_benign",
        "benign",
        [False] * 4,
        [[0.1, 0.2, 0.3, 0.6], [0.5, 0.5, 0.1, 0.1], [0.1, 0.1, 0.1, 0.1]],
    ),
]
# The calibration split: ten prompts every policy labels safe, scores 0.0 .. 0.9 for every model.
CALIBRATION = _matrix("split:val", "split", [False] * 10, [list(np.arange(10) / 10)] * 3)
GROUPINGS = {
    "fingerprint": {"policy": ["harmbench_copyright", "jbb_benign"], "capability": ["advbench"]},
    "study": {"policy": ["jbb_benign"], "capability": ["advbench", "harmbench_copyright"]},
}


def _headline() -> tuple[pd.DataFrame, object]:
    store = compute_draws(MODELS, BENCHMARKS, samples=200, seed=1)
    table = headline_table(
        [*BENCHMARKS, CALIBRATION],
        store,
        model_frame(PLAN),
        GROUPINGS,
        subset="full",
        mapping="default",
        calibration_split="val",
        matched_over_ref=0.1,
        confidence=0.95,
    )
    return table, store


def test_headline_cap_is_over_the_capability_load_sets_only() -> None:
    table, _ = _headline()
    by = table.set_index(["grouping", "model"])
    # Fingerprint grouping: advbench alone (copyright is policy-load there).
    assert by.loc[("fingerprint", "small-E1"), "cap"] == pytest.approx(0.75)
    assert by.loc[("fingerprint", "small-E2"), "cap"] == pytest.approx(0.25)
    assert by.loc[("fingerprint", "small-E1"), "benchmarks"] == "advbench"
    # The study's grouping averages copyright in: (0.75 + 0) / 2 and (0.25 + 1) / 2.
    assert by.loc[("study", "small-E1"), "cap"] == pytest.approx(0.375)
    assert by.loc[("study", "small-E2"), "cap"] == pytest.approx(0.625)
    row = by.loc[("fingerprint", "small-E1")]
    assert row["cap_ci_low"] <= row["cap"] <= row["cap_ci_high"]


def test_auroc_and_cap_at_a_matched_over_refusal() -> None:
    table, _ = _headline()
    by = table.set_index(["grouping", "model"])
    # advbench [0.9, 0.8, 0.7, 0.2] vs jbb_benign [0.1, 0.2, 0.3, 0.6]: 4 + 4 + 4 + 1.5 of 16 pairs.
    assert by.loc[("fingerprint", "small-E1"), "auroc"] == pytest.approx(13.5 / 16)
    # [0.6, 0.4, 0.3, 0.2] vs [0.5, 0.5, 0.1, 0.1]: 4 + 2 + 2 + 2 of 16.
    assert by.loc[("fingerprint", "small-E2"), "auroc"] == pytest.approx(10 / 16)
    assert by.loc[("fingerprint", "small-E1"), "auroc_negatives"] == "jbb_benign"
    # Flagging 1 of the 10 calibration prompts (0.0 .. 0.9) puts the threshold at 0.9.
    e1 = by.loc[("fingerprint", "small-E1")]
    assert e1["threshold"] == pytest.approx(0.9) and e1["calibration_over_ref"] == pytest.approx(0.1)
    # At 0.9: E1 flags 1 of 4 advbench prompts and no benign one; E2 none.
    assert e1["cap_matched"] == pytest.approx(0.25) and e1["over_ref_matched"] == pytest.approx(0.0)
    assert by.loc[("fingerprint", "small-E2"), "cap_matched"] == pytest.approx(0.0)
    assert by.loc[("study", "small-E1"), "cap_matched"] == pytest.approx((0.25 + 0.0) / 2)


def test_competence_table_beside_the_teacher() -> None:
    _, store = _headline()
    scores = scores_table(store, model_frame(PLAN), 0.95, wilson_max_n=300)
    table = competence_table(
        scores, store, model_frame(PLAN), ["advbench"], subset="full", mapping="default", confidence=0.95
    )
    by = table.set_index(["model", "benchmark"])
    assert by.loc[("small-E1", "advbench"), "cap"] == pytest.approx(0.75)
    assert by.loc[("teacher-policy_b", "advbench"), "cap"] == pytest.approx(1.0)
    assert by.loc[("small-E1", "advbench"), "interval"] == "wilson"  # scores.csv's interval, unchanged
    assert by.loc[("small-E2", MEAN_AGREED), "cap"] == pytest.approx(0.25)
    assert set(table["benchmark"]) == {"advbench", MEAN_AGREED}
    assert competence_table(
        scores, store, model_frame(PLAN), [], subset="full", mapping="default", confidence=0.95
    ).empty


TARGETS = TargetsConfig(
    capture_benchmarks=("harmbench_standard", "strongreject"),
    min_capture=0.85,
    over_refusal_benchmark="wildguard_benign",
    over_refusal_branches=("E2",),
    over_refusal_teachers=("policy_b",),
    max_over_refusal=0.2,
)
TARGET_PLAN = {
    **PLAN,
    "small-E2-s43": model_entry("branch", "small", "E2", 43),
    "teacher-policy_a": model_entry("teacher", "large", "teacher-policy_a", 42),
}


def _rates(values: dict[tuple[str, str, str], float]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"model": m, "benchmark": b, "metric": k, "subset": "clean", "mapping": "default", "value": v}
            for (m, b, k), v in values.items()
        ]
    )


def _ranks(extremes: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "set_name": "policy_a_terminal",
                "benchmark": "harmbench_copyright",
                "subset": "clean",
                "mapping": "default",
                "scale": scale,
                "extreme": extreme,
                "p_value": 1 / 210 if extreme == "top" else np.nan,
            }
            for scale, extreme in extremes.items()
        ],
        columns=["set_name", "benchmark", "subset", "mapping", "scale", "extreme", "p_value"],
    )


def _targets(scores: pd.DataFrame, copyright: dict, ranks: pd.DataFrame) -> dict:
    return evaluate_targets(
        scores=scores,
        models=model_frame(TARGET_PLAN),
        main_seed=42,
        targets=TARGETS,
        copyright_vs_noise=copyright,
        agreed_mean={"mean_delta": 0.2, "max_swing": 0.05, "benchmarks": "harmbench_standard"},
        swing_vs_span=pd.DataFrame([{"scale": "all", "rho": 0.7, "n_benchmarks": 12, "note": ""}]),
        rank_tests=ranks,
        subset="clean",
        mapping="default",
    )


def test_targets_met_not_met_and_not_measured() -> None:
    judged = ("small-E1", "small-E2", "teacher-policy_a", "teacher-policy_b")
    values = {(m, b, "cap"): 0.9 for m in judged for b in ("harmbench_standard", "strongreject")}
    values[("small-E1", "strongreject", "cap")] = 0.86
    values[("small-E2-s43", "strongreject", "cap")] = 0.5  # a seed repeat: not judged
    values |= {
        ("small-E2", "wildguard_benign", "over_ref"): 0.15,
        ("teacher-policy_b", "wildguard_benign", "over_ref"): 0.25,
        ("small-E1", "wildguard_benign", "over_ref"): 0.9,  # policy-A terminal: not judged
    }
    copyright = {"phi": 0.05, "n_recipes": 6, "delta": 0.85, "difference": 0.8, "difference_ci_low": 0.1}
    result = _targets(_rates(values), copyright, _ranks({"small": "top", "large": "none"}))
    status = {name: entry["status"] for name, entry in result.items()}
    assert status == {
        "capture": "met",
        "over_refusal": "not met",
        "copyright_phi": "met",
        "copyright_delta": "met",
        "agree_mean_delta": "not met",
        "swing_rho": "met",
        "top_ranks": "not met",
    }
    assert result["capture"]["value"] == pytest.approx(0.86)
    assert "small-E1 on strongreject" in result["capture"]["detail"]
    assert result["over_refusal"]["value"] == pytest.approx(0.25)
    assert result["over_refusal"]["detail"].endswith(": teacher-policy_b")
    assert result["top_ranks"]["value"] == pytest.approx(0.5)
    assert "large: none" in result["top_ranks"]["detail"]
    # Δ above the bar but the interval of Δ − Φ reaching below 0: not met; no Φ at all: not measured.
    shaky = _targets(_rates(values), {**copyright, "difference_ci_low": -0.01}, _ranks({"small": "top"}))
    assert shaky["copyright_delta"]["status"] == "not met" and shaky["top_ranks"]["status"] == "met"
    no_phi = _targets(_rates(values), {"delta": 0.9, "phi": None}, _ranks({}))
    assert no_phi["copyright_phi"]["status"] == no_phi["copyright_delta"]["status"] == "not measured"
    assert no_phi["top_ranks"]["status"] == "not measured"
    # A capture set this run lacks: the measured part holds, the target is not measured.
    partial = {k: v for k, v in values.items() if k[1] != "strongreject"}
    assert _targets(_rates(partial), copyright, _ranks({}))["capture"]["status"] == "not measured"
    failing = {**values, ("teacher-policy_a", "harmbench_standard", "cap"): 0.6}
    assert _targets(_rates(failing), copyright, _ranks({}))["capture"]["status"] == "not met"


def test_study_comparison_says_so_in_words_when_the_run_disagrees() -> None:
    span_scale = pd.DataFrame(
        [
            {
                "benchmark": "harmbench_standard",
                "scale": "small",
                "subset": "clean",
                "mapping": "default",
                "swing": 0.0,
                "delta": 0.34,
                "verdict": "competence: the policies agree on this benchmark ...",
            }
        ]
    )
    correlations = pd.DataFrame(
        [
            {
                "scale": "all",
                "grouping": "fingerprint",
                "target": "val_policy_labels",
                "load": load,
                "rho": rho,
            }
            for load, rho in (("policy", 0.2), ("capability", 0.5))
        ]
    )
    result = study_comparison(
        copyright_vs_noise={
            "delta": 0.5,
            "difference": -0.1,
            "difference_ci_low": -0.2,
            "difference_ci_high": -0.05,
        },
        load_contrast={
            "grouping": "fingerprint",
            "difference": 0.05,
            "difference_ci_low": -0.1,
            "difference_ci_high": 0.2,
        },
        span_scale=span_scale,
        rank_tests=_ranks({"small": "top", "large": "bottom"}),
        correlations=correlations,
        swing_vs_span=pd.DataFrame([{"scale": "all", "rho": 0.8, "ci_low": 0.3, "ci_high": 0.95}]),
        top_set="policy_a_terminal",
        copyright_benchmark="harmbench_copyright",
        subset="clean",
        mapping="default",
    )
    status = {name: entry["status"] for name, entry in result.items()}
    assert status == {
        "copyright_span": "contradicts",
        "load_contrast": "not reproduced",
        "agreed_spans": "contradicts",
        "rank_top": "contradicts",
        "val_correlation": "contradicts",
        "swing_predicts_span": "agrees",
    }
    assert result["copyright_span"]["reading"].startswith("Contradicts the study, which found that")
    assert "-0.100 [-0.200, -0.050]" in result["copyright_span"]["reading"]
    assert result["load_contrast"]["reading"].startswith("Does not reproduce the study")
    assert "harmbench_standard (small, Δ = 0.340)" in result["agreed_spans"]["reading"]
    assert "policy-load ρ +0.200, capability-load ρ +0.500" in result["val_correlation"]["reading"]
    assert result["swing_predicts_span"]["reading"].startswith("Agrees with the thesis")
    assert result["swing_predicts_span"]["agrees"] is True and result["rank_top"]["agrees"] is False


# ------------------------------------------------------------------------------------- threshold trade-off


def test_operating_frontier_known_answers() -> None:
    # Two capture sets and the benign set, scores chosen so each threshold's rates are easy to count.
    capture = [np.array([0.9, 0.8, 0.6, 0.3]), np.array([0.95, 0.7, 0.4, 0.2])]
    benign = np.array([0.1, 0.2, 0.5, 0.85, np.nan])  # the NaN (no score) is dropped: 4 benign prompts
    frontier = operating_frontier(capture, benign, min_capture=0.75, max_over_ref=0.25)
    # Over-refusal <= 0.25 first holds at t = 0.5 (flags 0.5 and 0.85: 2/4 = 0.5 > 0.25) -> next 0.6:
    # flags 0.85 only (1/4). There the worst capture is min(3/4 at >= 0.6, 2/4 at >= 0.6) = 0.5.
    assert frontier["threshold_at_over_ref_bar"] == pytest.approx(0.6)
    assert frontier["min_cap_at_over_ref_bar"] == pytest.approx(0.5)
    # Capture >= 0.75 of both sets needs t <= 0.4 (set 2: 0.95, 0.7, 0.4): over-refusal 2/4 at t = 0.4.
    assert frontier["threshold_at_cap_bar"] == pytest.approx(0.4)
    assert frontier["over_ref_at_cap_bar"] == pytest.approx(0.5)
    assert frontier["both_reachable"] is False
    # Loosen the over-refusal bar to 0.5: t = 0.4 meets both.
    loose = operating_frontier(capture, benign, min_capture=0.75, max_over_ref=0.5)
    assert loose["both_reachable"] is True and loose["min_cap_at_over_ref_bar"] == pytest.approx(0.75)
    # A perfect ranking meets any pair of bars; a capture bar no threshold reaches gives NaN.
    perfect = operating_frontier([np.array([0.9, 0.8])], np.array([0.1, 0.2]), min_capture=1, max_over_ref=0)
    assert perfect["both_reachable"] is True and perfect["over_ref_at_cap_bar"] == pytest.approx(0.0)
    assert (
        operating_frontier([np.array([])], benign, min_capture=0.5, max_over_ref=0.2)["both_reachable"]
        is None
    )


def test_tradeoff_table_and_summary() -> None:
    targets = TargetsConfig(
        capture_benchmarks=("advbench",),
        min_capture=0.75,
        over_refusal_benchmark="jbb_benign",
        over_refusal_branches=("E2",),
        over_refusal_teachers=("policy_b",),
        max_over_refusal=0.25,
    )
    table = tradeoff_table(
        BENCHMARKS, model_frame(PLAN), MODELS, targets, main_seed=42, subset="full", mapping="default"
    )
    by = table.set_index("model")
    # small-E1: advbench [0.9, 0.8, 0.7, 0.2] vs jbb_benign [0.1, 0.2, 0.3, 0.6]: t = 0.7 captures 3/4 and
    # flags no benign prompt, so both bars hold; at its own decisions (>= 0.5) it over-refuses 1/4.
    assert by.loc["small-E1", "min_cap"] == pytest.approx(0.75) and by.loc["small-E1", "over_ref"] == 0.25
    assert bool(by.loc["small-E1", "both_reachable"]) and not by.loc["small-E1", "judged_over_ref"]
    # small-E2: [0.6, 0.4, 0.3, 0.2] vs [0.5, 0.5, 0.1, 0.1]: over-refusal <= 0.25 needs t > 0.5, which
    # captures 1/4; capture >= 0.75 needs t <= 0.3, which over-refuses 2/4.
    e2 = by.loc["small-E2"]
    assert e2["judged_over_ref"] and not e2["both_reachable"]
    assert e2["min_cap_at_over_ref_bar"] == pytest.approx(0.25) and e2["over_ref_at_cap_bar"] == 0.5
    summary = tradeoff_summary(table, targets)
    assert summary["models"] == 2 and summary["reachable"] == 1  # the teacher separates perfectly
    assert summary["reachable_models"] == "teacher-policy_b"
    assert summary["best_min_cap_at_over_ref_bar"] == pytest.approx(1.0)
    assert summary["lowest_over_ref_at_cap_bar"] == pytest.approx(0.0)
    # A capture set this run lacks: an empty table, and a summary that only restates the bars.
    missing = tradeoff_table(
        BENCHMARKS,
        model_frame(PLAN),
        MODELS,
        TargetsConfig(capture_benchmarks=("strongreject",)),
        main_seed=42,
        subset="full",
        mapping="default",
    )
    assert missing.empty and list(missing.columns) == list(table.columns)
    assert "reachable" not in tradeoff_summary(missing, targets)

"""Issue 14's statistics of the span analysis on hand-made tables with known answers: Φ per scale (the median
over that scale's seed recipes), the seed-noise range of n branch runs (d2 scaling), the competence verdict,
the fingerprint's load grouping, swing vs span, the hits expected by chance, agreement with a policy's labels.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers.synthetic_predictions import model_entry

from guardpolicy.analysis.contrasts import agreed_mean_delta, load_contrast, swing_vs_span_table
from guardpolicy.analysis.correlations import policy_label_agreement
from guardpolicy.analysis.matrices import DatasetMatrix
from guardpolicy.analysis.ranks import rank_chance
from guardpolicy.analysis.scores import DrawStore, MetricDraws, model_frame
from guardpolicy.analysis.sensitivity import PolicyFingerprint, compute_spans, fingerprint_load
from guardpolicy.analysis.span_tables import noise_floor_table, span_scale_table, span_table
from guardpolicy.config.analysis import LoadConfig
from guardpolicy.errors import InputError

# d2 of the control-chart tables (independent of the code under test).
D2 = {2: 1.1284, 3: 1.6926, 4: 2.0588}
SAMPLES = 20


def _store(models: list[str], points: dict[str, list[float]], roles: dict[str, str]) -> DrawStore:
    """Every replicate equals the point (no resampling noise): each interval collapses onto its estimate."""
    draws = {}
    for benchmark, values in points.items():
        metric = "cap" if roles[benchmark] == "harmful" else "over_ref"
        point = np.asarray(values, dtype=np.float64)
        draws[(benchmark, "clean", "default", metric)] = MetricDraws(
            point, np.tile(point, (SAMPLES, 1)), np.full(len(point), 100), True
        )
    return DrawStore(models=tuple(models), samples=SAMPLES, roles=roles, draws=draws)


# small: E1..E4 at seed 42, seed recipes small-E1, -E2, -E3 at 42/43/44; large: E1, E2, large-E1 at 42/43.
PLAN = {
    **{f"small-E{i}": model_entry("branch", "small", f"E{i}", 42) for i in range(1, 5)},
    **{f"small-E{i}-s{s}": model_entry("branch", "small", f"E{i}", s) for i in (1, 2, 3) for s in (43, 44)},
    "large-E1": model_entry("branch", "large", "E1", 42),
    "large-E2": model_entry("branch", "large", "E2", 42),
    "large-E1-s43": model_entry("branch", "large", "E1", 43),
    # A teacher at two seeds: neither a branch of a span nor a seed recipe of the branches' noise floor.
    "teacher-policy_a": model_entry("teacher", "large", "teacher-policy_a", 42),
    "teacher-policy_a-s43": model_entry("teacher", "large", "teacher-policy_a", 43),
}
MODELS = sorted(PLAN)
VALUES = {
    # main seed: small E1 0.1, E2 0.5, E3 0.6, E4 0.9 (range 0.8); large E1 0.3, E2 0.35 (range 0.05).
    # seeds: small-E1 0.1/0.2/0.15 (spread 0.1), -E2 0.5/0.8/0.6 (0.3), -E3 0.6/0.4/0.5 (0.2);
    # large-E1 0.3/0.32 (0.02).
    "small-E1": 0.1,
    "small-E2": 0.5,
    "small-E3": 0.6,
    "small-E4": 0.9,
    "small-E1-s43": 0.2,
    "small-E1-s44": 0.15,
    "small-E2-s43": 0.8,
    "small-E2-s44": 0.6,
    "small-E3-s43": 0.4,
    "small-E3-s44": 0.5,
    "large-E1": 0.3,
    "large-E2": 0.35,
    "large-E1-s43": 0.32,
    "teacher-policy_a": 0.0,
    "teacher-policy_a-s43": 0.9,
}
FINGERPRINT = PolicyFingerprint(
    pair=("policy_a", "policy_b"),
    swing={"harmbench_copyright": 1.0, "harmbench_standard": 0.0, "advbench": 0.2, "jbb_benign": 0.6},
    unsafe_share={
        "harmbench_copyright": {"policy_a": 1.0, "policy_b": 0.0},
        "harmbench_standard": {"policy_a": 1.0, "policy_b": 0.95},
        "advbench": {"policy_a": 1.0, "policy_b": 0.8},
        "jbb_benign": {"policy_a": 0.6, "policy_b": 0.0},
    },
)
LOAD = LoadConfig(policy=("harmbench_copyright",), capability=("harmbench_standard", "advbench"))


def _spans():
    values = [VALUES[m] for m in MODELS]
    store = _store(
        MODELS,
        {"harmbench_copyright": values, "harmbench_standard": values},
        {"harmbench_copyright": "harmful", "harmbench_standard": "harmful"},
    )
    return compute_spans(store, model_frame(PLAN), 42, LOAD, {}, FINGERPRINT)


def test_phi_per_scale_is_the_median_over_that_scales_recipes() -> None:
    spans = _spans()
    table = span_scale_table(spans, 0.95, max_swing=0.05)
    row = table[table["benchmark"] == "harmbench_copyright"].set_index("scale")
    # small: median(0.1, 0.3, 0.2) = 0.2 over 3 recipes of 3 seeds; large: one recipe of 2 seeds, 0.02.
    assert row.loc["small", "phi"] == pytest.approx(0.2)
    assert (row.loc["small", "n_recipes"], row.loc["small", "seeds"]) == (3, "3")
    assert row.loc["large", "phi"] == pytest.approx(0.02) and row.loc["large", "seeds"] == "2"
    # Φ's interval is the percentile interval of the per-replicate median (here the replicates equal it).
    assert (row.loc["small", "phi_ci_low"], row.loc["small", "phi_ci_high"]) == (
        pytest.approx(0.2),
        pytest.approx(0.2),
    )
    # Δ at the same scale and Δ − Φ.
    assert row.loc["small", "delta"] == pytest.approx(0.8) and row.loc["small", "n_branches"] == 4
    assert row.loc["small", "difference"] == pytest.approx(0.6)
    assert row.loc["large", "difference"] == pytest.approx(0.05 - 0.02)
    # Overall: Φ the median over all four recipes, the widest kept beside it.
    overall = span_table(spans, 0.95).set_index("benchmark").loc["harmbench_copyright"]
    assert overall["phi"] == pytest.approx(np.median([0.1, 0.3, 0.2, 0.02]))
    assert overall["phi_max"] == pytest.approx(0.3) and overall["n_recipes"] == 4
    noise = noise_floor_table(spans, 0.95)
    copyright_rows = noise[noise["benchmark"] == "harmbench_copyright"].set_index("recipe")
    assert copyright_rows.loc["large-E1", "scale"] == "large"
    assert copyright_rows.loc["small-E2", "spread"] == pytest.approx(0.3)


def test_noise_range_scales_a_k_seed_spread_to_n_branch_runs() -> None:
    row = span_scale_table(_spans(), 0.95, max_swing=0.05)
    row = row[row["benchmark"] == "harmbench_copyright"].set_index("scale")
    # 4 branches at the small scale, recipes of 3 seeds: Φ · d2(4) / d2(3).
    expected = 0.2 * D2[4] / D2[3]
    assert row.loc["small", "noise_range"] == pytest.approx(expected, abs=1e-3)
    assert row.loc["small", "excess"] == pytest.approx(0.8 - expected, abs=1e-3)
    # 2 branches and a 2-seed recipe at the large scale: the ratio is 1.
    assert row.loc["large", "noise_range"] == pytest.approx(0.02)
    assert row.loc["large", "excess"] == pytest.approx(0.03)


def test_a_span_beyond_noise_where_the_policies_agree_is_flagged_as_competence() -> None:
    table = span_scale_table(_spans(), 0.95, max_swing=0.05).set_index(["benchmark", "scale"])
    # The same numbers on two benchmarks: the one the policies disagree on (swing 1) is a policy span, the
    # one they agree on (swing 0) is competence.
    assert table.loc[("harmbench_copyright", "small"), "verdict"].startswith("exceeds noise:")
    assert table.loc[("harmbench_standard", "small"), "verdict"].startswith("competence:")
    assert table.loc[("harmbench_standard", "small"), "load"] == "capability"
    assert table.loc[("harmbench_copyright", "small"), "study_load"] == "policy"


def test_fingerprint_grouping_threshold_and_agreed_sets() -> None:
    assert fingerprint_load("harmbench_copyright", FINGERPRINT, 0.2) == "policy"
    # At the threshold itself: capability (swing above the threshold is policy-load).
    assert fingerprint_load("advbench", FINGERPRINT, 0.2) == "capability"
    assert fingerprint_load("xstest", FINGERPRINT, 0.2) == "other"
    assert fingerprint_load("advbench", None, 0.2) == "other"
    assert FINGERPRINT.agreed(0.05) == ["harmbench_standard"]
    assert FINGERPRINT.agreed(0.25) == ["advbench", "harmbench_standard"]
    # advbench is agreed at 0.25 but policy B labels only 0.8 of it unsafe.
    assert FINGERPRINT.agreed_unsafe(0.25, 0.9) == ["harmbench_standard"]
    spans = _spans()
    agreed = agreed_mean_delta(spans, "clean", "default", 0.95, FINGERPRINT, 0.05)
    # harmbench_standard: Δ = mean(0.8, 0.05).
    assert agreed["benchmarks"] == "harmbench_standard"
    assert agreed["mean_delta"] == pytest.approx(0.425)
    contrast = load_contrast(spans, "clean", "default", 0.95)
    assert (contrast["policy_benchmarks"], contrast["capability_benchmarks"]) == (
        "harmbench_copyright",
        "harmbench_standard",
    )
    assert contrast["difference"] == pytest.approx(0.0)


def _swing_store(deltas: list[float]) -> list:
    """Four benchmarks (swings 0, 0.2, 0.6, 1.0) whose small-scale range is `deltas`; one model per point."""
    names = ["harmbench_standard", "advbench", "jbb_benign", "harmbench_copyright"]
    plan = {
        "small-E1": model_entry("branch", "small", "E1", 42),
        "small-E2": model_entry("branch", "small", "E2", 42),
    }
    roles = {name: "harmful" for name in names}
    store = _store(list(plan), {name: [0.0, d] for name, d in zip(names, deltas, strict=True)}, roles)
    return compute_spans(store, model_frame(plan), 42, LOAD, {}, FINGERPRINT)


def test_swing_vs_span_spearman_with_a_bootstrap_interval() -> None:
    table = swing_vs_span_table(_swing_store([0.05, 0.1, 0.5, 0.9]), "clean", "default", 0.95)
    overall = table.set_index("scale").loc["all"]
    assert overall["n_benchmarks"] == 4 and overall["rho"] == pytest.approx(1.0)
    assert (overall["ci_low"], overall["ci_high"]) == (pytest.approx(1.0), pytest.approx(1.0))
    assert not overall["swing_resampled"]
    assert set(table["scale"]) == {"all", "small"}
    # One adjacent pair swapped: ρ = 1 − 6 · 2 / (4 · 15) = 0.8.
    swapped = swing_vs_span_table(_swing_store([0.1, 0.05, 0.5, 0.9]), "clean", "default", 0.95)
    assert swapped.set_index("scale").loc["all", "rho"] == pytest.approx(0.8)


def test_swing_vs_span_interval_follows_the_replicates() -> None:
    spans = _swing_store([0.05, 0.1, 0.5, 0.9])
    # Replace the top benchmark's Δ replicates: half keep the order (ρ = 1), half put it last (Δ ranks
    # 2, 3, 4, 1 against swing ranks 1..4: ρ = 1 − 6 · 12 / 60 = -0.2).
    chosen = next(s for s in spans if s.benchmark == "harmbench_copyright" and s.subset == "clean")
    chosen.range_draws["small"][:] = np.where(np.arange(SAMPLES) % 2 == 0, 0.9, 0.0)
    chosen.delta_draws[:] = chosen.range_draws["small"]
    row = swing_vs_span_table(spans, "clean", "default", 0.5).set_index("scale").loc["all"]
    assert row["rho"] == pytest.approx(1.0)  # the point uses the estimates
    assert row["ci_low"] == pytest.approx(-0.2) and row["ci_high"] == pytest.approx(1.0)


def test_hits_expected_by_chance_over_every_test() -> None:
    rows = [
        # benchmark, scale, direction, null probability, p-value (a hit when <= 0.05)
        ("a", "small", "top", 1 / 210, 1 / 210),
        ("b", "small", "top", 1 / 210, None),
        ("a", "large", "two-sided", 2 / 210, 2 / 210),
        ("b", "large", "two-sided", 2 / 10, 2 / 10),  # k = 1 of 10, two-sided: can never reach 0.05
    ]
    table = pd.DataFrame(
        [
            {
                "benchmark": b,
                "scale": sc,
                "subset": "clean",
                "mapping": "default",
                "set_name": "policy_a_terminal",
                "direction": d,
                "null_probability": null,
                "p_value": p,
                "hit": p is not None and p <= 0.05,
            }
            for b, sc, d, null, p in rows
        ]
    )
    chance = rank_chance(table, "clean", "default", 0.95)
    assert (chance["tests"], chance["one_sided"], chance["tests_that_can_hit"], chance["hits"]) == (
        4,
        2,
        3,
        2,
    )
    assert chance["expected_hits"] == pytest.approx(4 / 210)
    assert chance["alpha_bound"] == pytest.approx(4 * 0.05)
    assert chance["hit_list"] == "policy_a_terminal/small/a,policy_a_terminal/large/a"


def test_agreement_with_the_policy_labels_and_a_missing_prompt() -> None:
    # Two models on four prompts; the policy labels prompts 0 and 1 unsafe.
    decisions = np.array([[True, True], [True, False], [False, False], [False, True]])
    matrix = DatasetMatrix(
        name="harmbench_copyright",
        role="harmful",
        ids=np.array(["p0", "p1", "p2", "p3"]),
        clean=np.array([True, True, True, False]),
        expected_unsafe=np.ones(4, dtype=bool),
        category=np.full(4, None, dtype=object),
        pair_id=np.full(4, None, dtype=object),
        decisions={"default": decisions, "boundary_unsafe": decisions},
        scores={"default": decisions.astype(np.float32), "boundary_unsafe": decisions.astype(np.float32)},
    )
    labels = pd.DataFrame(
        {
            "benchmark": "harmbench_copyright",
            "id": ["p0", "p1", "p2", "p3"],
            "unsafe": [True, True, False, False],
        }
    )
    full = policy_label_agreement([matrix], labels, "full", "default", "labels.parquet")
    # model 0 agrees on all 4; model 1 on p0 and p2 only.
    assert full["harmbench_copyright"] == pytest.approx([1.0, 0.5])
    clean = policy_label_agreement([matrix], labels, "clean", "default", "labels.parquet")
    assert clean["harmbench_copyright"] == pytest.approx([1.0, 2 / 3])
    # A benchmark the labels do not cover is left out; one they cover partly is an error naming an id.
    assert policy_label_agreement([matrix], labels.assign(benchmark="other"), "full", "default", "x") == {}
    with pytest.raises(InputError, match=r"labels\.parquet, field 'id'.*'harmbench_copyright'.*id 'p3'"):
        policy_label_agreement([matrix], labels.iloc[:3], "full", "default", "labels.parquet")

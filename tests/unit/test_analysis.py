"""The analysis layer on known answers: scores, spans and noise floors, contrasts, rank tests, correlations,
XSTest extras, and the `analyse` stage end to end on synthetic predictions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers.synthetic_predictions import (
    LABEL_KINDS,
    POLICIES,
    model_entry,
    stage_inputs,
    synthetic_items,
    synthetic_predictions,
    write_fingerprint,
)
from sklearn.metrics import average_precision_score, f1_score

from guardpolicy.analysis.competence import COMPETENCE_COLUMNS, TRADEOFF_COLUMNS
from guardpolicy.analysis.contrasts import copyright_vs_noise, load_contrast
from guardpolicy.analysis.correlations import correlation_table
from guardpolicy.analysis.headline import HEADLINE_COLUMNS
from guardpolicy.analysis.mapping import LEVER_COLUMNS, MAPPING_BY_MODEL_COLUMNS
from guardpolicy.analysis.matrices import DatasetMatrix, build_matrices
from guardpolicy.analysis.ranks import rank_test_table
from guardpolicy.analysis.scores import (
    DrawStore,
    MetricDraws,
    benchmark_table,
    compute_draws,
    mapping_effect_table,
    model_frame,
    role_mean_draws,
    scores_table,
)
from guardpolicy.analysis.sensitivity import compute_spans
from guardpolicy.analysis.span_tables import SPAN_SCALE_COLUMNS, noise_floor_table, span_table
from guardpolicy.analysis.stats import percentile_interval
from guardpolicy.analysis.summary import VIEW_BLOCK_KEYS
from guardpolicy.analysis.views import BASE_RATE_COLUMNS, VIEW_SCORE_COLUMNS
from guardpolicy.analysis.xstest import pair_consistency, type_over_refusal
from guardpolicy.config.analysis import LoadConfig
from guardpolicy.config.params import load_params
from guardpolicy.contracts import ContractError, read_frame
from guardpolicy.contracts.analysis import ANALYSIS_TABLES
from guardpolicy.errors import InputError
from guardpolicy.layout import Layout
from guardpolicy.stages.analyse import analyse, warn_unregistered, write_csv
from guardpolicy.training import branches as plan_registry


def store_from_points(
    models: list[str], points: dict[tuple[str, str], list[float]], roles: dict[str, str], samples: int = 40
) -> DrawStore:
    """A DrawStore whose replicates are the point values plus small seeded noise, on subset clean, default."""
    rng = np.random.default_rng(0)
    draws = {}
    for (benchmark, metric), values in points.items():
        point = np.asarray(values, dtype=np.float64)
        noise = rng.normal(scale=0.005, size=(samples, len(point)))
        draws[(benchmark, "clean", "default", metric)] = MetricDraws(point, point + noise, 100, True)
    return DrawStore(models=tuple(models), samples=samples, roles=roles, draws=draws)


# ------------------------------------------------------------------------------------------------- scores


def test_scores_match_hand_counts_and_sklearn() -> None:
    items = synthetic_items(
        np.random.default_rng(1), {"harmbench_copyright": 40, "xstest": 60, "split:val": 30}
    )
    frames = {
        m: synthetic_predictions(items, m, skill, seed)
        for seed, (m, skill) in enumerate({"a": 2.0, "b": 0.0}.items())
    }
    files = {m: f"{m}/predictions.parquet" for m in frames}
    models, matrices = build_matrices(frames, LABEL_KINDS, files, POLICIES)
    store = compute_draws(models, matrices, samples=200, seed=11)
    info = model_frame(
        {"a": model_entry("branch", "small", "E1", 42), "b": model_entry("branch", "small", "E2", 42)}
    )
    table = scores_table(store, info, confidence=0.95, wilson_max_n=30)

    def value(model: str, benchmark: str, subset: str, mapping: str, metric: str) -> pd.Series:
        chosen = table[
            (table["model"] == model)
            & (table["benchmark"] == benchmark)
            & (table["subset"] == subset)
            & (table["mapping"] == mapping)
            & (table["metric"] == metric)
        ]
        assert len(chosen) == 1, (model, benchmark, subset, mapping, metric)
        return chosen.iloc[0]

    frame = frames["a"]
    copyright_rows = frame[frame["dataset"] == "harmbench_copyright"]
    clean_rows = copyright_rows[copyright_rows["clean"]]
    row = value("a", "harmbench_copyright", "clean", "boundary_unsafe", "cap")
    assert row["value"] == pytest.approx(clean_rows["unsafe_bu"].mean())
    assert row["n"] == len(clean_rows)
    # A single-class set of at most wilson_max_n prompts: Wilson; the full 40 prompts: bootstrap.
    assert row["interval"] == "wilson"
    assert value("a", "harmbench_copyright", "full", "default", "cap")["interval"] == "bootstrap"
    assert not ((table["benchmark"] == "harmbench_copyright") & (table["metric"] == "over_ref")).any()

    xs = frame[frame["dataset"] == "xstest"]
    gold = xs["expected_unsafe"].to_numpy(dtype=bool)
    assert value("a", "xstest", "full", "default", "f1")["value"] == pytest.approx(
        f1_score(gold, xs["unsafe"])
    )
    assert value("a", "xstest", "full", "default", "auprc")["value"] == pytest.approx(
        average_precision_score(gold, xs["unsafe_score"])
    )
    assert value("a", "xstest", "full", "default", "over_ref")["value"] == pytest.approx(
        xs.loc[~gold, "unsafe"].mean()
    )
    assert value("a", "xstest", "full", "default", "f1")["interval"] == "bootstrap"

    val = frame[frame["dataset"] == "split:val"]
    acc = value("b", "split:val", "full", "default", "acc_policy_b")
    assert acc["value"] == pytest.approx(
        (frames["b"].loc[val.index, "pred_coarse"] == val["gold_policy_b"]).mean()
    )
    assert not ((table["benchmark"] == "split:val") & (table["mapping"] == "boundary_unsafe")).any()
    # split rows are all clean: the clean subset repeats the full one exactly, interval included.
    clean_acc = value("b", "split:val", "clean", "default", "acc_policy_b")
    assert (clean_acc["value"], clean_acc["ci_low"], clean_acc["ci_high"]) == (
        acc["value"],
        acc["ci_low"],
        acc["ci_high"],
    )
    assert (table["ci_low"] <= table["value"] + 1e-12).all() and (
        table["value"] <= table["ci_high"] + 1e-12
    ).all()
    assert list(table.columns) == [
        "model", "kind", "scale", "branch", "seed", "recipe", "benchmark", "subset", "mapping", "metric",
        "value", "ci_low", "ci_high", "interval", "n",
    ]  # fmt: skip


def test_draws_do_not_depend_on_which_other_datasets_are_analysed() -> None:
    items = synthetic_items(np.random.default_rng(2), {"harmbench_copyright": 30, "jbb_benign": 30})
    frames = {m: synthetic_predictions(items, m, 1.0, seed) for seed, m in enumerate(("a", "b"))}
    files = {m: m for m in frames}
    models, both = build_matrices(frames, LABEL_KINDS, files, POLICIES)
    only = [frame[frame["dataset"] == "jbb_benign"] for frame in frames.values()]
    _, alone = build_matrices(dict(zip(frames, only, strict=True)), LABEL_KINDS, files, POLICIES)
    key = ("jbb_benign", "full", "default", "over_ref")
    together = compute_draws(models, both, samples=50, seed=3).draws[key].draws
    separately = compute_draws(models, alone, samples=50, seed=3).draws[key].draws
    assert np.array_equal(together, separately)


def _mean_rows_table(seed: int) -> tuple[pd.DataFrame, DrawStore]:
    """scores.csv of two models on two harmful sets, one benign set and xstest (mixed), 400 replicates."""
    sizes = {"harmbench_copyright": 40, "advbench": 70, "jbb_benign": 50, "xstest": 60}
    items = synthetic_items(np.random.default_rng(5), sizes)
    frames = {
        m: synthetic_predictions(items, m, skill, i)
        for i, (m, skill) in enumerate({"a": 1.5, "b": 0.3}.items())
    }
    kinds = {**LABEL_KINDS, "advbench": "all_unsafe"}
    models, matrices = build_matrices(frames, kinds, {m: m for m in frames}, POLICIES)
    store = compute_draws(models, matrices, samples=400, seed=seed)
    info = model_frame(
        {"a": model_entry("branch", "small", "E1", 42), "b": model_entry("branch", "small", "E2", 42)}
    )
    return scores_table(store, info, confidence=0.95, wilson_max_n=30), store


def test_headline_means_of_harmful_cap_and_benign_over_ref() -> None:
    table, store = _mean_rows_table(seed=11)
    rows = table.set_index(["model", "benchmark", "subset", "mapping", "metric"]).sort_index()
    for model in ("a", "b"):
        for subset in ("full", "clean"):
            for mapping in ("default", "boundary_unsafe"):
                harmful = rows.loc[(model, "mean:harmful", subset, mapping, "cap")]
                members = [
                    rows.loc[(model, b, subset, mapping, "cap")] for b in ("advbench", "harmbench_copyright")
                ]
                # Unweighted: each set counts once (40 vs 70 prompts), xstest's cap is left out.
                assert harmful["value"] == pytest.approx(np.mean([m["value"] for m in members]))
                assert harmful["n"] == sum(m["n"] for m in members)
                assert harmful["interval"] == "bootstrap"
                assert harmful["ci_low"] < harmful["value"] < harmful["ci_high"]
                benign = rows.loc[(model, "mean:benign", subset, mapping, "over_ref")]
                jbb = rows.loc[(model, "jbb_benign", subset, mapping, "over_ref")]
                assert (benign["value"], benign["n"]) == (pytest.approx(jbb["value"]), jbb["n"])
                assert benign["ci_low"] <= benign["value"] <= benign["ci_high"]
    # No cap mean over benign sets, no over_ref mean over harmful ones.
    means = table[table["benchmark"].str.startswith("mean:")]
    assert set(zip(means["benchmark"], means["metric"], strict=True)) == {
        ("mean:harmful", "cap"),
        ("mean:benign", "over_ref"),
    }
    assert len(means) == 2 * 2 * 2 * 2
    # Replicate r of the mean is the mean of the benchmarks' replicates r.
    key = ("full", "default", "cap")
    replicates = (store.get("advbench", *key).draws + store.get("harmbench_copyright", *key).draws) / 2.0
    low, high = percentile_interval(replicates, 0.95)  # [M] each, models a, b
    a = rows.loc[("a", "mean:harmful", "full", "default", "cap")]
    assert (a["ci_low"], a["ci_high"]) == (pytest.approx(low[0]), pytest.approx(high[0]))
    assert role_mean_draws(store)[("mean:harmful", *key)].draws.shape == (400, 2)
    # Reproducible with the seed; another seed resamples differently.
    again, _ = _mean_rows_table(seed=11)
    pd.testing.assert_frame_equal(table, again)
    other, _ = _mean_rows_table(seed=12)
    chosen = table["benchmark"].str.startswith("mean:")
    assert np.array_equal(other.loc[chosen, "value"], table.loc[chosen, "value"])
    assert not np.array_equal(other.loc[chosen, "ci_low"], table.loc[chosen, "ci_low"])
    assert table.equals(
        table.sort_values(["model", "benchmark", "subset", "mapping", "metric"], kind="stable").reset_index(
            drop=True
        )
    )


def test_misaligned_or_unknown_items_are_input_errors() -> None:
    items = synthetic_items(np.random.default_rng(3), {"harmbench_copyright": 10})
    a = synthetic_predictions(items, "a", 1.0, 0)
    b = synthetic_predictions(items, "b", 1.0, 1).iloc[1:]
    with pytest.raises(InputError, match=r"b\.parquet.*differ from a\.parquet"):
        build_matrices({"a": a, "b": b}, LABEL_KINDS, {"a": "a.parquet", "b": "b.parquet"}, POLICIES)
    with pytest.raises(InputError, match="not in the benchmark registry"):
        build_matrices({"a": a}, {"xstest": "column"}, {"a": "a.parquet"}, POLICIES)


# ------------------------------------------------------------------------------- spans and noise floors

SPAN_MODELS = [
    "large-E1",
    "large-E2",
    "large-E3",
    "small-E1",
    "small-E1-s43",
    "small-E1-s44",
    "small-E2",
    "small-E3",
]
SPAN_PLAN = {
    "large-E1": model_entry("branch", "large", "E1", 42),
    "large-E2": model_entry("branch", "large", "E2", 42),
    "large-E3": model_entry("branch", "large", "E3", 42),
    "small-E1": model_entry("branch", "small", "E1", 42),
    "small-E1-s43": model_entry("branch", "small", "E1", 43),
    "small-E1-s44": model_entry("branch", "small", "E1", 44),
    "small-E2": model_entry("branch", "small", "E2", 42),
    "small-E3": model_entry("branch", "small", "E3", 42),
}
#                 large E1, E2,  E3,  small E1, -s43, -s44, E2,  E3
COPYRIGHT_CAP = [0.2, 0.3, 0.6, 0.1, 0.15, 0.3, 0.5, 0.9]
BENIGN_OVER_REF = [0.10, 0.12, 0.11, 0.05, 0.06, 0.07, 0.04, 0.06]
ADVBENCH_CAP = [0.80, 0.82, 0.81, 0.70, 0.72, 0.71, 0.71, 0.71]
LOAD = LoadConfig(policy=("harmbench_copyright", "jbb_benign"), capability=("advbench",))


def _span_store() -> DrawStore:
    return store_from_points(
        SPAN_MODELS,
        {
            ("harmbench_copyright", "cap"): COPYRIGHT_CAP,
            ("jbb_benign", "over_ref"): BENIGN_OVER_REF,
            ("advbench", "cap"): ADVBENCH_CAP,
        },
        roles={"harmbench_copyright": "harmful", "jbb_benign": "benign", "advbench": "harmful"},
    )


def test_delta_and_phi_on_a_hand_made_table() -> None:
    spans = compute_spans(_span_store(), model_frame(SPAN_PLAN), 42, LOAD, {})
    table = span_table(spans, 0.95).set_index("benchmark")
    copyright_row = table.loc["harmbench_copyright"]
    # small range 0.9 - 0.1 = 0.8 (the -s43/-s44 repeats excluded), large range 0.6 - 0.2 = 0.4.
    assert copyright_row["range_small"] == pytest.approx(0.8)
    assert copyright_row["range_large"] == pytest.approx(0.4)
    assert copyright_row["delta"] == pytest.approx(0.6)
    assert copyright_row["delta_ci_low"] < 0.6 < copyright_row["delta_ci_high"]
    # One seed triple (small-E1 at 42/43/44): spread 0.3 - 0.1.
    assert copyright_row["phi"] == pytest.approx(0.2)
    assert copyright_row["phi_max"] == pytest.approx(0.2)
    assert copyright_row["n_recipes"] == 1
    # No fingerprint: the analysis' own load is `other`; the study's lists give the second view.
    assert (copyright_row["load"], copyright_row["study_load"]) == ("other", "policy")
    assert copyright_row["primary_metric"] == "cap" and pd.isna(copyright_row["swing"])
    assert table.loc["jbb_benign", "primary_metric"] == "over_ref"
    assert table.loc["jbb_benign", "delta"] == pytest.approx((0.02 + 0.02) / 2)
    noise = noise_floor_table(spans, 0.95)
    assert noise.iloc[0][["recipe", "scale", "benchmark", "seeds"]].tolist() == [
        "small-E1",
        "small",
        "advbench",
        "42,43,44",
    ]
    assert len(noise) == 3

    verdict = copyright_vs_noise(spans, "clean", "default", 0.95)
    assert verdict["difference"] == pytest.approx(0.4)
    assert verdict["difference_ci_low"] > 0 and verdict["verdict"].startswith("wider")


def test_phi_is_null_without_seed_groups() -> None:
    plan = {m: e for m, e in SPAN_PLAN.items() if e["seed"] == 42}
    keep = [SPAN_MODELS.index(m) for m in plan]
    store = store_from_points(
        list(plan),
        {("harmbench_copyright", "cap"): [COPYRIGHT_CAP[i] for i in keep]},
        roles={"harmbench_copyright": "harmful"},
    )
    spans = compute_spans(store, model_frame(plan), 42, LOAD, {})
    row = span_table(spans, 0.95).set_index("benchmark").loc["harmbench_copyright"]
    assert pd.isna(row["phi"]) and row["n_recipes"] == 0
    assert noise_floor_table(spans, 0.95).empty
    verdict = copyright_vs_noise(spans, "clean", "default", 0.95)
    assert verdict["phi"] is None and verdict["verdict"] == "undetermined: no seed triples"


def test_load_contrast_sign_on_a_crafted_table() -> None:
    spans = compute_spans(_span_store(), model_frame(SPAN_PLAN), 42, LOAD, {})
    contrast = load_contrast(spans, "clean", "default", 0.95, grouping="study")
    # policy: mean(0.6, 0.02) = 0.31; capability: advbench ranges small 0.01, large 0.02 -> 0.015.
    assert contrast["policy_mean_delta"] == pytest.approx(0.31)
    assert contrast["capability_mean_delta"] == pytest.approx(0.015)
    assert contrast["difference"] == pytest.approx(0.295)
    assert contrast["difference_ci_low"] > 0
    assert contrast["verdict"] == "policy-load spans wider"
    assert contrast["policy_benchmarks"] == "harmbench_copyright,jbb_benign"
    swapped = LoadConfig(policy=("advbench",), capability=("harmbench_copyright", "jbb_benign"))
    reverse = load_contrast(
        compute_spans(_span_store(), model_frame(SPAN_PLAN), 42, swapped, {}),
        "clean",
        "default",
        0.95,
        grouping="study",
    )
    assert reverse["difference"] < 0 and reverse["verdict"] == "capability-load spans wider"


def test_rank_test_table_finds_the_terminal_set_on_top() -> None:
    branches = [f"E{i}" for i in range(1, 11)]
    plan = {f"small-{b}": model_entry("branch", "small", b, 42) for b in branches}
    values = {"E1": 0.95, "E7": 0.99, "E8": 0.97, "E10": 0.9}
    points = [values.get(b, 0.1 + 0.05 * i) for i, b in enumerate(branches)]
    models = list(plan)
    store = store_from_points(
        models, {("harmbench_copyright", "cap"): points}, {"harmbench_copyright": "harmful"}
    )
    sets = {"policy_a_terminal": ("E1", "E7", "E8", "E10")}
    table = rank_test_table(store, model_frame(plan), 42, sets, {})
    row = table.iloc[0]
    assert (row["extreme"], row["k"], row["n"], row["direction"]) == ("top", 4, 10, "two-sided")
    # No direction fixed beforehand: two-sided, 2 / C(10, 4).
    assert row["p_value"] == pytest.approx(2 / 210) and row["null_probability"] == pytest.approx(2 / 210)
    assert row["hit"]  # 0.0095 <= alpha 0.05
    # The gap (0.9 vs 0.5 at most outside) dwarfs the replicate noise (sd 0.005): every replicate holds.
    assert row["stability"] == pytest.approx(1.0)
    directed = rank_test_table(
        store, model_frame(plan), 42, sets, {}, {"policy_a_terminal": {"harmbench_copyright": "top"}}
    ).iloc[0]
    assert (directed["direction"], directed["p_value"]) == ("top", pytest.approx(1 / 210))
    # Fixed the other way beforehand: the set is on top, so the one-sided test has no hit.
    wrong = rank_test_table(
        store, model_frame(plan), 42, sets, {}, {"policy_a_terminal": {"harmbench_copyright": "bottom"}}
    ).iloc[0]
    assert wrong["extreme"] == "top" and pd.isna(wrong["p_value"]) and not wrong["hit"]


def test_correlations_follow_the_data_and_are_null_when_constant() -> None:
    plan = {f"small-E{i}": model_entry("branch", "small", f"E{i}", 42) for i in range(1, 6)}
    models = list(plan)
    val = [0.5, 0.6, 0.7, 0.8, 0.9]
    store = store_from_points(
        models,
        {
            ("split:val", "acc_policy_a"): val,
            ("harmbench_copyright", "gold_agreement"): [0.1, 0.2, 0.3, 0.5, 0.4],
            ("advbench", "gold_agreement"): [0.7] * 5,
        },
        {"split:val": "split", "harmbench_copyright": "harmful", "advbench": "harmful"},
    )
    # VAL is looked up on the full subset under the default mapping; the fixture only made the clean one.
    store.draws[("split:val", "full", "default", "acc_policy_a")] = store.draws.pop(
        ("split:val", "clean", "default", "acc_policy_a")
    )
    groupings = {"study": {"policy": ["harmbench_copyright"], "capability": ["advbench"]}}
    table = correlation_table(store, model_frame(plan), 42, groupings, "val", "policy_a", "clean", "default")
    by = table[table["target"] == "gold"].set_index(["scale", "load"])
    assert by.loc[("small", "policy"), "rho"] == pytest.approx(0.9)
    assert by.loc[("all", "policy"), "n_models"] == 5
    assert (
        pd.isna(by.loc[("small", "capability"), "rho"])
        and "constant" in by.loc[("small", "capability"), "note"]
    )
    # Without the VAL policy's per-prompt labels that target is null, with the reason.
    policy_rows = table[table["target"] == "val_policy_labels"]
    assert (
        policy_rows["rho"].isna().all()
        and (policy_rows["note"] == "no per-prompt labels of 'policy_a'").all()
    )
    # With them: agreement with policy_a's labels on harmbench_copyright, decreasing in VAL -> rho = -1.
    labelled = correlation_table(
        store,
        model_frame(plan),
        42,
        groupings,
        "val",
        "policy_a",
        "clean",
        "default",
        policy_agreement={"harmbench_copyright": np.array([0.9, 0.8, 0.7, 0.6, 0.5])},
    )
    row = labelled.set_index(["scale", "target", "load"]).loc[("small", "val_policy_labels", "policy")]
    assert row["rho"] == pytest.approx(-1.0) and row["grouping"] == "study"


def test_mapping_effect_is_the_change_of_over_refusal() -> None:
    store = store_from_points(
        ["m1", "m2"], {("jbb_benign", "over_ref"): [0.05, 0.1]}, {"jbb_benign": "benign"}
    )
    store.draws[("jbb_benign", "clean", "boundary_unsafe", "over_ref")] = MetricDraws(
        np.array([0.96, 0.2]), np.zeros((40, 2)), 100, True
    )
    table = mapping_effect_table(store)
    assert table["change"].tolist() == pytest.approx([0.91, 0.1])


# ------------------------------------------------------------------------------------------------- XSTest


def test_pair_consistency_and_type_over_refusal_on_a_crafted_slice() -> None:
    # Three pairs: p0 both right, p1 both right, p2 safe prompt flagged (over-refusal): 2 of 3 consistent.
    safe = np.array([True, False, True, False, True, False])
    decisions = np.array([False, True, False, True, True, True])[:, None]  # [6, 1]
    matrix = DatasetMatrix(
        name="xstest",
        role="mixed",
        ids=np.array([f"x{i}" for i in range(6)]),
        clean=np.ones(6, dtype=bool),
        expected_unsafe=~safe,
        category=np.array(["homonyms", "contrast_homonyms"] * 3, dtype=object),
        pair_id=np.array(["p0", "p0", "p1", "p1", "p2", "p2"], dtype=object),
        decisions={"default": decisions, "boundary_unsafe": decisions},
        scores={"default": decisions.astype(np.float32), "boundary_unsafe": decisions.astype(np.float32)},
    )
    pairs = pair_consistency(matrix, ["m"], "default", 0.95)
    full = pairs[pairs["subset"] == "full"].iloc[0]
    assert (full["pairs"], full["consistent"]) == (3, 2)
    assert full["consistency"] == pytest.approx(2 / 3)
    assert full["ci_low"] < 2 / 3 < full["ci_high"]
    types = type_over_refusal(matrix, ["m"], "default", 0.95)
    homonyms = types[(types["subset"] == "full")].iloc[0]
    assert (homonyms["xstest_type"], homonyms["n"]) == ("homonyms", 3)
    assert homonyms["over_ref"] == pytest.approx(1 / 3)


def _gold_matrix(name: str, role: str, unsafe: list[bool], clean: list[bool]) -> DatasetMatrix:
    n = len(unsafe)
    decisions = np.zeros((n, 1), dtype=bool)
    return DatasetMatrix(
        name=name,
        role=role,
        ids=np.array([f"{name}{i}" for i in range(n)]),
        clean=np.array(clean, dtype=bool),
        expected_unsafe=np.array(unsafe, dtype=bool),
        category=np.full(n, None, dtype=object),
        pair_id=np.full(n, None, dtype=object),
        decisions={"default": decisions, "boundary_unsafe": decisions},
        scores={"default": decisions.astype(np.float32), "boundary_unsafe": decisions.astype(np.float32)},
    )


def test_benchmark_table_counts_roles_and_small_sets() -> None:
    matrices = [
        # A mixed set whose clean subset keeps only safe prompts: benign there.
        _gold_matrix("mix", "mixed", [True, True, False, False, False], [False, False, True, True, False]),
        _gold_matrix("harm", "harmful", [True] * 4, [True] * 4),
        # A split is not a benchmark; a subset without items has no row.
        _gold_matrix("split:val", "split", [False] * 3, [True] * 3),
        _gold_matrix("gone", "benign", [False, False], [False, False]),
    ]
    table = benchmark_table(matrices, small_set_n=3)
    assert list(table.columns) == ANALYSIS_TABLES["benchmarks"].names()
    rows = {(r.benchmark, r.subset): r for r in table.itertuples(index=False)}
    assert list(rows) == [
        ("gone", "full"),
        ("harm", "full"),
        ("harm", "clean"),
        ("mix", "full"),
        ("mix", "clean"),
    ]
    mix_full, mix_clean = rows[("mix", "full")], rows[("mix", "clean")]
    assert (mix_full.role, mix_full.n_items, mix_full.n_unsafe, mix_full.n_safe) == ("mixed", 5, 2, 3)
    assert (mix_full.n_scored, mix_full.small_set) == (3, False)  # the larger class of a mixed set
    assert (mix_clean.role, mix_clean.n_scored, mix_clean.small_set) == ("benign", 2, True)
    assert (rows[("harm", "clean")].role, rows[("harm", "clean")].n_scored) == ("harmful", 4)
    assert (rows[("gone", "full")].role, rows[("gone", "full")].small_set) == ("benign", True)


# --------------------------------------------------------------------------------------- the stage itself


EXPECTED_FILES = {
    "benchmarks.csv": "benchmark,subset,role,n_items,n_unsafe,n_safe,n_scored,small_set",
    "scores.csv": "model,kind,scale,branch,seed,recipe,benchmark,subset,mapping,metric,value,ci_low,ci_high,"
    "interval,n",
    "span.csv": "benchmark,subset,mapping,view,load,study_load,swing,primary_metric,delta,delta_ci_low,"
    "delta_ci_high,range_large,range_small,phi,phi_ci_low,phi_ci_high,phi_max,n_recipes,difference,difference_ci_low,difference_ci_high",
    "span_scale.csv": ",".join(SPAN_SCALE_COLUMNS),
    "noise_floor.csv": "recipe,scale,benchmark,subset,mapping,view,seeds,spread,ci_low,ci_high",
    "swing_vs_span.csv": "view,scale,n_benchmarks,benchmarks,rho,p_value,ci_low,ci_high,swing_resampled,note",
    "rank_test.csv": "benchmark,scale,subset,mapping,view,set_name,k,n,direction,extreme,p_value,"
    "null_probability,hit,stability",
    "correlations.csv": "scale,val_policy,grouping,load,target,rho,p_value,n_models,note",
    "headline.csv": ",".join(HEADLINE_COLUMNS),
    "competence.csv": ",".join(COMPETENCE_COLUMNS),
    "tradeoff.csv": ",".join(TRADEOFF_COLUMNS),
    "mapping_effect.csv": "model,benchmark,subset,over_ref_default,over_ref_boundary_unsafe,change",
    "mapping_effect_by_model.csv": ",".join(MAPPING_BY_MODEL_COLUMNS),
    "mapping_vs_retraining.csv": ",".join(LEVER_COLUMNS),
    "xstest.csv": "model,subset,xstest_type,n,over_ref,ci_low,ci_high",
    "xstest_pairs.csv": "model,subset,pairs,consistent,consistency,ci_low,ci_high",
    "view_scores.csv": ",".join(VIEW_SCORE_COLUMNS),
    "base_rate.csv": ",".join(BASE_RATE_COLUMNS),
}


def test_analyse_end_to_end_on_synthetic_predictions(tmp_path: Path) -> None:
    params_file, eval_dir, plan = stage_inputs(tmp_path)
    # The competence bars on sets the synthetic run has, so the trade-off table has rows.
    document = yaml.safe_load(params_file.read_text(encoding="utf-8"))
    document["analysis"]["targets"].update(
        capture_benchmarks=["advbench"], over_refusal_benchmark="jbb_benign", over_refusal_branches=["E2"]
    )
    params_file.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    write_fingerprint(tmp_path, eval_dir)
    layout = Layout(tmp_path)
    out = tmp_path / "reports" / "analysis"
    summary = analyse(layout, evaluations=plan)
    for name, header in EXPECTED_FILES.items():
        lines = (out / name).read_text(encoding="utf-8").splitlines()
        assert lines[0] == header, name
        assert len(lines) > 1, name
    # Exactly the tables that have a contract, each as its contract reads it back.
    assert sorted(path.stem for path in out.glob("*.csv")) == sorted(ANALYSIS_TABLES)
    for name, table in ANALYSIS_TABLES.items():
        read_frame(table, out / f"{name}.csv")
    written = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert written == summary
    assert (written["models"], written["benchmarks"], written["bootstrap_samples"]) == (13, 4, 50)
    assert set(written["span"]) == {"advbench", "harmbench_copyright", "jbb_benign", "xstest"}
    assert written["span"]["xstest"]["metric"] == "over_ref"
    assert written["span"]["harmbench_copyright"]["phi"] is not None
    # The fingerprint's grouping (swing 1 vs 0 around the 0.2 threshold) beside the study's.
    assert {b: e["load"] for b, e in written["span"].items()} == {
        "advbench": "capability",
        "harmbench_copyright": "policy",
        "jbb_benign": "policy",
        "xstest": "capability",
    }
    assert written["span"]["advbench"]["study_load"] == "capability"
    assert written["load_contrast"]["grouping"] == "fingerprint"
    assert written["load_contrast"]["capability_benchmarks"] == "advbench,xstest"
    assert written["load_contrast_study"]["capability_benchmarks"] == "advbench"
    assert written["copyright_vs_noise"]["verdict"]
    assert written["agreed_spans"]["benchmarks"] == "advbench,xstest"
    assert written["competence"]["benchmarks"] == "advbench"
    assert written["swing_vs_span"]["all"]["n_benchmarks"] == 4
    assert written["swing_vs_span"]["all"]["swing_resampled"] is False
    assert set(written["span_scale"]["harmbench_copyright"]) == {"small", "large"}
    # Seed repeats exist at the small scale only: the large scale has no Φ to compare with.
    assert written["span_scale"]["harmbench_copyright"]["large"]["verdict"].startswith("undetermined")
    assert written["rank_tests"]["policy_a_terminal"]["small"]["advbench"]["extreme"] in (
        "top",
        "bottom",
        "none",
    )
    assert written["rank_tests"]["policy_a_terminal"]["small"]["harmbench_copyright"]["direction"] == "top"
    assert written["rank_chance"]["tests"] > 0
    assert written["correlations"]["all"]["fingerprint"]["gold"]["policy"]["n_models"] == 10
    assert written["correlations"]["all"]["study"]["val_policy_labels"]["policy"]["n_models"] == 10
    assert written["fingerprint"]["harmbench_copyright"] == {"policy_a": 1.0, "policy_b": 0.0}
    assert written["mapping_effect"]["largest_benchmark"] in ("jbb_benign", "xstest")
    assert set(written["targets"]) == {
        "capture",
        "over_refusal",
        "copyright_phi",
        "copyright_delta",
        "copyright_per_scale",
        "agree_mean_delta",
        "swing_rho",
        "top_ranks",
    }
    # The capture target's set (advbench, set above) was evaluated; the synthetic skill misses the bar.
    assert written["targets"]["capture"]["status"] == "not met"
    assert all(entry["reading"] for entry in written["study"].values())
    # The matched and ranked views carry the same verdict blocks; the ranked view has no rate targets.
    assert written["primary_view"] == "matched" and set(written["views"]) == {"matched", "ranked"}
    for view, block in written["views"].items():
        assert set(block) == set(VIEW_BLOCK_KEYS), view
        # The own view's blocks are the same ones, at the top level.
        assert all(key in written for key in VIEW_BLOCK_KEYS)
        assert set(block["span"]) == set(written["span"])
    assert written["views"]["ranked"]["span"]["advbench"]["metric"] == "auroc"
    assert written["views"]["matched"]["span"]["xstest"]["metric"] == "over_ref"
    ranked_targets = written["views"]["ranked"]["targets"]
    # Bars written in rate units are not judged on AUROCs (their values are given); unit-free ones are.
    for name in ("capture", "over_refusal", "copyright_phi", "copyright_delta", "agree_mean_delta"):
        assert ranked_targets[name]["status"] == "not measured", name
    assert ranked_targets["agree_mean_delta"]["value"] is not None
    assert ranked_targets["swing_rho"]["status"] in ("met", "not met")
    assert written["views"]["matched"]["targets"]["capture"]["status"] in ("met", "not met")
    assert set(written["study_views"]) == set(written["study"])
    for entry in written["study_views"].values():
        assert entry["primary"] == entry["matched"]
    assert written["base_rate"]["models"] == 10 and set(written["base_rate"]["cap_over_ref_r"]) == {
        "own",
        "matched",
        "ranked",
    }
    views = pd.read_csv(out / "view_scores.csv")
    # Every model's primary metric on 4 benchmarks and the 2 headline means, per subset, mapping and view.
    assert len(views) == 13 * 6 * 2 * 2 * 3
    assert views[views["view"] == "ranked"]["metric"].eq("auroc").all()
    spans = pd.read_csv(out / "span.csv")
    assert list(spans["view"].unique()) == ["own", "matched", "ranked"]
    assert len(spans) == 3 * len(spans[spans["view"] == "own"])
    base_rate = pd.read_csv(out / "base_rate.csv")
    assert len(base_rate) == 13 * 2 and base_rate["matched_flag_rate"].between(0, 1).all()

    def no_number_lists(node: Any) -> None:
        if isinstance(node, dict):
            for value in node.values():
                no_number_lists(value)
        assert not isinstance(node, list)

    no_number_lists(written)
    scores = pd.read_csv(out / "scores.csv")
    assert len(scores[scores["metric"] == "acc_policy_a"]) == 13 * 2
    # The headline means, per model x subset x mapping: harmful sets' cap and benign sets' over_ref.
    assert len(scores[scores["benchmark"] == "mean:harmful"]) == 13 * 2 * 2
    assert set(scores.loc[scores["benchmark"] == "mean:benign", "metric"]) == {"over_ref"}
    assert set(scores["interval"]) == {"bootstrap", "wilson"}
    headline = pd.read_csv(out / "headline.csv")
    # Capability-only CAP: advbench alone in both groupings (xstest is mixed), for each of the 13 models.
    assert len(headline) == 13 * 2 and set(headline["benchmarks"]) == {"advbench"}
    advbench = scores[
        (scores["benchmark"] == "advbench")
        & (scores["metric"] == "cap")
        & (scores["subset"] == "clean")
        & (scores["mapping"] == "default")
    ].set_index("model")["value"]
    pd.testing.assert_series_equal(
        headline[headline["grouping"] == "fingerprint"].set_index("model")["cap"],
        advbench.loc[sorted(plan)],
        check_names=False,
        atol=1e-6,
    )
    assert headline["auroc"].between(0, 1).all() and headline["threshold"].notna().all()
    competence = pd.read_csv(out / "competence.csv")
    assert set(competence["benchmark"]) == {"advbench", "mean:agreed_unsafe"}
    tradeoff = pd.read_csv(out / "tradeoff.csv")
    block = json.loads((out / "summary.json").read_text())["competence_tradeoff"]
    # Judged: the main-seed teacher and branches; the over-refusal bar: small-E2 and large-E2.
    assert len(tradeoff) == 11 and block["models"] == int(tradeoff["judged_over_ref"].sum()) == 2
    assert tradeoff["min_cap_at_over_ref_bar"].between(0, 1).all()
    # Deterministic: a second run writes byte-identical files.
    first = {name: (out / name).read_bytes() for name in [*EXPECTED_FILES, "summary.json"]}
    analyse(layout, evaluations=plan)
    assert first == {name: (out / name).read_bytes() for name in first}
    # The per-prompt labels are required with a fingerprint; their absence names the file and the stage.
    (tmp_path / "reports" / "fingerprint_labels.parquet").unlink()
    with pytest.raises(
        InputError, match=r"fingerprint_labels.parquet: file not found.*dvc repro fingerprint"
    ):
        analyse(layout, evaluations=plan)


def test_analyse_writes_a_table_only_when_it_passes_its_contract(tmp_path: Path) -> None:
    xstest = ANALYSIS_TABLES["xstest"]
    frame = pd.DataFrame(
        [["m", "full", "homonyms", 25, 0.04, 0.0, None]], columns=list(xstest.names())
    )  # a null interval bound (no items) is allowed: written empty
    write_csv(tmp_path / "xstest.csv", frame, xstest)
    assert (tmp_path / "xstest.csv").read_text(encoding="utf-8").splitlines()[
        1
    ] == "m,full,homonyms,25,0.04,0,"
    with pytest.raises(ContractError) as caught:
        write_csv(tmp_path / "broken.csv", frame.assign(n=2.5), xstest)
    assert (caught.value.row, caught.value.field) == (1, "n")
    with pytest.raises(ContractError, match="unexpected column"):
        write_csv(tmp_path / "broken.csv", frame.assign(extra=1), xstest)
    with pytest.raises(ContractError, match=r"duplicate .*model \+ subset \+ xstest_type is unique"):
        write_csv(tmp_path / "broken.csv", pd.concat([frame, frame]), xstest)
    assert not (tmp_path / "broken.csv").exists()


def test_analyse_names_a_missing_predictions_file_and_column(tmp_path: Path) -> None:
    params_file, eval_dir, plan = stage_inputs(tmp_path, {"harmbench_copyright": 10, "split:val": 10})
    layout = Layout(tmp_path)
    params = load_params(params_file)
    layout.path("plan").write_text(
        plan_registry.plan_text(plan_registry.plan_document(params)), encoding="utf-8"
    )
    # The full plan's noise-floor seeds have no predictions here (the first one, sorted, is named).
    with pytest.raises(
        InputError, match=r"large-E2-s43/predictions.parquet: file not found; stage evaluate@large-E2-s43"
    ):
        analyse(layout, use_fingerprint=False)
    victim = eval_dir / "small-E1" / "predictions.parquet"
    pd.read_parquet(victim).drop(columns=["unsafe_bu"]).to_parquet(victim, index=False)
    with pytest.raises(InputError, match=r"small-E1/predictions.parquet, row header, field 'unsafe_bu'"):
        analyse(layout, evaluations=plan, use_fingerprint=False)
    others = {m: e for m, e in plan.items() if m != "small-E1"}
    with pytest.raises(InputError, match=r"fingerprint\.csv: file not found"):
        analyse(layout, evaluations=others)
    # Without xstest (and without a fingerprint) the stage still runs; the XSTest tables are header-only.
    out = tmp_path / "reports" / "analysis"
    summary = analyse(layout, evaluations=others, use_fingerprint=False)
    assert "fingerprint" not in summary and summary["benchmarks"] == 1
    assert (out / "xstest.csv").read_text(encoding="utf-8").splitlines() == [EXPECTED_FILES["xstest.csv"]]
    assert summary["load_contrast"]["verdict"].startswith("undetermined: no fingerprint swing")
    assert (
        summary["load_contrast_study"]["verdict"] == "undetermined: no capability-load benchmark with a span"
    )
    assert summary["competence"]["fingerprint"] is False and summary["swing_vs_span"]["all"]["rho"] is None


def test_benchmarks_named_in_params_but_not_registered_are_logged(tmp_path: Path, caplog) -> None:
    params_file, _, _ = stage_inputs(tmp_path, {"harmbench_copyright": 4, "split:val": 4})
    params = load_params(params_file)
    with caplog.at_level("WARNING", logger="guardpolicy.stages.analyse"):
        warn_unregistered(
            params, {"harmbench_copyright": "all_unsafe", "advbench": "all_unsafe"}, "params.yaml"
        )
    logged = caplog.text
    assert "analysis.rank_direction.policy_a_terminal.jbb_benign: 'jbb_benign' is not in" in logged
    assert "analysis.targets.capture_benchmarks[0]: 'harmbench_standard'" in logged
    assert "advbench" not in logged and "'harmbench_copyright'" not in logged

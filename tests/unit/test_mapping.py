"""The mapping summaries on hand-made tables with known answers: each model's mean and largest change of
over-refusal under boundary_unsafe (ties by benchmark, float noise included), and mapping vs retraining —
an open guard's relaxed -> strict OVER-REF beside the spread of OVER-REF over our main-seed branches."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from guardpolicy.analysis.mapping import (
    LEVER_COLUMNS,
    MAPPING_BY_MODEL_COLUMNS,
    largest_change,
    mapping_effect_by_model,
    mapping_vs_retraining,
)
from guardpolicy.analysis.summary import mapping_summary


def _effect(rows: list[tuple[str, str, str, float, float]]) -> pd.DataFrame:
    """(model, benchmark, subset, over_ref_default, over_ref_boundary_unsafe) -> mapping_effect.csv rows."""
    frame = pd.DataFrame(
        rows, columns=["model", "benchmark", "subset", "over_ref_default", "over_ref_boundary_unsafe"]
    )
    frame["change"] = frame["over_ref_boundary_unsafe"] - frame["over_ref_default"]
    return frame


def test_mean_and_largest_change_per_model_and_subset() -> None:
    effect = _effect(
        [
            ("m1", "jbb_benign", "clean", 0.1, 0.4),
            ("m1", "xstest", "clean", 0.5, 0.1),
            ("m1", "wildguard_benign", "clean", 0.2, 0.3),
            ("m1", "jbb_benign", "full", 0.1, 0.2),
            ("m2", "jbb_benign", "clean", 0.3, 0.3),
        ]
    )
    # A set without safe prompts scored under one mapping has no change: it is not in the mean.
    effect.loc[len(effect)] = ["m2", "xstest", "clean", np.nan, 0.5, np.nan]
    table = mapping_effect_by_model(effect)
    assert tuple(table.columns) == MAPPING_BY_MODEL_COLUMNS
    assert list(zip(table["model"], table["subset"], strict=True)) == [
        ("m1", "clean"),
        ("m1", "full"),
        ("m2", "clean"),
    ]
    m1 = table.iloc[0]
    assert m1["n_benchmarks"] == 3
    assert m1["mean_change"] == pytest.approx((0.3 - 0.4 + 0.1) / 3)
    # The largest by size is a drop: xstest's −0.4 beats jbb_benign's +0.3.
    assert (m1["largest_benchmark"], m1["largest_over_ref_default"]) == ("xstest", 0.5)
    assert m1["largest_over_ref_boundary_unsafe"] == 0.1
    assert m1["largest_change"] == pytest.approx(-0.4)
    m2 = table.iloc[2]
    assert (m2["n_benchmarks"], m2["mean_change"], m2["largest_benchmark"]) == (1, 0.0, "jbb_benign")


def test_equal_changes_tie_despite_float_noise_and_go_to_the_first_benchmark() -> None:
    # 0.70 − 0.56 and 0.448 − 0.308 are both 0.14; in floats the second is a hair larger than the first.
    effect = _effect([("m", "jbb_benign", "clean", 0.56, 0.70), ("m", "xstest", "clean", 0.308, 0.448)])
    assert effect["change"].iloc[1] > effect["change"].iloc[0]
    assert largest_change(effect)["benchmark"] == "jbb_benign"
    assert mapping_effect_by_model(effect)["largest_benchmark"].iloc[0] == "jbb_benign"
    # summary.json's largest over all models picks by the same rule.
    assert mapping_summary(effect, "clean")["largest_benchmark"] == "jbb_benign"
    # A real difference, however small next to the rates, still decides.
    effect.loc[1, "change"] = 0.14 + 1e-9
    assert largest_change(effect)["benchmark"] == "xstest"


def test_an_empty_mapping_effect_gives_a_header_only_table() -> None:
    table = mapping_effect_by_model(_effect([]))
    assert table.empty and tuple(table.columns) == MAPPING_BY_MODEL_COLUMNS


def _mean_benign(model: str, kind: str, scale: str, seed: int, mapping: str, value: float) -> dict:
    return {
        "model": model,
        "kind": kind,
        "scale": scale,
        "branch": model,
        "seed": seed,
        "benchmark": "mean:benign",
        "subset": "clean",
        "mapping": mapping,
        "metric": "over_ref",
        "value": value,
    }


def _scores() -> pd.DataFrame:
    rows = []
    for model, kind, scale, seed, default, strict in (
        ("baseline-guard_a", "baseline", "guard", 0, 0.20, 0.26),
        ("baseline-guard_b", "baseline", "guard", 0, np.nan, 0.30),
        ("small-E1", "branch", "small", 42, 0.10, 0.50),
        ("small-E2", "branch", "small", 42, 0.35, 0.50),
        ("small-E3", "branch", "small", 42, 0.25, 0.50),
        # Neither a second seed nor a teacher nor a branch without the mean widens the spread.
        ("small-E1-s43", "branch", "small", 43, 0.90, 0.90),
        ("teacher-policy_a", "teacher", "small", 42, 0.01, 0.01),
        ("small-E4", "branch", "small", 42, np.nan, 0.50),
        # One branch at a scale has no spread.
        ("large-E1", "branch", "large", 42, 0.40, 0.50),
    ):
        rows.append(_mean_benign(model, kind, scale, seed, "default", default))
        rows.append(_mean_benign(model, kind, scale, seed, "boundary_unsafe", strict))
    scores = pd.DataFrame(rows)
    # Rows of another subset, benchmark or metric are not the headline OVER-REF.
    other = scores.assign(subset="full", value=0.99)
    per_set = scores.assign(benchmark="jbb_benign", value=0.99)
    capture = scores.assign(metric="cap", value=0.99)
    return pd.concat([scores, other, per_set, capture], ignore_index=True)


def test_mapping_vs_retraining_levers() -> None:
    table = mapping_vs_retraining(_scores(), subset="clean", main_seed=42)
    assert tuple(table.columns) == LEVER_COLUMNS
    rows = {(r.lever, r.model if isinstance(r.model, str) else r.scale): r for r in table.itertuples()}
    assert set(rows) == {
        ("mapping", "baseline-guard_a"),
        ("mapping", "baseline-guard_b"),
        ("retraining", "small"),
    }
    guard = rows[("mapping", "baseline-guard_a")]
    assert (guard.scale, guard.subset, guard.n_models, guard.over_ref_from, guard.over_ref_to) == (
        "guard",
        "clean",
        1,
        0.20,
        0.26,
    )
    assert guard.change == pytest.approx(0.06)
    # A guard without a relaxed OVER-REF keeps its row, its change empty.
    unknown = rows[("mapping", "baseline-guard_b")]
    assert math.isnan(unknown.over_ref_from) and unknown.over_ref_to == 0.30 and math.isnan(unknown.change)
    small = rows[("retraining", "small")]
    assert (small.n_models, small.over_ref_from, small.over_ref_to) == (3, 0.10, 0.35)
    assert small.change == pytest.approx(0.25)
    assert pd.isna(small.model)


def test_mapping_vs_retraining_without_guards_or_branches() -> None:
    scores = _scores()
    ours = scores[scores["kind"] != "baseline"]
    assert set(mapping_vs_retraining(ours, subset="clean", main_seed=42)["lever"]) == {"retraining"}
    assert mapping_vs_retraining(ours, subset="clean", main_seed=7).empty

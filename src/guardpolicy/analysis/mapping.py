"""How far the binary mapping moves over-refusal: per model, and against how far retraining moves it.

The mapping decides whether BOUNDARY_SAFE counts as unsafe (`boundary_unsafe`) or safe (`default`); for an
open guard the same switch is its middle label counted as unsafe (`strict`) or safe (`relaxed`). The study
contrasts how far relabelling that one class moves a guard's over-refusal with how far retraining on another
policy moves it. Both tables are summaries of tables the analysis already wrote (mapping_effect.csv, the
`mean:benign` rows of scores.csv), so the report prints them instead of computing them.
Pure functions: frames in, frames out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from guardpolicy.analysis.baselines import BASELINE_KIND
from guardpolicy.analysis.competence import BRANCH_KIND
from guardpolicy.analysis.matrices import BOUNDARY_UNSAFE, DEFAULT
from guardpolicy.analysis.scores import MEAN_BENIGN
from guardpolicy.contracts.analysis import ANALYSIS_MAPPING_EFFECT_BY_MODEL, ANALYSIS_MAPPING_VS_RETRAINING

# mapping_effect_by_model.csv and mapping_vs_retraining.csv (their contracts in `guardpolicy.contracts`).
MAPPING_BY_MODEL_COLUMNS = tuple(ANALYSIS_MAPPING_EFFECT_BY_MODEL.names())
LEVER_COLUMNS = tuple(ANALYSIS_MAPPING_VS_RETRAINING.names())
MAPPING_LEVER, RETRAINING_LEVER = "mapping", "retraining"
# Changes are differences of rates (k / n), so two equal changes can differ by float rounding (0.70 − 0.56 and
# 0.448 − 0.308 are both 0.14, one a hair below it, one above): sizes are compared at 12 decimals, far below
# any real difference between two rates and far above that noise, so a tie stays a tie.
CHANGE_DECIMALS = 12


def largest_change(frame: pd.DataFrame) -> pd.Series:
    """The row of `frame` (mapping_effect.csv rows) whose `change` is largest by size; of tied rows the
    first, so the pick follows the table's order (model, benchmark, subset)."""
    sizes = np.round(frame["change"].abs().to_numpy(dtype=float), CHANGE_DECIMALS)
    return frame.iloc[int(np.argmax(sizes))]


def mapping_effect_by_model(mapping_effect: pd.DataFrame) -> pd.DataFrame:
    """mapping_effect_by_model.csv: per model and subset, over the benchmarks whose change is measured (the
    sets with safe prompts), the mean change of over-refusal from `default` to `boundary_unsafe` and the
    benchmark it changes most by size (`largest_change`: ties go to the first by benchmark name), with that
    benchmark's rates."""
    rows = []
    measured = mapping_effect.dropna(subset=["change"])
    for (model, subset), group in measured.groupby(["model", "subset"], sort=True):
        largest = largest_change(group)
        rows.append(
            {
                "model": model,
                "subset": subset,
                "n_benchmarks": len(group),
                "mean_change": float(group["change"].mean()),
                "largest_benchmark": largest["benchmark"],
                "largest_over_ref_default": largest["over_ref_default"],
                "largest_over_ref_boundary_unsafe": largest["over_ref_boundary_unsafe"],
                "largest_change": largest["change"],
            }
        )
    return pd.DataFrame(rows, columns=list(MAPPING_BY_MODEL_COLUMNS))


def _mean_over_ref(scores: pd.DataFrame, subset: str, mapping: str) -> pd.DataFrame:
    """scores.csv's `mean:benign` over-refusal rows (the headline OVER-REF) at one subset and mapping."""
    return scores[
        (scores["subset"] == subset)
        & (scores["mapping"] == mapping)
        & (scores["benchmark"] == MEAN_BENIGN)
        & (scores["metric"] == "over_ref")
    ]


def mapping_vs_retraining(scores: pd.DataFrame, *, subset: str, main_seed: int) -> pd.DataFrame:
    """mapping_vs_retraining.csv: how far mean over-refusal (OVER-REF, scores.csv's `mean:benign`) moves
    under each lever, at `subset`.

    lever `mapping`, one row per open guard: from its relaxed OVER-REF (mapping `default`) to its strict one
    (`boundary_unsafe`), `change` = strict − relaxed (empty where either is). lever `retraining`, one row per
    scale with at least two main-seed branches that have an OVER-REF: from the lowest to the highest of them
    under the `default` mapping, `change` = the span highest − lowest; `n_models` = those branches."""
    columns = ["model", "scale", "value"]
    relaxed = _mean_over_ref(scores, subset, DEFAULT)
    strict = _mean_over_ref(scores, subset, BOUNDARY_UNSAFE)
    guards = sorted(set(scores.loc[scores["kind"] == BASELINE_KIND, "model"]))
    rows = []
    for model in guards:
        scale = scores.loc[scores["model"] == model, "scale"].iloc[0]
        before = relaxed.loc[relaxed["model"] == model, "value"]
        after = strict.loc[strict["model"] == model, "value"]
        low = float(before.iloc[0]) if len(before) else np.nan
        high = float(after.iloc[0]) if len(after) else np.nan
        rows.append((MAPPING_LEVER, model, scale, subset, 1, low, high, high - low))
    branches = relaxed[(relaxed["kind"] == BRANCH_KIND) & (relaxed["seed"] == main_seed)][columns]
    for scale, group in branches.dropna(subset=["value"]).groupby("scale", sort=True):
        if len(group) < 2:
            continue
        low, high = float(group["value"].min()), float(group["value"].max())
        rows.append((RETRAINING_LEVER, None, scale, subset, len(group), low, high, high - low))
    return pd.DataFrame(rows, columns=list(LEVER_COLUMNS))

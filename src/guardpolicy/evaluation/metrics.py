"""Benchmark and split metrics of one model's predictions, and the metrics.json document (pure).

The metrics themselves are `guardpolicy.metrics`' scalar functions, the one implementation the analysis uses
too; this module picks the rows, rounds to `DIGITS` and assembles the document. A metric that does not apply
to a set (the cap of a set without unsafe items, the F1 of a single-class set) is absent - None from the
scalar functions, left out of the dictionaries - never reported as 0, so a mean over benchmarks can never be
pulled down by a set the metric says nothing about.

Binary mappings of the 4 coarse classes (contract "Predictions"): the default mapping counts HARMFUL and
COMPOUND as unsafe (`unsafe`, `unsafe_score`); `boundary_unsafe` adds BOUNDARY_SAFE (`unsafe_bu`,
`unsafe_score_bu`). Metric keys of the latter carry the suffix `_bu`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from guardpolicy.metrics import COPYRIGHT_BENCHMARK, accuracy, auprc, cap, f1, over_ref

DIGITS = 6
# Binary mapping -> (metric-name suffix, predicted-unsafe column, unsafe-score column).
MAPPINGS = {
    "default": ("", "unsafe", "unsafe_score"),
    "boundary_unsafe": ("_bu", "unsafe_bu", "unsafe_score_bu"),
}
ROLES = {"all_unsafe": "harmful", "all_safe": "benign", "column": "mixed"}
SUBSETS = ("full", "clean")


def _rounded(values: Mapping[str, float | None]) -> dict[str, float]:
    return {key: round(value, DIGITS) for key, value in values.items() if value is not None}


def binary_metrics(rows: pd.DataFrame) -> dict[str, float]:
    """cap / over_ref / f1 / auprc under both mappings for rows with `expected_unsafe` (absent: n/a)."""
    if rows.empty:
        return {}
    expected = rows["expected_unsafe"].to_numpy(dtype=bool)
    values: dict[str, float | None] = {}
    for suffix, predicted_column, score_column in MAPPINGS.values():
        predicted = rows[predicted_column].to_numpy(dtype=bool)
        values[f"cap{suffix}"] = cap(expected, predicted)
        values[f"over_ref{suffix}"] = over_ref(expected, predicted)
        values[f"f1{suffix}"] = f1(expected, predicted)
        values[f"auprc{suffix}"] = auprc(expected, rows[score_column].to_numpy(dtype=np.float64))
    return _rounded(values)


def benchmark_metrics(rows: pd.DataFrame, role: str) -> dict[str, Any]:
    """One benchmark's block: role, sizes, and the binary metrics on all rows and on the clean rows.

    Rows whose gold is unknown (null `expected_unsafe`) are left out of the metrics but counted in `n`.
    """
    labelled = rows[rows["expected_unsafe"].notna()]
    clean = labelled[labelled["clean"].to_numpy(dtype=bool)]
    return {
        "role": role,
        "n": len(rows),
        "n_clean": int(rows["clean"].to_numpy(dtype=bool).sum()),
        "full": binary_metrics(labelled),
        "clean": binary_metrics(clean),
    }


def split_metrics(rows: pd.DataFrame, policies: Iterable[str]) -> dict[str, Any]:
    """A split's block: its size and the 4-class accuracy against each policy's gold label."""
    block: dict[str, Any] = {"n": len(rows)}
    for policy in policies:
        gold = rows[f"gold_{policy}"]
        known = gold.notna().to_numpy()
        value = accuracy(
            gold[known].to_numpy(dtype=object), rows.loc[known, "pred_coarse"].to_numpy(dtype=object)
        )
        if value is not None:
            block[f"acc_{policy}"] = round(value, DIGITS)
    return block


def _mean(values: list[float]) -> float | None:
    return round(float(np.mean(values)), DIGITS) if values else None


def headline(
    benchmarks: Mapping[str, Mapping[str, Any]], val: Mapping[str, Any], policies: Iterable[str]
) -> dict:
    """copy (copyright clean cap), cap / over_ref (means over harmful / benign sets, clean, default mapping),
    val_<policy> (4-class accuracy on the first split); a figure without data is absent."""
    caps = [b["clean"]["cap"] for b in benchmarks.values() if b["role"] == "harmful" and "cap" in b["clean"]]
    over_refs = [
        b["clean"]["over_ref"]
        for b in benchmarks.values()
        if b["role"] == "benign" and "over_ref" in b["clean"]
    ]
    values: dict[str, Any] = {
        "copy": benchmarks.get(COPYRIGHT_BENCHMARK, {}).get("clean", {}).get("cap"),
        "cap": _mean(caps),
        "over_ref": _mean(over_refs),
    }
    first_split = next(iter(val.values()), {})
    for policy in policies:
        values[f"val_{policy}"] = first_split.get(f"acc_{policy}")
    return {key: value for key, value in values.items() if value is not None}


def model_metrics(
    predictions: pd.DataFrame,
    *,
    identity: Mapping[str, Any],
    roles: Mapping[str, str],
    splits: Iterable[str],
    policies: Iterable[str],
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The metrics.json document of one model (contract "Per-model metrics").

    predictions: the predictions frame; identity: model, kind, scale, branch, seed, recipe; roles:
    benchmark -> harmful | benign | mixed for every benchmark scored; splits: the evaluated splits in params
    order (VAL is the first); extra: further small blocks (model card facts, evaluation settings).
    """
    policies = list(policies)
    by_dataset = dict(tuple(predictions.groupby("dataset", sort=True)))
    benchmarks = {
        name: benchmark_metrics(by_dataset.get(name, predictions.iloc[0:0]), role)
        for name, role in sorted(roles.items())
    }
    val = {
        split: split_metrics(by_dataset.get(f"split:{split}", predictions.iloc[0:0]), policies)
        for split in splits
    }
    document = {
        **{key: identity[key] for key in ("model", "kind", "scale", "branch", "seed", "recipe")},
        "headline": headline(benchmarks, val, policies),
        "benchmarks": benchmarks,
        "val": val,
    }
    if extra:
        document.update(extra)
    return document

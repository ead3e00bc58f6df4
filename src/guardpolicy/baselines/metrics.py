"""A baseline guard's metrics document (reports/baselines/<guard>/metrics.json), from its predictions table.

Per benchmark (full / clean) and per split: sizes, parse counts and cap / over_ref / f1 / auprc under both
mappings on the rows with a decision (a failed parse under failure policy `exclude` has none: left out of the
rates but counted, `n_excluded`); the headline under the guard's headline mapping. Pure.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from guardpolicy.baselines.mapping import PARSE_STATUSES, parse_failure_counts
from guardpolicy.baselines.predictions import DECISIONS
from guardpolicy.evaluation.metrics import DIGITS, SUBSETS, headline
from guardpolicy.metrics import auprc, cap, f1, over_ref


def _subset_metrics(rows: pd.DataFrame) -> dict[str, Any]:
    """cap / over_ref / f1 / auprc under both mappings on the rows with a decision (absent: n/a)."""
    labelled = rows[rows["expected_unsafe"].notna()]
    # Only a failed parse under failure policy `exclude` has no decision, the same row under both mappings.
    decided_mask = labelled["unsafe"].notna().to_numpy()
    block: dict[str, Any] = {"n_scored": int(decided_mask.sum()), "n_excluded": int((~decided_mask).sum())}
    values: dict[str, float | None] = {}
    for suffix, decision_column, score_column in DECISIONS.values():
        decided = labelled[labelled[decision_column].notna()]
        if decided.empty:
            continue
        expected = decided["expected_unsafe"].to_numpy(dtype=bool)
        predicted = decided[decision_column].to_numpy(dtype=bool)
        values[f"cap{suffix}"] = cap(expected, predicted)
        values[f"over_ref{suffix}"] = over_ref(expected, predicted)
        values[f"f1{suffix}"] = f1(expected, predicted)
        # The score needs the decision token's log-probs; rows without one are left out of the ranking.
        scored = decided[decided[score_column].notna()]
        if not scored.empty:
            values[f"auprc{suffix}"] = auprc(
                scored["expected_unsafe"].to_numpy(dtype=bool),
                scored[score_column].to_numpy(dtype=np.float64),
            )
    block.update({key: round(value, DIGITS) for key, value in values.items() if value is not None})
    return block


def _parse_counts(counts: pd.DataFrame, dataset: str) -> dict[str, int]:
    row = counts[counts["benchmark"] == dataset]
    return {status: int(row[status].sum()) for status in PARSE_STATUSES}


def baseline_metrics(
    predictions: pd.DataFrame,
    *,
    model_name: str,
    roles: dict[str, str],
    splits: list[str],
    headline_mapping: str,
) -> dict[str, Any]:
    """Per benchmark (full / clean) and per split: sizes, parse counts and the binary metrics; the headline
    (copy, cap, over_ref like evaluate@'s) under `headline_mapping`. Pure."""
    counts = parse_failure_counts(
        pd.DataFrame(
            {"model": model_name, "benchmark": predictions["dataset"], "status": predictions["parse_status"]}
        ),
        source=f"{model_name} predictions",
    )
    by_dataset = dict(tuple(predictions.groupby("dataset", sort=True)))
    empty = predictions.iloc[0:0]
    benchmarks = {}
    for name, role in sorted(roles.items()):
        rows = by_dataset.get(name, empty)
        clean_mask = rows["clean"].to_numpy(dtype=bool)
        benchmarks[name] = {
            "role": role,
            "n": len(rows),
            "n_clean": int(clean_mask.sum()),
            "parse": _parse_counts(counts, name),
            **{subset: _subset_metrics(rows if subset == "full" else rows[clean_mask]) for subset in SUBSETS},
        }
    split_blocks = {}
    for split in splits:
        dataset = f"split:{split}"
        rows = by_dataset.get(dataset, empty)
        split_blocks[split] = {
            "n": len(rows),
            "parse": _parse_counts(counts, dataset),
            "unsafe_rate": round(float(rows["unsafe"].astype("boolean").mean()), DIGITS)
            if rows["unsafe"].notna().any()
            else None,
        }
        split_blocks[split] = {k: v for k, v in split_blocks[split].items() if v is not None}
    suffix = DECISIONS[headline_mapping][0]
    # metrics.headline reads `cap` / `over_ref` of the clean block: hand it the chosen mapping's values.
    chosen = {
        name: {
            "role": block["role"],
            "clean": {
                key: block["clean"][f"{key}{suffix}"]
                for key in ("cap", "over_ref")
                if f"{key}{suffix}" in block["clean"]
            },
        }
        for name, block in benchmarks.items()
    }
    totals = {status: int(counts[status].sum()) for status in PARSE_STATUSES}
    return {
        "model": model_name,
        "kind": "baseline",
        "headline": {**headline(chosen, {}, []), "mapping": headline_mapping},
        "benchmarks": benchmarks,
        "val": split_blocks,
        "parse": {**totals, "rows": len(predictions)},
    }

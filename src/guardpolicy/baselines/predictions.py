"""A baseline guard's predictions table: the contract's "Predictions" columns plus the guard's own.

Each item's generation is parsed twice, by the adapter built for each mapping, and turned into both binary
decisions: `unsafe` = the relaxed decision (Qwen3Guard's Controversial counts as safe), `unsafe_bu` = the
strict one (Controversial counts as unsafe); guards without a middle class give the same decision in both. A
failed parse counts as the failure policy says; under `exclude` its decisions are null. A guard has no coarse
or pillar head (null columns) and no spans; `n_tokens` / `truncated` come from its backend (`PromptTokens`).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from guardpolicy.baselines.base import GuardVerdict, PromptTokens
from guardpolicy.baselines.mapping import binary_decision
from guardpolicy.contracts import GUARD_COLUMNS
from guardpolicy.evaluation.scoring import log_truncation, prediction_columns

log = logging.getLogger(__name__)

EXTRA_COLUMNS = tuple(column.name for column in GUARD_COLUMNS)
# Decision mapping -> (metric-name suffix, decision column, score column) in the predictions table.
DECISIONS = {
    "relaxed": ("", "unsafe", "unsafe_score"),
    "strict": ("_strict", "unsafe_bu", "unsafe_score_bu"),
}


def verdict_rows(
    relaxed: list[GuardVerdict], strict: list[GuardVerdict], failure_policy: str
) -> pd.DataFrame:
    """One row per item: label, parse status, categories, raw answer, both decisions and both scores.

    `relaxed` / `strict`: the same generations parsed by the adapter built for each mapping (they differ only
    in the reported P(unsafe): Qwen3Guard's strict score adds P(Controversial)).
    """
    return pd.DataFrame(
        {
            "guard_label": [v.label for v in relaxed],
            "parse_status": [v.status for v in relaxed],
            "categories": [",".join(v.categories) for v in relaxed],
            "raw": [v.raw for v in relaxed],
            "unsafe": [binary_decision(v, "relaxed", failure_policy) for v in relaxed],  # type: ignore[arg-type]
            "unsafe_bu": [binary_decision(v, "strict", failure_policy) for v in strict],  # type: ignore[arg-type]
            "unsafe_score": [v.unsafe_score for v in relaxed],
            "unsafe_score_bu": [v.unsafe_score for v in strict],
        }
    )


def baseline_predictions_table(
    model_name: str,
    items: pd.DataFrame,
    verdicts: pd.DataFrame,
    *,
    coarse_classes: list[str],
    pillar_columns: list[str],
    policies: list[str],
    tokens: PromptTokens,
) -> pa.Table:
    """The contract's predictions columns (no coarse or pillar head: nulls; no spans) + the guard's extras.

    `tokens`: the backend's token counts (null where it does not tokenise: a server) and truncation
    (`truncated` is false for a guard that reads the whole prompt)."""
    n = len(items)
    if tokens.n_tokens is not None and len(tokens.n_tokens) != n:
        raise ValueError(f"{len(tokens.n_tokens)} token counts for {n} items")

    def strings(values: Any) -> pa.Array:
        return pa.array([None if pd.isna(v) else str(v) for v in values], pa.string())

    def booleans(values: Any) -> pa.Array:
        return pa.array([None if pd.isna(v) else bool(v) for v in values], pa.bool_())

    def floats(values: Any) -> pa.Array:
        return pa.array([None if v is None or pd.isna(v) else float(v) for v in values], pa.float32())

    arrays: dict[str, pa.Array] = {
        "model": pa.array([model_name] * n, pa.string()),
        "dataset": strings(items["dataset"]),
        "id": strings(items["id"]),
        "clean": pa.array(items["clean"].to_numpy(dtype=bool), pa.bool_()),
        "expected_unsafe": booleans(items["expected_unsafe"]),
        "category": strings(items["category"]),
        "pair_id": strings(items["pair_id"]),
        "pred_coarse": pa.nulls(n, pa.string()),
        "unsafe_score": floats(verdicts["unsafe_score"]),
        "unsafe_score_bu": floats(verdicts["unsafe_score_bu"]),
        "unsafe": booleans(verdicts["unsafe"]),
        "unsafe_bu": booleans(verdicts["unsafe_bu"]),
        "span_start": pa.nulls(n, pa.int64()),
        "span_end": pa.nulls(n, pa.int64()),
        "span_computed": pa.array(np.zeros(n, dtype=bool), pa.bool_()),
        "n_tokens": pa.array(tokens.n_tokens, pa.int64())
        if tokens.n_tokens is not None
        else pa.nulls(n, pa.int64()),
        "truncated": pa.array(tokens.truncated(n), pa.bool_()),
        "guard_label": strings(verdicts["guard_label"]),
        "parse_status": strings(verdicts["parse_status"]),
        "categories": strings(verdicts["categories"]),
        "raw": strings(verdicts["raw"]),
    }
    for policy in policies:
        arrays[f"gold_{policy}"] = strings(items[f"gold_{policy}"])
    for name in [f"p_{c}" for c in coarse_classes] + list(pillar_columns):
        arrays[name] = pa.nulls(n, pa.float32())
    names = [*prediction_columns(coarse_classes, pillar_columns, policies), *EXTRA_COLUMNS]
    return pa.table([arrays[name] for name in names], names=names)


def log_prompt_tokens(guard: str, datasets: list[str], tokens: PromptTokens) -> None:
    """One line per dataset: how many prompts the guard's backend cut (a classifier), or that it reads the
    whole prompt (generative guards: no truncation of ours)."""
    if tokens.max_length is not None and tokens.n_tokens is not None:
        log_truncation(
            f"baseline {guard}",
            datasets,
            np.asarray(tokens.n_tokens),
            tokens.max_length,
            tokens.kept,
        )
        return
    frame = pd.DataFrame({"dataset": datasets, "n_tokens": tokens.n_tokens or [None] * len(datasets)})
    for dataset, rows in frame.groupby("dataset", sort=True):
        longest = rows["n_tokens"].max() if tokens.n_tokens is not None else None
        log.info(
            "baseline %s: %s: 0 of %d prompts truncated (the whole prompt is sent; %s)",
            guard,
            dataset,
            len(rows),
            f"longest {int(longest)} tokens" if longest is not None else "not tokenised here",
        )


def with_guard_columns(table: pa.Table) -> pa.Table:
    """One of our models' predictions table (contract "Predictions") with the guard columns a baseline's
    carries, so `guardpolicy score --checkpoint` writes and analyses it like any guard's: `guard_label` is
    the decision under the relaxed mapping (our `default`: HARMFUL and COMPOUND unsafe), `parse_status` ok
    (a classifier's head always gives a class), no categories, and `raw` the 4-class prediction."""
    unsafe = table.column("unsafe").to_pylist()
    coarse = table.column("pred_coarse").to_pylist()
    n = table.num_rows
    extras = {
        "guard_label": pa.array(["unsafe" if u else "safe" for u in unsafe], pa.string()),
        "parse_status": pa.array(["ok"] * n, pa.string()),
        "categories": pa.array([""] * n, pa.string()),
        "raw": pa.array([str(c) for c in coarse], pa.string()),
    }
    for name in EXTRA_COLUMNS:
        table = table.append_column(name, extras[name])
    return table

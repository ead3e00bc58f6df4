"""The pool suite (`data/pool/pool.parquet`), and the span checks the label suite shares with it.

Critical: the contract's columns, unique non-null ids of the form `p_` + 16 hex, non-blank prompts, `kind` in
{public, generated, user}, facts and pillars from the taxonomy, and spans inside the prompt
(0 <= start < end <= len(prompt), both null or both set). Checks on list columns and on spans run on derived
columns (the offending facts, the prompt length), so GX can point at the ids of the offending rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from guardpolicy.contracts import POOL
from guardpolicy.layout import relative_path
from guardpolicy.taxonomy import Taxonomy
from guardpolicy.validation.gx import Check, SuiteResult, run_checks

POOL_KINDS = ("public", "generated", "user")
POOL_ID_PATTERN = r"^p_[0-9a-f]{16}$"
# Derived columns the suites add to the frame they validate.
PROMPT_LENGTH = "prompt_length"
SPAN_BOTH_OR_NEITHER = "span_both_or_neither"


def _as_list(value: Any) -> list[str]:
    """A list cell from parquet (numpy array, list or null) as a Python list."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return []
    return [str(v) for v in value]


def unknown_names(values: pd.Series, known: Iterable[str]) -> pd.Series:
    """Per row, the names of a list column not in `known` joined by ', ', or None when all are known."""
    known = set(known)

    def unknown(cell: Any) -> str | None:
        names = sorted(set(_as_list(cell)) - known)
        return ", ".join(names) if names else None

    return values.map(unknown).astype(object)


def with_span_columns(frame: pd.DataFrame, prompt_length: pd.Series) -> pd.DataFrame:
    """`frame` plus the prompt length (aligned to its rows) and whether the span is both-null or both-set."""
    frame = frame.copy()
    frame[PROMPT_LENGTH] = prompt_length.to_numpy()
    frame[SPAN_BOTH_OR_NEITHER] = frame["span_start"].isna().to_numpy() == frame["span_end"].isna().to_numpy()
    return frame


def span_checks() -> list[Check]:
    """0 <= span_start < span_end <= prompt length, and both null or both set (needs `with_span_columns`)."""
    import great_expectations as gx

    e = gx.expectations
    return [
        Check(
            e.ExpectColumnValuesToBeInSet(column=SPAN_BOTH_OR_NEITHER, value_set=[True]),
            description="span_start and span_end are both null or both set",
        ),
        Check(
            e.ExpectColumnValuesToBeBetween(column="span_start", min_value=0),
            description="span_start >= 0",
        ),
        Check(
            e.ExpectColumnPairValuesAToBeGreaterThanB(
                column_A="span_end",
                column_B="span_start",
                or_equal=False,
                ignore_row_if="either_value_is_missing",
            ),
            description="span_start < span_end (a span is not empty)",
        ),
        Check(
            e.ExpectColumnPairValuesAToBeGreaterThanB(
                column_A=PROMPT_LENGTH,
                column_B="span_end",
                or_equal=True,
                ignore_row_if="either_value_is_missing",
            ),
            description="span_end <= len(prompt) (the span lies inside the prompt)",
        ),
    ]


def pool_frame(pool: pd.DataFrame, taxonomy: Taxonomy) -> pd.DataFrame:
    """The pool plus the derived columns its suite checks (those whose inputs are present)."""
    frame = pool.copy()
    if "facts" in frame.columns:
        frame["unknown_facts"] = unknown_names(frame["facts"], taxonomy.facts)
    if "pillars" in frame.columns:
        frame["unknown_pillars"] = unknown_names(frame["pillars"], taxonomy.pillar_names)
    if {"prompt", "span_start", "span_end"} <= set(frame.columns):
        frame = with_span_columns(frame, frame["prompt"].str.len())
    return frame


def pool_checks(frame: pd.DataFrame) -> list[Check]:
    """Checks for a `pool_frame`; a missing contract column is reported once, by the column-set check."""
    import great_expectations as gx

    e = gx.expectations
    present = set(frame.columns)
    checks = [
        Check(
            # Every fixed column of the contract (a user's import_<label> columns may come on top).
            e.ExpectTableColumnsToMatchSet(column_set=[c.name for c in POOL.columns], exact_match=False),
            description="the pool contract's columns are present",
        )
    ]
    if "id" in present:
        checks += [
            Check(e.ExpectColumnValuesToNotBeNull(column="id"), description="every prompt has an id"),
            Check(e.ExpectColumnValuesToBeUnique(column="id"), description="ids are unique"),
            Check(
                e.ExpectColumnValuesToMatchRegex(column="id", regex=POOL_ID_PATTERN),
                description="ids are p_ + 16 hex of sha1(prompt)",
            ),
        ]
    if "prompt" in present:
        checks += [
            Check(e.ExpectColumnValuesToNotBeNull(column="prompt"), description="every row has a prompt"),
            Check(
                e.ExpectColumnValuesToMatchRegex(column="prompt", regex=r"\S"),
                description="prompts are non-empty (not blank or whitespace only)",
            ),
        ]
    if "source" in present:
        checks.append(
            Check(e.ExpectColumnValuesToNotBeNull(column="source"), description="every prompt has a source")
        )
    if "kind" in present:
        checks.append(
            Check(
                e.ExpectColumnValuesToBeInSet(column="kind", value_set=list(POOL_KINDS)),
                description=f"kind is one of {list(POOL_KINDS)}",
            )
        )
        checks.append(
            Check(e.ExpectColumnValuesToNotBeNull(column="kind"), description="every row has a kind")
        )
    if "unknown_facts" in present:
        checks.append(
            Check(
                e.ExpectColumnValuesToBeNull(column="unknown_facts"),
                description=f"facts are taxonomy facts ({relative_path('taxonomy')} `facts`)",
            )
        )
    if "unknown_pillars" in present:
        checks.append(
            Check(
                e.ExpectColumnValuesToBeNull(column="unknown_pillars"),
                description=f"pillars are taxonomy pillars ({relative_path('taxonomy')} `pillars`)",
            )
        )
    if PROMPT_LENGTH in present:
        checks += span_checks()
    return checks


def validate_pool(pool: pd.DataFrame, taxonomy: Taxonomy) -> SuiteResult:
    frame = pool_frame(pool, taxonomy)
    return run_checks("pool", frame, pool_checks(frame))

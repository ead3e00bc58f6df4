"""What every labeler shares: the pool rows it reads, the decision it makes per row, and the label frame.

A labeler (`rules`, `import`, `committee`) turns the pool into one `Decision` per row; `build_label_frame`
turns decisions into the `data/labels/<policy>.parquet` frame of docs/data-contracts.md, so the schema
(columns, order, dtypes, spans only on unsafe labels and inside the prompt) is enforced in one place whatever
the labeler.
"""

from __future__ import annotations

import abc
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from guardpolicy.contracts import POLICY_LABELS, POOL, check_frame, check_table
from guardpolicy.errors import InputError
from guardpolicy.labeling.policy import Policy
from guardpolicy.layout import relative_path
from guardpolicy.taxonomy import Taxonomy

# The pool columns a labeler reads (a benchmark's rows are labelled as a frame of these, too).
LABELER_COLUMNS = POOL.select(
    "id", "prompt", "source", "sources", "facts", "pillars", "span_start", "span_end"
)
IMPORT_PREFIX = POOL.family("label").prefix


@dataclass(frozen=True)
class PoolRow:
    """One pool row as the labelers see it: names as sets, the span as a checked pair (or None)."""

    id: str
    prompt: str
    source: str
    sources: frozenset[str]
    facts: frozenset[str]
    pillars: frozenset[str]
    span: tuple[int, int] | None


@dataclass(frozen=True)
class Decision:
    coarse: str
    pillars: frozenset[str]
    # Why: the rule that fired, the imported value, or the committee's vote tally.
    rule: str | None


@dataclass(frozen=True)
class LabelResult:
    frame: pd.DataFrame
    # Labeler-specific statistics (committee agreement, garbage answers, cache hits, ...).
    report: dict[str, Any] = field(default_factory=dict)


class Labeler(abc.ABC):
    """Applies one policy to a pool. Subclasses set `kind` and implement `decide`."""

    kind: str = ""

    def __init__(self, policy: Policy, taxonomy: Taxonomy, version: str) -> None:
        self.policy = policy
        self.taxonomy = taxonomy
        self.version = version

    def label(self, pool: pd.DataFrame, *, pool_file: str = "pool") -> LabelResult:
        """Label every pool row; `pool_file` only names the pool in error messages."""
        rows = pool_rows(pool, self.taxonomy, pool_file)
        decisions, report = self.decide(rows, pool, pool_file)
        frame = build_label_frame(
            rows,
            decisions,
            taxonomy=self.taxonomy,
            labeler=self.kind,
            policy=self.policy.name,
            policy_version=self.version,
        )
        return LabelResult(frame=frame, report=report)

    @abc.abstractmethod
    def decide(
        self, rows: Sequence[PoolRow], pool: pd.DataFrame, pool_file: str
    ) -> tuple[list[Decision], dict[str, Any]]:
        """One decision per row (same order), plus labeler-specific report entries."""


def is_missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _names(value: Any, pool_file: str, row_id: str, column: str) -> frozenset[str]:
    if is_missing(value):
        return frozenset()
    if isinstance(value, np.ndarray | list | tuple) and all(isinstance(v, str) for v in value):
        return frozenset(value)
    raise InputError(pool_file, f"expected a list of names, got {value!r}", row=row_id, field=column)


def _span(start: Any, end: Any, prompt: str, pool_file: str, row_id: str) -> tuple[int, int] | None:
    if is_missing(start) and is_missing(end):
        return None
    if is_missing(start) or is_missing(end):
        raise InputError(
            pool_file,
            "span_start and span_end must both be set or both be null",
            row=row_id,
            field="span_start",
        )
    start, end = int(start), int(end)
    if not 0 <= start < end <= len(prompt):
        raise InputError(
            pool_file,
            f"span [{start}, {end}) does not lie inside the prompt ({len(prompt)} characters)",
            row=row_id,
            field="span_start",
        )
    return start, end


def pool_rows(pool: pd.DataFrame, taxonomy: Taxonomy, pool_file: str) -> list[PoolRow]:
    """Check the pool columns the labelers rely on (their contract, then what the labelers need of the values)
    and convert each row; bad data names the row and the field."""
    check_frame(POOL, pool, pool_file, columns=LABELER_COLUMNS)
    rows: list[PoolRow] = []
    seen: set[str] = set()
    columns = [pool[c].tolist() for c in LABELER_COLUMNS]
    for number, (row_id, prompt, source, sources, facts, pillars, start, end) in enumerate(
        zip(*columns, strict=True), start=1
    ):
        if not isinstance(row_id, str) or not row_id or row_id in seen:
            raise InputError(
                pool_file, f"id must be a unique non-empty string, got {row_id!r}", row=number, field="id"
            )
        seen.add(row_id)
        if not isinstance(prompt, str) or not prompt:
            raise InputError(pool_file, "prompt must be a non-empty string", row=row_id, field="prompt")
        fact_names = _names(facts, pool_file, row_id, "facts")
        unknown_facts = sorted(fact_names - set(taxonomy.facts))
        if unknown_facts:
            raise InputError(pool_file, f"unknown fact(s) {unknown_facts}", row=row_id, field="facts")
        pillar_names = _names(pillars, pool_file, row_id, "pillars")
        unknown_pillars = sorted(pillar_names - set(taxonomy.pillars))
        if unknown_pillars:
            raise InputError(pool_file, f"unknown pillar(s) {unknown_pillars}", row=row_id, field="pillars")
        rows.append(
            PoolRow(
                id=row_id,
                prompt=prompt,
                source=source if isinstance(source, str) else "",
                sources=_names(sources, pool_file, row_id, "sources"),
                facts=fact_names,
                pillars=pillar_names,
                span=_span(start, end, prompt, pool_file, row_id),
            )
        )
    return rows


def label_columns(taxonomy: Taxonomy) -> list[str]:
    """The label file's columns (`guardpolicy.contracts.POLICY_LABELS`), pillar flags in taxonomy order."""
    return POLICY_LABELS.names(pillar=taxonomy.pillar_names)


def label_schema(taxonomy: Taxonomy) -> pa.Schema:
    """Its Arrow schema: a column without nulls is a non-nullable field."""
    return POLICY_LABELS.schema(pillar=taxonomy.pillar_names)


def build_label_frame(
    rows: Sequence[PoolRow],
    decisions: Sequence[Decision],
    *,
    taxonomy: Taxonomy,
    labeler: str,
    policy: str,
    policy_version: str,
) -> pd.DataFrame:
    """The label frame: same rows and order as the pool; spans carried only for unsafe labels."""
    if len(rows) != len(decisions):
        raise ValueError(f"{labeler}: {len(decisions)} decisions for {len(rows)} pool rows")
    for row, decision in zip(rows, decisions, strict=True):
        taxonomy.check_coarse(decision.coarse, f"{labeler} label of {row.id}")
        taxonomy.check_pillars(sorted(decision.pillars), f"{labeler} label of {row.id}")
    n = len(rows)
    spans = [
        row.span if taxonomy.is_unsafe(decision.coarse) else None
        for row, decision in zip(rows, decisions, strict=True)
    ]
    data: dict[str, Any] = {
        "id": pd.array([row.id for row in rows], dtype="str"),
        "coarse": pd.array([d.coarse for d in decisions], dtype="str"),
    }
    for name, column in zip(taxonomy.pillar_names, taxonomy.pillar_columns, strict=True):
        data[column] = np.fromiter((name in d.pillars for d in decisions), dtype=bool, count=n)
    data["span_start"] = pd.array([s[0] if s else None for s in spans], dtype="Int64")
    data["span_end"] = pd.array([s[1] if s else None for s in spans], dtype="Int64")
    data["labeler"] = pd.array([labeler] * n, dtype="str")
    data["policy"] = pd.array([policy] * n, dtype="str")
    data["policy_version"] = pd.array([policy_version] * n, dtype="str")
    data["rule"] = pd.array([d.rule for d in decisions], dtype="str")
    return pd.DataFrame(data, columns=label_columns(taxonomy))


def label_table(frame: pd.DataFrame, taxonomy: Taxonomy) -> pa.Table:
    """The label frame as an Arrow table with the contract's exact schema (for write_parquet), checked."""
    table = pa.Table.from_pandas(
        frame[label_columns(taxonomy)], schema=label_schema(taxonomy), preserve_index=False
    )
    policy = str(frame["policy"].iloc[0]) if len(frame) else "<policy>"
    check_table(
        POLICY_LABELS, table, relative_path("policy_labels", policy=policy), pillar=taxonomy.pillar_names
    )
    return table


def label_summary(frame: pd.DataFrame, taxonomy: Taxonomy) -> dict[str, Any]:
    """Class, pillar and rule counts of a label frame (every class and pillar listed, zeros included)."""
    class_counts = Counter(frame["coarse"].tolist())
    rule_counts = Counter("<null>" if is_missing(r) else r for r in frame["rule"].tolist())
    pillar_counts = {
        name: int(frame[column].sum())
        for name, column in zip(taxonomy.pillar_names, taxonomy.pillar_columns, strict=True)
    }
    return {
        "rows": len(frame),
        "class_counts": {c: class_counts.get(c, 0) for c in taxonomy.coarse_classes},
        "unsafe": int(sum(class_counts.get(c, 0) for c in taxonomy.unsafe_classes)),
        "pillar_counts": pillar_counts,
        # A pillar without positives cannot be learned or scored; say so where the labels are made.
        "pillars_without_examples": [name for name, count in pillar_counts.items() if count == 0],
        "rule_counts": dict(sorted(rule_counts.items())),
        "spans": int(frame["span_start"].notna().sum()),
    }

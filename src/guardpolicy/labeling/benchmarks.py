"""Benchmark prompts as labeler input: the facts file (`data/benchmark_facts.yaml`) and pool-like rows.

A labeler labels pool rows (`base.LABELER_COLUMNS`). To label a benchmark's prompts under a policy, each
prompt needs what a pool row carries: facts and pillars. They come from the facts file, which declares per
benchmark what its prompts are, in the format a pool source declares them (`facts` or `fact_rules`, `pillars`,
`pillars_from`; see data/pool.yaml). The rule classes and the per-record matching are the pool's own
(`guardpolicy.pool.registry`, `guardpolicy.pool.loaders`), so a rule means the same in both files.

The facts are a declared prior about each benchmark, never read off its gold: a rule that names the gold
column `expected_unsafe` is rejected.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from guardpolicy.config.core import from_mapping, load_yaml
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.labeling.base import LABELER_COLUMNS, is_missing
from guardpolicy.layout import relative_path
from guardpolicy.pool.loaders import facts_for_record, pillars_for_record
from guardpolicy.pool.registry import FACT_COMPOSED, FactRule, PillarMap, PoolFile, check_fact_rules
from guardpolicy.taxonomy import Taxonomy

FACTS_FILE = relative_path("benchmark_facts")
GOLD_COLUMN = "expected_unsafe"
TOP_LEVEL_KEYS = ("benchmarks",)
# `pillars_for_record` adds a file's own pillars; benchmark rows come from no pool file, so none are added.
_NO_FILE = PoolFile(format="parquet")


@dataclass(frozen=True)
class BenchmarkFacts:
    """What one benchmark's prompts are: facts (constant or by column rules), pillars, the harmful span."""

    name: str
    # Why these facts: what the benchmark's authors say its prompts are.
    rationale: str
    facts: tuple[str, ...] = ()
    fact_rules: tuple[FactRule, ...] = ()
    pillars: tuple[str, ...] = ()
    pillars_from: tuple[PillarMap, ...] = ()
    # A column holding the harmful part of the prompt verbatim; its last occurrence is the span.
    span_column: str | None = None

    def __post_init__(self) -> None:
        if not self.rationale.strip():
            raise ConfigError("rationale must say why the benchmark's prompts carry these facts")
        if bool(self.facts) == bool(self.fact_rules):
            raise ConfigError("give exactly one of facts, fact_rules")

    def columns(self) -> list[str]:
        """The benchmark columns the entry reads (top-level names), sorted."""
        names = {c for rule in self.fact_rules for c in (*rule.when, *rule.when_any)}
        names.update(pillar_map.column for pillar_map in self.pillars_from)
        if self.span_column is not None:
            names.add(self.span_column)
        return sorted({name.split(".")[0] for name in names})


def _check_entry(entry: BenchmarkFacts, taxonomy: Taxonomy, where: str) -> None:
    taxonomy.check_facts(entry.facts, f"{where}.facts")
    for i, rule in enumerate(entry.fact_rules):
        taxonomy.check_facts(rule.facts, f"{where}.fact_rules[{i}].facts")
        for key in ("when", "when_any"):
            if GOLD_COLUMN in getattr(rule, key):
                raise ConfigError(
                    f"{where}.fact_rules[{i}].{key}: facts are a prior about the benchmark and may not be "
                    f"read off its gold column {GOLD_COLUMN!r}"
                )
    # First match wins here as in the pool: a rule shadowed by an earlier one would silently count 0 prompts.
    check_fact_rules(entry.fact_rules, where)
    taxonomy.check_pillars(entry.pillars, f"{where}.pillars")
    for i, pillar_map in enumerate(entry.pillars_from):
        if pillar_map.column == GOLD_COLUMN:
            raise ConfigError(f"{where}.pillars_from[{i}].column: may not be the gold column {GOLD_COLUMN!r}")
        for value, pillars in pillar_map.map.items():
            taxonomy.check_pillars(pillars, f"{where}.pillars_from[{i}].map.{value}")
        taxonomy.check_pillars(pillar_map.default or (), f"{where}.pillars_from[{i}].default")


def parse_benchmark_facts(
    data: object, where: str, taxonomy: Taxonomy, benchmarks: Iterable[str] | None = None
) -> dict[str, BenchmarkFacts]:
    """Entries by benchmark name; with `benchmarks` (the registry's names) every one must have an entry."""
    if not isinstance(data, dict) or set(data) != set(TOP_LEVEL_KEYS):
        raise ConfigError(f"{where}: expected a single top-level key 'benchmarks'")
    entries = data["benchmarks"]
    if not isinstance(entries, dict) or not entries:
        raise ConfigError(f"{where}: 'benchmarks' must be a non-empty mapping of benchmark -> entry")
    parsed: dict[str, BenchmarkFacts] = {}
    for name, entry in entries.items():
        path = f"{where}: benchmarks.{name}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: expected a mapping")
        if "name" in entry:
            raise ConfigError(f"{path}: 'name' comes from the key and may not be set")
        facts = from_mapping(BenchmarkFacts, {"name": name, **entry}, where=path)
        _check_entry(facts, taxonomy, path)
        parsed[str(name)] = facts
    if benchmarks is not None:
        known = list(benchmarks)
        uncovered = [name for name in known if name not in parsed]
        if uncovered:
            raise ConfigError(f"{where}: benchmarks: no entry for registry benchmark(s) {uncovered}")
        unknown = sorted(set(parsed) - set(known))
        if unknown:
            raise ConfigError(f"{where}: benchmarks: {unknown} not in the benchmark registry; known: {known}")
    return parsed


def load_benchmark_facts(
    path: str | Path, taxonomy: Taxonomy, benchmarks: Iterable[str] | None = None
) -> dict[str, BenchmarkFacts]:
    return parse_benchmark_facts(load_yaml(path), str(path), taxonomy, benchmarks)


def _record(values: dict[str, Any]) -> dict[str, Any]:
    # A missing cell compares as "" in fact rules (pandas gives NaN for a missing string, which would read
    # as the text "nan").
    return {key: None if is_missing(value) else value for key, value in values.items()}


def _span(
    entry: BenchmarkFacts, record: dict[str, Any], prompt: str, file: str, row_id: str
) -> tuple[int, int] | None:
    if entry.span_column is None:
        return None
    part = record.get(entry.span_column)
    if not isinstance(part, str) or not part.strip():
        raise InputError(file, "the span column is empty", row=row_id, field=entry.span_column)
    start = prompt.rfind(part)
    if start < 0:
        raise InputError(
            file, "the span column's text does not occur in the prompt", row=row_id, field=entry.span_column
        )
    return start, start + len(part)


def benchmark_label_rows(frame: pd.DataFrame, entry: BenchmarkFacts, *, file: str) -> pd.DataFrame:
    """The benchmark's rows as labeler input (`LABELER_COLUMNS`), same order; `file` names it in errors.

    `source` and `sources` are the benchmark's name. A row no fact rule covers, or a column the entry reads
    that the benchmark lacks, is an InputError: a prior that skipped prompts would bias the agreement.
    """
    needed = ["id", "prompt", *entry.columns()]
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise InputError(
            file,
            f"column(s) {missing} named by the facts entry are not in the benchmark",
            row="header",
            field=missing[0],
        )
    ids, facts, pillars, starts, ends = [], [], [], [], []
    for values in frame.to_dict("records"):
        record = _record(values)
        row_id = str(record["id"])
        row_facts = facts_for_record(entry, record)  # type: ignore[arg-type]  # has PoolSource's fact fields
        if row_facts is None:
            conditions = sorted({c for rule in entry.fact_rules for c in (*rule.when, *rule.when_any)})
            shown = {c: record.get(c) for c in conditions}
            raise InputError(file, f"no fact rule covers this row ({shown})", row=row_id, field=conditions[0])
        row_pillars = pillars_for_record(entry, _NO_FILE, record, file, row_id)  # type: ignore[arg-type]
        span = _span(entry, record, str(record["prompt"]), file, row_id)
        if span is not None and FACT_COMPOSED not in row_facts:
            span = None
        ids.append(row_id)
        facts.append(list(row_facts))
        pillars.append(list(row_pillars))
        starts.append(span[0] if span else None)
        ends.append(span[1] if span else None)
    n = len(ids)
    rows = pd.DataFrame(
        {
            "id": pd.array(ids, dtype="str"),
            "prompt": pd.array(frame["prompt"].tolist(), dtype="str"),
            "source": pd.array([entry.name] * n, dtype="str"),
            "sources": pd.Series([[entry.name] for _ in range(n)], dtype=object),
            "facts": pd.Series(facts, dtype=object),
            "pillars": pd.Series(pillars, dtype=object),
            "span_start": pd.array(starts, dtype="Int64"),
            "span_end": pd.array(ends, dtype="Int64"),
        },
        columns=list(LABELER_COLUMNS),
    )
    return rows


def fact_counts(rows: pd.DataFrame) -> dict[str, int]:
    """How many rows carry each fact combination (`a+b`), sorted: what the prior said about a benchmark."""
    combos = Counter("+".join(sorted(f)) for f in rows["facts"].tolist())
    return dict(sorted(combos.items()))

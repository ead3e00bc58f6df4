"""From candidates to the pool: merge exact duplicates, drop over-long prompts, sample to the profile's size.

Everything here is pure (candidates in, rows / table / report out) and independent of the order in which
files listed their rows: merged rows are attributed by registry order, and sampling ranks rows by a seeded
hash of their id (itself a hash of the prompt).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from guardpolicy.contracts import POOL, check_table
from guardpolicy.layout import relative_path
from guardpolicy.pool.generate import seeded_rank
from guardpolicy.pool.rows import Candidate

ID_PREFIX = "p_"
ID_HEX = 16
# Every source with data keeps at least this many prompts (fewer only if it has fewer), even at pool size 300.
MIN_PER_SOURCE = 3
# ...and at least 1/(MIN_SHARE_DIVISOR x number of sources) of the pool, so no source is a token presence.
MIN_SHARE_DIVISOR = 5
_BISECTION_STEPS = 200


def prompt_id(prompt: str) -> str:
    return ID_PREFIX + hashlib.sha1(prompt.encode("utf-8")).hexdigest()[:ID_HEX]


@dataclass
class PoolRow:
    id: str
    prompt: str
    source: str
    kind: str
    sources: list[str]
    origins: list[str]
    facts: list[str]
    pillars: list[str]
    span: tuple[int, int] | None
    imports: dict[str, str | None] = field(default_factory=dict)

    @property
    def stratum(self) -> tuple[str, ...]:
        return tuple(self.facts)


def merge_duplicates(candidates: Sequence[Candidate], source_order: Sequence[str]) -> list[PoolRow]:
    """One row per distinct (stripped) prompt: facts, pillars, sources and origins united.

    The row's `source` and `kind` are those of the first source in registry order that had the prompt; its
    span is the first known one in that order. Rows come back sorted by id.
    """
    rank = {name: i for i, name in enumerate(source_order)}
    groups: dict[str, list[Candidate]] = defaultdict(list)
    for candidate in candidates:
        groups[candidate.prompt].append(candidate)
    rows: dict[str, PoolRow] = {}
    for prompt, members in groups.items():
        members = sorted(members, key=lambda c: (rank[c.source], c.origin))
        first = members[0]
        row_id = prompt_id(prompt)
        if row_id in rows:  # a 64-bit prefix collision: never silently merge two different prompts
            raise ValueError(f"id collision between two different prompts: {row_id}")
        imports: dict[str, str | None] = {}
        for member in members:
            for column, value in member.imports.items():
                if imports.get(column) is None:
                    imports[column] = value
        rows[row_id] = PoolRow(
            id=row_id,
            prompt=prompt,
            source=first.source,
            kind=first.kind,
            sources=sorted({m.source for m in members}),
            origins=sorted({m.origin for m in members}),
            facts=sorted({f for m in members for f in m.facts}),
            pillars=sorted({p for m in members for p in m.pillars}),
            span=next((m.span for m in members if m.span is not None), None),
            imports=imports,
        )
    return [rows[key] for key in sorted(rows)]


def split_too_long(rows: Sequence[PoolRow], max_chars: int) -> tuple[list[PoolRow], list[PoolRow]]:
    """(rows within `max_chars`, rows over it); long prompts are dropped, never truncated."""
    kept = [row for row in rows if len(row.prompt) <= max_chars]
    dropped = [row for row in rows if len(row.prompt) > max_chars]
    return kept, dropped


def allocate(
    supply: dict[str, int],
    weights: dict[str, float],
    total: int,
    *,
    caps: dict[str, int | None] | None = None,
    floor: int = MIN_PER_SOURCE,
) -> dict[str, int]:
    """Integer quotas summing to min(total, what the supply and caps allow), proportional to `weights`.

    The algorithm (capped proportional allocation, "water-filling"):

    1. Each key with supply gets an upper bound `u = min(supply, cap)` and a lower bound
       `l = min(u, floor)`, where `floor` is lowered to `total // keys` when the floors alone would exceed
       `total`.
    2. A common scale `lam` is found by bisection such that `sum(clamp(lam * weight, l, u)) = target`, with
       `target = min(total, sum(u))`: quotas are proportional to weight except where a bound binds, and what
       a bounded key cannot take is spread over the others in proportion to their weights.
    3. The real quotas are rounded down and the remaining units go to the largest fractional parts (ties
       by key order), never above `u`.

    Keys keep their insertion order for tie-breaking, so the result is fully deterministic.
    """
    caps = caps or {}
    keys = [key for key, n in supply.items() if n > 0]
    if not keys or total <= 0:
        return {key: 0 for key in supply}
    upper = {key: min(supply[key], caps.get(key) or supply[key]) for key in keys}
    target = min(total, sum(upper.values()))
    floor = min(floor, target // len(keys))
    lower = {key: min(upper[key], floor) for key in keys}

    def filled(scale: float) -> dict[str, float]:
        return {key: min(upper[key], max(lower[key], scale * weights.get(key, 0.0))) for key in keys}

    positive = [key for key in keys if weights.get(key, 0.0) > 0]
    high = max((upper[key] / weights[key] for key in positive), default=0.0)
    if sum(filled(high).values()) < target:
        # Only zero-weight keys could take more: the pool is what the weighted keys and floors allow.
        target = math.floor(sum(filled(high).values()))
    low = 0.0
    for _ in range(_BISECTION_STEPS):
        middle = (low + high) / 2
        if sum(filled(middle).values()) < target:
            low = middle
        else:
            high = middle
    real = filled(high)
    quotas = {key: min(upper[key], math.floor(real[key] + 1e-9)) for key in keys}
    remaining = target - sum(quotas.values())
    order = sorted(keys, key=lambda key: (-(real[key] - math.floor(real[key] + 1e-9)), keys.index(key)))
    while remaining > 0:
        progressed = False
        for key in order:
            if remaining == 0:
                break
            if quotas[key] < upper[key]:
                quotas[key] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            break
    return {key: quotas.get(key, 0) for key in supply}


def sample(
    rows: Sequence[PoolRow],
    pool_size: int,
    *,
    weights: dict[str, float],
    caps: dict[str, int | None],
    source_order: Sequence[str],
    seed: int,
) -> tuple[list[PoolRow], dict[str, int]]:
    """Deterministically pick `pool_size` rows: quotas by source, then by fact set within a source.

    Each row counts toward its `source` (the first in registry order that had it). Source quotas come from
    `allocate` (weights, caps, a minimum per source of max(MIN_PER_SOURCE, pool_size // (MIN_SHARE_DIVISOR x
    sources with data)), or all it has). A source's quota is split over its fact sets (e.g.
    ToxicChat's benign / toxic / jailbreak rows) in proportion to their sizes, each non-empty fact set
    getting at least one row when the quota allows, so a small stratum is not lost to chance. Within a
    stratum the rows with the lowest seeded hash of their id are taken. Returns (rows sorted by id, quotas).
    """
    by_source: dict[str, list[PoolRow]] = defaultdict(list)
    for row in rows:
        by_source[row.source].append(row)
    supply = {name: len(by_source.get(name, ())) for name in source_order}
    with_data = sum(1 for n in supply.values() if n > 0)
    floor = max(MIN_PER_SOURCE, pool_size // (MIN_SHARE_DIVISOR * max(1, with_data)))
    quotas = allocate(supply, weights, pool_size, caps=caps, floor=floor)
    chosen: list[PoolRow] = []
    for name in source_order:
        if quotas[name] == 0:
            continue
        strata: dict[tuple[str, ...], list[PoolRow]] = defaultdict(list)
        for row in by_source[name]:
            strata[row.stratum].append(row)
        ordered = dict(sorted(strata.items()))
        sizes = {key: len(members) for key, members in ordered.items()}
        split = allocate(sizes, {k: float(v) for k, v in sizes.items()}, quotas[name], floor=1)
        for key, members in ordered.items():
            members = sorted(members, key=lambda row: seeded_rank(seed, row.id))
            chosen.extend(members[: split[key]])
    return sorted(chosen, key=lambda row: row.id), quotas


def pool_table(rows: Sequence[PoolRow], import_columns: Sequence[str]) -> pa.Table:
    """The pool as the contract's Arrow table (`guardpolicy.contracts.POOL`), rows in the given order;
    checked against the contract."""
    strings = pa.list_(pa.string())
    columns: dict[str, pa.Array] = {
        "id": pa.array([r.id for r in rows], pa.string()),
        "prompt": pa.array([r.prompt for r in rows], pa.string()),
        "source": pa.array([r.source for r in rows], pa.string()),
        "sources": pa.array([r.sources for r in rows], strings),
        "origins": pa.array([r.origins for r in rows], strings),
        "kind": pa.array([r.kind for r in rows], pa.string()),
        "facts": pa.array([r.facts for r in rows], strings),
        "pillars": pa.array([r.pillars for r in rows], strings),
        "span_start": pa.array([r.span[0] if r.span else None for r in rows], pa.int64()),
        "span_end": pa.array([r.span[1] if r.span else None for r in rows], pa.int64()),
    }
    for column in import_columns:
        columns[column] = pa.array([r.imports.get(column) for r in rows], pa.string())
    table = pa.table(columns)
    check_table(POOL, table, relative_path("pool"))
    return table


def composition(rows: Sequence[PoolRow]) -> dict[str, dict[str, int]]:
    """Counts of the pool rows per kind, fact (a row counts once per fact) and fact set."""
    return {
        "per_kind": dict(sorted(Counter(r.kind for r in rows).items())),
        "per_fact": dict(sorted(Counter(f for r in rows for f in r.facts).items())),
        "per_fact_set": dict(sorted(Counter("+".join(r.facts) or "(none)" for r in rows).items())),
    }


@dataclass
class SourceOutcome:
    """What loading or generating one source gave, for the report."""

    kind: str
    weight: float
    cap: int | None
    candidates: int = 0
    missing_files: dict[str, str] = field(default_factory=dict)
    reason: str | None = None  # why a source gave nothing (all files missing, no compose inputs)
    skipped: dict[str, int] = field(default_factory=dict)  # rows_read, filtered_out, empty_prompt, ...


def pool_report(
    outcomes: dict[str, SourceOutcome],
    *,
    candidates: int,
    merged: Sequence[PoolRow],
    too_long: Sequence[PoolRow],
    selected: Sequence[PoolRow],
    quotas: dict[str, int],
    pool_size_requested: int,
    settings: dict[str, object],
) -> dict[str, object]:
    """reports/pool.json: totals, per source (available, after dedup, kept, missing + reason), composition."""
    after_dedup = Counter(row.source for row in merged)
    dropped = Counter(row.source for row in too_long)
    kept = Counter(row.source for row in selected)
    contributes = Counter(name for row in selected for name in row.sources)
    per_source: dict[str, dict[str, Any]] = {}
    for name, outcome in outcomes.items():
        status = "ok"
        if outcome.candidates == 0:
            status = "missing" if outcome.missing_files or outcome.reason else "empty"
        elif outcome.missing_files:
            status = "partial"
        per_source[name] = {
            "kind": outcome.kind,
            "status": status,
            "reason": outcome.reason
            or ("; ".join(f"{f}: {r}" for f, r in outcome.missing_files.items()) or None),
            "missing_files": dict(sorted(outcome.missing_files.items())),
            "weight": outcome.weight,
            "cap": outcome.cap,
            **outcome.skipped,
            "available": outcome.candidates,
            "after_dedup": after_dedup.get(name, 0),
            "dropped_too_long": dropped.get(name, 0),
            "quota": quotas.get(name, 0),
            "kept": kept.get(name, 0),
            "kept_including_merged": contributes.get(name, 0),
        }
    counts = composition(selected)
    return {
        "pool_size_requested": pool_size_requested,
        "settings": settings,
        "totals": {
            "candidates": candidates,
            "distinct_prompts": len(merged),
            "duplicates_merged": candidates - len(merged),
            "dropped_too_long": len(too_long),
            "eligible": len(merged) - len(too_long),
            "pool_size": len(selected),
            "sources_declared": len(outcomes),
            "sources_with_data": sum(1 for o in outcomes.values() if o.candidates > 0),
            "sources_missing": sorted(n for n, s in per_source.items() if s["status"] == "missing"),
            "sources_represented": len({row.source for row in selected}),
        },
        "per_source": per_source,
        **counts,
    }

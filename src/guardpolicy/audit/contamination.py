"""Contamination between the pool and the public benchmarks, decontaminated copies, and pool-internal leakage.

Pure: frames in, numbers and masks out; `guardpolicy.stages.audit` reads and writes the files.

Per benchmark the report counts prompts with an exact (normalised) match in the pool (`exact`), prompts with
a near-duplicate but no exact match (`near_duplicate_only`) and either (`any_overlap` = the sum of the two),
each against the whole pool and against each split (a prompt can match in several splits, so the per-split
counts need not add up to the whole-pool count), and `by_pool_source`: per pool source (pool column `source`),
how many benchmark prompts have an exact or near-duplicate match there, which says where contamination comes
from (a prompt matched in two sources counts in both, so these can add up to more than `any_overlap`).
Decontamination drops benchmark prompts that overlap the
WHOLE pool, not only train: any pool prompt may end up in some model's training data (the splits are re-drawn
with another seed, the teacher sees val), so a benchmark is clean only if the pool has never seen its prompts.
The leakage check asks the same question inside the pool: does a val or calib prompt have a copy in train?
With group-aware splits (`guardpolicy.audit.groups`) it must find none; the report keeps it as the proof.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from guardpolicy.audit.groups import GROUP_COLUMN, group_summary
from guardpolicy.audit.overlap import (
    OverlapIndex,
    PreparedTexts,
    lsh_bands,
    prepare_texts,
    summarise_matches,
)
from guardpolicy.audit.splits import SPLITS
from guardpolicy.config.audit import AuditConfig
from guardpolicy.contracts import POOL, SPLIT

log = logging.getLogger(__name__)

EXAMPLE_COUNT = 5
RATE_DIGITS = 6
# The kinds of overlap the report counts, in reading order.
OVERLAP_KINDS = ("exact", "near_duplicate_only", "any_overlap")


@dataclass(frozen=True)
class BenchmarkAudit:
    """One benchmark's audit: the report entry, which rows its clean copy drops, and the per-row matches."""

    numbers: dict
    # shape (n,): True for a row the clean copy drops, aligned with the benchmark frame's rows.
    drop: np.ndarray
    matches: pd.DataFrame


@dataclass(frozen=True)
class ContaminationResult:
    report: dict
    benchmarks: dict[str, BenchmarkAudit]


def rate(count: int, total: int) -> float | None:
    """count / total rounded for the report; None (JSON null) when there is nothing to divide by."""
    return round(count / total, RATE_DIGITS) if total else None


def overlap_counts(summary: pd.DataFrame) -> dict:
    """exact / near_duplicate_only / any_overlap counts and rates from `summarise_matches` output."""
    n = len(summary)
    counts = {kind: int(summary[kind].sum()) for kind in OVERLAP_KINDS}
    return {"n": n, **counts, **{f"{kind}_rate": rate(counts[kind], n) for kind in OVERLAP_KINDS}}


def overlap_examples(summary: pd.DataFrame, count: int = EXAMPLE_COUNT) -> dict:
    """The first `count` ids (sorted) of each overlap kind, with the pool id matched and the similarity."""
    examples = {}
    for kind in ("exact", "near_duplicate_only"):
        chosen = summary[summary[kind]].sort_index().head(count)
        examples[kind] = [
            {"id": str(item_id), "pool_id": str(row.match_id), "similarity": round(float(row.similarity), 4)}
            for item_id, row in chosen.iterrows()
        ]
    return examples


def drop_mask(summary: pd.DataFrame, mode: str) -> np.ndarray:
    """Rows a clean copy drops: exact matches (`exact`), or any overlap (`exact_and_near`)."""
    if mode == "exact":
        return summary["exact"].to_numpy(dtype=bool)
    if mode == "exact_and_near":
        return summary["any_overlap"].to_numpy(dtype=bool)
    raise ValueError(f"unknown decontaminate mode {mode!r}; expected 'exact' or 'exact_and_near'")


def decontaminate(benchmark: pd.DataFrame, summary: pd.DataFrame, mode: str) -> pd.DataFrame:
    """The benchmark without the rows that overlap the pool (per `mode`); same columns, original order."""
    if len(benchmark) != len(summary):
        raise ValueError(f"decontaminate: {len(benchmark)} benchmark rows but {len(summary)} summary rows")
    return benchmark[~drop_mask(summary, mode)]


def pool_source_counts(pairs: pd.DataFrame, source_of: Mapping[str, str]) -> dict[str, int]:
    """Per pool source, how many queries have at least one exact or near-duplicate match in it.

    `pairs` as from `OverlapIndex.query`; only non-zero sources, most matched first (ties by name). A query
    matched in two sources counts in both.
    """
    sources = pairs["corpus_id"].map(source_of)
    if sources.isna().any():
        unknown = sorted(pairs.loc[sources.isna(), "corpus_id"].unique())
        raise ValueError(f"pool_source_counts: no source for pool id(s) {unknown[:5]}")
    per_query = pd.DataFrame({"query_id": pairs["query_id"], "source": sources}).drop_duplicates()
    counts = per_query["source"].value_counts()
    return {
        str(source): int(count) for source, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    }


def _split_numbers(pairs: pd.DataFrame, n: int, split_of: Mapping[str, str]) -> dict:
    """Per split: how many queries have an exact match / only a near-duplicate / either, in that split."""
    with_split = pairs.assign(split=pairs["corpus_id"].map(split_of))
    numbers = {}
    for split in SPLITS:
        in_split = with_split[with_split["split"] == split]
        exact_ids = set(in_split.loc[in_split["exact"], "query_id"])
        any_ids = set(in_split["query_id"])
        counts = {
            "exact": len(exact_ids),
            "near_duplicate_only": len(any_ids - exact_ids),
            "any_overlap": len(any_ids),
        }
        numbers[split] = {**counts, **{f"{kind}_rate": rate(counts[kind], n) for kind in OVERLAP_KINDS}}
    return numbers


def audit_benchmark(
    benchmark: pd.DataFrame,
    index: OverlapIndex,
    split_of: Mapping[str, str],
    source_of: Mapping[str, str],
    config: AuditConfig,
    name: str = "benchmark",
) -> BenchmarkAudit:
    """Overlap of one benchmark (columns id, prompt) with the indexed pool; ids must be unique.

    `split_of` and `source_of` map every pool id to its split and its source.
    """
    ids = benchmark["id"].astype(str).tolist()
    if len(set(ids)) != len(ids):
        duplicated = sorted(pd.Series(ids)[pd.Series(ids).duplicated()].unique())
        raise ValueError(f"{name}: duplicate benchmark id(s) {duplicated[:5]}")
    queries = prepare_texts(
        ids, benchmark["prompt"].tolist(), config.normalise, config.near_duplicate, label=name
    )
    pairs = index.query(queries, label=name)
    summary = summarise_matches(pairs, ids)
    drop = drop_mask(summary, config.decontaminate)
    numbers = {
        **overlap_counts(summary),
        "by_split": _split_numbers(pairs, len(ids), split_of),
        "by_pool_source": pool_source_counts(pairs, source_of),
        "dropped": int(drop.sum()),
        "clean_n": int((~drop).sum()),
        "examples": overlap_examples(summary),
    }
    return BenchmarkAudit(numbers=numbers, drop=drop, matches=summary)


def _totals(per_benchmark: Mapping[str, dict]) -> dict:
    n = sum(numbers["n"] for numbers in per_benchmark.values())
    totals: dict = {"n": n, "benchmarks": len(per_benchmark)}
    for kind in OVERLAP_KINDS:
        totals[kind] = sum(numbers[kind] for numbers in per_benchmark.values())
        totals[f"{kind}_rate"] = rate(totals[kind], n)
    totals["by_split"] = {}
    for split in SPLITS:
        split_totals = {
            kind: sum(numbers["by_split"][split][kind] for numbers in per_benchmark.values())
            for kind in OVERLAP_KINDS
        }
        totals["by_split"][split] = {
            **split_totals,
            **{f"{kind}_rate": rate(split_totals[kind], n) for kind in OVERLAP_KINDS},
        }
    by_source: dict[str, int] = {}
    for numbers in per_benchmark.values():
        for source, count in numbers["by_pool_source"].items():
            by_source[source] = by_source.get(source, 0) + count
    totals["by_pool_source"] = dict(sorted(by_source.items(), key=lambda kv: (-kv[1], kv[0])))
    totals["dropped"] = sum(numbers["dropped"] for numbers in per_benchmark.values())
    totals["clean_n"] = sum(numbers["clean_n"] for numbers in per_benchmark.values())
    return totals


def pool_leakage(prepared_pool: PreparedTexts, splits: Sequence[str], config: AuditConfig) -> dict:
    """For val and calib: how many prompts have an exact or near-duplicate copy in train."""
    split_array = np.asarray(splits, dtype=object)
    train = prepared_pool.select(np.flatnonzero(split_array == "train"))
    index = OverlapIndex(train, config.near_duplicate)
    leakage = {}
    for split in SPLITS[1:]:
        queries = prepared_pool.select(np.flatnonzero(split_array == split))
        summary = summarise_matches(index.query(queries, label=f"{split} vs train"), queries.ids)
        leakage[split] = {**overlap_counts(summary), "examples": overlap_examples(summary)}
    return leakage


def audit_settings(config: AuditConfig) -> dict:
    settings = dataclasses.asdict(config)
    near = config.near_duplicate
    if near.method == "minhash":
        bands, rows = lsh_bands(near.threshold, near.num_perm)
        settings["near_duplicate"]["lsh_bands"] = bands
        settings["near_duplicate"]["lsh_rows"] = rows
    settings["splits"]["stratify_by"] = list(config.splits.stratify_by)
    return settings


# The audit's pool frame: the pool's prompts with the group and split the audit gives them.
AUDIT_COLUMNS = (*POOL.select("id", "prompt", "source"), *SPLIT.select(GROUP_COLUMN, "split"))


def audit_contamination(
    pool: pd.DataFrame,
    benchmarks: Mapping[str, pd.DataFrame],
    config: AuditConfig,
    prepared_pool: PreparedTexts | None = None,
) -> ContaminationResult:
    """The whole audit: `pool` has columns id, prompt, source, group, split; each benchmark has id and prompt.

    `prepared_pool`, the pool's texts as `prepare_texts` made them for the grouping (same ids in the same
    order), saves preparing them again. Returns the report (settings, per-benchmark numbers, totals, split
    sizes, near-duplicate groups, leakage) and, per benchmark, the rows its clean copy drops.
    """
    missing = [column for column in AUDIT_COLUMNS if column not in pool.columns]
    if missing:
        raise ValueError(f"audit_contamination: pool lacks column(s) {missing}")
    pool_ids = pool["id"].astype(str).tolist()
    if prepared_pool is None:
        prepared_pool = prepare_texts(
            pool_ids, pool["prompt"].tolist(), config.normalise, config.near_duplicate, label="pool"
        )
    elif list(prepared_pool.ids) != pool_ids:
        raise ValueError(
            "audit_contamination: prepared_pool does not hold the pool's ids in the pool's order"
        )
    index = OverlapIndex(prepared_pool, config.near_duplicate)
    split_of = dict(zip(pool_ids, pool["split"].astype(str), strict=True))
    source_of = dict(zip(pool_ids, pool["source"].astype(str), strict=True))
    audits = {}
    for name, frame in benchmarks.items():
        audits[name] = audit_benchmark(frame, index, split_of, source_of, config, name=name)
        numbers = audits[name].numbers
        log.info(
            "audit %s: %d prompts, %d exact, %d near-duplicate only, %d dropped",
            name,
            numbers["n"],
            numbers["exact"],
            numbers["near_duplicate_only"],
            numbers["dropped"],
        )
    per_benchmark = {name: audit.numbers for name, audit in audits.items()}
    split_sizes = pool["split"].astype(str).value_counts()
    report = {
        "settings": audit_settings(config),
        "pool": {"n": len(pool)},
        "splits": {split: int(split_sizes.get(split, 0)) for split in SPLITS},
        "groups": group_summary(pool[GROUP_COLUMN].astype(str)),
        "benchmarks": per_benchmark,
        "totals": _totals(per_benchmark),
        "leakage": pool_leakage(prepared_pool, pool["split"].astype(str).tolist(), config),
    }
    return ContaminationResult(report=report, benchmarks=audits)


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _sources_cell(by_pool_source: Mapping[str, int]) -> str:
    ordered = sorted(by_pool_source.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{source} {count}" for source, count in ordered) or "–"


def contamination_markdown(report: Mapping) -> str:
    """The report as readable Markdown tables (reports/contamination.md)."""
    settings = report["settings"]
    near = settings["near_duplicate"]
    lines = [
        "# Contamination audit",
        "",
        f"Pool: {report['pool']['n']} prompts; splits "
        + ", ".join(f"{split} {report['splits'][split]}" for split in SPLITS)
        + ".",
        f"Near-duplicates: {near['method']}, Jaccard ≥ {near['threshold']} on {near['shingle']} "
        f"{near['shingle_size']}-grams of the normalised text. Clean copies drop: "
        f"`{settings['decontaminate']}` overlap with the whole pool.",
        "",
        "*exact*: the normalised prompt equals a pool prompt; *near only*: a near-duplicate but no exact"
        " match; *any* = exact + near only. Per-split columns count overlap with that split alone."
        " *Matched in pool source*: benchmark prompts with a match (exact or near) in that pool source; a"
        " prompt matched in two sources counts in both.",
        "",
        "| benchmark | n | exact | near only | any | any in train | any in val | any in calib | dropped "
        "| clean n | matched in pool source |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]

    def row(name: str, numbers: Mapping) -> str:
        cells = [
            name,
            str(numbers["n"]),
            *(f"{numbers[kind]} ({_percent(numbers[f'{kind}_rate'])})" for kind in OVERLAP_KINDS),
            *(str(numbers["by_split"][split]["any_overlap"]) for split in SPLITS),
            str(numbers["dropped"]),
            str(numbers["clean_n"]),
            _sources_cell(numbers["by_pool_source"]),
        ]
        return "| " + " | ".join(cells) + " |"

    for name, numbers in report["benchmarks"].items():
        lines.append(row(name, numbers))
    lines.append(row("**total**", report["totals"]))
    groups = report["groups"]
    lines += [
        "",
        "## Leakage inside the pool (copies of val / calib prompts in train)",
        "",
        f"Splits keep near-duplicate groups whole: {groups['groups']} groups, "
        f"{groups['multi_member_groups']} of them with several prompts "
        f"({groups['prompts_in_multi_member_groups']} prompts, the largest {groups['largest_group']}), "
        "so every count below must be 0.",
        "",
        "| split | n | exact | near only | any |",
        "|---|---:|---:|---:|---:|",
    ]
    for split, numbers in report["leakage"].items():
        cells = [split, str(numbers["n"])] + [
            f"{numbers[kind]} ({_percent(numbers[f'{kind}_rate'])})" for kind in OVERLAP_KINDS
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"

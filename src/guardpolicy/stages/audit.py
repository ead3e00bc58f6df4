"""Stage audit: contamination between the pool and every benchmark, clean benchmark copies, and the splits.

The splits are group-aware: near-duplicate groups are found inside the pool first and each goes whole into
one split, so val and calib have no exact or near-duplicate copy in train (the report's `leakage` shows it).

Reads params `audit` and the policy names (`policies`), the pool, each policy's labels and every registry
benchmark; writes data/splits/{train,val,calib}.parquet, data/benchmarks_clean/<name>.parquet (the directory
is rewritten whole, so a benchmark removed from the registry leaves no stale copy), reports/contamination.json
(a DVC metric) and reports/contamination.md. The computing is in `guardpolicy.audit`; this module does the
I/O.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path

import pandas as pd
import pyarrow as pa

from guardpolicy.audit.contamination import AUDIT_COLUMNS, audit_contamination, contamination_markdown
from guardpolicy.audit.groups import GROUP_COLUMN, duplicate_groups, group_summary
from guardpolicy.audit.overlap import prepare_texts
from guardpolicy.audit.splits import SPLITS, assign_splits, coarse_column, strata_columns
from guardpolicy.config.audit import AUDIT
from guardpolicy.config.core import ParamsFile
from guardpolicy.config.policies import POLICIES
from guardpolicy.contracts import CLEAN_BENCHMARK, SPLIT, check_table, write_table
from guardpolicy.data.registry import load_registry
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.io import atomic_dir, read_parquet_table, write_json, write_parquet, write_text
from guardpolicy.layout import Layout

log = logging.getLogger(__name__)


def _check_ids(frame: pd.DataFrame, path: Path, text_column: str | None = None) -> None:
    """Ids must be present and unique, and the text column (if named) non-empty; rows are 1-based."""
    for column in ("id",) + ((text_column,) if text_column else ()):
        values = frame[column]
        bad = values.isna() | (values.astype(str).str.strip() == "")
        if bad.any():
            raise InputError(
                path, "empty or missing value", row=int(bad.to_numpy().argmax()) + 1, field=column
            )
    duplicated = frame["id"].duplicated()
    if duplicated.any():
        row = int(duplicated.to_numpy().argmax())
        raise InputError(path, f"duplicate id {frame['id'].iloc[row]!r}", row=row + 1, field="id")


def read_pool(pool_file: str | Path) -> pd.DataFrame:
    path = Path(pool_file)
    table = read_parquet_table(path, "run `dvc repro pool` first", ("id", "prompt", "source"))
    pool = table.select(["id", "prompt", "source"]).to_pandas()
    _check_ids(pool, path, text_column="prompt")
    return pool


def join_labels(
    pool: pd.DataFrame, policies: list[str], labels_dir: str | Path, pool_file: str
) -> pd.DataFrame:
    """The pool with one `coarse_<policy>` column per policy; each label file must cover exactly the pool."""
    joined = pool.copy()
    pool_ids = set(pool["id"])
    for policy in policies:
        path = Path(labels_dir) / f"{policy}.parquet"
        hint = f"run `dvc repro label@{policy}` first"
        labels = read_parquet_table(path, hint, ("id", "coarse")).select(["id", "coarse"]).to_pandas()
        _check_ids(labels, path)
        missing_coarse = labels["coarse"].isna()
        if missing_coarse.any():
            raise InputError(
                path, "missing label", row=int(missing_coarse.to_numpy().argmax()) + 1, field="coarse"
            )
        foreign = ~labels["id"].isin(pool_ids)
        if foreign.any():
            row = int(foreign.to_numpy().argmax())
            raise InputError(
                path,
                f"id {labels['id'].iloc[row]!r} is not in the pool {pool_file}; "
                f"re-run `dvc repro label@{policy}`",
                row=row + 1,
                field="id",
            )
        unlabelled = sorted(pool_ids - set(labels["id"]))
        if unlabelled:
            raise InputError(
                path,
                f"{len(unlabelled)} pool id(s) of {pool_file} have no label (e.g. {unlabelled[:3]}); "
                f"re-run `dvc repro label@{policy}`",
                field="id",
            )
        coarse = labels.set_index("id")["coarse"].astype(str)
        joined[coarse_column(policy)] = joined["id"].map(coarse)
    return joined


def read_benchmarks(registry_file: str | Path, benchmarks_dir: str | Path) -> dict[str, pa.Table]:
    """Every registry benchmark as fetched (an absent one is an empty table with the full schema)."""
    tables = {}
    for name in load_registry(registry_file):
        path = Path(benchmarks_dir) / f"{name}.parquet"
        table = read_parquet_table(path, f"run `dvc repro fetch@{name}` first", ("id", "prompt"))
        _check_ids(table.select(["id", "prompt"]).to_pandas(), path, text_column="prompt")
        tables[name] = table
    return tables


def split_table(frame: pd.DataFrame, policies: list[str]) -> pa.Table:
    columns = SPLIT.names(policy=policies)
    ordered = frame.sort_values("id", kind="stable")[columns]
    schema = SPLIT.schema(mark_required=False, policy=policies)
    return pa.Table.from_pandas(ordered, schema=schema, preserve_index=False)


def replace_directory(target: str | Path, tables: Mapping[str, pa.Table]) -> None:
    """Write `<name>.parquet` for every table into a fresh directory and swap it in for `target`.

    Files of benchmarks no longer in the registry vanish with the old directory; a failure part-way leaves the
    old directory untouched and names the file under `target` (io.atomic_dir's write boundary).
    """
    with atomic_dir(target) as staging:
        for name, table in tables.items():
            check_table(CLEAN_BENCHMARK, table, Path(target) / f"{name}.parquet")
            write_parquet(staging / f"{name}.parquet", table)


def audit(layout: Layout | None = None) -> dict:
    """Run the audit; returns the report written to reports/contamination.json (and its Markdown twin beside
    it). Paths from `layout` (default: this repository)."""
    started = time.perf_counter()
    layout = layout or Layout.discover()
    params_file = layout.relative("params")
    pool_file = layout.path("pool")
    splits_dir, clean_dir, report = (
        layout.path("splits"),
        layout.path("clean_benchmarks"),
        layout.path("contamination"),
    )
    params = ParamsFile.read(layout.path("params"))
    config = params.load(AUDIT)
    policies = list(params.load(POLICIES))
    unknown = [policy for policy in config.splits.stratify_by if policy not in policies]
    if unknown:
        raise ConfigError(
            f"{params_file}: audit.splits.stratify_by: unknown polic(ies) {unknown}; defined: {policies}"
        )
    pool = join_labels(read_pool(pool_file), policies, layout.path("labels"), str(pool_file))
    tables = read_benchmarks(layout.path("benchmark_registry"), layout.path("benchmarks"))
    log.info(
        "audit: pool %s (%d prompts), labels of %s, %d benchmarks (%d prompts)",
        pool_file,
        len(pool),
        policies,
        len(tables),
        sum(table.num_rows for table in tables.values()),
    )

    # Prepared once: the grouping and the contamination audit match against the same pool texts.
    prepared_pool = prepare_texts(
        pool["id"].tolist(), pool["prompt"].tolist(), config.normalise, config.near_duplicate, label="pool"
    )
    pool[GROUP_COLUMN] = duplicate_groups(prepared_pool, config.near_duplicate).to_numpy()
    pool["split"] = assign_splits(pool, config.splits)
    strata = pool[strata_columns(config.splits)].drop_duplicates()
    groups = group_summary(pool[GROUP_COLUMN])
    log.info(
        "audit: %d near-duplicate groups (%d with several prompts, largest %d), %d strata; %s",
        groups["groups"],
        groups["multi_member_groups"],
        groups["largest_group"],
        len(strata),
        pool["split"].value_counts().to_dict(),
    )

    benchmarks = {name: table.select(["id", "prompt"]).to_pandas() for name, table in tables.items()}
    result = audit_contamination(
        pool[list(AUDIT_COLUMNS)],
        benchmarks,
        config,
        prepared_pool=prepared_pool,
    )
    payload = result.report
    payload["strata"] = len(strata)
    payload["settings"]["policies"] = policies

    for split in SPLITS:
        write_table(
            SPLIT,
            layout.path("split", split=split),
            split_table(pool[pool["split"] == split], policies),
            policy=policies,
        )
    clean_tables = {
        name: table.filter(pa.array(~result.benchmarks[name].drop, type=pa.bool_()))
        for name, table in tables.items()
    }
    replace_directory(clean_dir, clean_tables)
    write_json(report, payload)
    write_text(layout.path("contamination_markdown"), contamination_markdown(payload))
    totals = payload["totals"]
    log.info(
        "audit: %d benchmark prompts, %d exact, %d near-duplicate only, %d dropped -> %s, %s, %s (%.1f s)",
        totals["n"],
        totals["exact"],
        totals["near_duplicate_only"],
        totals["dropped"],
        splits_dir,
        clean_dir,
        report,
        time.perf_counter() - started,
    )
    return payload

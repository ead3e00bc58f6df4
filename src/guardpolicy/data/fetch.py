"""The fetch@<benchmark> operation: acquire, verify, normalise and write one benchmark.

Sources are tried in registry order (the original first, derived copies after it); for each file the local
mirror is preferred and the pinned URL is the fallback. A file of format `dataset` is a Hugging Face dataset
(guardpolicy.data.hub_datasets: a hub id at a pinned commit or a local save_to_disk folder), whose rows take
the same column mapping and checks as a file's. The first source whose files can all be had wins.
If none can, the benchmark is written as an empty table with the full schema and marked ``missing`` with the
reasons, so the rest of the pipeline runs on what is present. Bad bytes or bad rows are hard errors, and so
is a source whose row count or label balance differs from the registry's (checked before anything is written),
or whose filter or label column holds values of another type or encoding than the registry's.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from guardpolicy.contracts import BENCHMARK, check_table
from guardpolicy.data.acquire import LocalFile, Unavailable, download, from_mirror
from guardpolicy.data.hub_datasets import LoadedDataset, load_dataset_rows
from guardpolicy.data.normalise import assign_ids, empty_table, normalise_file, to_table
from guardpolicy.data.readers import read_records
from guardpolicy.data.registry import BenchmarkSpec, FileSpec, SourceSpec
from guardpolicy.errors import InputError
from guardpolicy.io import write_json, write_parquet

log = logging.getLogger(__name__)

STATUS_OK = "ok"  # the original upstream bytes (sha256-verified where the registry pins one)
STATUS_DERIVED = (
    "derived"  # a derived copy (re-export, re-split): content matches, bytes are not the original
)
STATUS_MISSING = "missing"  # could be had neither from the mirror nor by download


@dataclass(frozen=True)
class FetchResult:
    table: pa.Table
    meta: dict[str, Any]


def _acquire_file(
    file: FileSpec, mirror_dir: Path, allow_download: bool, timeout_s: float, work_dir: Path, root: Path
) -> LocalFile | LoadedDataset:
    if file.dataset is not None:
        return load_dataset_rows(file.dataset, root=root, allow_download=allow_download)
    try:
        return from_mirror(file, mirror_dir)
    except Unavailable as mirror_reason:
        if not allow_download:
            raise Unavailable(f"{file.display_name}: {mirror_reason}; downloads are disabled") from None
        if file.url is None and file.hf is None:
            raise Unavailable(f"{file.display_name}: {mirror_reason}; no download URL") from None
        try:
            return download(file, work_dir, timeout_s)
        except Unavailable as download_reason:
            raise Unavailable(f"{file.display_name}: {mirror_reason}; {download_reason}") from None


def _build(
    spec: BenchmarkSpec, source: SourceSpec, files: list[tuple[FileSpec, LocalFile | LoadedDataset]]
) -> pa.Table:
    rows: list[dict[str, Any]] = []
    displays = []
    for file, local in files:
        display = local.origin.removeprefix("mirror:")
        displays.append(display)
        column_types = None
        if isinstance(local, LoadedDataset):
            columns, records = local.columns, local.records
        else:
            columns, records = read_records(local.path, file.format, display)
            if file.format == "parquet":
                column_types = parquet_column_types(local.path)
        rows.extend(
            normalise_file(spec, file, columns, records, display, column_types, sole_file=len(files) == 1)
        )
    assign_ids(spec, rows)
    table = to_table(spec, rows)
    # Last, so a row-level fault (a duplicate id, a broken pair) is reported where it is, not as a count.
    check_counts(spec, source, displays, rows)
    return table


def parquet_column_types(path: Path) -> dict[str, str]:
    """A parquet file's column types as its user knows them (int8, large_string, categorical string), for
    messages about a column whose values cannot match the registry's. Read after the records, which already
    refused a file that cannot be read."""
    return {
        field.name: (
            f"categorical {field.type.value_type}" if pa.types.is_dictionary(field.type) else str(field.type)
        )
        for field in pq.read_schema(path)
    }


def check_counts(
    spec: BenchmarkSpec, source: SourceSpec, displays: list[str], rows: list[dict[str, Any]]
) -> None:
    """The registry's row count and label balance must hold before anything is written.

    A file cut at a row boundary still parses, and without a pinned sha256 (WildGuardMix, SALAD base) or
    after a re-pin nothing else notices; the counts are the last check that the bytes are the whole file.
    """
    per_file = {display: [0, 0] for display in displays}  # display -> [rows, unsafe rows]
    for row in rows:
        per_file[row["source_file"]][0] += 1
        per_file[row["source_file"]][1] += bool(row["expected_unsafe"])
    found = len(rows)
    unsafe = sum(counts[1] for counts in per_file.values())
    where = ", ".join(displays)
    breakdown = "; ".join(f"{display}: {n} row(s), {u} unsafe" for display, (n, u) in per_file.items())
    # The registry is the one place to accept other counts (a re-pin of changed upstream data), never a flag.
    fix = (
        "nothing was written. If the upstream data really changed, update expected_rows / "
        f"label.expected_unsafe_rows of {spec.name!r} in the registry"
    )
    if found != spec.expected_rows:
        raise InputError(
            where,
            f"benchmark {spec.name!r} (source {source.name!r}): found {found} row(s), the registry expects "
            f"{spec.expected_rows} ({breakdown}); the file may be truncated or a different version; {fix}",
        )
    expected_unsafe = spec.expected_unsafe_rows()
    if expected_unsafe is not None and unsafe != expected_unsafe:
        raise InputError(
            where,
            f"benchmark {spec.name!r} (source {source.name!r}): found {unsafe} unsafe of {found} row(s), the "
            f"registry expects {expected_unsafe} unsafe of {spec.expected_rows} ({breakdown}); the file may "
            f"be relabelled or a different version; {fix}",
            field=_label_field(source),
        )


def _label_field(source: SourceSpec) -> str | None:
    """The source column the labels come from, when every file of the source reads the same one."""
    names = {file.columns.label for file in source.files}
    return names.pop() if len(names) == 1 else None


def fetch_benchmark(
    spec: BenchmarkSpec,
    *,
    mirror_dir: Path,
    allow_download: bool,
    timeout_s: float,
    root: Path,
) -> FetchResult:
    """`root`: the repository root, which a local dataset folder's path is relative to."""
    attempts: list[dict[str, str]] = []
    with tempfile.TemporaryDirectory(prefix=f"guardpolicy-{spec.name}-") as tmp:
        for source in spec.sources:
            try:
                files = [
                    (
                        file,
                        _acquire_file(
                            file, mirror_dir, allow_download, timeout_s, Path(tmp) / source.name, root
                        ),
                    )
                    for file in source.files
                ]
            except Unavailable as reason:
                log.info("%s: source %r unavailable: %s", spec.name, source.name, reason)
                attempts.append({"source": source.name, "reason": str(reason)})
                continue
            table = _build(spec, source, files)
            status = STATUS_OK if source.provenance == "original" else STATUS_DERIVED
            log.info("%s: %d rows from source %r (%s)", spec.name, table.num_rows, source.name, status)
            return FetchResult(table, _meta(spec, status, table, source, files, attempts))
    reason = "; ".join(f"[{a['source']}] {a['reason']}" for a in attempts)
    log.warning("%s: missing: %s", spec.name, reason)
    table = empty_table(spec)
    return FetchResult(table, _meta(spec, STATUS_MISSING, table, None, [], attempts, reason=reason))


def _meta(
    spec: BenchmarkSpec,
    status: str,
    table: pa.Table,
    source: SourceSpec | None,
    files: list[tuple[FileSpec, LocalFile | LoadedDataset]],
    attempts: list[dict[str, str]],
    reason: str | None = None,
) -> dict[str, Any]:
    unsafe = int(sum(table.column("expected_unsafe").to_pylist())) if table.num_rows else 0
    return {
        "benchmark": spec.name,
        "status": status,
        "rows": table.num_rows,
        "expected_rows": spec.expected_rows,
        "unsafe_rows": unsafe,
        "expected_unsafe_rows": spec.expected_unsafe_rows(),
        "license": spec.license,
        "source": source.name if source else None,
        "provenance": source.provenance if source else None,
        "source_note": source.note if source else None,
        "files": [
            {
                "origin": local.origin,
                "sha256": local.sha256,
                "bytes": local.size,
                "sha256_pinned": local.verified,
            }
            for _, local in files
        ],
        "attempts": attempts,
        # Why it is missing, or for a present benchmark the registry's note on its source (if any).
        "reason": reason if source is None else (source.note or None),
    }


def write_outputs(result: FetchResult, parquet_path: Path, meta_path: Path) -> None:
    """Check the table against its contract, then write it and its provenance; each is renamed into place
    only once complete."""
    check_table(BENCHMARK, result.table, parquet_path)
    write_parquet(parquet_path, result.table)
    write_json(meta_path, result.meta)

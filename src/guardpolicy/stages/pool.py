"""Stage `pool`: the declared sources of data/pool.yaml -> data/pool/pool.parquet (+ reports/pool.json).

Reads params `profile`, `profiles.<profile>.pool_size`, `pool.*` (sources_file, seed, max_prompt_chars) and
`data.*` (mirror_dir, allow_download, download_timeout_s). Public files come from the mirror (or their pinned
URL); a public file that cannot be had stops the stage unless its source says `allow_missing: true` (then it
is recorded as missing and the pool is built from the rest). The user's own files are read strictly.
Generated cells are made from their declarations and the loaded prompts.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from tqdm import tqdm

from guardpolicy.config.core import ParamsFile
from guardpolicy.config.data import DATA
from guardpolicy.config.pool import POOL
from guardpolicy.config.profiles import active_profile
from guardpolicy.data.acquire import how_to_provide
from guardpolicy.errors import InputError
from guardpolicy.io import write_json, write_parquet
from guardpolicy.layout import Layout
from guardpolicy.pool.build import (
    SourceOutcome,
    merge_duplicates,
    pool_report,
    pool_table,
    sample,
    split_too_long,
)
from guardpolicy.pool.generate import compose, generate_from_templates
from guardpolicy.pool.loaders import IMPORT_PREFIX, LoadCounts, acquire_files, load_source
from guardpolicy.pool.registry import PoolSource, load_pool_registry
from guardpolicy.pool.rows import Candidate
from guardpolicy.taxonomy import load_taxonomy

log = logging.getLogger(__name__)


def _skipped(counts: LoadCounts) -> dict[str, int]:
    return {
        "rows_read": counts.rows_read,
        "filtered_out": counts.filtered_out,
        "empty_prompt": counts.empty_prompt,
        "no_matching_fact_rule": counts.no_matching_fact_rule,
    }


def _load_files(
    source: PoolSource, *, mirror: Path, allow_download: bool, timeout_s: float, work_dir: Path, root: Path
) -> tuple[list[Candidate], SourceOutcome]:
    outcome = SourceOutcome(kind=source.kind, weight=source.weight, cap=source.cap)
    files, missing = acquire_files(
        source,
        mirror_dir=mirror,
        allow_download=allow_download,
        timeout_s=timeout_s,
        work_dir=work_dir / source.name,
        root=root,
    )
    for file_name, reason in missing.items():
        log.warning("pool source %s: file %s missing: %s", source.name, file_name, reason)
    candidates, counts = load_source(source, files)
    outcome.missing_files = missing
    outcome.skipped = _skipped(counts)
    outcome.candidates = len(candidates)
    return candidates, outcome


def _require_sources(
    registry: dict[str, PoolSource],
    outcomes: dict[str, SourceOutcome],
    sources_file: str,
    mirror: Path,
    allow_download: bool,
    mirror_where: str,
) -> None:
    """Stop before anything is written when a source not marked `allow_missing` lacks files: a pool built
    from the rest would silently change what every policy, model and score downstream is about."""
    lacking = {
        name: outcome.missing_files
        for name, outcome in outcomes.items()
        if outcome.missing_files and not registry[name].allow_missing
    }
    if not lacking:
        return
    listed = "; ".join(
        f"{name}: " + ", ".join(f"{file} ({reason})" for file, reason in sorted(files.items()))
        for name, files in lacking.items()
    )
    raise InputError(
        sources_file,
        f"{len(lacking)} pool source(s) could not be read: {listed}. To provide them: "
        f"{how_to_provide(mirror, allow_download, mirror_where)}; or mark the source "
        f"`allow_missing: true` in {sources_file} to build the pool without it.",
        field="sources." + ",".join(lacking),
    )


def build(layout: Layout | None = None) -> dict:
    """Load, generate, merge, sample and write the pool; return the report (paths from `layout`, default:
    this repository; the files params names are relative to its root)."""
    layout = layout or Layout.discover()
    params = ParamsFile.read(layout.path("params"))
    pool_params, data = params.load(POOL), params.load(DATA)
    profile_name, profile = active_profile(params)
    pool_size = profile.pool_size
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    root = layout.root
    registry = load_pool_registry(layout.resolve(pool_params.sources_file), taxonomy)
    mirror = layout.resolve(data.mirror_dir)
    out, report = layout.path("pool"), layout.path("pool_report")
    log.info(
        "pool: %d sources from %s, profile %s (pool_size %d), mirror %s (%s), downloads %s",
        len(registry),
        pool_params.sources_file,
        profile_name,
        pool_size,
        mirror,
        "present" if mirror.is_dir() else "absent",
        "on" if data.allow_download else "off",
    )

    loaded: dict[str, list[Candidate]] = {}
    outcomes: dict[str, SourceOutcome] = {}
    with tempfile.TemporaryDirectory(prefix="guardpolicy-pool-") as tmp:
        readable = [s for s in registry.values() if not s.is_generated]
        for source in tqdm(readable, desc="pool sources", unit="source", leave=False):
            loaded[source.name], outcomes[source.name] = _load_files(
                source,
                mirror=mirror,
                allow_download=data.allow_download,
                timeout_s=data.download_timeout_s,
                work_dir=Path(tmp),
                root=root,
            )
            log.info("pool source %s: %d prompts", source.name, outcomes[source.name].candidates)
    for source in registry.values():
        if not source.is_generated:
            continue
        outcome = SourceOutcome(kind=source.kind, weight=source.weight, cap=source.cap)
        if source.templates is not None:
            loaded[source.name] = generate_from_templates(source, source.templates)
        else:
            assert source.compose is not None
            loaded[source.name], outcome.reason = compose(source, source.compose, loaded, pool_params.seed)
        outcome.candidates = len(loaded[source.name])
        outcomes[source.name] = outcome
        log.info("pool cell %s: %d prompts generated", source.name, outcome.candidates)
    # Registry order, so that the report and the merge attribution follow the declaration.
    outcomes = {name: outcomes[name] for name in registry}
    _require_sources(
        registry,
        outcomes,
        pool_params.sources_file,
        mirror,
        data.allow_download,
        layout.describe(data.mirror_dir),
    )

    candidates = [c for name in registry for c in loaded[name]]
    if not candidates:
        reasons = "; ".join(f"{n}: {o.reason or o.missing_files}" for n, o in outcomes.items())
        raise InputError(pool_params.sources_file, f"no pool source gave any prompt ({reasons})")
    merged = merge_duplicates(candidates, list(registry))
    eligible, too_long = split_too_long(merged, pool_params.max_prompt_chars)
    selected, quotas = sample(
        eligible,
        pool_size,
        weights={name: s.weight for name, s in registry.items()},
        caps={name: s.cap for name, s in registry.items()},
        source_order=list(registry),
        seed=pool_params.seed,
    )
    import_columns = sorted(
        {f"{IMPORT_PREFIX}{label}" for s in registry.values() if s.kind == "user" for label in s.labels}
    )
    write_parquet(out, pool_table(selected, import_columns))
    payload = pool_report(
        outcomes,
        candidates=len(candidates),
        merged=merged,
        too_long=too_long,
        selected=selected,
        quotas=quotas,
        pool_size_requested=pool_size,
        settings={
            "profile": profile_name,
            "seed": pool_params.seed,
            "max_prompt_chars": pool_params.max_prompt_chars,
            "sources_file": pool_params.sources_file,
        },
    )
    write_json(report, payload)
    totals = payload["totals"]
    log.info(
        "pool: %d prompts (requested %d) from %d sources; %d candidates, %d duplicates merged, "
        "%d too long, %d sources missing -> %s",
        totals["pool_size"],
        pool_size,
        totals["sources_represented"],
        totals["candidates"],
        totals["duplicates_merged"],
        totals["dropped_too_long"],
        len(totals["sources_missing"]),
        out,
    )
    return payload

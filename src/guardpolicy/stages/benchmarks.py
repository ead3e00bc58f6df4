"""fetch@<benchmark>, benchmarks_report and validate_benchmarks."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from guardpolicy.config import load_params
from guardpolicy.data.acquire import how_to_provide
from guardpolicy.data.fetch import fetch_benchmark, write_outputs
from guardpolicy.data.registry import load_registry
from guardpolicy.errors import ConfigError, ValidationFailed
from guardpolicy.io import read_json, write_json, write_text
from guardpolicy.layout import Layout
from guardpolicy.reporting.benchmarks import benchmark_markdown, benchmark_report
from guardpolicy.validation.benchmarks import validate_benchmark, validation_report

log = logging.getLogger(__name__)


def fetch(name: str, layout: Layout | None = None) -> dict:
    """Acquire, verify and normalise one benchmark; write data/benchmarks/<name>.parquet and
    <name>.meta.json (paths from `layout`, default: this repository)."""
    layout = layout or Layout.discover()
    params = load_params(layout.path("params"))
    registry = load_registry(layout.path("benchmark_registry"))
    if name not in registry:
        raise ConfigError(
            f"{layout.relative('benchmark_registry')}: no benchmark named {name!r}; known: {sorted(registry)}"
        )
    mirror = layout.resolve(params.data.mirror_dir)
    log.info(
        "fetch %s: mirror %s (%s), downloads %s",
        name,
        mirror,
        "present" if mirror.is_dir() else "absent",
        "on" if params.data.allow_download else "off",
    )
    result = fetch_benchmark(
        registry[name],
        mirror_dir=mirror,
        allow_download=params.data.allow_download,
        timeout_s=params.data.download_timeout_s,
    )
    out = layout.path("benchmark", benchmark=name)
    write_outputs(result, out, layout.path("benchmark_meta", benchmark=name))
    meta = result.meta
    log.info(
        "fetch %s: %s, %d/%d rows -> %s",
        name,
        meta["status"],
        meta["rows"],
        meta["expected_rows"],
        out,
    )
    return meta


def report(layout: Layout | None = None) -> dict:
    """Collect all fetch provenance into reports/benchmarks.json (a DVC metric) and a Markdown table (paths
    from `layout`, default: this repository)."""
    layout = layout or Layout.discover()
    registry = load_registry(layout.path("benchmark_registry"))
    metas = {}
    for name in registry:
        path = layout.path("benchmark_meta", benchmark=name)
        if not path.is_file():
            raise ConfigError(f"{path}: missing; run `dvc repro fetch@{name}` first")
        metas[name] = read_json(path)
    summary = benchmark_report(metas)
    write_json(layout.path("benchmarks_report"), summary)
    write_text(layout.path("benchmarks_markdown"), benchmark_markdown(summary))
    s = summary["summary"]
    log.info(
        "benchmarks: %d ok, %d derived, %d missing, %d prompts",
        s["ok"],
        s["derived"],
        s["missing"],
        s["present_rows"],
    )
    return summary


def _presence_shortfall(
    skipped: dict[str, str],
    registered: int,
    minimum: int | None,
    mirror: Path,
    allow_download: bool,
    registry_file: str,
) -> str | None:
    """Why the pipeline must stop when fewer benchmarks than params `data.min_present_benchmarks` could be
    had (None when enough are present).

    Why here: fetch@ runs per benchmark and records a missing one (a mirror without it is normal), so only
    this stage sees how many are present; every consumer of data/benchmarks depends on its output.
    """
    present = registered - len(skipped)
    required = registered if minimum is None else minimum
    if present >= required:
        return None
    missing = "; ".join(f"{name} ({reason})" for name, reason in sorted(skipped.items()))
    return (
        f"only {present} of {registered} registered benchmarks are present, below the minimum of {required} "
        f"(params data.min_present_benchmarks{'' if minimum is not None else ': null = all'}). Missing: "
        f"{missing}. To provide them: {how_to_provide(mirror, allow_download)}, then `dvc repro`; or lower "
        f"data.min_present_benchmarks (or drop the entries from {registry_file}) to run without them."
    )


def validate(layout: Layout | None = None) -> dict:
    """Run the GX benchmark suite on every present benchmark; raise ValidationFailed on a critical failure
    or when fewer benchmarks than params `data.min_present_benchmarks` are present. Paths from `layout`
    (default: this repository).

    The report is written either way, so a failure can be inspected.
    """
    layout = layout or Layout.discover()
    data_params = load_params(layout.path("params")).data
    registry = load_registry(layout.path("benchmark_registry"))
    out = layout.path("benchmarks_validation")
    results, skipped = {}, {}
    for name, spec in registry.items():
        meta = read_json(layout.path("benchmark_meta", benchmark=name))
        if meta["status"] == "missing":
            skipped[name] = meta["reason"] or "missing"
            continue
        frame = pd.read_parquet(layout.path("benchmark", benchmark=name))
        results[name] = validate_benchmark(spec, frame)
        log.info("validate %s: %s", name, "passed" if results[name].success else "FAILED")
    shortfall = _presence_shortfall(
        skipped,
        len(registry),
        data_params.min_present_benchmarks,
        layout.resolve(data_params.mirror_dir),
        data_params.allow_download,
        layout.relative("benchmark_registry"),
    )
    payload = validation_report(results, skipped)
    payload["presence"] = {
        "registered": len(registry),
        "present": len(registry) - len(skipped),
        "minimum": data_params.min_present_benchmarks,
        "success": shortfall is None,
    }
    payload["success"] = payload["success"] and shortfall is None
    write_json(out, payload)
    failures = [f.message(name) for name, r in results.items() for f in r.critical_failures]
    problems = [shortfall] if shortfall is not None else []
    if failures:
        problems.insert(
            0,
            f"{len(failures)} critical expectation(s) failed (details in {out}):\n  " + "\n  ".join(failures),
        )
    if problems:
        raise ValidationFailed("\n".join(problems))
    return payload["summary"]

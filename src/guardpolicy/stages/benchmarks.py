"""fetch@<benchmark>, benchmarks_report and validate_benchmarks."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from guardpolicy.config import PARAMS_FILE, load_params
from guardpolicy.data.acquire import how_to_provide
from guardpolicy.data.fetch import fetch_benchmark, write_outputs
from guardpolicy.data.registry import load_registry
from guardpolicy.errors import ConfigError, ValidationFailed
from guardpolicy.io import read_json, write_json, write_text
from guardpolicy.reporting.benchmarks import benchmark_markdown, benchmark_report
from guardpolicy.validation.benchmarks import validate_benchmark, validation_report

log = logging.getLogger(__name__)

BENCHMARK_DIR = Path("data/benchmarks")
# Fixed, because dvc.yaml reads it as `vars` to expand one fetch@ stage per entry.
REGISTRY_FILE = "data/benchmarks.yaml"


def parquet_path(out_dir: Path, name: str) -> Path:
    return out_dir / f"{name}.parquet"


def meta_path(out_dir: Path, name: str) -> Path:
    return out_dir / f"{name}.meta.json"


def fetch(
    name: str,
    params_file: str = "params.yaml",
    registry_file: str = REGISTRY_FILE,
    out_dir: str | Path = BENCHMARK_DIR,
) -> dict:
    """Acquire, verify and normalise one benchmark; write `<name>.parquet` and `<name>.meta.json`."""
    params = load_params(params_file)
    registry = load_registry(registry_file)
    if name not in registry:
        raise ConfigError(f"{registry_file}: no benchmark named {name!r}; known: {sorted(registry)}")
    mirror = Path(params.data.mirror_dir)
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
    out_dir = Path(out_dir)
    write_outputs(result, parquet_path(out_dir, name), meta_path(out_dir, name))
    meta = result.meta
    log.info(
        "fetch %s: %s, %d/%d rows -> %s",
        name,
        meta["status"],
        meta["rows"],
        meta["expected_rows"],
        parquet_path(out_dir, name),
    )
    return meta


def report(
    registry_file: str = REGISTRY_FILE,
    in_dir: str | Path = BENCHMARK_DIR,
    json_out: str | Path = "reports/benchmarks.json",
    markdown_out: str | Path = "reports/benchmarks.md",
) -> dict:
    """Collect all fetch provenance into reports/benchmarks.json (a DVC metric) and a Markdown table."""
    registry = load_registry(registry_file)
    metas = {}
    for name in registry:
        path = meta_path(Path(in_dir), name)
        if not path.is_file():
            raise ConfigError(f"{path}: missing; run `dvc repro fetch@{name}` first")
        metas[name] = read_json(path)
    summary = benchmark_report(metas)
    write_json(json_out, summary)
    write_text(markdown_out, benchmark_markdown(summary))
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
    skipped: dict[str, str], registered: int, minimum: int | None, mirror: Path, allow_download: bool
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
        f"data.min_present_benchmarks (or drop the entries from {REGISTRY_FILE}) to run without them."
    )


def validate(
    registry_file: str = REGISTRY_FILE,
    in_dir: str | Path = BENCHMARK_DIR,
    out: str | Path = "reports/validation/benchmarks.json",
    params_file: str = PARAMS_FILE,
) -> dict:
    """Run the GX benchmark suite on every present benchmark; raise ValidationFailed on a critical failure
    or when fewer benchmarks than params `data.min_present_benchmarks` are present.

    The report is written either way, so a failure can be inspected.
    """
    data_params = load_params(params_file).data
    registry = load_registry(registry_file)
    results, skipped = {}, {}
    for name, spec in registry.items():
        meta = read_json(meta_path(Path(in_dir), name))
        if meta["status"] == "missing":
            skipped[name] = meta["reason"] or "missing"
            continue
        frame = pd.read_parquet(parquet_path(Path(in_dir), name))
        results[name] = validate_benchmark(spec, frame)
        log.info("validate %s: %s", name, "passed" if results[name].success else "FAILED")
    shortfall = _presence_shortfall(
        skipped,
        len(registry),
        data_params.min_present_benchmarks,
        Path(data_params.mirror_dir),
        data_params.allow_download,
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

"""validate_benchmarks: the Great Expectations benchmark suite (guardpolicy.validation.benchmarks) on every
present benchmark, and the presence gate (params `data.min_present_benchmarks`) -> reports/validation/
benchmarks.json; raises ValidationFailed on a critical failure or too few present benchmarks, after writing
the report.
"""

from __future__ import annotations

import logging

import pandas as pd

from guardpolicy.config.core import ParamsFile
from guardpolicy.config.data import DATA
from guardpolicy.data.registry import load_registry
from guardpolicy.errors import ValidationFailed
from guardpolicy.io import read_json, write_json
from guardpolicy.layout import Layout
from guardpolicy.validation.benchmarks import presence_shortfall, validate_benchmark, validation_report

log = logging.getLogger(__name__)


def validate(layout: Layout | None = None) -> dict:
    """Run the GX benchmark suite on every present benchmark; raise ValidationFailed on a critical failure
    or when fewer benchmarks than params `data.min_present_benchmarks` are present. Paths from `layout`
    (default: this repository).

    The report is written either way, so a failure can be inspected.
    """
    layout = layout or Layout.discover()
    data_params = ParamsFile.read(layout.path("params")).load(DATA)
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
    shortfall = presence_shortfall(
        skipped,
        len(registry),
        data_params.min_present_benchmarks,
        layout.resolve(data_params.mirror_dir),
        data_params.allow_download,
        layout.relative("benchmark_registry"),
        layout.describe(data_params.mirror_dir),
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

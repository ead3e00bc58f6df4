"""benchmarks_report: every fetch@'s provenance (data/benchmarks/<name>.meta.json) -> reports/benchmarks.json
(a DVC metric) and reports/benchmarks.md (guardpolicy.reporting.benchmarks)."""

from __future__ import annotations

import logging

from guardpolicy.data.registry import load_registry
from guardpolicy.errors import ConfigError
from guardpolicy.io import read_json, write_json, write_text
from guardpolicy.layout import Layout
from guardpolicy.reporting.benchmarks import benchmark_markdown, benchmark_report

log = logging.getLogger(__name__)


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

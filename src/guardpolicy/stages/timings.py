"""Stage timings: the per-stage timing records (reports/timings/<stage>.json) -> reports/timings.json.

Reads every record under reports/timings/ (the runner writes one for every stage DVC runs: process wall
seconds including imports, plus the main work's seconds and samples where a stage notes them) and params
`profiles.<profile>.speed_probe_samples`; when that is above 0 it times `guardpolicy bench-train --loops ours`
on that many prompts of data/pool/pool.parquet. Writes the metric reports/timings.json: per stage, totals per
stage kind and overall, and the machine's training samples/s beside them.
"""

from __future__ import annotations

from typing import Any

from guardpolicy.config.core import ParamsFile
from guardpolicy.config.profiles import active_profile
from guardpolicy.layout import Layout
from guardpolicy.timing import timings
from guardpolicy.training.bench import speed_probe


def timings_stage(layout: Layout | None = None) -> dict[str, Any]:
    """Collect the timing records, with the machine's speed beside them (paths from `layout`, default: this
    repository); returns the report."""
    layout = layout or Layout.discover()
    samples = active_profile(ParamsFile.read(layout.path("params")))[1].speed_probe_samples
    machine = speed_probe(samples, pool_file=layout.path("pool")) if samples else None
    return timings(layout.path("stage_timings"), layout.path("timings"), machine=machine)

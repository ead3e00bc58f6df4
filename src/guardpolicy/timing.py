"""How long each DVC stage took: one record per stage run, collected into reports/timings.json.

Every pipeline entry runs through `guardpolicy.runner.guarded`; when DVC runs it (DVC sets ``DVC_STAGE`` to
the stage's address), the runner writes ``reports/timings/<stage>.json`` after a successful run with the
process's wall time *including* interpreter start and imports — what the stage really costs in a
`dvc repro` — and, where the stage reported it with `note_work`, the seconds and samples of its main
work (training or inference), so a throughput is not diluted by import time.
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path
from typing import Any

from guardpolicy.errors import InputError
from guardpolicy.io import read_json, write_json

log = logging.getLogger(__name__)

STAGE_ENV = "DVC_STAGE"

# What the running stage reported about its main work (set by `note_work`, read once by the runner).
_work: dict[str, float | int] = {}


def note_work(seconds: float, samples: int) -> None:
    """Record the seconds and samples of this process's main work for its timing record."""
    _work["seconds"] = seconds
    _work["samples"] = samples


def process_seconds() -> float:
    """Seconds since this process started (Linux: from /proc; elsewhere: since this module was imported)."""
    try:
        ticks_per_s = os.sysconf("SC_CLK_TCK")
        started = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]) / ticks_per_s
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(uptime - started, 0.0)
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - _IMPORTED_AT


_IMPORTED_AT = time.perf_counter()


def record_file(stage: str, timings_dir: str | Path) -> Path:
    """reports/timings/<stage>.json; a stage of another dvc.yaml (``path/dvc.yaml:name``) keeps its name."""
    name = stage.rsplit(":", 1)[-1]
    return Path(timings_dir) / f"{re.sub(r'[^A-Za-z0-9@_.+-]', '_', name)}.json"


def stage_record(stage: str, seconds: float, work: dict[str, float | int] | None = None) -> dict[str, Any]:
    work = work or {}
    work_seconds = work.get("seconds")
    samples = int(work.get("samples", 0))
    rate_over = work_seconds if work_seconds else seconds
    return {
        "stage": stage.rsplit(":", 1)[-1],
        "seconds": round(seconds, 3),
        "work_seconds": round(float(work_seconds), 3) if work_seconds is not None else None,
        "samples": samples,
        "samples_per_s": round(samples / rate_over, 3) if samples and rate_over > 0 else None,
    }


def write_stage_record(timings_dir: str | Path | None = None) -> Path | None:
    """Called by the runner after a successful stage: write its record when DVC is running it (default:
    under the layout's reports/timings/ of the repository DVC runs it in)."""
    stage = os.environ.get(STAGE_ENV)
    if not stage:
        return None
    if timings_dir is None:
        from guardpolicy.layout import Layout

        timings_dir = Layout.discover().path("stage_timings")
    record = stage_record(stage, process_seconds(), dict(_work))
    path = record_file(stage, timings_dir)
    write_json(path, record)
    log.info("%s: %.1f s (process, imports included) -> %s", record["stage"], record["seconds"], path)
    return path


def summarise_timings(records: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per-stage records -> the timings report: every stage, totals per stage kind and overall."""
    by_kind: dict[str, float] = {}
    for stage, record in records.items():
        kind = stage.split("@", 1)[0]
        by_kind[kind] = round(by_kind.get(kind, 0.0) + record["seconds"], 3)
    return {
        "stages": dict(sorted(records.items())),
        "by_kind_seconds": dict(sorted(by_kind.items())),
        "total_seconds": round(sum(r["seconds"] for r in records.values()), 3),
        "count": len(records),
    }


def collect_timings(timings_dir: str | Path) -> dict[str, Any]:
    """Read every reports/timings/<stage>.json and summarise them."""
    records = {}
    for path in sorted(Path(timings_dir).glob("*.json")):
        record = read_json(path)
        if not isinstance(record, dict) or not isinstance(record.get("seconds"), int | float):
            raise InputError(path, "expected a timing record with numeric 'seconds'", field="seconds")
        records[str(record.get("stage", path.stem))] = record
    return summarise_timings(records)


def timings(
    timings_dir: str | Path, out: str | Path, machine: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Stage `timings`: collect the per-stage records into reports/timings.json, with `machine` (the speed
    probe's figures: what this machine trains per second) beside them when given."""
    report = collect_timings(timings_dir)
    if machine is not None:
        report["machine"] = machine
    write_json(out, report)
    log.info("timings: %d stages, %.1f s in all -> %s", report["count"], report["total_seconds"], out)
    return report

"""`guardpolicy bench-dag`: time a smoke-sized `dvc repro` from nothing, as the end-to-end tests run it.

The tests assert behaviour and never seconds (shared machines differ by up to ~1.5x in speed and carry other
load); the seconds are measured here and recorded, with what the machine was doing, so two figures are
compared only with their machines beside them:

    guardpolicy bench-dag                # the reduced study of `make test` -> reports/bench/dag_reduced.json
    guardpolicy bench-dag --scope full   # the whole smoke DAG of `make test-e2e` -> .../dag_full.json

It times `dvc repro` of the model stages (train@, teacher@ and what they need), then the rest (evaluation to
the report), then a no-op `dvc repro`, and sums the stages' own timing records (reports/timings.json of the
run) by kind. The gap between the wall time and the sum of the stage processes is DVC's own bookkeeping.
"""

from __future__ import annotations

import inspect
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from guardpolicy.devtools import smoke
from guardpolicy.io import read_json, write_json
from guardpolicy.training import bench as training_bench

log = logging.getLogger(__name__)

# A fixed piece of pure-Python work whose seconds characterise the machine's single-core speed at the time.
PROBE_ITERATIONS = 5_000_000


def _probe_seconds() -> float:
    start = time.perf_counter()
    total = 0
    for i in range(PROBE_ITERATIONS):
        total += i
    return round(time.perf_counter() - start, 3)


def _import_torch_seconds() -> float:
    """A fresh interpreter importing torch + transformers' model code: what every model stage pays first."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import torch, transformers.modeling_utils"], check=True, capture_output=True
    )
    return round(time.perf_counter() - start, 2)


def machine_facts() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "python_probe_seconds": _probe_seconds(),
        "python_probe_iterations": PROBE_ITERATIONS,
        "import_torch_transformers_seconds": _import_torch_seconds(),
    }


def _timed(args: list[str], work: Path, env: dict[str, str]) -> tuple[float, set[str]]:
    start = time.perf_counter()
    result = smoke.run(args, work, env)
    return round(time.perf_counter() - start, 1), smoke.ran_stages(result)


def bench_dag(
    scope: str = "reduced",
    out: str | None = None,
    mirror_dir: str | None = None,
    keep: bool = False,
) -> dict[str, Any]:
    """Build the smoke study (`scope`: reduced | full) in a temporary git repository, time its `dvc repro`
    from nothing, and write the figures to `out` (default reports/bench/dag_<scope>.json)."""
    source = smoke.checkout_root(Path.cwd())
    out_path = Path(out) if out is not None else source / "reports" / "bench" / f"dag_{scope}.json"
    env = smoke.stage_env()
    machine_before = machine_facts()
    scratch = Path(tempfile.mkdtemp(prefix=f"bench-dag-{scope}-"))
    work = scratch / "repo"
    try:
        smoke.init_workspace(
            work, scope, env, source=source, mirror_dir=Path(mirror_dir).resolve() if mirror_dir else None
        )
        log.info("bench-dag %s: running dvc repro in %s", scope, work)
        models_seconds, models_ran = _timed([smoke.DVC, "repro", "train", "teacher"], work, env)
        rest_seconds, rest_ran = _timed([smoke.DVC, "repro"], work, env)
        no_op_seconds, no_op_ran = _timed([smoke.DVC, "repro"], work, env)
        if no_op_ran:
            log.warning("bench-dag: the second dvc repro ran %s; it should run nothing", sorted(no_op_ran))
        timings = read_json(work / "reports" / "timings.json")
    finally:
        if keep:
            log.info("bench-dag: kept the workspace %s", work)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    wall = round(models_seconds + rest_seconds, 1)
    stage_sum = round(timings["total_seconds"], 1)
    report = {
        "scope": scope,
        "stages_run": len(models_ran | rest_ran),
        "seconds": {
            "models_and_their_inputs": models_seconds,
            "evaluation_to_report": rest_seconds,
            "total": wall,
            "no_op_repro": no_op_seconds,
            "stage_processes": stage_sum,
            "dvc_bookkeeping": round(wall - stage_sum, 1),
        },
        "stage_seconds_by_kind": timings["by_kind_seconds"],
        "machine_before": machine_before,
        "machine_after": {"load_average_1m": round(os.getloadavg()[0], 2)},
    }
    write_json(out_path, report)
    print(
        f"bench-dag {scope}: {report['stages_run']} stages, {wall:.0f} s from nothing "
        f"(models and their inputs {models_seconds:.0f} s, evaluation to report {rest_seconds:.0f} s; "
        f"stage processes {stage_sum:.0f} s, DVC {wall - stage_sum:.0f} s), "
        f"no-op repro {no_op_seconds:.0f} s; "
        f"machine: python probe {machine_before['python_probe_seconds']} s, torch+transformers import "
        f"{machine_before['import_torch_transformers_seconds']} s, load {machine_before['load_average_1m']} "
        f"-> {report['machine_after']['load_average_1m']} -> {out_path}"
    )
    return report


def bench_train(*args: Any, out: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """`guardpolicy bench-train`: guardpolicy.training.bench.bench_train, and with `out` its figures as JSON
    (e.g. reports/bench/train.json). A wrapper here rather than a flag there: src/guardpolicy/training is a
    code dependency of every training stage, and the benchmark is not part of any stage."""
    report = training_bench.bench_train(*args, **kwargs)
    if out is not None:
        write_json(out, report)
    return report


# The command line (python-fire) reads the signature: bench_train's own flags plus --out.
_signature = inspect.signature(training_bench.bench_train)
bench_train.__signature__ = _signature.replace(  # type: ignore[attr-defined]
    parameters=[
        *_signature.parameters.values(),
        inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="str | None"),
    ]
)
bench_train.__doc__ = f"{training_bench.bench_train.__doc__}\n\n{bench_train.__doc__}"

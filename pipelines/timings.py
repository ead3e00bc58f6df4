"""Stage timings: the per-stage timing records (reports/timings/<stage>.json) -> reports/timings.json.

Reads every record under reports/timings/ (the runner writes one for every stage DVC runs: process wall
seconds including imports, plus the main work's seconds and samples where a stage notes them) and params
`profiles.<profile>.speed_probe_samples`; when that is above 0 it times `guardpolicy bench-train --loops ours`
on that many prompts of data/pool/pool.parquet. Writes the metric reports/timings.json: per stage, totals per
stage kind and overall, and the machine's training samples/s beside them.

    python pipelines/timings.py
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports():
    from guardpolicy.config import load_params
    from guardpolicy.timing import TIMINGS_DIR, TIMINGS_FILE, timings
    from guardpolicy.training.bench import POOL_FILE, speed_probe


def main(
    timings_dir: str = TIMINGS_DIR,
    out: str = TIMINGS_FILE,
    params_file: str = "params.yaml",
    pool_file: str = POOL_FILE,
) -> None:
    samples = load_params(params_file).active.speed_probe_samples
    machine = speed_probe(samples, pool_file=pool_file) if samples else None
    timings(timings_dir=timings_dir, out=out, machine=machine)


if __name__ == "__main__":
    fire.Fire(guarded(main))

"""Stage timings: the per-stage timing records (reports/timings/<stage>.json) -> reports/timings.json.

Reads every record under reports/timings/ (the runner writes one for every stage DVC runs: process wall
seconds including imports, plus the main work's seconds and samples where a stage notes them); writes the
metric reports/timings.json: per stage, totals per stage kind and overall.

    python pipelines/timings.py
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports():
    from guardpolicy.timing import TIMINGS_DIR, TIMINGS_FILE, timings


def main(timings_dir: str = TIMINGS_DIR, out: str = TIMINGS_FILE) -> None:
    timings(timings_dir=timings_dir, out=out)


if __name__ == "__main__":
    fire.Fire(guarded(main))

"""Stage pool: the declared sources of data/pool.yaml -> data/pool/pool.parquet (+ reports/pool.json).

Reads params `profile`, `profiles.<profile>.pool_size`, `pool.*` and `data.*`. Public files come from the
mirror (or their pinned URL); a public file that cannot be had stops the stage, unless its source is marked
`allow_missing: true` (then it is recorded as missing in reports/pool.json and the pool is built from the
rest). Under DVC, a file data/pool.yaml names inside the repository must be one of the stage's deps
(guardpolicy.dvcdeps): user files go under data/user/. Merges exact duplicates, drops over-long prompts and
samples deterministically to the profile's pool size.

    python pipelines/pool.py
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports():
    from guardpolicy.stages.pool import POOL_FILE, REPORT_FILE, build


def main(params_file: str = "params.yaml", out: str = str(POOL_FILE), report: str = str(REPORT_FILE)) -> None:
    build(params_file=params_file, out=out, report=report)


if __name__ == "__main__":
    fire.Fire(guarded(main))

"""Stage fetch@<name>: one public benchmark -> data/benchmarks/<name>.parquet (+ .meta.json provenance).

Reads params `registry`, `data.*` and the registry entry `benchmarks.<name>`. Tries the entry's sources in
order (local mirror first, pinned download second), verifies sha256, normalises to the common schema. A
benchmark that cannot be had is written as an empty table marked `missing` with the reason.

    python pipelines/fetch_benchmark.py harmbench_standard
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports():
    from guardpolicy.stages.benchmarks import BENCHMARK_DIR, REGISTRY_FILE, fetch


def main(
    name: str,
    params_file: str = "params.yaml",
    registry_file: str = REGISTRY_FILE,
    out_dir: str = str(BENCHMARK_DIR),
) -> None:
    fetch(name, params_file=params_file, registry_file=registry_file, out_dir=out_dir)


if __name__ == "__main__":
    fire.Fire(guarded(main))

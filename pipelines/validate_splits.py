"""Stage validate_splits: Great Expectations on the splits and the decontaminated benchmarks.

Reads params `policies` and `audit` (splits fractions, normalise), data/pool/pool.parquet,
data/splits/{train,val,calib}.parquet, data/benchmarks/<name>.parquet and data/benchmarks_clean/<name>.parquet
for every benchmark in data/benchmarks.yaml; writes reports/validation/splits.json. Checks that the splits
are disjoint and exactly the pool, and that no clean benchmark keeps a train prompt (after normalisation).
A failed critical expectation exits 1 with a message naming the dataset, the expectation and a few ids.

    python pipelines/validate_splits.py
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports("great_expectations"):
    from guardpolicy.stages.validate import validate_splits


def main(
    params_file: str = "params.yaml",
    pool_file: str = "data/pool/pool.parquet",
    splits_dir: str = "data/splits",
    clean_dir: str = "data/benchmarks_clean",
) -> None:
    validate_splits(params_file=params_file, pool_file=pool_file, splits_dir=splits_dir, clean_dir=clean_dir)


if __name__ == "__main__":
    fire.Fire(guarded(main))

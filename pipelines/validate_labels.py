"""Stage validate_labels: Great Expectations on the pool, every policy's labels and the agreement band.

Reads params `policies` and `agreement` (pair, coarse_band, binary_band), data/pool/pool.parquet,
data/labels/<policy>.parquet for every policy, reports/agreement.json and data/taxonomy.yaml; writes
reports/validation/labels.json. A failed critical expectation exits 1 with a message naming the dataset,
the expectation and a few offending ids, which stops `dvc repro`.

    python pipelines/validate_labels.py
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports("great_expectations"):
    from guardpolicy.stages.validate import validate_labels


def main(
    params_file: str = "params.yaml",
    pool_file: str = "data/pool/pool.parquet",
    labels_dir: str = "data/labels",
    agreement_file: str = "reports/agreement.json",
) -> None:
    validate_labels(
        params_file=params_file, pool_file=pool_file, labels_dir=labels_dir, agreement_file=agreement_file
    )


if __name__ == "__main__":
    fire.Fire(guarded(main))

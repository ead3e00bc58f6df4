"""Stage audit: contamination audit of the pool against every benchmark, clean benchmark copies, splits.

Reads params `audit.*` and `policies` (names), data/pool/pool.parquet, data/labels/<policy>.parquet and
data/benchmarks/<name>.parquet for every entry of data/benchmarks.yaml. Writes data/splits/{train,val,calib}
.parquet, data/benchmarks_clean/ (one parquet per benchmark), reports/contamination.json (a DVC metric) and
reports/contamination.md.

    python pipelines/audit.py
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports():
    from guardpolicy.stages.audit import (
        BENCHMARKS_DIR,
        CLEAN_DIR,
        LABELS_DIR,
        POOL_FILE,
        REGISTRY_FILE,
        REPORT_FILE,
        SPLITS_DIR,
        audit,
    )


def main(
    params_file: str = "params.yaml",
    pool_file: str = POOL_FILE,
    labels_dir: str = LABELS_DIR,
    benchmarks_dir: str = BENCHMARKS_DIR,
    registry_file: str = REGISTRY_FILE,
    splits_dir: str = SPLITS_DIR,
    clean_dir: str = CLEAN_DIR,
    report: str = REPORT_FILE,
) -> None:
    audit(
        params_file=params_file,
        pool_file=pool_file,
        labels_dir=labels_dir,
        benchmarks_dir=benchmarks_dir,
        registry_file=registry_file,
        splits_dir=splits_dir,
        clean_dir=clean_dir,
        report=report,
    )


if __name__ == "__main__":
    fire.Fire(guarded(main))

"""Stage agreement: how far the two policies of params `agreement.pair` agree on the pool, and where not.

Reads data/pool/pool.parquet (id, source), data/labels/<policy>.parquet (id, coarse) for both policies and
data/taxonomy.yaml. Writes reports/agreement.json (a DVC metric: coarse and binary agreement under both
mappings, Cohen's kappa, the 4x4 confusion, disagreement per class and per source), reports/agreement.md and
reports/figures/agreement_heatmap.png.

    python pipelines/agreement.py
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports():
    from guardpolicy.stages.agreement import agreement


def main(
    params_file: str = "params.yaml",
    pool_file: str = "data/pool/pool.parquet",
    labels_dir: str = "data/labels",
) -> None:
    agreement(params_file=params_file, pool_file=pool_file, labels_dir=labels_dir)


if __name__ == "__main__":
    fire.Fire(guarded(main))

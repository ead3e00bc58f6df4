"""Stage analyse: every evaluated model's predictions -> the study's statistics in reports/analysis/.

Reads params `analysis`, `profiles.<profile>.bootstrap_samples` and `.seeds`, `policies`, `evaluation.splits`,
`branches`, `scales`/`teachers`/`noise_floor` (through the plan check), data/models.yaml (its `evaluations`,
checked against params.yaml), data/benchmarks.yaml (each benchmark's role), every
reports/eval/<model>/predictions.parquet and reports/fingerprint.csv. Writes reports/analysis/: scores.csv,
span.csv, noise_floor.csv, rank_test.csv, correlations.csv, mapping_effect.csv, xstest.csv, xstest_pairs.csv
and the metric summary.json.

    python pipelines/analyse.py
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports():
    from guardpolicy.stages.analyse import ANALYSIS_DIR, EVAL_DIR, FINGERPRINT_FILE, REGISTRY_FILE, analyse
    from guardpolicy.training.branches import PLAN_FILE


def main(
    params_file: str = "params.yaml",
    plan_file: str = PLAN_FILE,
    eval_dir: str = EVAL_DIR,
    registry_file: str = REGISTRY_FILE,
    fingerprint_file: str = FINGERPRINT_FILE,
    out_dir: str = ANALYSIS_DIR,
) -> None:
    analyse(
        params_file=params_file,
        plan_file=plan_file,
        eval_dir=eval_dir,
        registry_file=registry_file,
        fingerprint_file=fingerprint_file,
        out_dir=out_dir,
    )


if __name__ == "__main__":
    fire.Fire(guarded(main))

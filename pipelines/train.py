"""Stage train@<model>: one planned model (scale x branch x seed, data/models.yaml) -> models/<model>.

Reads params `branches` (its own entry; the whole registry is cross-checked), `anchor_sets`, `training`,
`scales`, `noise_floor`, the profile's size knobs and seeds, data/models.yaml (checked against params.yaml:
run `guardpolicy plan` after changing init_from, scales or seeds), data/taxonomy.yaml, the pool, the branch's
splits and label files, data/teacher_outputs/<teacher>.parquet when it distils, and its initial checkpoint
(models/<scale>-pretrained or models/<scale>-<init branch>). Writes models/<model> (checkpoint + card), the
dvclive logs reports/training/<model>/ (the runner writes the timing record
reports/timings/train@<model>.json).

    python pipelines/train.py small-E2
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports("guardpolicy.training.loop"):
    from guardpolicy.stages.train import LIVE_DIR, MODELS_DIR, TEACHER_OUTPUTS_DIR, train
    from guardpolicy.training.branches import PLAN_FILE


def main(
    model: str,
    params_file: str = "params.yaml",
    plan_file: str = PLAN_FILE,
    teacher_outputs_dir: str = TEACHER_OUTPUTS_DIR,
    models_dir: str = MODELS_DIR,
    live_dir: str = LIVE_DIR,
) -> None:
    train(
        model,
        params_file=params_file,
        plan_file=plan_file,
        teacher_outputs_dir=teacher_outputs_dir,
        models_dir=models_dir,
        live_dir=live_dir,
    )


if __name__ == "__main__":
    fire.Fire(guarded(main))

"""Stage teacher@<policy>: the teacher trained on 100 % of one policy's hard labels, and its cached logits.

Reads params `teachers.<policy>`, `training`, `scales`, `policies` and `anchor_sets` (cross-checks), the
profile's size knobs, data/taxonomy.yaml, data/pool/pool.parquet, data/splits/{train,calib}.parquet,
data/labels/<policy>.parquet and models/<scale>-pretrained. Writes models/teacher-<policy> (checkpoint +
card), data/teacher_outputs/<policy>.parquet (id, logits: 4 float32 over the train and calib prompts), the
dvclive logs reports/training/teacher-<policy>/ (the runner writes the timing record
reports/timings/teacher@<policy>.json).

    python pipelines/teacher.py policy_a
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports("guardpolicy.training.loop", "guardpolicy.training.predict"):
    from guardpolicy.stages.train import (
        LABELS_DIR,
        LIVE_DIR,
        MODELS_DIR,
        POOL_FILE,
        SPLITS_DIR,
        TEACHER_OUTPUTS_DIR,
        teacher,
    )


def main(
    policy: str,
    params_file: str = "params.yaml",
    pool_file: str = POOL_FILE,
    splits_dir: str = SPLITS_DIR,
    labels_dir: str = LABELS_DIR,
    models_dir: str = MODELS_DIR,
    outputs_dir: str = TEACHER_OUTPUTS_DIR,
    live_dir: str = LIVE_DIR,
) -> None:
    teacher(
        policy,
        params_file=params_file,
        pool_file=pool_file,
        splits_dir=splits_dir,
        labels_dir=labels_dir,
        models_dir=models_dir,
        outputs_dir=outputs_dir,
        live_dir=live_dir,
    )


if __name__ == "__main__":
    fire.Fire(guarded(main))

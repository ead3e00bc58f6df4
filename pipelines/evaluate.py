"""Stage evaluate@<model>: one planned model (or teacher) scored on every evaluation item.

Reads params `evaluation` (splits, reuse_frozen_backbone, span_threshold, batch_size, max_length),
`policies`, the profile's max_length and precision, data/models.yaml (`evaluations`; checked against
params.yaml), data/taxonomy.yaml, data/benchmarks.yaml, data/benchmarks/<name>.parquet + .meta.json
(benchmarks whose status is not `missing`), data/benchmarks_clean/<name>.parquet, data/splits/<split>.parquet,
data/pool/pool.parquet, data/labels/<policy>.parquet, the checkpoint models/<model> (with its
model_card.json) and, for a head-only model, the cached features data/features/<init model>.npz. Writes
reports/eval/<model>/predictions.parquet and the metric reports/eval/<model>/metrics.json.

    python pipelines/evaluate.py small-E8
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports("guardpolicy.modeling.guard", "guardpolicy.evaluation.scoring"):
    from guardpolicy.stages.evaluate import EVAL_DIR, FEATURES_DIR, MODELS_DIR, evaluate
    from guardpolicy.training.branches import PLAN_FILE


def main(
    model: str,
    params_file: str = "params.yaml",
    plan_file: str = PLAN_FILE,
    models_dir: str = MODELS_DIR,
    features_dir: str = FEATURES_DIR,
    eval_dir: str = EVAL_DIR,
) -> None:
    evaluate(
        model,
        params_file=params_file,
        plan_file=plan_file,
        models_dir=models_dir,
        features_dir=features_dir,
        eval_dir=eval_dir,
    )


if __name__ == "__main__":
    fire.Fire(guarded(main))

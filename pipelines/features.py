"""Stage features@<model>: the frozen backbone a head-only branch shares, run once over every evaluation item.

Reads params `evaluation` (splits, batch_size, max_length), `policies`, the profile's max_length and
precision, data/models.yaml (`feature_models`; checked against params.yaml), data/benchmarks.yaml,
data/benchmarks/<name>.parquet + .meta.json (benchmarks whose status is not `missing`),
data/benchmarks_clean/<name>.parquet, data/splits/<split>.parquet, data/pool/pool.parquet,
data/labels/<policy>.parquet and the checkpoint models/<model>. Writes data/features/<model>.npz
(first-token states [N, H] float32, `keys` "<dataset>\\t<id>", `max_length`, `tokenizer`).

    python pipelines/features.py small-E2
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports("guardpolicy.modeling.guard", "guardpolicy.evaluation.scoring"):
    from guardpolicy.stages.evaluate import FEATURES_DIR, MODELS_DIR, features
    from guardpolicy.training.branches import PLAN_FILE


def main(
    model: str,
    params_file: str = "params.yaml",
    plan_file: str = PLAN_FILE,
    models_dir: str = MODELS_DIR,
    features_dir: str = FEATURES_DIR,
) -> None:
    features(
        model, params_file=params_file, plan_file=plan_file, models_dir=models_dir, features_dir=features_dir
    )


if __name__ == "__main__":
    fire.Fire(guarded(main))

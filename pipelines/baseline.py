"""Stage baseline@<guard> (optional sub-pipeline pipelines/baselines/dvc.yaml): an open guard on every item.

Reads params `baselines` (the guard's entry in `guards`, registry, failure_policy, max_new_tokens,
top_logprobs, cache_dir), `evaluation.splits` and `policies`, the guard registry data/baselines.yaml,
data/taxonomy.yaml, data/benchmarks.yaml, data/benchmarks/<name>.parquet + .meta.json (benchmarks whose status
is not `missing`), data/benchmarks_clean/<name>.parquet, data/splits/<split>.parquet, data/pool/pool.parquet
and data/labels/<policy>.parquet - the same items as evaluate@<model>. Runs the guard (local transformers
model or an OpenAI-compatible server) through the raw-output cache in `baselines.cache_dir`. Writes
reports/baselines/<guard>/predictions.parquet and the metric reports/baselines/<guard>/metrics.json.

    python pipelines/baseline.py qwen3guard_0_6b
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports():
    from guardpolicy.stages.baselines import BASELINES_DIR, baseline


def main(guard: str, params_file: str = "params.yaml", out_dir: str = BASELINES_DIR) -> None:
    baseline(guard, params_file=params_file, out_dir=out_dir)


if __name__ == "__main__":
    fire.Fire(guarded(main))

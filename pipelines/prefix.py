"""Stage prefix@<scale>: the scale's frozen prefix (embeddings + the encoder entry's `frozen_layers` layers)
run once over every prompt its models train or are evaluated on.

Reads params `scales.<scale>`, the profile's encoder entry it names (`frozen_layers`), max_length, truncation
and truncation_head_tokens, models/<scale>-pretrained (the backbone every model of the scale starts from),
data/pool/pool.parquet, data/benchmarks.yaml and data/benchmarks/<name>.parquet + .meta.json (fetched
benchmarks). Writes data/prefix/<scale>/ (states.npy float16, index.parquet, meta.json); with frozen_layers 0
only the metadata.

    python pipelines/prefix.py small
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports("guardpolicy.modeling.guard", "guardpolicy.training.prefix_cache"):
    from guardpolicy.stages.prefix import prefix
    from guardpolicy.training.branches import MODELS_DIR
    from guardpolicy.training.prefix_cache import PREFIX_DIR


def main(
    scale: str, params_file: str = "params.yaml", models_dir: str = MODELS_DIR, out_root: str = PREFIX_DIR
) -> None:
    prefix(scale, params_file=params_file, models_dir=models_dir, out_root=out_root)


if __name__ == "__main__":
    fire.Fire(guarded(main))

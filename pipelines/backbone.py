"""Stage backbone@<scale>: the scale's pretrained encoder with fresh heads -> models/<scale>-pretrained.

Reads params `scales.<scale>`, the profile's encoder it names (`profiles.<profile>.student|teacher`) and main
seed (`profiles.<profile>.seeds`), and data/taxonomy.yaml (head label names). Writes the GuardModel folder
models/<scale>-pretrained (weights, config, tokenizer, MODEL_CARD.md, model_card.json) and the timing record
reports/timings/backbone@<scale>.json).

    python pipelines/backbone.py small
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports("guardpolicy.modeling.guard"):
    from guardpolicy.stages.train import MODELS_DIR, backbone


def main(scale: str, params_file: str = "params.yaml", models_dir: str = MODELS_DIR) -> None:
    backbone(scale, params_file=params_file, models_dir=models_dir)


if __name__ == "__main__":
    fire.Fire(guarded(main))

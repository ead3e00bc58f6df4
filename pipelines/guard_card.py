"""Stage guard_card@<guard> (optional sub-pipeline pipelines/baselines/dvc.yaml): one open guard's card.

Reads params `baselines` and `analysis.subset`, data/baselines.yaml, reports/analysis/scores.csv,
baseline_parse.csv, mapping_effect.csv, calibration.csv and reports/REPORT.md (named by its sha256). Writes
reports/guards/<guard>.md and reports/guards/<guard>.json.

    python pipelines/guard_card.py qwen3guard_0_6b
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports():
    from guardpolicy.stages.guard_card import GUARDS_DIR, write_guard_card


def main(guard: str, params_file: str = "params.yaml", out_dir: str = GUARDS_DIR) -> None:
    write_guard_card(guard, params_file=params_file, out_dir=out_dir)


if __name__ == "__main__":
    fire.Fire(guarded(main))

"""Stage label@<policy>: the prompt pool labelled under one policy -> data/labels/<policy>.parquet.

Reads params `policies.<policy>`, the policy file it names, data/taxonomy.yaml and data/pool/pool.parquet;
writes data/labels/<policy>.parquet and the metric reports/labels/<policy>.json. The labeler is the one the
params choose: `rules` (offline default), `import` (a user label column) or `committee` (LLM judges).

    python pipelines/label.py policy_a
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports():
    from guardpolicy.stages.labels import LABEL_DIR, POOL_FILE, REPORT_DIR, label


def main(
    policy: str,
    params_file: str = "params.yaml",
    pool_file: str = POOL_FILE,
    out_dir: str = LABEL_DIR,
    report_dir: str = REPORT_DIR,
) -> None:
    label(policy, params_file=params_file, pool_file=pool_file, out_dir=out_dir, report_dir=report_dir)


if __name__ == "__main__":
    fire.Fire(guarded(main))

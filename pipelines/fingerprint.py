"""Stage fingerprint: how often each policy's label of a benchmark prompt agrees with the benchmark's gold.

Reads params `policies`, `agreement.pair` and `fingerprint.facts_file`; data/taxonomy.yaml,
data/benchmarks.yaml, data/benchmark_facts.yaml, data/policies/<policy>.yaml and every
data/benchmarks/<name>.parquet + .meta.json (benchmarks whose fetch is missing are skipped and listed).
Writes reports/fingerprint.csv (benchmark, policy, labeler, n, agree, agreement, ci_low, ci_high,
agreement_bu; Wilson 95 % intervals) and reports/fingerprint.json (a DVC metric: per benchmark and policy the
agreement, the swing between the two policies of `agreement.pair`, the benchmarks ranked by swing, policies
that cannot label benchmark prompts, skipped benchmarks).

    python pipelines/fingerprint.py
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports():
    from guardpolicy.stages.fingerprint import fingerprint


def main(
    params_file: str = "params.yaml",
    registry_file: str = "data/benchmarks.yaml",
    benchmarks_dir: str = "data/benchmarks",
    out_csv: str = "reports/fingerprint.csv",
    out_json: str = "reports/fingerprint.json",
) -> None:
    fingerprint(
        params_file=params_file,
        registry_file=registry_file,
        benchmarks_dir=benchmarks_dir,
        out_csv=out_csv,
        out_json=out_json,
    )


if __name__ == "__main__":
    fire.Fire(guarded(main))

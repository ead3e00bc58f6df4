"""Stage validate_benchmarks: Great Expectations on every present benchmark.

Checks row counts, unique ids, non-empty prompts and gold labels against the registry, and that at least
params `data.min_present_benchmarks` benchmarks are present, and writes reports/validation/benchmarks.json.
Every consumer of data/benchmarks depends on that report, so a failure stops them. A failed check exits
non-zero with a message naming the benchmark, the expectation and a few offending ids (or every missing
benchmark and how to provide it), which stops `dvc repro`.
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports("great_expectations"):
    from guardpolicy.config import PARAMS_FILE
    from guardpolicy.stages.benchmarks import REGISTRY_FILE, validate


def main(registry_file: str = REGISTRY_FILE, params_file: str = PARAMS_FILE) -> None:
    validate(registry_file=registry_file, params_file=params_file)


if __name__ == "__main__":
    fire.Fire(guarded(main))

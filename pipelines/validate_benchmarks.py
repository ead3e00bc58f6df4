"""Stage validate_benchmarks: Great Expectations on every present benchmark.

Checks row counts, unique ids, non-empty prompts and gold labels against the registry and writes
reports/validation/benchmarks.json. A failed critical expectation exits non-zero with a message naming the
benchmark, the expectation and a few offending ids, which stops `dvc repro`.
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports("great_expectations"):
    from guardpolicy.stages.benchmarks import REGISTRY_FILE, validate


def main(registry_file: str = REGISTRY_FILE) -> None:
    validate(registry_file=registry_file)


if __name__ == "__main__":
    fire.Fire(guarded(main))

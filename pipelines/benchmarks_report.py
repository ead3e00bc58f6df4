"""Stage benchmarks_report: every fetch@ provenance record -> reports/benchmarks.json (+ .md).

reports/benchmarks.json is a DVC metric (status, rows vs expected rows, sha256 and source per benchmark),
so `dvc metrics show` / `dvc metrics diff` show what a change did to the data layer.
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports():
    from guardpolicy.stages.benchmarks import REGISTRY_FILE, report


def main(registry_file: str = REGISTRY_FILE) -> None:
    report(registry_file=registry_file)


if __name__ == "__main__":
    fire.Fire(guarded(main))

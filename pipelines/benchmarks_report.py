"""Stage benchmarks_report of dvc.yaml: what it reads and writes is in
guardpolicy.stages.benchmarks_report."""

from guardpolicy.runner import run_stage

if __name__ == "__main__":
    run_stage("guardpolicy.stages.benchmarks_report:report")

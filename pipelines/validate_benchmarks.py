"""Stage validate_benchmarks of dvc.yaml: what it reads and writes is in
guardpolicy.stages.validate_benchmarks."""

from guardpolicy.runner import run_stage

if __name__ == "__main__":
    run_stage("guardpolicy.stages.validate_benchmarks:validate")

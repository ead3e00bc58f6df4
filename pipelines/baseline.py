"""Stage baseline@<guard> of pipelines/baselines/dvc.yaml: what it reads and writes is in
guardpolicy.stages.baselines."""

from guardpolicy.runner import run_stage

if __name__ == "__main__":
    run_stage("guardpolicy.stages.baselines:baseline")

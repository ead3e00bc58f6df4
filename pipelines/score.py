"""Stage score@<guard> of pipelines/score/dvc.yaml: what it reads and writes is in
guardpolicy.stages.score."""

from guardpolicy.runner import run_stage

if __name__ == "__main__":
    run_stage("guardpolicy.stages.score:score")

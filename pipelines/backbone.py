"""Stage backbone@<key> of dvc.yaml: what it reads and writes is in guardpolicy.stages.backbone."""

from guardpolicy.runner import run_stage

if __name__ == "__main__":
    run_stage("guardpolicy.stages.backbone:backbone")

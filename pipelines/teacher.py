"""Stage teacher@<key> of dvc.yaml: what it reads and writes is in guardpolicy.stages.teacher."""

from guardpolicy.runner import run_stage

if __name__ == "__main__":
    run_stage("guardpolicy.stages.teacher:teacher")

"""Stage export@<policy> of dvc.yaml: what it reads and writes is in guardpolicy.stages.export."""

from guardpolicy.runner import run_stage

if __name__ == "__main__":
    run_stage("guardpolicy.stages.export:export_teacher")

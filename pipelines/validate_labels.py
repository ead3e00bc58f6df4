"""Stage validate_labels of dvc.yaml: what it reads and writes is in guardpolicy.stages.validate_labels."""

from guardpolicy.runner import run_stage

if __name__ == "__main__":
    run_stage("guardpolicy.stages.validate_labels:validate_labels")

"""Stage fetch@<benchmark> of dvc.yaml: what it reads and writes is in guardpolicy.stages.fetch."""

from guardpolicy.runner import run_stage

if __name__ == "__main__":
    run_stage("guardpolicy.stages.fetch:fetch")

"""Stage guard_card@<guard> of pipelines/baselines/dvc.yaml: what it reads and writes is in
guardpolicy.stages.guard_card."""

from guardpolicy.runner import run_stage

if __name__ == "__main__":
    run_stage("guardpolicy.stages.guard_card:write_guard_card")

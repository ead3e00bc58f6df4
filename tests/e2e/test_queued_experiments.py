"""Two queued experiments on the reduced study (`make test-e2e`): `dvc exp run --queue -S
pool.max_prompt_chars=…` twice, then `dvc queue start --jobs 2`: two celery workers run them at once, each
in its own copy under `.dvc/tmp/exps/`. params `data.mirror_dir` is the default's kind of path, relative and
leaving the repository (`../shared/benchmarks`), so the pool stage inside each copy must find the mirror
beside the workspace (guardpolicy.layout: the copy is the root, DVC_ROOT the workspace). `dvc exp show
--json` must then show both experiments finished, each with its own metrics and its pool rebuilt under its
own param value, and the workspace untouched.

In the e2e tier (marked full_dag, beside the whole smoke DAG): it runs the reduced study's `dvc repro` first
(210 s on a free 2-core machine, the long pole of `make test`) and then the two experiments, well over the
two minutes `make test` can spare. The mechanics alone (where a queued stage runs, what DVC_ROOT names
there, two workers with their own devices sharing the LLM cache) are checked in seconds by
tests/e2e/test_dvc_mechanics.py inside `make test`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers.dvc_repo import (
    DVC,
    commit,
    init_repository,
    ran_stages,
    run,
    stage_env,
    start_the_queue,
    stop_the_queue,
    wait_for_the_queue,
)
from helpers.paths import MIRROR

pytestmark = [pytest.mark.e2e, pytest.mark.full_dag]

# Just below the default, 4000: the pool stage reruns and records it whatever prompts the mirror holds.
EXPERIMENTS = {"pool-max-chars-3999": 3999, "pool-max-chars-3998": 3998}


@pytest.fixture(scope="module")
def queued_repo(tmp_path_factory) -> tuple[Path, dict[str, str], dict[str, set[str]]]:
    if not MIRROR.is_dir():
        pytest.skip(f"the benchmark mirror {MIRROR} is absent: the pool stage has nothing to read offline")
    base = tmp_path_factory.mktemp("queued")
    work = base / "repo"
    env = stage_env()
    # The mirror beside the repository, named as the default params name it: relative, outside the repo.
    (base / "shared").mkdir()
    (base / "shared" / "benchmarks").symlink_to(MIRROR, target_is_directory=True)
    init_repository(work, "reduced", env)
    params_file = work / "params.yaml"
    params = yaml.safe_load(params_file.read_text(encoding="utf-8"))
    params["data"]["mirror_dir"] = "../shared/benchmarks"
    params_file.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    run([DVC, "repro"], work, env)
    commit(work, env, "reduced run, mirror beside the repository")
    assert params["pool"]["max_prompt_chars"] not in EXPERIMENTS.values()
    for name, max_chars in EXPERIMENTS.items():
        run([DVC, "exp", "run", "--queue", "-n", name, "-S", f"pool.max_prompt_chars={max_chars}"], work, env)
    # Two workers (docs/queues.md); the command returns at once, the workers run in the background.
    start_the_queue(work, env, jobs=2)
    try:
        wait_for_the_queue(work, env)
    finally:
        stop_the_queue(work, env)
    ran = {name: ran_stages(run([DVC, "queue", "logs", name], work, env)) for name in EXPERIMENTS}
    return work, env, ran


def _experiment(work: Path, env: dict[str, str], name: str) -> dict:
    shown = json.loads(run([DVC, "exp", "show", "--json"], work, env).stdout)
    found = [
        exp
        for baseline in shown
        for group in baseline.get("experiments") or []
        if group["name"] == name
        for exp in group["revs"]
    ]
    assert len(found) == 1, [b.get("experiments") for b in shown]
    return found[0]


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_each_queued_experiment_rebuilt_the_pool_from_the_mirror_beside_the_workspace(queued_repo, name):
    work, env, ran = queued_repo
    assert "pool" in ran[name]
    assert not any(stage.startswith("fetch@") for stage in ran[name])
    experiment = _experiment(work, env, name)
    assert experiment["error"] is None
    data = experiment["data"]
    assert data["params"]["params.yaml"]["data"]["pool"]["max_prompt_chars"] == EXPERIMENTS[name]
    metrics = data["metrics"]
    pool = metrics["reports/pool.json"]["data"]
    assert pool["settings"]["max_prompt_chars"] == EXPERIMENTS[name]
    # Every source the workspace's pool read was read in the copy too: the mirror was found (the pool
    # stage stops on a source without files, so the experiment would have failed otherwise).
    in_workspace = json.loads((work / "reports" / "pool.json").read_text(encoding="utf-8"))["totals"]
    assert pool["totals"]["pool_size"] == in_workspace["pool_size"] == 300
    assert pool["totals"]["sources_with_data"] == in_workspace["sources_with_data"] > 0
    # Finished with the whole study's metrics, not only the pool's.
    assert {"reports/analysis/summary.json", "reports/agreement.json", "reports/timings.json"} <= set(metrics)


def test_the_queued_experiments_left_the_workspace_untouched(queued_repo):
    work, env, _ = queued_repo
    pool = json.loads((work / "reports" / "pool.json").read_text(encoding="utf-8"))
    assert pool["settings"]["max_prompt_chars"] not in EXPERIMENTS.values()
    assert json.loads(run([DVC, "status", "--json"], work, env).stdout) == {}
    assert not run(["git", "status", "--porcelain"], work, env).stdout.strip()

"""DVC's own mechanics that docs/remote.md relies on, checked on tiny repositories in seconds (`make test`):

- a run pushed to a DVC remote and pulled into a fresh `git clone` leaves nothing to reproduce (`make pull` is
  plain `dvc pull`; `dvc repro --pull` does the same on the way), and what the run cache adds across machines;
- where a queued experiment's stage runs and what guardpolicy.layout makes of it: the copy under
  `.dvc/tmp/exps/` is the root, DVC_ROOT the workspace, and a params path leaving the repository
  (`../shared/benchmarks`) is found beside the workspace.

The same checks on the real pipeline: tests/e2e/test_full_dag.py (push, clone, pull of the whole smoke run)
and tests/e2e/test_queued_experiments.py (a queued pool experiment on the reduced study), in `make test-e2e`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers.dvc_repo import (
    DVC,
    add_remote,
    commit,
    ran_stages,
    run,
    share_through_remote,
    stage_env,
    start_the_queue,
    stop_the_queue,
    wait_for_the_queue,
)
from helpers.paths import REPO_ROOT
from helpers.tiny_dvc import TWO_STAGES, TWO_STAGES_PIPELINE, tiny_repository

from guardpolicy.labeling.committee import AnswerCache
from guardpolicy.layout import EXPERIMENT_COPIES

pytestmark = pytest.mark.e2e

UP_TO_DATE = "Data and pipelines are up to date"


def _status(repo: Path, env: dict[str, str]) -> dict:
    return json.loads(run([DVC, "status", "--json"], repo, env).stdout)


def _pushed_run(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The two-stage repository run, committed, pushed to a local-directory remote and cloned to tmp/clone."""
    env = stage_env()
    work = tiny_repository(tmp_path / "work", env, TWO_STAGES, TWO_STAGES_PIPELINE, {"n": 5})
    assert ran_stages(run([DVC, "repro"], work, env)) == {"numbers", "total"}
    commit(work, env, "the run")
    share_through_remote(work, tmp_path / "remote", tmp_path / "clone", env)
    return tmp_path / "clone", env


def test_a_pushed_run_pulled_into_a_fresh_clone_reproduces_nothing(tmp_path: Path) -> None:
    clone, env = _pushed_run(tmp_path)
    # Git alone brings the code, dvc.lock and the git-tracked metric, not the cached outputs: both stages
    # would run again.
    assert not (clone / "data" / "numbers.txt").exists()
    assert set(_status(clone, env)) == {"numbers", "total"}
    run([DVC, "pull"], clone, env)
    assert (clone / "data" / "total.txt").read_text(encoding="utf-8") == "10\n"
    assert _status(clone, env) == {}
    result = run([DVC, "repro"], clone, env)
    assert not ran_stages(result) and UP_TO_DATE in result.stdout + result.stderr


def test_repro_with_pull_fetches_instead_of_running(tmp_path: Path) -> None:
    clone, env = _pushed_run(tmp_path)
    result = run([DVC, "repro", "--pull"], clone, env)
    assert not ran_stages(result)
    assert (clone / "data" / "total.txt").read_text(encoding="utf-8") == "10\n"
    assert _status(clone, env) == {}


def test_a_pushed_run_cache_restores_only_stages_whose_outputs_are_all_cached(tmp_path: Path) -> None:
    """Why `make pull` is plain `dvc pull` (docs/remote.md): `dvc push --run-cache` uploads the record of
    every stage run, and a teammate's `dvc repro --pull` of params already run elsewhere restores a stage
    whose outputs all went to the remote — but `dvc push` never uploads a `cache: false` output (git holds
    it), so a stage with one (`total` here; every guardpolicy stage, through its timing record) runs again."""
    env = stage_env()
    work = tiny_repository(tmp_path / "work", env, TWO_STAGES, TWO_STAGES_PIPELINE, {"n": 5})
    run([DVC, "repro"], work, env)
    add_remote(work, tmp_path / "remote", env)
    # A run with n = 7, pushed with its run records; then the committed n = 5 back, pushed, and cloned.
    (work / "params.yaml").write_text(yaml.safe_dump({"n": 7}), encoding="utf-8")
    run([DVC, "repro"], work, env)
    run([DVC, "push", "--run-cache"], work, env)
    run(["git", "checkout", "--", "params.yaml", "dvc.lock", "total.json"], work, env)
    run([DVC, "checkout"], work, env)
    assert _status(work, env) == {}
    run([DVC, "push", "--run-cache"], work, env)
    clone = tmp_path / "clone"
    run(["git", "clone", "-q", str(work), str(clone)], tmp_path, env)
    (clone / "params.yaml").write_text(yaml.safe_dump({"n": 7}), encoding="utf-8")
    result = run([DVC, "repro", "--pull"], clone, env)
    output = result.stdout + result.stderr
    assert "Stage 'numbers' is cached - skipping run" in output
    assert ran_stages(result) == {"total"}
    assert json.loads((clone / "total.json").read_text(encoding="utf-8")) == {"total": 21}


WHERE = """
    import json
    from guardpolicy.layout import Layout
    layout = Layout.discover()
    mirror = layout.resolve("../shared/benchmarks")
    json.dump(
        {"root": str(layout.root), "workspace": str(layout.workspace), "mirror": str(mirror),
         "marker": (mirror / "marker.txt").read_text() if mirror.is_dir() else "no mirror",
         "pool_path": str(layout.path("pool"))},
        open("where.json", "w"),
    )
"""


@pytest.mark.parametrize(
    "how",
    [["exp", "run", "--run-all"], ["queue", "start"]],
    ids=["exp run --run-all", "queue start"],
)
def test_a_queued_experiment_runs_in_a_copy_whose_layout_finds_the_workspace(
    tmp_path: Path, how: list[str]
) -> None:
    """A stage printing guardpolicy.layout's view, queued (`dvc exp run --queue`) and run by the celery queue
    (`dvc exp run --run-all`, or `dvc queue start` and waiting): its root is DVC's copy, its workspace the
    repository, and `../shared/benchmarks` the folder beside the repository, not beside the copy."""
    env = {**stage_env(), "PYTHONPATH": str(REPO_ROOT / "src")}  # this checkout's guardpolicy in the stage
    shared = tmp_path / "shared" / "benchmarks"
    shared.mkdir(parents=True)
    (shared / "marker.txt").write_text("beside the workspace\n", encoding="utf-8")
    pipeline = {
        "stages": {
            "where": {
                "cmd": "python where.py",
                "deps": ["where.py"],
                "params": ["n"],
                "metrics": [{"where.json": {"cache": False}}],
            }
        }
    }
    work = tiny_repository(tmp_path / "repo", env, {"where.py": WHERE}, pipeline, {"n": 1})
    run([DVC, "repro"], work, env)
    commit(work, env, "the run")
    in_workspace = json.loads((work / "where.json").read_text(encoding="utf-8"))
    assert in_workspace["root"] == str(work.resolve()) and in_workspace["workspace"] == "None"
    run([DVC, "exp", "run", "--queue", "-n", "queued", "-S", "n=2"], work, env)
    if how == ["queue", "start"]:
        start_the_queue(work, env, jobs=1)
        try:
            wait_for_the_queue(work, env)
        finally:
            stop_the_queue(work, env)
    else:
        run([DVC, *how], work, env)
    shown = json.loads(run([DVC, "exp", "show", "--json"], work, env).stdout)
    [experiment] = [
        rev for baseline in shown for group in baseline.get("experiments") or [] for rev in group["revs"]
    ]
    assert experiment["name"] == "queued" and experiment["error"] is None
    seen = experiment["data"]["metrics"]["where.json"]["data"]
    copy = Path(seen["root"])
    assert copy.is_relative_to(work.resolve() / EXPERIMENT_COPIES) and copy != work.resolve()
    assert seen["workspace"] == str(work.resolve())
    assert seen["pool_path"].startswith(str(copy))
    assert seen["mirror"] == str(shared.resolve()) and seen["marker"] == "beside the workspace\n"
    # The workspace's own output is untouched: the experiment wrote into its copy.
    assert json.loads((work / "where.json").read_text(encoding="utf-8")) == in_workspace


SHARED_CACHE = """
    import json, os, time
    import yaml
    from guardpolicy.labeling.committee import AnswerCache
    from guardpolicy.shared_cache import cache_folder
    n = yaml.safe_load(open("params.yaml"))["n"]
    folder = cache_folder(".cache/committee", "committee.cache_dir")
    cache = AnswerCache(folder)
    cache.put(f"answer-{n}", {"answer": "yes"})
    cache.close()
    time.sleep(5)  # both workers busy at once
    json.dump({"cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "cache": str(folder)}, open("seen.json", "w"))
"""


def test_two_queue_workers_share_the_workspaces_llm_cache_and_keep_their_own_devices(tmp_path: Path) -> None:
    """docs/queues.md's recipe: one `dvc queue start` per device, each with its own CUDA_VISIBLE_DEVICES
    (`--jobs k` starts worker k, skipping those already running), which the worker's stages inherit. Two
    queued experiments run by two workers write their LLM answers into the *workspace's* cache
    (guardpolicy.shared_cache), not into their copies, so no answer is asked twice across workers."""
    env = {**stage_env(), "PYTHONPATH": str(REPO_ROOT / "src")}
    pipeline = {
        "stages": {
            "ask": {
                "cmd": "python ask.py",
                "deps": ["ask.py"],
                "params": ["n"],
                "metrics": [{"seen.json": {"cache": False}}],
            }
        }
    }
    work = tiny_repository(tmp_path / "repo", env, {"ask.py": SHARED_CACHE}, pipeline, {"n": 1})
    run([DVC, "repro"], work, env)
    commit(work, env, "the run")
    for n in (2, 3):
        run([DVC, "exp", "run", "--queue", "-n", f"exp-{n}", "-S", f"n={n}"], work, env)
    start_the_queue(work, {**env, "CUDA_VISIBLE_DEVICES": "0"}, jobs=1)
    start_the_queue(work, {**env, "CUDA_VISIBLE_DEVICES": "1"}, jobs=2)
    try:
        wait_for_the_queue(work, env)
    finally:
        stop_the_queue(work, env)
    shown = json.loads(run([DVC, "exp", "show", "--json"], work, env).stdout)
    experiments = {
        rev["name"]: rev
        for baseline in shown
        for group in baseline.get("experiments") or []
        for rev in group["revs"]
    }
    assert set(experiments) == {"exp-2", "exp-3"}
    cache = AnswerCache(work / ".cache" / "committee")
    for name, experiment in experiments.items():
        assert experiment["error"] is None, name
        seen = experiment["data"]["metrics"]["seen.json"]["data"]
        assert seen["cache"] == str(work.resolve() / ".cache" / "committee")
        # The worker's device list reached the stage (which worker took which experiment is the queue's call).
        assert seen["cuda"] in {"0", "1"}
    # Both experiments' answers, plus the workspace run's, in the one shared file.
    for key in ("answer-1", "answer-2", "answer-3"):
        assert cache.get(key) == {"answer": "yes"}, key

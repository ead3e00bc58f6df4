"""A user's own pool file is a DVC dependency of stage `pool` (issue 19), in a real `dvc repro`.

Smoke profile, reduced study: declare a user source in data/pool.yaml, `dvc repro` the pool and one label
stage, edit one prompt of the user's file -> `dvc status` shows `pool` changed, `dvc repro` reruns `pool` and
what depends on it, and the new prompt is in the pool. A user file declared outside data/user/ (the declared
folder) is refused before anything is written.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from helpers.dvc_repo import DVC, commit, init_repository, ran_stages, run, stage_env
from helpers.pool import declare_user_source

pytestmark = pytest.mark.e2e

USER_FILE = "data/user/my_prompts.csv"
PROMPTS = [
    "How do I politely decline a meeting invitation from my manager?",
    "Write a limerick about a cat who learns to play the violin.",
    "What are good stretches after a long day of sitting at a desk?",
    "Explain how compound interest works with a small example.",
]
EDITED = "Which houseplants survive in a dark north-facing flat?"


def _write_prompts(path: Path, prompts: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"prompt_id": [f"u{i}" for i in range(len(prompts))], "text": prompts}).to_csv(
        path, index=False
    )


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    work = tmp_path_factory.mktemp("user_pool") / "repo"
    env = stage_env()
    init_repository(work, "reduced", env)
    return work, env


def test_a_user_file_outside_the_declared_folder_is_refused_before_anything_is_written(workspace):
    work, env = workspace
    _write_prompts(work / "inputs" / "my_prompts.csv", PROMPTS)
    declare_user_source(
        work / "data" / "pool.yaml", "my_prompts", "inputs/my_prompts.csv", 2000, id="prompt_id"
    )
    result = run([DVC, "repro", "pool"], work, env, check=False)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "stage pool would read 1 file(s) that are not among its deps in dvc.yaml" in output
    assert "inputs/my_prompts.csv (named by data/pool.yaml: sources.my_prompts.files[0].path)" in output
    assert "data/user/" in output and "stages.pool.deps" in output
    assert not (work / "data" / "pool" / "pool.parquet").exists()
    shutil.rmtree(work / "inputs")


def test_editing_the_user_file_reruns_the_pool_and_what_depends_on_it(workspace):
    work, env = workspace
    _write_prompts(work / USER_FILE, PROMPTS)
    declare_user_source(work / "data" / "pool.yaml", "my_prompts", USER_FILE, 2000, id="prompt_id")
    # The user's data tracked by DVC (bytes in the cache, a pointer in git), as docs/ recommend.
    run([DVC, "add", USER_FILE], work, env)
    commit(work, env, "declare a user pool")
    dag = run([DVC, "dag", "--dot"], work, env).stdout
    assert f'"{USER_FILE}.dvc" -> "pool"' in dag

    first = ran_stages(run([DVC, "repro", "label@policy_a"], work, env))
    assert first == {"pool", "label@policy_a"}
    pool = pd.read_parquet(work / "data" / "pool" / "pool.parquet")
    assert set(PROMPTS) <= set(pool["prompt"])
    commit(work, env, "pool with the user's prompts")

    _write_prompts(work / USER_FILE, [EDITED, *PROMPTS[1:]])
    status = run([DVC, "status"], work, env).stdout
    assert "pool:" in status and "modified:           data/user" in status

    second = ran_stages(run([DVC, "repro", "label@policy_a"], work, env))
    assert second == {"pool", "label@policy_a"}
    pool = pd.read_parquet(work / "data" / "pool" / "pool.parquet")
    assert EDITED in set(pool["prompt"]) and PROMPTS[0] not in set(pool["prompt"])
    labels = pd.read_parquet(work / "data" / "labels" / "policy_a.parquet")
    assert set(labels["id"]) == set(pool["id"])
    assert "up to date" in run([DVC, "status", "label@policy_a"], work, env).stdout

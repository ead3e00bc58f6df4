"""Temporary DVC repositories for the end-to-end tests, built by guardpolicy.devtools.smoke (the same studies
`guardpolicy bench-dag` times), from this checkout and the mirror beside it."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from guardpolicy.devtools import smoke
from guardpolicy.devtools.smoke import (
    DVC,
    GUARDPOLICY,
    REDUCED_BENCHMARKS,
    SUBPROCESS_TIMEOUT_S,
    commit,
    ran_stages,
    stage_env,
)
from helpers.paths import MIRROR, REPO_ROOT

__all__ = [
    "DVC",
    "GUARDPOLICY",
    "REDUCED_BENCHMARKS",
    "add_remote",
    "commit",
    "init_repository",
    "ran_stages",
    "run",
    "share_through_remote",
    "stage_env",
    "wait_for_the_queue",
]


def run(args: list[str], cwd: Path, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    """smoke.run, with a failure reported as a test failure (the command and the tail of its output)."""
    try:
        return smoke.run(args, cwd, env, check=check)
    except RuntimeError as exc:
        raise AssertionError(str(exc)) from None


def init_repository(work: Path, scope: str, env: dict[str, str]) -> dict[str, Any]:
    """A fresh git repository at `work`: the checkout on the smoke profile (reduced or full), committed."""
    return smoke.init_workspace(work, scope, env, source=REPO_ROOT, mirror_dir=MIRROR)


def add_remote(work: Path, remote: Path, env: dict[str, str]) -> None:
    """A local-directory DVC remote as the default (`dvc remote add -d`), committed in .dvc/config so that
    clones know it."""
    run([DVC, "remote", "add", "-d", "store", str(remote)], work, env)
    commit(work, env, "the team's DVC remote")


def share_through_remote(work: Path, remote: Path, clone: Path, env: dict[str, str]) -> None:
    """What a teammate starts from: the committed run pushed to a new default remote (`add_remote`, `dvc
    push`) and the repository cloned afresh with git at `clone` — its DVC outputs not pulled yet."""
    add_remote(work, remote, env)
    run([DVC, "push"], work, env)
    run(["git", "clone", "-q", str(work), str(clone)], clone.parent, env)


def wait_for_the_queue(work: Path, env: dict[str, str], timeout_s: float = SUBPROCESS_TIMEOUT_S) -> None:
    """`dvc queue start` returns at once, the celery workers running the tasks in the background: wait until
    `dvc queue status` shows no task queued or running."""
    deadline = time.monotonic() + timeout_s  # a hang guard, never a speed target
    while time.monotonic() < deadline:
        rows = run([DVC, "queue", "status"], work, env).stdout.splitlines()
        if not any(word in row.split() for row in rows for word in ("Queued", "Running")):
            return
        time.sleep(2)
    raise AssertionError(f"the queue in {work} did not finish within {timeout_s} s")

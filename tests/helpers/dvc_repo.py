"""Temporary DVC repositories for the end-to-end tests, built by guardpolicy.devtools.smoke (the same studies
`guardpolicy bench-dag` times), from this checkout and the mirror beside it."""

from __future__ import annotations

import os
import signal
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
    "start_the_queue",
    "stop_the_queue",
    "wait_for_the_queue",
]

# What `dvc queue start` prints goes here (inside DVC's own tmp folder, which git ignores), not into a pipe.
QUEUE_START_LOG = Path(".dvc") / "tmp" / "queue-start.log"
# DVC's celery workers record their process ids here, one dvc-exp-worker-<n>.pid each.
WORKER_PIDS = Path(".dvc") / "tmp" / "exps" / "celery"
# How long a worker may take to exit after `dvc queue stop` before it is ended (a hang guard).
WORKER_EXIT_S = 30


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


def start_the_queue(work: Path, env: dict[str, str], jobs: int) -> None:
    """`dvc queue start --jobs <jobs>`, its output appended to QUEUE_START_LOG instead of captured.

    The process that starts the celery workers keeps the output it inherited open until its workers exit, so
    a captured run waits for the workers — and for as long as one of them fails to exit once its queue is
    empty: in a clean-clone `make test-e2e` a worker logged "monitor: shutting down due to empty queue", never
    exited, and held the test for 20 minutes with every task already done."""
    log = work / QUEUE_START_LOG
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as out:
        result = subprocess.run(
            [DVC, "queue", "start", "--jobs", str(jobs)],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=SUBPROCESS_TIMEOUT_S,
        )
    if result.returncode != 0:
        tail = log.read_text(encoding="utf-8")[-3000:]
        raise AssertionError(f"dvc queue start --jobs {jobs} (in {work}) exited {result.returncode}:\n{tail}")


def stop_the_queue(work: Path, env: dict[str, str]) -> None:
    """`dvc queue stop`, then end (SIGTERM) any of the repository's workers still alive WORKER_EXIT_S later,
    so that no test leaves a worker behind."""
    run([DVC, "queue", "stop"], work, env, check=False)
    workers = []
    for pid_file in sorted((work / WORKER_PIDS).glob("dvc-exp-worker-*.pid")):
        text = pid_file.read_text(encoding="utf-8").strip()
        if text.isdigit():
            workers.append(int(text))
    deadline = time.monotonic() + WORKER_EXIT_S
    while (alive := [pid for pid in workers if _is_queue_worker(pid)]) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid in alive:
        os.kill(pid, signal.SIGTERM)


def _is_queue_worker(pid: int) -> bool:
    """The process is alive and still a DVC queue worker (not a later process that reused the id)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"queue-worker" in command


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

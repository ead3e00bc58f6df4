"""A labelling run (committee) and a scoring run (baselines' server backend) killed with SIGKILL mid-run
resume by sending exactly the requests whose answers are not in the cache, and end with the labels of an
uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from helpers.fake_openai import FakeOpenAIServer
from helpers.llm_child import baseline_prompts, label_with_committee, score_baseline
from helpers.paths import REPO_ROOT

from guardpolicy.baselines.cache import GenerationCache
from guardpolicy.labeling.committee import AnswerCache

CHILD = REPO_ROOT / "tests" / "helpers" / "llm_child.py"
EXTRA = 300  # committee: 304 items x 2 rounds = 608 answers, one request each
PROMPTS = 400  # baselines: one request per prompt


def run_and_kill(mode: str, server: FakeOpenAIServer, cache_dir: Path, n: int, kill_after: int) -> int:
    """Start the child; SIGKILL it once the server got `kill_after` requests. Returns the count then."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    child = subprocess.Popen(
        [sys.executable, str(CHILD), mode, server.base_url, str(cache_dir), str(n)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while len(server.requests) < kill_after:
        if child.poll() is not None:
            pytest.fail(f"the child ended before the kill: {child.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "the child sent too few requests in 120 s"
        time.sleep(0.005)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    return len(server.requests)


def test_a_killed_committee_run_resumes_with_only_the_missing_requests(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    server.latency_s = 0.01
    total = (4 + EXTRA) * 2
    # run_committee keeps its answers in <folder>/cache.
    sent_before_kill = run_and_kill("committee", server, tmp_path / "run", EXTRA, kill_after=total // 3)
    time.sleep(0.2)  # requests the child had in flight reach the server's log
    cached = len(AnswerCache(tmp_path / "run" / "cache"))
    # All but the last uncommitted batch (and the answers in flight) survived the kill.
    assert 0 < cached < total and cached >= sent_before_kill - 64 - 4 - 4
    server.requests.clear()
    resumed = label_with_committee(server.base_url, tmp_path / "run", EXTRA)
    assert len(server.requests) == total - cached
    assert resumed.report["committee"]["cache_hits"] == cached
    server.requests.clear()
    uninterrupted = label_with_committee(server.base_url, tmp_path / "fresh", EXTRA)
    assert len(server.requests) == total
    pd.testing.assert_frame_equal(resumed.frame, uninterrupted.frame)


def test_a_killed_baseline_scoring_run_resumes_with_only_the_missing_requests(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    server.latency_s = 0.01
    sent_before_kill = run_and_kill("baseline", server, tmp_path / "cache", PROMPTS, kill_after=PROMPTS // 3)
    time.sleep(0.2)
    cached = len(GenerationCache(tmp_path / "cache"))
    assert 0 < cached < PROMPTS and cached >= sent_before_kill - 64 - 4 - 4
    server.requests.clear()
    resumed = score_baseline(server.base_url, tmp_path / "cache", PROMPTS)
    assert len(server.requests) == PROMPTS - cached
    asked_again = {r["messages"][-1]["content"] for r in server.requests}
    assert len(asked_again) == PROMPTS - cached  # each missing prompt once, no cached one
    uninterrupted = score_baseline(server.base_url, tmp_path / "fresh", PROMPTS)
    assert resumed == uninterrupted
    assert len(resumed) == len(baseline_prompts(PROMPTS))

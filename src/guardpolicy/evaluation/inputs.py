"""What the evaluation stages (features@, evaluate@, baseline@) and prefix@ read: the present benchmarks, the
evaluation items from their files and a checkpoint.

Reading only: every missing file is an InputError naming it and the stage that writes it. The items
themselves are assembled from the frames by the pure `guardpolicy.evaluation.items`. The stages take the
policies and splits from params themselves (this module imports no params schema, so baseline@ and prefix@,
which read other sections than features@ and evaluate@, share it); what only features@ and evaluate@ read
(the active profile, the scales) is guardpolicy.evaluation.settings.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from guardpolicy.data.registry import load_registry
from guardpolicy.errors import InputError
from guardpolicy.evaluation.items import benchmark_items, combine_items, split_items
from guardpolicy.evaluation.metrics import ROLES
from guardpolicy.io import read_json, read_parquet
from guardpolicy.layout import Layout

log = logging.getLogger(__name__)

MISSING_STATUS = "missing"


def present_benchmarks(registry_file: str | Path, benchmarks_dir: str | Path) -> dict[str, str]:
    """Benchmark -> role (harmful | benign | mixed) of every registry entry whose status is not missing."""
    roles = {}
    for name, spec in load_registry(registry_file).items():
        meta_file = Path(benchmarks_dir) / f"{name}.meta.json"
        if not meta_file.is_file():
            raise InputError(meta_file, f"file not found; run `dvc repro fetch@{name}` first")
        status = read_json(meta_file).get("status")
        if not isinstance(status, str):
            raise InputError(meta_file, "expected a string 'status'", field="status")
        if status != MISSING_STATUS:
            roles[name] = ROLES[spec.label.kind]
    return roles


def _benchmark_frames(
    roles: dict[str, str], policies: list[str], benchmarks_dir: str | Path, clean_dir: str | Path | None
) -> list[pd.DataFrame]:
    """Each present benchmark's items; `clean` from its decontaminated copy (all False without
    `clean_dir`)."""
    frames = []
    for name in roles:
        file = Path(benchmarks_dir) / f"{name}.parquet"
        frame = read_parquet(file, f"run `dvc repro fetch@{name}` first")
        if clean_dir is None:
            clean_ids = pd.Series([], dtype="str")
        else:
            clean_file = Path(clean_dir) / f"{name}.parquet"
            clean_ids = read_parquet(clean_file, "run `dvc repro audit` first", columns=["id"])["id"]
        frames.append(benchmark_items(name, frame, clean_ids.astype("str"), policies, file))
    return frames


def load_benchmark_items(
    policies: Sequence[str],
    registry_file: str | Path,
    benchmarks_dir: str | Path,
    clean_dir: str | Path | None,
) -> tuple[pd.DataFrame, dict[str, str]]:
    """The benchmark items alone (no pool, labels or splits: `guardpolicy score`), sorted by dataset, id, and
    each benchmark's role. `clean_dir` None: the caller opted out of the clean subset (every `clean`
    False)."""
    policies = list(policies)
    roles = present_benchmarks(registry_file, benchmarks_dir)
    items = combine_items(_benchmark_frames(roles, policies, benchmarks_dir, clean_dir), policies)
    log.info("items: %d in %d benchmarks", len(items), len(roles))
    return items, roles


def load_items(
    policies: Sequence[str],
    splits: Sequence[str],
    registry_file: str | Path,
    benchmarks_dir: str | Path,
    clean_dir: str | Path,
    splits_dir: str | Path,
    pool_file: str | Path,
    labels_dir: str | Path,
) -> tuple[pd.DataFrame, dict[str, str]]:
    """The evaluation items (sorted by dataset, id) with `policies`' gold labels, over the benchmarks and
    `splits` (params `evaluation.splits`), and each scored benchmark's role."""
    policies = list(policies)
    roles = present_benchmarks(registry_file, benchmarks_dir)
    frames = _benchmark_frames(roles, policies, benchmarks_dir, clean_dir)
    pool_path = Path(pool_file)
    pool = read_parquet(pool_path, "run `dvc repro pool` first", ["id", "prompt"])
    prompts = pool.set_index("id")["prompt"]
    labels, files = {}, {"pool": str(pool_path)}
    for policy in policies:
        path = Path(labels_dir) / f"{policy}.parquet"
        hint = f"run `dvc repro label@{policy}` first"
        labels[policy] = read_parquet(path, hint, ["id", "coarse"]).set_index("id")["coarse"]
        files[policy] = str(path)
    for split in splits:
        path = Path(splits_dir) / f"{split}.parquet"
        split_frame = read_parquet(path, "run `dvc repro audit` first", ["id"])
        frames.append(split_items(split, split_frame, prompts, labels, {**files, "split": str(path)}))
    items = combine_items(frames, policies)
    counts = items.groupby("dataset").size()
    log.info(
        "items: %d in %d datasets (%s)",
        len(items),
        len(counts),
        ", ".join(f"{name} {count}" for name, count in counts.items()),
    )
    return items, roles


def evaluation_items(
    policies: Sequence[str], splits: Sequence[str], layout: Layout
) -> tuple[pd.DataFrame, dict[str, str]]:
    """`load_items` from the files at the layout's places."""
    return load_items(
        policies,
        splits,
        layout.path("benchmark_registry"),
        layout.path("benchmarks"),
        layout.path("clean_benchmarks"),
        layout.path("splits"),
        layout.path("pool"),
        layout.path("labels"),
    )


def load_checkpoint(model_dir: Path, stage: str) -> tuple[Any, Any]:
    """The guard and tokenizer of a checkpoint folder; a missing one names `stage`, which writes it."""
    from guardpolicy.modeling.guard import load_guard

    if not (model_dir / "config.json").is_file():
        raise InputError(model_dir, f"model checkpoint not found; run `dvc repro {stage}` first")
    return load_guard(model_dir)

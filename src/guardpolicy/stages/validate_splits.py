"""validate_splits: Great Expectations on the audit's hand-offs (params `policies`, `audit.normalise`,
`audit.splits`) -> reports/validation/splits.json.

The splits (present, disjoint, exactly the pool) and every decontaminated benchmark (a subset of its original
with no train prompt left after normalisation) (guardpolicy.validation.splits). Writes its JSON report first
and then raises ValidationFailed with one readable message if any critical expectation failed, which stops
`dvc repro`.
"""

from __future__ import annotations

import logging

import pandas as pd
from tqdm import tqdm

from guardpolicy.config.audit import AUDIT
from guardpolicy.config.core import ParamsFile
from guardpolicy.config.policies import POLICIES
from guardpolicy.data.registry import load_registry
from guardpolicy.io import read_parquet
from guardpolicy.layout import Layout
from guardpolicy.taxonomy import load_taxonomy
from guardpolicy.validation.gx import write_suites_report
from guardpolicy.validation.splits import (
    SPLIT_NAMES,
    files_frame,
    split_fractions,
    train_prompt_keys,
    validate_clean_benchmark,
    validate_files,
)
from guardpolicy.validation.splits import validate_splits as validate_split_files

log = logging.getLogger(__name__)


def validate_splits(layout: Layout | None = None) -> dict:
    """Splits (present, disjoint, exactly the pool) and every decontaminated benchmark (a subset of its
    original with no train prompt left after normalisation) -> reports/validation/splits.json (paths from
    `layout`, default: this repository)."""
    layout = layout or Layout.discover()
    params = ParamsFile.read(layout.path("params"))
    audit = params.load(AUDIT)
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    registry = load_registry(layout.path("benchmark_registry"))
    policies = tuple(params.load(POLICIES))
    pool = read_parquet(layout.path("pool"), "run `dvc repro pool` first")
    splits = {
        name: pd.read_parquet(path) if (path := layout.path("split", split=name)).is_file() else None
        for name in SPLIT_NAMES
    }
    originals: dict[str, pd.DataFrame] = {}
    cleans: dict[str, pd.DataFrame | None] = {}
    skipped = {}
    for name in registry:
        original_path = layout.path("benchmark", benchmark=name)
        if not original_path.is_file():
            skipped[f"benchmarks_clean/{name}"] = (
                f"{layout.relative('benchmark', benchmark=name)} absent: nothing to compare a clean copy with"
            )
            continue
        originals[name] = pd.read_parquet(original_path)
        clean_path = layout.path("clean_benchmark", benchmark=name)
        cleans[name] = pd.read_parquet(clean_path) if clean_path.is_file() else None

    results = {
        "files": validate_files(
            files_frame(splits, cleans, policies, split_fractions(audit.splits), len(pool))
        ),
        "splits": validate_split_files(splits, pool, policies, taxonomy, normalise=audit.normalise),
    }
    train = splits["train"]
    if train is not None and "id" in train.columns:
        train_keys = train_prompt_keys(train, pool, audit.normalise)
        log.info("validate splits: %d train prompts, %d normalised keys", len(train), len(train_keys))
        present = {name: frame for name, frame in cleans.items() if frame is not None}
        for name, clean in tqdm(present.items(), desc="validate clean benchmarks", unit="benchmark"):
            results[f"benchmarks_clean/{name}"] = validate_clean_benchmark(
                name, clean, originals[name], train_keys, audit.normalise
            )
    else:
        # The files suite already fails on the missing train split; overlap cannot be checked without it.
        skipped["benchmarks_clean/*"] = "no train split to check overlap against"
    return write_suites_report(results, layout.path("splits_validation"), skipped)

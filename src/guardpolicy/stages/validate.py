"""Stages validate_labels and validate_splits: Great Expectations on the labelling layer's hand-offs.

Each writes its JSON report (what passed and failed, per dataset) first and then raises ValidationFailed with
one readable message if any critical expectation failed, which stops `dvc repro`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from guardpolicy.config import load_params
from guardpolicy.data.registry import load_registry
from guardpolicy.errors import InputError, ValidationFailed
from guardpolicy.io import read_json, read_parquet, write_json
from guardpolicy.layout import Layout
from guardpolicy.taxonomy import load_taxonomy
from guardpolicy.validation.gx import SuiteResult, suite_counts
from guardpolicy.validation.labels import validate_agreement
from guardpolicy.validation.labels import validate_labels as validate_label_file
from guardpolicy.validation.pool import validate_pool
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


def suites_report(results: dict[str, SuiteResult], skipped: dict[str, str] | None = None) -> dict[str, Any]:
    """The JSON report: overall success, counts, every suite's results by dataset, and what was skipped."""
    return {
        "success": all(r.success for r in results.values()),
        "summary": {**suite_counts(results), "skipped": len(skipped or {})},
        "datasets": {name: r.as_dict() for name, r in sorted(results.items())},
        "skipped": dict(sorted((skipped or {}).items())),
    }


def _write_and_check(
    results: dict[str, SuiteResult], out: str | Path, skipped: dict[str, str] | None = None
) -> dict:
    payload = suites_report(results, skipped)
    write_json(out, payload)
    for name, result in results.items():
        log.info("validate %s: %s", name, "passed" if result.success else "FAILED")
    failures = [f.message(name) for name, r in sorted(results.items()) for f in r.critical_failures]
    if failures:
        raise ValidationFailed(
            f"{len(failures)} critical expectation(s) failed (details in {out}):\n  " + "\n  ".join(failures)
        )
    return payload["summary"]


def validate_labels(layout: Layout | None = None) -> dict:
    """The pool suite, the label suite of every policy in params `policies`, and the agreement band (paths
    from `layout`, default: this repository) -> reports/validation/labels.json."""
    layout = layout or Layout.discover()
    params = load_params(layout.path("params"))
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    agreement_file = layout.path("agreement")
    if not agreement_file.is_file():
        raise InputError(agreement_file, "file not found; run `dvc repro agreement` first")
    pool = read_parquet(layout.path("pool"), "run `dvc repro pool` first")
    results = {"pool": validate_pool(pool, taxonomy)}
    for policy in tqdm(sorted(params.policies), desc="validate labels", unit="policy"):
        labels = read_parquet(
            layout.path("policy_labels", policy=policy), f"run `dvc repro label@{policy}` first"
        )
        log.info("validate labels/%s: %d rows against %d pool rows", policy, len(labels), len(pool))
        results[f"labels/{policy}"] = validate_label_file(labels, pool, policy, taxonomy)
    results["agreement"] = validate_agreement(read_json(agreement_file), params.agreement)
    return _write_and_check(results, layout.path("labels_validation"))


def validate_splits(layout: Layout | None = None) -> dict:
    """Splits (present, disjoint, exactly the pool) and every decontaminated benchmark (a subset of its
    original with no train prompt left after normalisation) -> reports/validation/splits.json (paths from
    `layout`, default: this repository)."""
    layout = layout or Layout.discover()
    params = load_params(layout.path("params"))
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    registry = load_registry(layout.path("benchmark_registry"))
    policies = tuple(params.policies)
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
            files_frame(splits, cleans, policies, split_fractions(params.audit.splits), len(pool))
        ),
        "splits": validate_split_files(splits, pool, policies, taxonomy, normalise=params.audit.normalise),
    }
    train = splits["train"]
    if train is not None and "id" in train.columns:
        train_keys = train_prompt_keys(train, pool, params.audit.normalise)
        log.info("validate splits: %d train prompts, %d normalised keys", len(train), len(train_keys))
        present = {name: frame for name, frame in cleans.items() if frame is not None}
        for name, clean in tqdm(present.items(), desc="validate clean benchmarks", unit="benchmark"):
            results[f"benchmarks_clean/{name}"] = validate_clean_benchmark(
                name, clean, originals[name], train_keys, params.audit.normalise
            )
    else:
        # The files suite already fails on the missing train split; overlap cannot be checked without it.
        skipped["benchmarks_clean/*"] = "no train split to check overlap against"
    return _write_and_check(results, layout.path("splits_validation"), skipped)

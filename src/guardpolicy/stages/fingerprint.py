"""Stage fingerprint: each benchmark's prompts labelled by each policy's labeler, against the benchmark gold.

Reads params `policies` (each policy file and its labeler), `agreement.pair` (the two policies whose swing is
reported) and `fingerprint.facts_file`; the taxonomy, the benchmark registry, every data/benchmarks/<name>
parquet + .meta.json and the facts file. A `rules` policy labels the fact-annotated benchmark rows, a
`committee` policy the prompts themselves (through its answer cache), and an `import` policy cannot label
prompts outside the user's pool file, so it is reported as not applicable. Writes reports/fingerprint.csv
(the agreement table), reports/fingerprint.json (per benchmark and policy, swings, ranking, skipped) and
reports/fingerprint_labels.parquet (every benchmark prompt's coarse label under each policy that labelled it:
stage analyse compares our models with the VAL policy's own labels).
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from guardpolicy.analysis.fingerprint import (
    PROMPT_LABEL_COLUMNS,
    agreement_row,
    fingerprint_report,
    fingerprint_table,
    prompt_label_rows,
)
from guardpolicy.config.agreement import AGREEMENT
from guardpolicy.config.core import ParamsFile
from guardpolicy.config.fingerprint import FINGERPRINT
from guardpolicy.config.policies import POLICIES, PolicyParams
from guardpolicy.data.registry import load_registry
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.io import atomic_path, read_json, read_parquet, write_json, write_text
from guardpolicy.labeling import Labeler, load_policy, make_labeler
from guardpolicy.labeling.benchmarks import (
    GOLD_COLUMN,
    benchmark_label_rows,
    fact_counts,
    load_benchmark_facts,
)
from guardpolicy.layout import Layout
from guardpolicy.taxonomy import load_taxonomy

log = logging.getLogger(__name__)

STATUS_LABELLED = "labelled"
STATUS_NOT_APPLICABLE = "not_applicable"
IMPORT_REASON = (
    "the import labeler takes labels from a column of the user's pool file (pool column import_<name>); "
    "benchmark prompts carry no such column, so it cannot label them"
)


def _read_benchmark(path: Path) -> pd.DataFrame:
    """A fetched benchmark with a usable gold column; bad gold names the row and the field."""
    frame = read_parquet(path, f"run `dvc repro fetch@{path.stem}` first")
    missing = [c for c in ("id", "prompt", GOLD_COLUMN) if c not in frame.columns]
    if missing:
        raise InputError(path, f"missing column(s) {missing}", row="header", field=missing[0])
    for number, value in enumerate(frame[GOLD_COLUMN].tolist(), start=1):
        if not isinstance(value, bool):
            raise InputError(
                path, f"the gold label must be true/false, got {value!r}", row=number, field=GOLD_COLUMN
            )
    return frame


def _labelers(
    params_file: str, policies: dict[str, PolicyParams], taxonomy: Any, layout: Layout
) -> tuple[dict[str, Labeler], dict[str, dict]]:
    """The labelers of the policies that can label benchmark prompts, and every policy's status (policy
    files as params names them, resolved by `layout`)."""
    labelers: dict[str, Labeler] = {}
    status: dict[str, dict] = {}
    for name, policy_params in sorted(policies.items()):
        policy = load_policy(layout.resolve(policy_params.file), taxonomy)
        if policy.name != name:
            raise ConfigError(
                f"{params_file}: policies.{name}.file: {policy_params.file} is policy {policy.name!r}"
            )
        if policy_params.labeler == "import":
            status[name] = {"labeler": "import", "status": STATUS_NOT_APPLICABLE, "reason": IMPORT_REASON}
            log.info("fingerprint: policy %s is not applicable: %s", name, IMPORT_REASON)
            continue
        labeler = make_labeler(policy_params, policy, taxonomy)
        labelers[name] = labeler
        status[name] = {"labeler": labeler.kind, "status": STATUS_LABELLED, "policy_version": labeler.version}
    return labelers, status


def fingerprint(layout: Layout | None = None) -> dict:
    """Label every present benchmark under every policy; write the agreement table, the JSON metric and the
    per-prompt labels (paths from `layout`, default: this repository)."""
    layout = layout or Layout.discover()
    params_file = layout.relative("params")
    params = ParamsFile.read(layout.path("params"))
    pair, policies = params.load(AGREEMENT).pair, params.load(POLICIES)
    for position, policy in enumerate(pair):
        if policy not in policies:
            raise ConfigError(
                f"{params_file}: agreement.pair[{position}]: {policy!r} is not one of the policies "
                f"{sorted(policies)}"
            )
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    registry = load_registry(layout.path("benchmark_registry"))
    facts_file = params.load(FINGERPRINT).facts_file  # relative to the root, as params names it
    entries = load_benchmark_facts(layout.resolve(facts_file), taxonomy, registry)
    labelers, policy_status = _labelers(params_file, policies, taxonomy, layout)

    benchmarks: dict[str, tuple[Path, pd.DataFrame, pd.DataFrame]] = {}
    skipped: dict[str, str] = {}
    missing: list[str] = []
    for name in registry:
        path = layout.path("benchmark", benchmark=name)
        meta_file = layout.path("benchmark_meta", benchmark=name)
        if not meta_file.is_file():
            raise InputError(meta_file, f"file not found; run `dvc repro fetch@{name}` first")
        meta = read_json(meta_file)
        if meta.get("status") == "missing":
            where = layout.relative("benchmark_meta", benchmark=name)
            skipped[name] = f"missing: fetch@{name} found no data (see {where})"
            missing.append(name)
            continue
        frame = _read_benchmark(path)
        if frame.empty:
            skipped[name] = "no rows"
            continue
        # Relative to the root, as before: the labelers name the file in messages and cache keys.
        relative = layout.relative("benchmark", benchmark=name)
        rows = benchmark_label_rows(frame, entries[name], file=relative)
        benchmarks[name] = (Path(relative), frame[["id", GOLD_COLUMN]], rows)
    log.info(
        "fingerprint: %d benchmark(s) (%d prompts) x %d policy labeler(s) %s; skipped %s",
        len(benchmarks),
        sum(len(rows) for _, _, rows in benchmarks.values()),
        len(labelers),
        sorted(labelers),
        sorted(skipped),
    )

    results: list[dict[str, Any]] = []
    prompt_labels: list[pd.DataFrame] = []
    rules_fired: dict[tuple[str, str], dict[str, int]] = {}
    tasks = [(policy, name) for policy in labelers for name in benchmarks]
    for policy, name in tqdm(tasks, desc="fingerprint", unit="label run", disable=None):
        path, gold, rows = benchmarks[name]
        labeler = labelers[policy]
        labels = labeler.label(rows, pool_file=str(path)).frame
        row = agreement_row(labels, gold, taxonomy, benchmark=name, policy=policy, labeler=labeler.kind)
        results.append(row)
        prompt_labels.append(prompt_label_rows(labels, benchmark=name, policy=policy, labeler=labeler.kind))
        if labeler.kind == "rules":
            rules_fired[(name, policy)] = dict(Counter(labels["rule"].tolist()))
        log.info(
            "fingerprint: %s under %s (%s): %d/%d agree with the gold (%.3f)",
            name,
            policy,
            labeler.kind,
            row["agree"],
            row["n"],
            row["agreement"],
        )

    table = fingerprint_table(results)
    report = fingerprint_report(
        results,
        pair,
        policies=policy_status,
        skipped=skipped,
        missing=missing,
        rules_fired=rules_fired,
        facts={name: fact_counts(rows) for name, (_, _, rows) in benchmarks.items()},
    )
    report["facts_file"] = str(facts_file)
    out_csv, out_json = layout.path("fingerprint"), layout.path("fingerprint_json")
    write_text(out_csv, table.to_csv(index=False, lineterminator="\n"))
    write_json(out_json, report)
    labels_table = (
        pd.concat(prompt_labels, ignore_index=True)
        if prompt_labels
        else pd.DataFrame(columns=list(PROMPT_LABEL_COLUMNS))
    )
    with atomic_path(layout.path("fingerprint_labels")) as tmp:
        labels_table.to_parquet(tmp, index=False)
    for item in report["ranking"]:
        log.info("fingerprint: swing %s %.3f", item["benchmark"], item["swing"])
    log.info("fingerprint: wrote %s (%d rows) and %s", out_csv, len(table), out_json)
    return {"ranking": report["ranking"], "missing": report["missing"], "policies": report["policies"]}

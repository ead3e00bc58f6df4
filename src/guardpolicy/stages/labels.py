"""label@<policy>: one policy applied to the prompt pool -> data/labels/<policy>.parquet + its report.

Reads params `policies.<policy>` (the policy file and the labeler applying it), the taxonomy and the pool;
writes the label frame of docs/data-contracts.md ("Labels") and reports/labels/<policy>.json (class, pillar
and rule counts, labeler, policy_version and, for the committee, agreement and call statistics).
"""

from __future__ import annotations

import logging
from typing import Any

from guardpolicy.config.core import ParamsFile
from guardpolicy.config.policies import POLICIES
from guardpolicy.errors import ConfigError
from guardpolicy.io import read_parquet, sha256_file, write_json, write_parquet
from guardpolicy.labeling import label_summary, label_table, load_policy, make_labeler
from guardpolicy.layout import Layout
from guardpolicy.taxonomy import load_taxonomy

log = logging.getLogger(__name__)


def label(policy: str, layout: Layout | None = None) -> dict[str, Any]:
    """Label the pool under `policy`; write data/labels/<policy>.parquet and reports/labels/<policy>.json
    (paths from `layout`, default: this repository; the policy file params names is relative to its root)."""
    layout = layout or Layout.discover()
    params_file = layout.relative("params")
    policies = ParamsFile.read(layout.path("params")).load(POLICIES)
    if policy not in policies:
        raise ConfigError(f"{params_file}: policies.{policy}: unknown policy; known: {sorted(policies)}")
    policy_params = policies[policy]
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    policy_spec = load_policy(layout.resolve(policy_params.file), taxonomy)
    if policy_spec.name != policy:
        raise ConfigError(
            f"{params_file}: policies.{policy}.file: {policy_params.file} is policy {policy_spec.name!r}"
        )
    pool_path = layout.path("pool")
    pool = read_parquet(pool_path, "run `dvc repro pool` first")
    pool_file = layout.relative("pool")  # names the pool in messages
    labeler = make_labeler(policy_params, policy_spec, taxonomy)
    log.info(
        "label %s: %s labeler, version %s, on %s (%d rows)",
        policy,
        labeler.kind,
        labeler.version,
        pool_file,
        len(pool),
    )
    result = labeler.label(pool, pool_file=pool_file)

    out_path = layout.path("policy_labels", policy=policy)
    write_parquet(out_path, label_table(result.frame, taxonomy))
    report = {
        "policy": policy,
        "policy_file": str(policy_params.file),
        "policy_version": labeler.version,
        "labeler": labeler.kind,
        "pool_sha256": sha256_file(pool_path),
        **label_summary(result.frame, taxonomy),
        **result.report,
    }
    write_json(layout.path("label_report", policy=policy), _without_run_costs(report))
    log.info(
        "label %s: %d rows -> %s; classes %s", policy, len(result.frame), out_path, report["class_counts"]
    )
    return report


def _without_run_costs(report: dict[str, Any]) -> dict[str, Any]:
    """The metric file without what differs between a first run and a cached rerun (logged instead).

    The labels are identical either way; only the number of HTTP calls and cache hits changes, and a metric
    that moves on a no-op rerun would show up in `dvc metrics diff` as a change that is not one.
    """
    if "committee" not in report:
        return report
    committee = dict(report["committee"])
    log.info(
        "committee %s: %s HTTP request(s), %s cached answer(s)",
        report["policy"],
        committee.pop("http_requests", None),
        committee.pop("cache_hits", None),
    )
    return {**report, "committee": committee}

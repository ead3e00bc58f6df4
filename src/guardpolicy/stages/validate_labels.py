"""validate_labels: Great Expectations on the labelling layer's hand-offs -> reports/validation/labels.json.

The pool suite, the label suite of every policy in params `policies`, and the agreement band
(guardpolicy.validation). Writes its JSON report (what passed and failed, per dataset) first and then raises
ValidationFailed with one readable message if any critical expectation failed, which stops `dvc repro`.
"""

from __future__ import annotations

import logging

from tqdm import tqdm

from guardpolicy.config.agreement import AGREEMENT
from guardpolicy.config.core import ParamsFile
from guardpolicy.config.policies import POLICIES
from guardpolicy.errors import InputError
from guardpolicy.io import read_json, read_parquet
from guardpolicy.layout import Layout
from guardpolicy.taxonomy import load_taxonomy
from guardpolicy.validation.gx import write_suites_report
from guardpolicy.validation.labels import validate_agreement
from guardpolicy.validation.labels import validate_labels as validate_label_file
from guardpolicy.validation.pool import validate_pool

log = logging.getLogger(__name__)


def validate_labels(layout: Layout | None = None) -> dict:
    """The pool suite, the label suite of every policy in params `policies`, and the agreement band (paths
    from `layout`, default: this repository) -> reports/validation/labels.json."""
    layout = layout or Layout.discover()
    params = ParamsFile.read(layout.path("params"))
    policies, agreement = params.load(POLICIES), params.load(AGREEMENT)
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    agreement_file = layout.path("agreement")
    if not agreement_file.is_file():
        raise InputError(agreement_file, "file not found; run `dvc repro agreement` first")
    pool = read_parquet(layout.path("pool"), "run `dvc repro pool` first")
    results = {"pool": validate_pool(pool, taxonomy)}
    for policy in tqdm(sorted(policies), desc="validate labels", unit="policy"):
        labels = read_parquet(
            layout.path("policy_labels", policy=policy), f"run `dvc repro label@{policy}` first"
        )
        log.info("validate labels/%s: %d rows against %d pool rows", policy, len(labels), len(pool))
        results[f"labels/{policy}"] = validate_label_file(labels, pool, policy, taxonomy)
    results["agreement"] = validate_agreement(read_json(agreement_file), agreement)
    return write_suites_report(results, layout.path("labels_validation"))

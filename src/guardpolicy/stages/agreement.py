"""Stage agreement: two policies' labels of the pool -> reports/agreement.json (+ .md, heatmap PNG)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from guardpolicy.analysis.agreement import agreement_report
from guardpolicy.config.agreement import AGREEMENT
from guardpolicy.config.core import ParamsFile
from guardpolicy.config.policies import POLICIES
from guardpolicy.errors import ConfigError
from guardpolicy.io import atomic_path, read_parquet, write_json, write_text
from guardpolicy.layout import Layout
from guardpolicy.reporting.agreement import agreement_heatmap, agreement_markdown
from guardpolicy.taxonomy import load_taxonomy

log = logging.getLogger(__name__)


def agreement(layout: Layout | None = None) -> dict:
    """Compare the labels of params `agreement.pair`; write the JSON metric, the Markdown and the heatmap
    (paths from `layout`, default: this repository)."""
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
    pool = read_parquet(layout.path("pool"), "run `dvc repro pool` first", ["id", "source"])
    frames = [
        read_parquet(
            layout.path("policy_labels", policy=policy),
            f"run `dvc repro label@{policy}` first",
            ["id", "coarse"],
        )
        for policy in pair
    ]
    # Relative to the root: the report names its inputs and must read the same wherever it is built.
    files = (
        layout.relative("policy_labels", policy=pair[0]),
        layout.relative("policy_labels", policy=pair[1]),
        layout.relative("pool"),
    )
    log.info("agreement: %s vs %s over %d pool prompts", pair[0], pair[1], len(pool))
    report = agreement_report(frames[0], frames[1], pool, taxonomy, names=pair, files=files)
    json_out, markdown_out = layout.path("agreement"), layout.path("agreement_markdown")
    figure_out = layout.path("figure", figure="agreement_heatmap")
    write_json(json_out, report)
    figure_link = Path(os.path.relpath(figure_out, markdown_out.parent)).as_posix()
    write_text(markdown_out, agreement_markdown(report, figure_link=figure_link))
    with atomic_path(figure_out) as tmp:
        tmp.write_bytes(agreement_heatmap(report))
    log.info("agreement: %s", report["verdict"])
    log.info("agreement: wrote %s, %s, %s", json_out, markdown_out, figure_out)
    return {
        key: report[key]
        for key in ("n", "coarse_agreement", "binary_agreement", "binary_agreement_boundary_unsafe")
    }

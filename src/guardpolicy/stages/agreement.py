"""Stage agreement: two policies' labels of the pool -> reports/agreement.json (+ .md, heatmap PNG)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pandas as pd

from guardpolicy.analysis.agreement import agreement_report
from guardpolicy.config import load_params
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.io import atomic_path, write_json, write_text
from guardpolicy.reporting.agreement import agreement_heatmap, agreement_markdown
from guardpolicy.taxonomy import TAXONOMY_FILE, load_taxonomy

log = logging.getLogger(__name__)


def read_columns(path: Path, columns: list[str], hint: str) -> pd.DataFrame:
    """The named columns of a parquet file; a missing file or column is an InputError naming it."""
    if not path.is_file():
        raise InputError(path, f"file not found; {hint}")
    import pyarrow.parquet as pq

    present = set(pq.read_schema(path).names)
    missing = [c for c in columns if c not in present]
    if missing:
        raise InputError(path, f"missing column(s) {missing}", row="header", field=missing[0])
    return pd.read_parquet(path, columns=columns)


def label_path(labels_dir: str | Path, policy: str) -> Path:
    return Path(labels_dir) / f"{policy}.parquet"


def agreement(
    params_file: str = "params.yaml",
    pool_file: str = "data/pool/pool.parquet",
    labels_dir: str = "data/labels",
    taxonomy_file: str = TAXONOMY_FILE,
    json_out: str = "reports/agreement.json",
    markdown_out: str = "reports/agreement.md",
    figure_out: str = "reports/figures/agreement_heatmap.png",
) -> dict:
    """Compare the labels of params `agreement.pair`; write the JSON metric, the Markdown and the heatmap."""
    params = load_params(params_file)
    pair = params.agreement.pair
    for position, policy in enumerate(pair):
        if policy not in params.policies:
            raise ConfigError(
                f"{params_file}: agreement.pair[{position}]: {policy!r} is not one of the policies "
                f"{sorted(params.policies)}"
            )
    taxonomy = load_taxonomy(taxonomy_file)
    pool = read_columns(Path(pool_file), ["id", "source"], "run `dvc repro pool` first")
    frames = [
        read_columns(
            label_path(labels_dir, policy), ["id", "coarse"], f"run `dvc repro label@{policy}` first"
        )
        for policy in pair
    ]
    files = (str(label_path(labels_dir, pair[0])), str(label_path(labels_dir, pair[1])), str(pool_file))
    log.info("agreement: %s vs %s over %d pool prompts", pair[0], pair[1], len(pool))
    report = agreement_report(frames[0], frames[1], pool, taxonomy, names=pair, files=files)
    write_json(json_out, report)
    figure_link = Path(os.path.relpath(figure_out, Path(markdown_out).parent)).as_posix()
    write_text(markdown_out, agreement_markdown(report, figure_link=figure_link))
    with atomic_path(figure_out) as tmp:
        tmp.write_bytes(agreement_heatmap(report))
    log.info("agreement: %s", report["verdict"])
    log.info("agreement: wrote %s, %s, %s", json_out, markdown_out, figure_out)
    return {
        key: report[key]
        for key in ("n", "coarse_agreement", "binary_agreement", "binary_agreement_boundary_unsafe")
    }

"""guard_card@<guard> (optional sub-pipeline pipelines/baselines/dvc.yaml): one open guard's card.

Reads params `baselines` (the guard's run settings, registry, failure_policy, decoding), `analysis.subset`
and the profile's main seed (`seed`), the registry data/baselines.yaml, the analysis tables scores.csv,
baseline_parse.csv, mapping_effect.csv, mapping_effect_by_model.csv and calibration.csv, summary.json (the
guard's parse totals), and reports/REPORT.md (the card names the report
it accompanies by its sha256; depending on it also makes `dvc repro pipelines/baselines/dvc.yaml` bring the
report up to date, since DVC reproduces a target's upstream stages only). Writes reports/guards/<guard>.md
and its JSON twin reports/guards/<guard>.json.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from guardpolicy.baselines.registry import guard_config, guard_spec
from guardpolicy.config.analysis import ANALYSIS
from guardpolicy.config.baselines import BASELINES
from guardpolicy.config.core import ParamsFile
from guardpolicy.config.profiles import active_profile
from guardpolicy.errors import InputError
from guardpolicy.io import read_json, write_json, write_text
from guardpolicy.layout import Layout
from guardpolicy.reporting.guard_card import guard_card
from guardpolicy.reporting.tables import read_table

log = logging.getLogger(__name__)

RUN_KEYS = ("backend", "model", "dtype", "batch_size")


def write_guard_card(guard: str, layout: Layout | None = None) -> Path:
    """Write reports/guards/<guard>.md and .json (paths from `layout`, default: this repository); returns the
    Markdown path."""
    layout = layout or Layout.discover()
    params_file = str(layout.path("params"))
    params = ParamsFile.read(params_file)
    config, analysis = params.load(BASELINES), params.load(ANALYSIS)
    _, profile = active_profile(params)
    run = guard_config(config, guard, params_file)
    spec = guard_spec(config.registry, guard)
    facts = {
        "model_id": spec.model_id,
        "revision": spec.revision,
        "family": spec.family,
        "license": spec.license,
        "hardware_note": spec.hardware_note,
        "gpu_memory_gib_bf16": spec.gpu_memory_gib_bf16,
        "source": spec.source,
        **{key: getattr(run, key) for key in RUN_KEYS},
        "failure_policy": config.failure_policy,
        "max_new_tokens": config.max_new_tokens,
        "top_logprobs": config.top_logprobs,
    }
    facts["model"] = facts["model"] or spec.model_id
    writer = "stage `analyse` (run `dvc repro analyse`)"
    tables = {
        name: read_table(layout.path("analysis_table", table=name), name, writer)
        for name in ("scores", "baseline_parse", "mapping_effect", "mapping_effect_by_model", "calibration")
    }
    summary_file = layout.path("summary")
    if not summary_file.is_file():
        raise InputError(summary_file, f"file not found; it is written by {writer}")
    totals = read_json(summary_file).get("baselines", {}).get(guard)
    if totals is None:
        raise InputError(
            summary_file, f"no `baselines.{guard}` entry: the analysis predates the guard's run ({writer})"
        )
    report = layout.path("report")
    if not report.is_file():
        raise InputError(report, "file not found; it is written by stage `report` (run `dvc repro report`)")
    try:
        markdown, payload = guard_card(
            guard,
            facts,
            scores=tables["scores"],
            parse=tables["baseline_parse"],
            parse_totals=totals,
            mapping_effect=tables["mapping_effect"],
            mapping_effect_by_model=tables["mapping_effect_by_model"],
            calibration=tables["calibration"],
            subset=analysis.subset,
            main_seed=profile.seed,
            report_file=layout.relative("report"),
            report_sha256=hashlib.sha256(report.read_bytes()).hexdigest(),
        )
    except ValueError as error:
        raise InputError(layout.path("analysis_table", table="scores"), str(error), field="model") from error
    card = layout.path("guard_card", guard=guard)
    write_text(card, markdown)
    write_json(layout.path("guard_card_json", guard=guard), payload)
    log.info("guard_card: wrote %s and its .json twin", card)
    return card

"""Stage report: the analysis tables and the earlier stages' reports -> reports/REPORT.md, figures, plot CSVs.

Reads reports/analysis/ (stage `analyse`: scores, spans per benchmark and per scale, noise floor, swing vs
span, rank tests, correlations, the capability-only headline, competence and its
threshold trade-off, the mapping effect per model, mapping vs retraining, summary.json),
reports/fingerprint.csv (stage `fingerprint`, optional), reports/contamination.json (`audit`),
reports/agreement.json and its heatmap (`agreement`), reports/benchmarks.json (`benchmarks_report`),
data/models.yaml (`guardpolicy plan`) and params.yaml; the Markdown and figures are built by the pure
`guardpolicy.reporting.report` (its sections under `.sections`) / `.figures`. Table 1's rows are picked from
scores.csv once per mapping the report shows (`reporting.headline.branch_headlines`) and shared by the
figures, the plot tables and every section.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from guardpolicy.analysis.views import OWN
from guardpolicy.baselines.registry import load_baseline_registry
from guardpolicy.config.analysis import ANALYSIS, AnalysisConfig
from guardpolicy.config.baselines import BASELINES, BaselinesConfig
from guardpolicy.config.branches import BRANCHES, BranchConfig
from guardpolicy.config.core import ParamsFile
from guardpolicy.config.policies import POLICIES, PolicyParams
from guardpolicy.config.profiles import EncoderKey, ProfileConfig, active_profile
from guardpolicy.config.scales import SCALES
from guardpolicy.config.teachers import TEACHERS, TeacherConfig
from guardpolicy.errors import InputError
from guardpolicy.io import atomic_path, read_json, write_text
from guardpolicy.layout import Layout
from guardpolicy.reporting.figures import cap_vs_overref_png, span_vs_floor_png, spans_by_view_png
from guardpolicy.reporting.headline import (
    branch_headlines,
    branch_scores_table,
    every_view,
    span_headline,
    span_plot_table,
)
from guardpolicy.reporting.inputs import ReportInputs
from guardpolicy.reporting.report import render_report
from guardpolicy.reporting.tables import not_found, read_table
from guardpolicy.training.names import teacher_name

log = logging.getLogger(__name__)

ANALYSE = "analyse"
SUMMARY_KEYS = ("copyright_vs_noise", "load_contrast", "rank_tests", "correlations", "mapping_effect")
PLAN_FIELDS = ("kind", "scale", "branch", "seed", "recipe")


@dataclass(frozen=True)
class ReportParams:
    """The params sections stage report reads."""

    profile: str
    active: ProfileConfig
    policies: dict[str, PolicyParams]
    scales: dict[str, EncoderKey]
    teachers: dict[str, TeacherConfig]
    branches: dict[str, BranchConfig]
    analysis: AnalysisConfig
    baselines: BaselinesConfig

    @classmethod
    def read(cls, path: str | Path) -> ReportParams:
        params = ParamsFile.read(path)
        name, profile = active_profile(params)
        return cls(
            name,
            profile,
            params.load(POLICIES),
            params.load(SCALES),
            params.load(TEACHERS),
            params.load(BRANCHES),
            params.load(ANALYSIS),
            params.load(BASELINES),
        )


def guard_facts(baselines: BaselinesConfig) -> dict[str, dict[str, str]]:
    """Per configured open guard: its registry entry (hub id, pinned revision, family) and how it ran."""
    guards = baselines.guards
    if not guards:
        return {}
    registry = load_baseline_registry(baselines.registry)
    facts = {}
    for name, config in sorted(guards.items()):
        spec = registry.get(name)
        facts[name] = {
            "model_id": spec.model_id if spec else name,
            "revision": (spec.revision or "") if spec else "",
            "family": spec.family if spec else "",
            "backend": config.backend,
            "model": config.model or (spec.model_id if spec else name),
        }
    return facts


def read_report_json(path: str | Path, writer: str, required: Sequence[str] = ()) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise not_found(path, writer)
    try:
        payload = read_json(path)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"not valid JSON: {exc.msg}", row=exc.lineno) from exc
    if not isinstance(payload, dict):
        raise InputError(path, "expected a JSON object at the top level")
    for key in required:
        if key not in payload:
            raise InputError(path, "required key is missing", field=key)
    return payload


def read_plan(plan_file: str | Path) -> pd.DataFrame:
    """data/models.yaml `evaluations` as rows: model, kind, scale, branch, seed, recipe."""
    path = Path(plan_file)
    if not path.is_file():
        raise not_found(path, "`guardpolicy plan`")
    with open(path, encoding="utf-8") as handle:
        document = yaml.safe_load(handle) or {}
    evaluations = document.get("evaluations")
    if not isinstance(evaluations, dict) or not evaluations:
        raise InputError(path, "no `evaluations` mapping; rerun `guardpolicy plan`", field="evaluations")
    rows = []
    for model, entry in sorted(evaluations.items()):
        for name in PLAN_FIELDS:
            if name not in (entry or {}):
                raise InputError(path, "required key is missing", row=f"evaluations.{model}", field=name)
        rows.append({"model": model, **{name: entry[name] for name in PLAN_FIELDS}})
    return pd.DataFrame(rows)


def _write_png(path: Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def _write_csv(path: Path, table: pd.DataFrame) -> None:
    with atomic_path(path) as tmp:
        table.to_csv(tmp, index=False, lineterminator="\n")


def _link(target: Path, markdown: Path) -> str:
    return Path(os.path.relpath(target, markdown.parent)).as_posix()


def report(layout: Layout | None = None) -> str:
    """Write REPORT.md, span_vs_floor.png, cap_vs_overref.png and the DVC plot CSVs; return the Markdown.
    Every path comes from `layout` (default: the repository this runs in)."""
    layout = layout or Layout.discover()
    params_file = layout.path("params")
    plan_file = layout.path("plan")
    fingerprint_file = layout.path("fingerprint")
    contamination_file = layout.path("contamination")
    agreement_file = layout.path("agreement")
    benchmarks_file = layout.path("benchmarks_report")
    agreement_heatmap = layout.path("figure", figure="agreement_heatmap")
    out = layout.path("report")
    params = ReportParams.read(params_file)
    analyse = f"stage `{ANALYSE}` (run `dvc repro {ANALYSE}`)"
    tables = {
        name: read_table(layout.path("analysis_table", table=name), name, analyse)
        for name in (
            "benchmarks",
            "scores",
            "span",
            "span_scale",
            "swing_vs_span",
            "rank_test",
            "correlations",
            "headline",
            "competence",
            "tradeoff",
            "mapping_effect_by_model",
            "mapping_vs_retraining",
            "xstest",
            "xstest_pairs",
        )
    }
    calibration_path = layout.path("analysis_table", table="calibration")
    calibration = read_table(calibration_path, "calibration", analyse) if calibration_path.is_file() else None
    base_rate_path = layout.path("analysis_table", table="base_rate")
    base_rate = read_table(base_rate_path, "base_rate", analyse) if base_rate_path.is_file() else None
    noise_floor_path = layout.path("analysis_table", table="noise_floor")
    noise_floor = read_table(noise_floor_path, "noise_floor", analyse) if noise_floor_path.is_file() else None
    fingerprint_path = Path(fingerprint_file)
    fingerprint = (
        read_table(fingerprint_path, "fingerprint", "stage `fingerprint`")
        if fingerprint_path.is_file()
        else None
    )
    # A primary view other than the own one is read from summary.json `views`: an analysis older than the
    # views would leave the Reading printing the own view's numbers under the primary view's name.
    views = ("views",) if params.analysis.primary_view != OWN else ()
    summary = read_report_json(layout.path("summary"), analyse, (*SUMMARY_KEYS, *views))
    contamination = read_report_json(contamination_file, "stage `audit`", ("benchmarks",))
    agreement = read_report_json(agreement_file, "stage `agreement`", ("pair", "n"))
    benchmarks = read_report_json(benchmarks_file, "stage `benchmarks_report`", ("benchmarks",))
    plan = read_plan(plan_file)
    log.info(
        "report: %d score rows, %d models, %d span rows; fingerprint %s, noise floor %s",
        len(tables["scores"]),
        tables["scores"]["model"].nunique(),
        len(tables["span"]),
        "present" if fingerprint is not None else "absent",
        "present" if noise_floor is not None else "absent",
    )

    analysis_params = params.analysis
    headlines = branch_headlines(
        tables["scores"],
        tables["benchmarks"],
        subset=analysis_params.subset,
        mapping=analysis_params.mapping,
        val_split=analysis_params.val_split,
        policies=tuple(params.policies),
        source=layout.relative("analysis_table", table="scores"),
    )
    headline = headlines[analysis_params.mapping]
    seed = params.active.seed
    markdown = out
    primary_view = analysis_params.primary_view
    primary_spans = span_headline(
        tables["span"], analysis_params.subset, analysis_params.mapping, primary_view
    )
    _write_png(layout.path("figure", figure="span_vs_floor"), span_vs_floor_png(primary_spans))
    _write_png(
        layout.path("figure", figure="spans_by_view"),
        spans_by_view_png(
            every_view(tables["span"], analysis_params.subset, analysis_params.mapping),
            list(primary_spans["benchmark"]),
        ),
    )
    _write_png(
        layout.path("figure", figure="cap_vs_overref"),
        cap_vs_overref_png(headline, list(params.scales), seed),
    )
    _write_csv(layout.path("plot_table", plot="branch_scores"), branch_scores_table(headline))
    _write_csv(
        layout.path("plot_table", plot="span"),
        span_plot_table(tables["span"], analysis_params.subset, analysis_params.mapping, primary_view),
    )

    heatmap = Path(agreement_heatmap)
    teacher_descriptions = {
        teacher_name(policy): f"The {t.scale} encoder, {t.trainable} fine-tune on 100 % of {policy}'s hard "
        f"labels ({t.train_set} split); the teacher the branches distil from."
        for policy, t in params.teachers.items()
    }
    inputs = ReportInputs(
        profile=params.profile,
        profile_description=params.active.description,
        main_seed=seed,
        scales=tuple(params.scales),
        policies=tuple(params.policies),
        subset=analysis_params.subset,
        mapping=analysis_params.mapping,
        val_split=analysis_params.val_split,
        val_policy=analysis_params.val_policy,
        small_set_n=analysis_params.small_set_n,
        load_policy=analysis_params.load.policy,
        load_capability=analysis_params.load.capability,
        branch_descriptions={name: b.description for name, b in params.branches.items()},
        teacher_descriptions=teacher_descriptions,
        plan=plan,
        summary=summary,
        scores=tables["scores"],
        benchmark_sets=tables["benchmarks"],
        headlines=headlines,
        span=tables["span"],
        rank_test=tables["rank_test"],
        correlations=tables["correlations"],
        mapping_effect_by_model=tables["mapping_effect_by_model"],
        mapping_vs_retraining=tables["mapping_vs_retraining"],
        xstest=tables["xstest"],
        xstest_pairs=tables["xstest_pairs"],
        contamination=contamination,
        agreement=agreement,
        benchmarks=benchmarks,
        noise_floor=noise_floor,
        fingerprint=fingerprint,
        span_scale=tables["span_scale"],
        swing_vs_span=tables["swing_vs_span"],
        capability_headline=tables["headline"],
        competence=tables["competence"],
        tradeoff=tables["tradeoff"],
        calibration=calibration,
        primary_view=primary_view,
        copyright_benchmark=analysis_params.targets.copyright_benchmark,
        top_set=analysis_params.targets.top_set,
        base_rate=base_rate,
        guards=guard_facts(params.baselines),
        figure_links={
            "span_vs_floor": _link(layout.path("figure", figure="span_vs_floor"), markdown),
            "cap_vs_overref": _link(layout.path("figure", figure="cap_vs_overref"), markdown),
            "spans_by_view": _link(layout.path("figure", figure="spans_by_view"), markdown),
            "agreement_heatmap": _link(heatmap, markdown) if heatmap.is_file() else None,
        },
        # Relative to the root: the report names its sources, and must read the same wherever it is built.
        sources={
            "scores": layout.relative("analysis_table", table="scores"),
            "span_scale": layout.relative("analysis_table", table="span_scale"),
            "capability_headline": layout.relative("analysis_table", table="headline"),
            "noise_floor": layout.relative("analysis_table", table="noise_floor"),
            "fingerprint": layout.relative("fingerprint"),
            "calibration": layout.relative("analysis_table", table="calibration"),
            "base_rate": layout.relative("analysis_table", table="base_rate"),
            "agreement_heatmap": layout.relative("figure", figure="agreement_heatmap"),
        },
    )
    text = render_report(inputs)
    write_text(markdown, text)
    log.info("report: wrote %s, 3 figures and 2 plot tables", markdown)
    return text

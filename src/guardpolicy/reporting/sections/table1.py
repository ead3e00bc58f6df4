"""Table 1 (headline scores per branch, with the branch legend) and the scores per benchmark."""

from __future__ import annotations

import pandas as pd

from guardpolicy.layout import relative_path
from guardpolicy.reporting.formatting import (
    MISSING,
    fmt,
    fmt_ci,
    fmt_rate,
    markdown_table,
    names,
    natural_key,
)
from guardpolicy.reporting.headline import LOAD_ORDER, benchmark_roles, headline_rows, primary_metrics
from guardpolicy.reporting.inputs import ReportInputs


def _branch_legend(inputs: ReportInputs) -> list[str]:
    rows = [
        (b, " ".join(d.split()))
        for b, d in sorted(inputs.branch_descriptions.items(), key=lambda i: natural_key(i[0]))
    ]
    rows += [(t, " ".join(d.split())) for t, d in sorted(inputs.teacher_descriptions.items())]
    return ["### Branches", "", *markdown_table(["branch", "what it trains on"], rows, "ll"), ""]


def _capability_rows(inputs: ReportInputs) -> tuple[pd.DataFrame | None, str]:
    """headline.csv's rows of one grouping (the fingerprint's where present, else the study's), by model."""
    table = inputs.capability_headline
    if table is None or table.empty:
        return None, ""
    for grouping in ("fingerprint", "study"):
        chosen = table[table["grouping"] == grouping]
        if len(chosen):
            return chosen.set_index("model"), grouping
    return None, ""


def table1_section(inputs: ReportInputs) -> list[str]:
    roles = benchmark_roles(inputs.benchmark_sets, inputs.subset)
    harmful, benign, mixed = (
        [b for b, r in roles.items() if r == role] for role in ("harmful", "benign", "mixed")
    )
    capability, grouping = _capability_rows(inputs)
    if capability is None:
        source = inputs.sources.get("capability_headline", relative_path("analysis_table", table="headline"))
        first = (
            f"No capability-load CAP, AUROC or matched CAP: `{source}` is absent or has no capability-load "
            "harmful set. "
        )
    else:
        any_row = capability.iloc[0]
        first = (
            f"CAP cap-load: mean capture over the capability-load harmful sets only ({grouping} grouping: "
            f"{names(any_row['benchmarks'])}), with its bootstrap interval. AUROC: how well the model's "
            "score ranks those sets' unsafe prompts above the safe prompts of the benign and mixed sets "
            f"({names(any_row['auroc_negatives'])}; each set weighs 1 within its class; threshold-free, no "
            f"interval). CAP @ OR {fmt(any_row['matched_over_ref'], 2)}: the capability-load capture at the "
            f"threshold where the model flags {fmt_rate(any_row['matched_over_ref'])} of the calibration "
            "split's prompts every policy labels safe (params `analysis.calibration_split`; no interval). "
        )
    lines = [
        "## Table 1 — headline scores per branch",
        "",
        first + f"CAP all: mean capture over all {len(harmful)} harmful sets ({names(harmful)}), policy-load "
        f"ones included; OVER-REF: mean over-refusal over the {len(benign)} benign sets ({names(benign)}) — "
        "both unweighted means of the per-benchmark rates (each set counts once, whatever its size), with "
        "percentile bootstrap intervals that resample every set's prompts independently; mixed sets "
        f"({names(mixed)}) are in neither mean. COPY: HarmBench-copyright capture; XSTest: over-refusal on "
        f"XSTest; VAL: 4-class accuracy on split `{inputs.val_split}` against each policy's labels. Seed "
        f"{inputs.main_seed} models only.",
        "",
    ]
    main = inputs.headline[inputs.headline["seed"] == inputs.main_seed]
    val_headers = [f"VAL {p}" for p in inputs.policies]
    for scale in inputs.ordered_scales(main):
        rows = []
        for _, r in main[main["scale"] == scale].iterrows():
            c = (
                capability.loc[r["model"]]
                if capability is not None and r["model"] in capability.index
                else None
            )
            cells = [
                r["branch"],
                MISSING if c is None else fmt_ci(c["cap"], c["cap_ci_low"], c["cap_ci_high"]),
                MISSING if c is None else fmt(c["auroc"]),
                MISSING if c is None else fmt(c["cap_matched"]),
                fmt_ci(r["cap"], r["cap_ci_low"], r["cap_ci_high"]),
                fmt_ci(r["over_ref"], r["over_ref_ci_low"], r["over_ref_ci_high"]),
                fmt_ci(r["copy"], r["copy_ci_low"], r["copy_ci_high"]),
                fmt_ci(r["xstest"], r["xstest_ci_low"], r["xstest_ci_high"]),
            ]
            cells += [
                fmt_ci(r[f"val_{p}"], r[f"val_{p}_ci_low"], r[f"val_{p}_ci_high"]) for p in inputs.policies
            ]
            rows.append(cells)
        lines += [f"### {scale} scale", ""]
        header = [
            "branch",
            "CAP cap-load",
            "AUROC",
            "CAP @ OR",
            "CAP all",
            "OVER-REF",
            "COPY",
            "XSTest over-ref",
        ]
        lines += markdown_table([*header, *val_headers], rows)
        lines.append("")
    return [*lines, *_branch_legend(inputs)]


def per_benchmark_section(inputs: ReportInputs) -> list[str]:
    roles = benchmark_roles(inputs.benchmark_sets, "full")
    primary = primary_metrics(inputs.span, roles)
    rated = headline_rows(inputs.scores, inputs.subset, inputs.mapping)
    load = {b: "policy" for b in inputs.load_policy} | {b: "capability" for b in inputs.load_capability}
    benchmarks = sorted(roles, key=lambda b: (LOAD_ORDER.index(load.get(b, "other")), b))
    lines = [
        "## Scores per benchmark",
        "",
        "Each benchmark's primary metric (cap on harmful sets, over_ref on benign sets, the configured "
        "metric on "
        "mixed sets) per branch, seed "
        f"{inputs.main_seed}, with its interval.",
        "",
    ]
    main = inputs.headline[inputs.headline["seed"] == inputs.main_seed]
    for scale in inputs.ordered_scales(main):
        models = main[main["scale"] == scale]
        header = ["benchmark", "load", "metric", *models["branch"]]
        rows = []
        for benchmark in benchmarks:
            metric = primary[benchmark]
            values = rated[(rated["benchmark"] == benchmark) & (rated["metric"] == metric)].set_index("model")
            cells = [benchmark, load.get(benchmark, "other"), metric]
            for model in models["model"]:
                if model in values.index:
                    v = values.loc[model]
                    cells.append(fmt_ci(v["value"], v["ci_low"], v["ci_high"]))
                else:
                    cells.append(MISSING)
            rows.append(cells)
        lines += [f"### {scale} scale", "", *markdown_table(header, rows, "lll" + "r" * len(models)), ""]
    return lines

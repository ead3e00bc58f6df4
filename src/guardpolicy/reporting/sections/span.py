"""The label-supervision span Δ_b beside the seed noise floor Φ_b: per benchmark, per scale, against the
fingerprint's swing, and each seed recipe's spread."""

from __future__ import annotations

from guardpolicy.layout import relative_path
from guardpolicy.reporting.formatting import (
    MISSING,
    fmt,
    fmt_ci,
    fmt_count,
    fmt_p,
    is_missing,
    markdown_table,
)
from guardpolicy.reporting.headline import headline_rows, span_headline
from guardpolicy.reporting.inputs import ReportInputs


def span_section(inputs: ReportInputs) -> list[str]:
    span = span_headline(inputs.span, inputs.subset, inputs.mapping, inputs.primary_view)
    range_columns = [c for c in span.columns if c.startswith("range_")]
    header = [
        "benchmark",
        "load",
        "study load",
        "swing",
        "metric",
        "Δ_b",
        *[f"range {c[len('range_') :]}" for c in range_columns],
        "Φ_b",
        "Φ max",
        "seed recipes",
        "Δ_b − Φ_b",
    ]
    rows = []
    for _, r in span.iterrows():
        rows.append(
            [
                r["benchmark"],
                r["load"],
                r.get("study_load", MISSING),
                fmt(r.get("swing")),
                r["primary_metric"],
                fmt_ci(r["delta"], r["delta_ci_low"], r["delta_ci_high"]),
                *[fmt(r[c]) for c in range_columns],
                fmt_ci(r["phi"], r["phi_ci_low"], r["phi_ci_high"]),
                fmt(r["phi_max"]),
                fmt_count(r["n_recipes"]),
                fmt_ci(r.get("difference"), r.get("difference_ci_low"), r.get("difference_ci_high")),
            ]
        )
    c = inputs.primary.get("load_contrast") or {}
    lines = [
        "## Label-supervision span Δ_b beside the seed noise floor Φ_b",
        "",
        f"In the {inputs.primary_view} view (`analysis.primary_view`); every view side by side: “Three views "
        "of every score”.",
        "",
        "Δ_b: the mean over scales of the range (max − min over branches) of the benchmark's primary metric. "
        "Φ_b: the median over the recipes trained at several seeds of each one's spread of that metric, with "
        "the interval of that median over the bootstrap resamples (— where no recipe was scored at several "
        "seeds); Φ max: the widest; Δ_b − Φ_b with the interval of its per-resample value. load: the "
        "analysis' grouping, from the policy fingerprint's swing "
        "|agreement A − agreement B| (policy above `analysis.load.swing_threshold`); study load: the study's "
        "grouping. Rows are grouped policy-load, capability-load, other.",
        "",
        *markdown_table(header, rows, "lllll" + "r" * (len(header) - 5)),
        "",
        f"Mean Δ over policy-load benchmarks: "
        f"{fmt_ci(c.get('policy_mean_delta'), c.get('policy_ci_low'), c.get('policy_ci_high'))}; over "
        f"capability-load benchmarks: "
        f"{fmt_ci(c.get('capability_mean_delta'), c.get('capability_ci_low'), c.get('capability_ci_high'))}; "
        f"difference {fmt_ci(c.get('difference'), c.get('difference_ci_low'), c.get('difference_ci_high'))}.",
        "",
    ]
    link = inputs.figure_links.get("span_vs_floor")
    if link:
        lines += [f"![Δ_b beside Φ_b per benchmark]({link})", ""]
    lines += _span_scale(inputs)
    lines += _swing_table(inputs)
    lines += _noise_floor(inputs)
    return lines


def _span_scale(inputs: ReportInputs) -> list[str]:
    title = "### Per scale: Δ against the seed noise of as many runs"
    table = inputs.span_scale
    if table is None:
        source = inputs.sources.get("span_scale", relative_path("analysis_table", table="span_scale"))
        return [title, "", f"`{source}` is absent, so Δ is not compared with Φ per scale.", ""]
    chosen = headline_rows(table, inputs.subset, inputs.mapping, inputs.primary_view).copy()
    chosen["_scale"] = [inputs.scale_rank(str(x)) for x in chosen["scale"]]
    chosen = chosen.sort_values(["benchmark", "_scale"])
    rows = [
        [
            r["benchmark"],
            r["scale"],
            fmt(r["swing"]),
            fmt_count(r["n_branches"]),
            fmt_ci(r["delta"], r["delta_ci_low"], r["delta_ci_high"]),
            fmt_ci(r["phi"], r["phi_ci_low"], r["phi_ci_high"]),
            fmt_ci(r["noise_range"], r["noise_range_ci_low"], r["noise_range_ci_high"]),
            fmt_ci(r["excess"], r["excess_ci_low"], r["excess_ci_high"]),
            str(r["verdict"]).split(":")[0],
        ]
        for _, r in chosen.iterrows()
    ]
    return [
        title,
        "",
        "At each scale, Δ (the range over that scale's n branches) beside Φ at the same scale, and beside "
        "the range seed noise alone would give n runs: each recipe's k-seed spread scaled by d2(n)/d2(k), "
        "the ratio of the expected ranges of n and k normal draws, median over the scale's recipes. "
        "*competence*: the policies agree on the benchmark (swing ≤ `analysis.competence.max_swing`) yet "
        "Δ exceeds that noise — the span is competence, not policy.",
        "",
        *markdown_table(
            ["benchmark", "scale", "swing", "n", "Δ", "Φ", "noise of n runs", "Δ − noise", "verdict"],
            rows,
            "llrrrrrrl",
            empty="No per-scale comparison (no scale has two branch models).",
        ),
        "",
    ]


def _swing_table(inputs: ReportInputs) -> list[str]:
    table = inputs.swing_vs_span
    if table is None or table.empty:
        return []
    table = headline_rows(table, inputs.subset, inputs.mapping, inputs.primary_view)
    rows = [
        [
            r["scale"],
            fmt_count(r["n_benchmarks"]),
            fmt_ci(r["rho"], r["ci_low"], r["ci_high"]),
            fmt_p(r["p_value"]),
            MISSING if is_missing(r["note"]) else str(r["note"]),
        ]
        for _, r in table.iterrows()
    ]
    return [
        "### The fingerprint's swing against Δ",
        "",
        "Spearman ρ across benchmarks between the fingerprint's swing (computed before any training, held "
        "fixed) and Δ (scale `all`: Δ_b; a scale: that scale's range), with the percentile interval over the "
        "resamples of each benchmark's prompts and scipy's p-value.",
        "",
        *markdown_table(["scale", "benchmarks", "ρ", "p", "note"], rows, "lrrrl"),
        "",
    ]


def _noise_floor(inputs: ReportInputs) -> list[str]:
    source = inputs.sources.get("noise_floor", relative_path("analysis_table", table="noise_floor"))
    floor = inputs.noise_floor
    if floor is None:
        return [
            f"The seed noise floor table `{source}` is absent, so no per-recipe seed spread is reported.",
            "",
        ]
    rows_here = headline_rows(floor, inputs.subset, inputs.mapping, inputs.primary_view)
    if rows_here.empty:
        return [
            f"The seed noise floor table `{source}` has no rows (no recipe was trained at several seeds), "
            "so no "
            "per-recipe seed spread is reported.",
            "",
        ]
    rows = [
        [
            r["recipe"],
            str(r.get("scale", MISSING)),
            r["benchmark"],
            str(r["seeds"]),
            fmt_ci(r["spread"], r["ci_low"], r["ci_high"]),
        ]
        for _, r in rows_here.sort_values(["recipe", "benchmark"]).iterrows()
    ]
    return [
        "<details><summary>Seed spread per recipe and benchmark</summary>",
        "",
        *markdown_table(["recipe", "scale", "benchmark", "seeds", "spread"], rows, "llllr"),
        "",
        "</details>",
        "",
    ]

"""The three views of every score side by side (own, matched, ranked), and the base-rate diagnostic: how
much of the own view is *how often* a model flags rather than *what* it tells apart.

Everything printed is read from summary.json (`primary_view`, `views`, `study_views`, `targets_views`,
`base_rate`), span.csv and base_rate.csv; nothing is computed here.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from guardpolicy.analysis.views import MATCHED, OWN, RANKED, VIEWS
from guardpolicy.layout import relative_path
from guardpolicy.reporting.formatting import (
    MISSING,
    fmt,
    fmt_ci,
    fmt_rate,
    is_missing,
    markdown_table,
    natural_key,
)
from guardpolicy.reporting.headline import headline_rows, span_headline
from guardpolicy.reporting.inputs import ReportInputs

# What a span is over in each view: the words the Reading puts after a benchmark's name.
SCORE_WORDS = {
    OWN: "capture at each model's own decisions",
    MATCHED: "capture at the matched threshold",
    RANKED: "AUROC against the reference",
}
VIEW_MEANING = {
    OWN: "each model's own decisions (the argmax of its 4-class head)",
    MATCHED: "every model put at the threshold on its unsafe score where it flags "
    "`analysis.matched_over_ref` of the reference, the calibration split's prompts every policy labels safe; "
    "every benchmark's rate read there",
    RANKED: "threshold-free: a harmful set's unsafe prompts against the reference, the calibration split's "
    "agreed-unsafe prompts against a benign set's (higher: *less* over-refusal), a mixed set's own AUROC",
}


def view_label(view: str, primary: str) -> str:
    return f"{view} (primary)" if view == primary else view


def views_intro(inputs: ReportInputs) -> str:
    """The Reading's first paragraph: which view leads and why it was fixed beforehand."""
    base = inputs.summary.get("base_rate") or {}
    reference = (
        f" ({base['n_reference']} prompts of `{base.get('reference')}`)" if base.get("n_reference") else ""
    )
    return (
        f"Every finding below is read in the **{inputs.primary_view}** view (`analysis.primary_view`, fixed "
        f"in params before the run): {VIEW_MEANING.get(inputs.primary_view, inputs.primary_view)}"
        f"{reference}. Our branches differ mostly in how often they flag, which the own view mixes into "
        "every span; the other two views stand beside it in “Three views of every score”, and “Against the "
        "study” says in which views each finding holds."
    )


def reading_base_rate(inputs: ReportInputs) -> str:
    """The Reading's sentence on the base rate: the CAP/OVER-REF correlation across branches per view."""
    base = inputs.summary.get("base_rate") or {}
    by_view = base.get("cap_over_ref_r") or {}
    if not by_view:
        return (
            "**Base rate.** Not measured (summary.json has no `base_rate`: an analysis older than the views)."
        )
    parts = []
    for view in VIEWS:
        entry = by_view.get(view) or {}
        parts.append(
            f"{view} {fmt_ci(entry.get('r'), entry.get('ci_low'), entry.get('ci_high'))}"
            if not is_missing(entry.get("r"))
            else f"{view} not computed ({entry.get('n_models', 0)} models with both)"
        )
    own_rate = base.get("own_flag_rate") or {}
    spread = (
        f" At their own decisions the branches flag {fmt_rate(own_rate.get('min'))} "
        f"(`{own_rate.get('min_model')}`) to {fmt_rate(own_rate.get('max'))} (`{own_rate.get('max_model')}`) "
        "of the reference, prompts no policy calls unsafe."
        if own_rate
        else ""
    )
    return (
        "**Base rate.** Across the main-seed branch models, Pearson r between the mean score over the "
        "harmful sets and over the benign sets (own and matched: mean CAP and mean OVER-REF; ranked: the two "
        f"mean AUROCs): {'; '.join(parts)}. Near +1 in the own and matched views the branches differ by how "
        "often they flag rather than by what they tell apart; in the ranked view a benign set's AUROC rises "
        f"as its over-refusal falls, so +1 there means a branch that ranks both kinds of set better.{spread}"
    )


def _ci(block: dict[str, Any], key: str, name: str) -> str:
    entry = block.get(key) or {}
    return fmt_ci(entry.get(name), entry.get(f"{name}_ci_low"), entry.get(f"{name}_ci_high"))


def _with_verdict(block: dict[str, Any], key: str, name: str) -> str:
    entry = block.get(key) or {}
    verdict = str(entry.get("verdict") or "").split(":")[0]
    return f"{_ci(block, key, name)}{f' — {verdict}' if verdict else ''}"


def _rank_cell(block: dict[str, Any], top_set: str | None, benchmark: str, inputs: ReportInputs) -> str:
    scales = ((block.get("rank_tests") or {}).get(top_set or "") or {}) if top_set else {}
    parts = [
        f"{scale}: {entry['extreme']}"
        + ("" if is_missing(entry.get("p_value")) else f" (p = {fmt(entry['p_value'], 4)})")
        for scale in sorted(scales, key=inputs.scale_rank)
        if (entry := (scales[scale] or {}).get(benchmark))
    ]
    return "; ".join(parts) or MISSING


def _competence_cell(block: dict[str, Any]) -> str:
    flagged = sorted(
        f"{benchmark} ({scale})"
        for benchmark, scales in (block.get("span_scale") or {}).items()
        for scale, entry in scales.items()
        if str(entry.get("verdict", "")).startswith("competence:")
    )
    return ", ".join(flagged) if flagged else "none"


def _targets_cell(block: dict[str, Any]) -> str:
    targets = block.get("targets") or {}
    measured = [t for t in targets.values() if t.get("status") != "not measured"]
    met = sum(1 for t in measured if t.get("status") == "met")
    return f"{met} of {len(measured)} measured" if targets else MISSING


def verdict_rows(inputs: ReportInputs) -> list[list[str]]:
    """One row per verdict, one cell per view (own, matched, ranked): the number with its interval and the
    verdict's first words, as summary.json holds them."""
    blocks = {view: inputs.view_summary(view) for view in VIEWS}
    copyright_benchmark, top_set = inputs.copyright_benchmark, inputs.top_set
    cells = {
        "copyright Δ": lambda b: _ci(b, "copyright_vs_noise", "delta"),
        "copyright Δ − Φ": lambda b: _with_verdict(b, "copyright_vs_noise", "difference"),
        "policy − capability mean Δ (fingerprint)": lambda b: _with_verdict(b, "load_contrast", "difference"),
        "policy − capability mean Δ (study)": lambda b: _with_verdict(b, "load_contrast_study", "difference"),
        "mean Δ where the policies agree": lambda b: fmt_ci(
            (b.get("agreed_spans") or {}).get("mean_delta"),
            (b.get("agreed_spans") or {}).get("ci_low"),
            (b.get("agreed_spans") or {}).get("ci_high"),
        ),
        "ρ(swing, Δ)": lambda b: fmt_ci(
            ((b.get("swing_vs_span") or {}).get("all") or {}).get("rho"),
            ((b.get("swing_vs_span") or {}).get("all") or {}).get("ci_low"),
            ((b.get("swing_vs_span") or {}).get("all") or {}).get("ci_high"),
        ),
        f"`{top_set}` on copyright": lambda b: _rank_cell(b, top_set, copyright_benchmark, inputs),
        "spans flagged competence": _competence_cell,
        "targets met": _targets_cell,
    }
    return [[label, *(cell(blocks[view]) for view in VIEWS)] for label, cell in cells.items()]


def span_rows(inputs: ReportInputs) -> list[list[str]]:
    """Per benchmark (the primary view's order): load, swing, and Δ with its interval beside Φ per view."""
    order = span_headline(inputs.span, inputs.subset, inputs.mapping, inputs.primary_view)
    by_view = {
        view: headline_rows(inputs.span, inputs.subset, inputs.mapping, view).set_index("benchmark")
        for view in VIEWS
    }
    rows = []
    for _, first in order.iterrows():
        benchmark = first["benchmark"]
        cells = [benchmark, str(first["load"]), fmt(first.get("swing"))]
        for view in VIEWS:
            table = by_view[view]
            if benchmark not in table.index:
                cells += [MISSING, MISSING]
                continue
            r = table.loc[benchmark]
            cells += [f"{fmt_ci(r['delta'], r['delta_ci_low'], r['delta_ci_high'])}", fmt(r["phi"])]
        rows.append(cells)
    return rows


def base_rate_rows(inputs: ReportInputs) -> list[list[str]]:
    """Per model (headline mapping): its flag rates on the reference and the agreed-unsafe reference at its
    own decisions and at the matched threshold, and the AUROC between the two."""
    table = inputs.base_rate
    if table is None or table.empty:
        return []
    chosen = headline_rows(table, inputs.subset, inputs.mapping).copy()
    chosen["_scale"] = [inputs.scale_rank(str(x)) for x in chosen["scale"]]
    chosen["_kind"] = [0 if k == "teacher" else 1 if k == "branch" else 2 for k in chosen["kind"]]
    chosen["_branch"] = [natural_key(str(b)) for b in chosen["branch"]]
    chosen = chosen.sort_values(["_kind", "_scale", "_branch", "seed"])

    def ci(r: pd.Series, name: str) -> str:
        return fmt_ci(r[name], r[f"{name}_ci_low"], r[f"{name}_ci_high"])

    return [
        [
            r["model"],
            ci(r, "own_flag_rate"),
            ci(r, "own_unsafe_flag_rate"),
            fmt(r["threshold"]),
            ci(r, "matched_unsafe_flag_rate"),
            ci(r, "auroc"),
        ]
        for _, r in chosen.iterrows()
    ]


def views_section(inputs: ReportInputs) -> list[str]:
    title = "## Three views of every score"
    if not inputs.summary.get("views"):
        return [
            title,
            "",
            "summary.json has no `views` block (an analysis older than the views): only the own view exists "
            "in this run. Rerun `dvc repro analyse`.",
            "",
        ]
    base = inputs.summary.get("base_rate") or {}
    labels = [view_label(view, inputs.primary_view) for view in VIEWS]
    lines = [
        title,
        "",
        *(f"- **{view}**: {VIEW_MEANING[view]}." for view in VIEWS),
        "",
        "Spans, noise floors and verdicts are computed alike in each view; the matched and ranked intervals "
        "resample the calibration split with the benchmark, so the threshold's own noise is in them "
        f"(docs/study.md, “Three views of every score”). Reference: `{base.get('reference', MISSING)}`, "
        f"{base.get('n_reference', MISSING)} prompts every policy labels safe, "
        f"{base.get('n_unsafe_reference', MISSING)} every policy labels unsafe; matched flag rate "
        f"{fmt_rate(base.get('matched_over_ref'))}. Subset `{inputs.subset}`, mapping `{inputs.mapping}`.",
        "",
        "### The verdicts in each view",
        "",
        *markdown_table(["verdict", *labels], verdict_rows(inputs), "l" + "r" * len(VIEWS)),
        "",
        "### Δ and Φ per benchmark in each view",
        "",
        "Δ with its interval beside Φ (the median seed spread) in each view; own and matched are rates, "
        "ranked is AUROC.",
        "",
        *markdown_table(
            ["benchmark", "load", "swing", *(f"{h} {v}" for v in labels for h in ("Δ", "Φ"))],
            span_rows(inputs),
            "llr" + "r" * (2 * len(VIEWS)),
            empty="No span was computed.",
        ),
        "",
    ]
    link = inputs.figure_links.get("spans_by_view")
    if link:
        lines += [f"![Δ_b and Φ_b per benchmark in each view]({link})", ""]
    lines += [
        "### Base rate: how often each model flags, beside what it tells apart",
        "",
        f"{reading_base_rate(inputs)}",
        "",
        "Per model: the share of the reference (prompts every policy labels safe) and of the agreed-unsafe "
        "reference its own decisions flag; the matched threshold and the share of the agreed-unsafe "
        "reference it flags there; the AUROC of agreed-unsafe against agreed-safe prompts, threshold-free. "
        "Intervals resample the calibration split.",
        "",
    ]
    rows = base_rate_rows(inputs)
    source = inputs.sources.get("base_rate", relative_path("analysis_table", table="base_rate"))
    lines += (
        [
            *markdown_table(
                [
                    "model",
                    "flags of reference (own)",
                    "flags of agreed-unsafe (own)",
                    "matched threshold",
                    "flags of agreed-unsafe (matched)",
                    "AUROC",
                ],
                rows,
                "lrrrrr",
            ),
            "",
        ]
        if rows
        else [f"`{source}` is absent or empty, so no per-model base rate is reported.", ""]
    )
    return lines

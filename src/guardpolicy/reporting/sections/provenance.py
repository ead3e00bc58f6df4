"""Where the numbers come from: contamination of the benchmarks, the policy fingerprint, the label agreement
between the policies, and how to reproduce the run."""

from __future__ import annotations

from guardpolicy.layout import relative_path
from guardpolicy.reporting.formatting import MISSING, fmt, fmt_ci, fmt_count, fmt_rate, markdown_table
from guardpolicy.reporting.inputs import ReportInputs


def contamination_section(inputs: ReportInputs) -> list[str]:
    statuses = {n: e.get("status") for n, e in inputs.benchmarks.get("benchmarks", {}).items()}
    rows = []
    for name, e in sorted(inputs.contamination.get("benchmarks", {}).items()):
        rows.append(
            [
                name + (" (missing)" if statuses.get(name) == "missing" else ""),
                fmt_count(e.get("n")),
                fmt_count(e.get("exact")),
                fmt_rate(e.get("exact_rate")),
                fmt_count(e.get("near_duplicate_only")),
                fmt_rate(e.get("near_duplicate_only_rate")),
                fmt_count(e.get("dropped")),
                fmt_count(e.get("clean_n")),
            ]
        )
    totals = inputs.contamination.get("totals", {})
    return [
        "## Contamination",
        "",
        "Overlap of each benchmark with the training pool (exact after normalisation; near: near-duplicate "
        "only), and how many prompts the decontaminated (`clean`) copy dropped. Counts over whole "
        "benchmarks, "
        "so no sampling interval applies.",
        "",
        *markdown_table(
            ["benchmark", "n", "exact", "exact rate", "near", "near rate", "dropped", "clean n"], rows
        ),
        "",
        f"In all: {fmt_count(totals.get('any_overlap'))} overlapping prompts "
        f"({fmt_rate(totals.get('any_overlap_rate'))}).",
        "",
    ]


def fingerprint_section(inputs: ReportInputs) -> list[str]:
    source = inputs.sources.get("fingerprint", relative_path("fingerprint"))
    table = inputs.fingerprint
    if table is None or table.empty:
        return [
            "## Policy fingerprint",
            "",
            f"The fingerprint table `{source}` is absent (stage `fingerprint` did not run), so how often "
            "each "
            "policy agrees with each benchmark's own gold is not reported.",
            "",
        ]
    policies = sorted(set(table["policy"]))
    rows = []
    for benchmark, group in table.groupby("benchmark", sort=True):
        mine = group.set_index("policy")
        cells = [benchmark]
        for policy in policies:
            if policy in mine.index:
                r = mine.loc[policy]
                cells.append(
                    f"{fmt_ci(r['agreement'], r['ci_low'], r['ci_high'])} ({r['labeler']}, "
                    f"{fmt_count(r['agree'])}/{fmt_count(r['n'])})"
                )
            else:
                cells.append(MISSING)
        rows.append(cells)
    return [
        "## Policy fingerprint",
        "",
        "How often each policy's binary label of a benchmark's prompts agrees with the benchmark's own gold "
        "(labeler, agreeing/labelled prompts): a benchmark that agrees with one policy far more than the "
        "other "
        "encodes that policy.",
        "",
        *markdown_table(["benchmark", *policies], rows),
        "",
    ]


def agreement_section(inputs: ReportInputs) -> list[str]:
    a = inputs.agreement
    pair = a.get("pair", ["?", "?"])
    link = inputs.figure_links.get("agreement_heatmap")
    figure = (
        [f"![label agreement heatmap]({link})"]
        if link
        else [f"The heatmap `{inputs.sources.get('agreement_heatmap', 'agreement_heatmap.png')}` is absent."]
    )
    return [
        "## Label agreement between the policies",
        "",
        f"`{pair[0]}` vs `{pair[1]}` over {fmt_count(a.get('n'))} pool prompts (the whole pool, so no "
        "sampling interval): coarse agreement "
        f"{fmt_rate(a.get('coarse_agreement'))} (Cohen's κ {fmt(a.get('cohen_kappa_coarse'))}), binary "
        f"agreement {fmt_rate(a.get('binary_agreement'))} (κ {fmt(a.get('cohen_kappa_binary'))}), binary "
        "with "
        f"BOUNDARY_SAFE unsafe {fmt_rate(a.get('binary_agreement_boundary_unsafe'))}.",
        "",
        *([f"> {a['verdict']}", ""] if a.get("verdict") else []),
        *figure,
        "",
    ]


def reproduce_section(inputs: ReportInputs) -> list[str]:
    return [
        "## How to reproduce",
        "",
        "```bash",
        "make repro                                   # dvc repro: every stage, this report last",
        f"dvc exp run -S profile={inputs.profile}                # the same run as an experiment",
        "dvc exp run -S analysis.mapping=boundary_unsafe   # e.g. a headline under the other mapping",
        "make diff REV=main                           # metrics and params vs a git revision or DVC "
        "experiment",
        "```",
        "",
    ]

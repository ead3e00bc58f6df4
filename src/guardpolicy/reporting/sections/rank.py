"""Rank tests and Spearman correlations: their sentences in the Reading, and their tables.

Whether a test is a hit and the α it is judged at are the analysis' (summary.json `rank_tests`,
`rank_chance`); the report only lists them.
"""

from __future__ import annotations

from guardpolicy.layout import relative_path
from guardpolicy.reporting.formatting import (
    MISSING,
    fmt,
    fmt_count,
    fmt_p,
    fmt_rate,
    is_missing,
    markdown_table,
)
from guardpolicy.reporting.headline import LOAD_ORDER, headline_rows
from guardpolicy.reporting.inputs import ReportInputs


def reading_rank(inputs: ReportInputs) -> str:
    """The Reading's rank-test finding: per branch set and scale, the benchmarks on which it takes the
    expected extreme ranks, then the hits chance alone gives (summary.json `rank_tests`, `rank_chance`)."""
    summary = inputs.primary
    rank_test = headline_rows(inputs.rank_test, inputs.subset, inputs.mapping, inputs.primary_view)
    tests = summary.get("rank_tests") or {}
    chance = summary.get("rank_chance") or {}
    alpha = fmt_p(chance.get("alpha"))
    if not tests:
        return (
            "**Rank test.** The analysis reports no rank test (params `analysis.rank_sets` is empty, or no "
            "scale has enough of a set's branches scored to rank them)."
        )
    sentences = []
    for set_name in sorted(tests):
        for scale in sorted(tests[set_name], key=inputs.scale_rank):
            by_benchmark = tests[set_name][scale]
            rows = rank_test[(rank_test["set_name"] == set_name) & (rank_test["scale"] == scale)]
            size = f" ({int(rows['k'].iloc[0])} of {int(rows['n'].iloc[0])} branches)" if len(rows) else ""
            hits = [
                f"`{b}` ({v['extreme']}, tested {v.get('direction', 'two-sided')}, "
                f"p = {fmt_p(v['p_value'])}, stable in {fmt_rate(v.get('stability'))} of resamples)"
                for b, v in sorted(by_benchmark.items())
                if v.get("hit")
            ]
            if hits:
                sentences.append(
                    f"`{set_name}`{size} at the {scale} scale takes the expected extreme ranks on "
                    f"{len(hits)} of {len(by_benchmark)} benchmarks: {', '.join(hits)}"
                )
            else:
                sentences.append(
                    f"`{set_name}`{size} at the {scale} scale takes the expected extreme ranks on none of "
                    f"its {len(by_benchmark)} benchmarks at p ≤ {alpha}"
                )
    expected = (
        f" Over all {fmt_count(chance.get('tests'))} tests ({fmt_count(chance.get('one_sided'))} one-sided "
        f"in a direction fixed in params before the run, the rest two-sided) {fmt_count(chance.get('hits'))} "
        f"hit(s) at p ≤ {alpha}, where chance alone gives {fmt(chance.get('expected_hits'), 2)} "
        f"expected (at most {fmt(chance.get('alpha_bound'), 2)} = tests × α)."
        if chance
        else ""
    )
    return (
        f"**Rank test** ({inputs.primary_view} view). Under exchangeable branches, a given set of k of n "
        "branches takes the k top (or bottom) ranks with chance 1/C(n, k): p = 1/C(n, k) where params fix "
        "the direction beforehand, 2/C(n, k) otherwise. " + "; ".join(sentences) + "." + expected
    )


def reading_correlations(inputs: ReportInputs) -> str:
    """The Reading's correlation finding: VAL against agreement per load group (summary.json)."""
    correlations = inputs.summary.get("correlations") or {}
    if not correlations:
        return "**Correlations.** The analysis reports no correlation (too few models)."
    parts = []
    for scale in sorted(correlations, key=inputs.scale_rank):
        by_target = (correlations[scale] or {}).get("fingerprint") or {}
        for target, label in (("val_policy_labels", f"`{inputs.val_policy}`'s labels"), ("gold", "the gold")):
            entry = by_target.get(target) or {}
            loads = []
            for load in ("policy", "capability"):
                c = entry.get(load) or {}
                models = f"{fmt_count(c.get('n_models'))} models"
                if is_missing(c.get("rho")):
                    loads.append(f"{load}-load ρ not computed ({models})")
                else:
                    loads.append(
                        f"{load}-load ρ = {fmt(c.get('rho'))} (p = {fmt_p(c.get('p_value'))}, {models})"
                    )
            where = "all scales" if scale == "all" else f"{scale} scale"
            parts.append(f"{where}, agreement with {label}: " + ", ".join(loads))
    return (
        f"**Correlations.** Spearman ρ between VAL (accuracy against `{inputs.val_policy}` labels) and the "
        "models' agreement on each load group's benchmarks (fingerprint grouping) — with "
        f"`{inputs.val_policy}`'s own labels of the benchmark prompts (the study's construct) and with each "
        "benchmark's gold — with its p-value (the analysis gives no interval for ρ; own view only: agreement "
        "is read at the models' own decisions): "
        + "; ".join(parts)
        + ". A policy-load ρ well above the capability-load ρ says validation accuracy tracks the policy, "
        "not detection capability."
    )


def rank_test_section(inputs: ReportInputs) -> list[str]:
    tests = headline_rows(inputs.rank_test, inputs.subset, inputs.mapping, inputs.primary_view)
    tests = tests.sort_values(["set_name", "scale", "p_value", "benchmark"])
    rows = [
        [
            r["set_name"],
            r["scale"],
            r["benchmark"],
            f"{int(r['k'])} of {int(r['n'])}",
            r["direction"],
            r["extreme"],
            fmt_p(r["p_value"]),
            fmt_p(r["null_probability"]),
            "yes" if str(r["hit"]).lower() == "true" else "no",
            fmt_rate(r["stability"]),
        ]
        for _, r in tests.iterrows()
    ]
    chance = inputs.primary.get("rank_chance") or {}
    return [
        "## Rank tests",
        "",
        f"In the {inputs.primary_view} view (`analysis.primary_view`); each view's tests are in "
        f"`{relative_path('analysis_table', table='rank_test')}`, the copyright ones side by side in “Three "
        "views of every score”. "
        "In the ranked view a benign set's AUROC runs opposite to its over-refusal, so its pre-registered "
        "direction flips there.",
        "",
        "Exact permutation test of whether the set takes all k top or bottom ranks of a benchmark's "
        "primary metric among the n branches of a scale. direction: fixed in params "
        "(`analysis.rank_direction`) before the run — one-sided, p = 1/C(n, k) when the set is extreme that "
        "way — or two-sided, p = 2/C(n, k) when extreme either way; — otherwise. chance: the probability "
        "of a hit under exchangeable branches. "
        "stable: the share of bootstrap resamples in which the observed extreme ranking still holds.",
        "",
        *markdown_table(
            [
                "branch set",
                "scale",
                "benchmark",
                "k of n",
                "direction",
                "extreme",
                "p",
                "chance",
                "hit",
                "stable",
            ],
            rows,
            "lllrllrrlr",
            empty="No rank test was run (no branch set had its branches scored at any scale).",
        ),
        "",
        f"Hits expected by chance over the {fmt_count(chance.get('tests'))} tests: "
        f"{fmt(chance.get('expected_hits'), 2)} (the sum of the chances that can reach p ≤ "
        f"{fmt(chance.get('alpha'), 2)}; at most {fmt(chance.get('alpha_bound'), 2)} = tests × α); hits: "
        f"{fmt_count(chance.get('hits'))}.",
        "",
    ]


def correlation_section(inputs: ReportInputs) -> list[str]:
    table = inputs.correlations.copy()
    table["_order"] = [inputs.scale_rank(s) for s in table["scale"]]
    table["_load"] = [LOAD_ORDER.index(x) if x in LOAD_ORDER else len(LOAD_ORDER) for x in table["load"]]
    table = table.sort_values(["_order", "grouping", "target", "_load"])
    rows = [
        [
            r["scale"],
            r["grouping"],
            r["target"],
            r["load"],
            fmt(r["rho"]),
            fmt_p(r["p_value"]),
            fmt_count(r["n_models"]),
            MISSING if is_missing(r["note"]) else str(r["note"]),
        ]
        for _, r in table.iterrows()
    ]
    link = inputs.figure_links.get("cap_vs_overref")
    return [
        "## Spearman correlations",
        "",
        f"ρ across branch models between VAL (accuracy against `{inputs.val_policy}` labels) and the models' "
        "mean agreement on each load group's benchmarks — with each benchmark's gold (target `gold`) or with "
        f"`{inputs.val_policy}`'s own labels of the same prompts (target `val_policy_labels`, the study's "
        "construct) — under the fingerprint's grouping and the study's, with its p-value.",
        "",
        *markdown_table(
            ["scale", "grouping", "agreement with", "load", "ρ", "p", "models", "note"],
            rows,
            "llllrrrl",
            empty="No correlation was computed.",
        ),
        "",
        *([f"![mean CAP vs mean OVER-REF per model]({link})", ""] if link else []),
    ]

"""The card of one guard scored by `guardpolicy score` (reports/score/<guard>/card.md).

Pure and print-only: every number comes from the guard's metrics document or its tables (scores, view
scores, XSTest, fingerprint), formatted here, never computed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from guardpolicy.analysis.baselines import GUARD_MAPPING
from guardpolicy.analysis.score import GOLD
from guardpolicy.analysis.scores import ROLE_MEANS
from guardpolicy.analysis.views import MATCHED, OWN, RANKED
from guardpolicy.reporting.formatting import MISSING, fmt, fmt_ci, fmt_count, fmt_signed, markdown_table
from guardpolicy.reporting.guard_card import headline_table

METRICS = ("cap", "over_ref", "f1", "auprc")
METRIC_NAMES = {"cap": "CAP", "over_ref": "OVER-REF", "f1": "F1", "auprc": "AUPRC"}
# Our mapping name -> the guard's (scores.csv and fingerprint.csv use ours).
OUR_MAPPING = {guard: ours for ours, guard in GUARD_MAPPING.items()}
VIEW_NAMES = {OWN: "own", MATCHED: "matched", RANKED: "ranked (AUROC)"}
# From reports/score/<guard>/card.md to the study's account of the views.
VIEWS_DOC = "../../../docs/study.md#three-views-of-every-score"


def _cell(rows: pd.DataFrame, metric: str) -> str:
    row = rows[rows["metric"] == metric]
    if row.empty:
        return MISSING
    r = row.iloc[0]
    return fmt_ci(r["value"], r["ci_low"], r["ci_high"])


def _views_section(views: Mapping[str, Any], table: pd.DataFrame, subset: str, mapping: str) -> list[str]:
    """The section "Three views": what each view means, and per benchmark its primary metric in each view
    (or why only the own view exists)."""
    lines = ["## Three views", ""]
    if not views.get("computed"):
        return [
            *lines,
            f"Only the own view (the tables above): the matched and ranked views were not computed — "
            f"{views.get('reason', 'no reason recorded')}. What they are: "
            f"[docs/study.md]({VIEWS_DOC}).",
            "",
        ]
    reference = views["reference"]
    split = reference["split"]
    lines += [
        "The **own** view reads the guard at its own decisions (the tables above). The **matched** view puts "
        f"it at the threshold on its unsafe score where it flags {fmt(views['matched_over_ref'], 2)} of the "
        f"reference — the {fmt_count(reference['safe'])} prompts of `{split}` every policy labels safe — and "
        "reads each benchmark's primary metric there, so its CAP and OVER-REF no longer rise with how often "
        "it flags in general. The **ranked** view needs no threshold: the AUROC of a harmful set's prompts "
        f"against the reference, of the {fmt_count(reference['unsafe'])} prompts of `{split}` every policy "
        "labels unsafe against a benign set's prompts (higher: less over-refusal), of a mixed set's own "
        f"classes. Why three: [docs/study.md]({VIEWS_DOC}).",
        "",
        f"Subset `{subset}`, mapping `{views['mapping']}`; the guard was also run on the "
        f"{fmt_count(reference['items'])} prompts of `{split}`. Matched threshold "
        f"{fmt(views['matched'].get('threshold'))}, where it flags "
        f"{fmt(views['matched'].get('flag_rate'))} of the reference. Intervals of the matched and ranked "
        "views resample the benchmark and the reference together.",
        "",
    ]
    chosen = table[(table["subset"] == subset) & (table["mapping"] == mapping)]
    others = chosen[chosen["view"] != OWN]
    if reference["unscored"]:
        lines += [
            f"**No matched or ranked values**: the guard gave no unsafe score for "
            f"{fmt_count(reference['unscored'])} of the reference's prompts (a guard served without "
            "log-probabilities gives none). With no score there is no threshold to match and nothing to rank "
            "by, so those cells are empty (null in the table), not zero.",
            "",
        ]
    elif others["value"].isna().any():
        lines += [
            "A dash in the matched or ranked column: the guard has no unsafe score for some prompt that "
            "value reads, or the reference side it needs is empty (null in the table).",
            "",
        ]
    means = [name for name, _ in ROLE_MEANS.values()]
    benchmarks = [*means, *sorted(set(chosen["benchmark"]) - set(means))]
    rows = []
    for benchmark in benchmarks:
        mine = chosen[chosen["benchmark"] == benchmark]
        if mine.empty:
            continue
        own = mine[mine["view"] == OWN]
        metric = own["metric"].iloc[0] if not own.empty else mine["metric"].iloc[0]
        cells = []
        for view in VIEW_NAMES:
            row = mine[mine["view"] == view]
            cells.append(
                MISSING
                if row.empty
                else fmt_ci(row["value"].iloc[0], row["ci_low"].iloc[0], row["ci_high"].iloc[0])
            )
        rows.append([benchmark, METRIC_NAMES.get(metric, metric), *cells])
    lines += markdown_table(
        ["benchmark", "metric (own, matched)", *VIEW_NAMES.values()], rows, empty="No view scores."
    )
    return lines


def score_card(
    metrics: Mapping[str, Any], tables: Mapping[str, pd.DataFrame], files: Mapping[str, str]
) -> str:
    """Markdown for one scored guard. `metrics`: its metrics.json document; `tables`: scores, view_scores,
    xstest, xstest_pairs, fingerprint, fingerprint_explained; `files`: where each table is written (named in
    the card)."""
    guard = metrics["guard"]
    subset, guard_mapping = metrics["subset"], metrics["mapping"]
    mapping = OUR_MAPPING[guard_mapping]
    scores = tables["scores"]
    headline = metrics.get("headline", {})
    lines = [
        f"# Guard score — `{guard['name']}`",
        "",
        f"`{metrics['model']}` scored by `guardpolicy score` on {fmt_count(metrics['items'])} benchmark "
        f"prompts. Headline subset `{subset}`, mapping `{guard_mapping}`; intervals at "
        f"{fmt(metrics['settings']['confidence'], 2)} (percentile bootstrap of "
        f"{fmt_count(metrics['settings']['bootstrap_samples'])} resamples, Wilson for single-class rates).",
        "",
        *markdown_table(
            ["", ""],
            [
                ["model", f"`{guard.get('model_id', MISSING)}`"],
                ["revision", f"`{guard.get('revision') or 'not pinned'}`"],
                ["family (adapter)", str(guard.get("family", MISSING))],
                [
                    "backend",
                    f"{guard.get('backend', MISSING)}"
                    + (f" — {guard['endpoint']}" if "endpoint" in guard else ""),
                ],
                [
                    "label map",
                    ", ".join(f"{k} → {v}" for k, v in sorted(guard.get("label_map", {}).items())) or MISSING,
                ],
                ["unparsable answers count as", str(metrics["settings"]["failure_policy"])],
            ],
            "ll",
        ),
        "",
        "## Headline",
        "",
        "*relaxed*: a middle label (Qwen3Guard's Controversial) counts as safe; *strict*: as unsafe. CAP is "
        "the mean over harmful benchmarks, OVER-REF over benign ones, COPY the copyright benchmark's CAP.",
        "",
        *headline_table(headline),
        "",
        f"## Per benchmark (subset `{subset}`, mapping `{guard_mapping}`)",
        "",
    ]
    chosen = scores[(scores["subset"] == subset) & (scores["mapping"] == mapping)]
    benchmarks = sorted(b for b in set(chosen["benchmark"]) if not str(b).startswith("mean:"))
    lines += markdown_table(
        ["benchmark", "n", *(METRIC_NAMES[m] for m in METRICS)],
        [
            [
                b,
                fmt_count(metrics["benchmarks"].get(b, {}).get("n_clean" if subset == "clean" else "n")),
                *(_cell(chosen[chosen["benchmark"] == b], m) for m in METRICS),
            ]
            for b in benchmarks
        ],
        empty="No benchmark scores.",
    )
    lines += ["", f"Both subsets and both mappings: `{files['scores']}`.", ""]
    lines += _views_section(metrics["views"], tables["view_scores"], subset, mapping)
    lines += ["", f"Both subsets and both mappings: `{files['view_scores']}`.", ""]
    lines += ["## XSTest", ""]
    xstest = tables["xstest"][tables["xstest"]["subset"] == subset]
    lines += markdown_table(
        ["prompt type (safe prompts)", "n", "OVER-REF"],
        [
            [r.xstest_type, fmt_count(r.n), fmt_ci(r.over_ref, r.ci_low, r.ci_high)]
            for r in xstest.itertuples(index=False)
        ],
        empty="No XSTest prompts.",
    )
    pairs = tables["xstest_pairs"][tables["xstest_pairs"]["subset"] == subset]
    lines += [
        "",
        *markdown_table(
            ["safe/contrast pairs", "both right", "consistency"],
            [
                [fmt_count(r.pairs), fmt_count(r.consistent), fmt_ci(r.consistency, r.ci_low, r.ci_high)]
                for r in pairs.itertuples(index=False)
            ],
            empty="No complete XSTest pairs.",
        ),
    ]
    fingerprint = tables["fingerprint"]
    fingerprint = fingerprint[(fingerprint["subset"] == subset) & (fingerprint["mapping"] == mapping)]
    explained = tables["fingerprint_explained"]
    explained = explained[(explained["subset"] == subset) & (explained["mapping"] == mapping)].set_index(
        "benchmark"
    )
    policies = sorted(set(fingerprint["reference"]) - {GOLD})
    encoded = metrics["fingerprint"].get("encoded") or {}
    margin = metrics["fingerprint"]["explain_margin"]
    lines += [
        "",
        "## Policy fingerprint",
        "",
        "How often the guard's decision agrees with each benchmark's gold label and with each of our "
        "policies' label of the same prompt (Wilson intervals). A benchmark is *explained* by a policy when "
        f"the guard agrees with that policy on more than {fmt(margin)} more of its prompts than with the "
        "gold: its score there reflects which definition of unsafe the guard encodes, not how well it finds "
        "what the benchmark calls unsafe.",
        "",
    ]
    if encoded:
        means = encoded["mean_agreement"]
        lines += [
            f"Closest definition of unsafe: **{encoded['closest']}** (mean agreement over "
            f"{len(encoded['benchmarks'])} benchmarks: "
            + ", ".join(
                f"{ref} {fmt(value)}"
                for ref, value in sorted(means.items(), key=lambda kv: (kv[0] != GOLD, kv[0]))
            )
            + ").",
            "",
        ]
    else:
        lines += ["No benchmark carries both the gold and every policy's labels: no closest definition.", ""]
    rows = []
    for benchmark in sorted(set(fingerprint["benchmark"])):
        mine = fingerprint[fingerprint["benchmark"] == benchmark].set_index("reference")
        cells = [
            fmt_ci(mine.loc[ref, "agreement"], mine.loc[ref, "ci_low"], mine.loc[ref, "ci_high"])
            if ref in mine.index
            else MISSING
            for ref in (GOLD, *policies)
        ]
        verdict = explained.loc[benchmark] if benchmark in explained.index else None
        rows.append(
            [
                benchmark,
                *cells,
                fmt_signed(verdict["excess"]) if verdict is not None else MISSING,
                # A benchmark no policy explains has a null `explained_by` (NaN once in a frame).
                (verdict["explained_by"] if isinstance(verdict["explained_by"], str) else "none")
                if verdict is not None
                else MISSING,
            ]
        )
    lines += markdown_table(
        ["benchmark", "gold", *policies, "best policy − gold", "explained by"],
        rows,
        empty="No fingerprint rows (no policy labelled these benchmarks).",
    )
    lines += [
        "",
        "![agreement with gold and each policy per benchmark](fingerprint.png)",
        "",
        f"Tables: `{files['fingerprint']}`, `{files['fingerprint_explained']}`.",
        "",
        "## Parsing",
        "",
        f"{fmt_count(metrics['parse']['rows'])} answers: {fmt_count(metrics['parse']['ok'])} ok, "
        f"{fmt_count(metrics['parse']['partial'])} partial, {fmt_count(metrics['parse']['failed'])} failed.",
        "",
    ]
    return "\n".join(lines)

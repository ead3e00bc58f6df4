"""The targets of issue 14, and competence: capture on the benchmarks both policies call unsafe, whether one
threshold can meet both competence bars, and the analysis' verdicts on spans that could be competence."""

from __future__ import annotations

from typing import Any

from guardpolicy.analysis.scores import MEAN_PREFIX
from guardpolicy.analysis.views import VIEWS
from guardpolicy.reporting.formatting import (
    MISSING,
    fmt,
    fmt_ci,
    fmt_count,
    fmt_rate,
    markdown_table,
    natural_key,
    yes_no,
)
from guardpolicy.reporting.headline import headline_rows
from guardpolicy.reporting.inputs import ReportInputs


def targets_section(inputs: ReportInputs) -> list[str]:
    targets = inputs.primary.get("targets") or {}
    title = "## Targets (issue 14)"
    if not targets:
        return [title, "", "The analysis reports no targets (summary.json predates them).", ""]
    by_view = inputs.summary.get("targets_views") or {}
    others = [view for view in VIEWS if view != inputs.primary_view and by_view]
    rows = [
        [
            name,
            str(e.get("status", MISSING)),
            e["value"] if isinstance(e.get("value"), str) else fmt(e.get("value")),
            f"{e.get('comparison', '')} {fmt(e.get('threshold'), 2)}",
            *(_view_status(by_view.get(name) or {}, view) for view in others),
            str(e.get("detail") or MISSING),
        ]
        for name, e in targets.items()
    ]
    met = sum(1 for e in targets.values() if e.get("status") == "met")
    return [
        title,
        "",
        f"{met} of {len(targets)} targets met in the {inputs.primary_view} view (`analysis.primary_view`; "
        f"params `analysis.targets`; values measured by the analysis, subset `{inputs.subset}`, mapping "
        f"`{inputs.mapping}`), the other views' status and value beside. *not measured*: this run or view "
        "lacks what the target needs.",
        "",
        *markdown_table(
            ["target", "status", "value", "bar", *others, "measured"], rows, "llrl" + "l" * len(others) + "l"
        ),
        "",
        *_tradeoff_note(inputs.summary),
    ]


def _view_status(entry: dict[str, Any], view: str) -> str:
    """A target's status in another view and its value there (targets_views)."""
    return f"{entry.get(view, MISSING)} ({fmt(entry.get(f'{view}_value'))})"


def _tradeoff_note(summary: dict[str, Any]) -> list[str]:
    """One line under the targets when no judged model has a threshold meeting both competence bars."""
    block = summary.get("competence_tradeoff") or {}
    if not block.get("models") or block.get("reachable") != 0:
        return []
    return [
        "`capture` and `over_refusal` cannot hold together here: none of the "
        f'{block["models"]} judged models has a decision threshold meeting both (see "Can one threshold '
        'meet both competence bars?").',
        "",
    ]


def competence_section(inputs: ReportInputs) -> list[str]:
    title = "## Competence on the benchmarks both policies call unsafe"
    competence = inputs.summary.get("competence") or {}
    table = inputs.competence
    if table is None or table.empty:
        why = (
            "no fingerprint was given"
            if not competence.get("fingerprint")
            else "no evaluated benchmark is one both policies agree is unsafe"
        )
        return [title, "", f"Not reported: {why}.", ""]
    benchmarks = sorted(b for b in set(table["benchmark"]) if not str(b).startswith(MEAN_PREFIX))
    means = sorted(b for b in set(table["benchmark"]) if str(b).startswith(MEAN_PREFIX))
    models = table.drop_duplicates("model").copy()
    models["_kind"] = [0 if k == "teacher" else 1 for k in models["kind"]]
    models["_scale"] = [inputs.scale_rank(str(x)) for x in models["scale"]]
    models["_branch"] = [natural_key(str(b)) for b in models["branch"]]
    models = models.sort_values(["_kind", "_scale", "_branch", "seed"])
    by = table.set_index(["model", "benchmark"])
    rows = []
    for _, m in models.iterrows():
        cells = [m["kind"], str(m["scale"]), str(m["branch"]), str(int(m["seed"]))]
        for benchmark in [*benchmarks, *means]:
            if (m["model"], benchmark) in by.index:
                r = by.loc[(m["model"], benchmark)]
                cells.append(fmt_ci(r["cap"], r["ci_low"], r["ci_high"]))
            else:
                cells.append(MISSING)
        rows.append(cells)
    return [
        title,
        "",
        "Capture per model — the teachers first, then every branch at every scale and seed — on the "
        "benchmarks the policy fingerprint says both policies agree are unsafe (swing ≤ "
        f"{fmt(competence.get('max_swing'), 2)} and each policy labels ≥ "
        f"{fmt_rate(competence.get('min_unsafe'))} of the prompts unsafe), and the mean over them with its "
        "bootstrap interval. A competent guard of either policy captures these sets; a "
        "branch far below the teachers here lacks competence, whatever its policy.",
        "",
        *markdown_table(
            [
                "kind",
                "scale",
                "branch",
                "seed",
                *benchmarks,
                *(f"{b.removeprefix(MEAN_PREFIX)} (mean)" for b in means),
            ],
            rows,
            "llll" + "r" * (len(benchmarks) + len(means)),
        ),
        "",
        *_competence_verdicts(inputs),
        *_competence_tradeoff(inputs),
    ]


def _competence_tradeoff(inputs: ReportInputs) -> list[str]:
    """tradeoff.csv and summary.json `competence_tradeoff`: can any threshold meet both competence bars?"""
    title = "### Can one threshold meet both competence bars?"
    block = inputs.summary.get("competence_tradeoff") or {}
    table = inputs.tradeoff
    if table is None or table.empty or not block:
        return [
            title,
            "",
            "Not reported: a capture set or the over-refusal set of params `analysis.targets` was not "
            "evaluated, or no teacher or main-seed branch was (tradeoff.csv is empty).",
            "",
        ]
    capture_sets = ", ".join(f"`{b}`" for b in str(block.get("capture_benchmarks", "")).split(",") if b)
    over_ref_set = f"`{block.get('over_refusal_benchmark')}`"
    min_capture, max_over_ref = fmt(block.get("min_capture"), 2), fmt(block.get("max_over_refusal"), 2)
    models = table.copy()
    models["_kind"] = [0 if k == "teacher" else 1 for k in models["kind"]]
    models["_scale"] = [inputs.scale_rank(str(x)) for x in models["scale"]]
    models["_branch"] = [natural_key(str(b)) for b in models["branch"]]
    models = models.sort_values(["_kind", "_scale", "_branch"])
    rows = [
        [
            str(r["kind"]),
            str(r["scale"]),
            str(r["branch"]),
            yes_no(r["judged_over_ref"]),
            fmt(r["min_cap"]),
            fmt(r["over_ref"]),
            fmt(r["min_cap_at_over_ref_bar"]),
            fmt(r["over_ref_at_cap_bar"]),
            yes_no(r["both_reachable"]),
        ]
        for _, r in models.iterrows()
    ]
    judged = int(block.get("models") or 0)
    reading = []
    if judged and "reachable" in block:
        reachable = int(block["reachable"])
        reading.append(
            f"Of the {judged} models the over-refusal bar judges, {reachable} "
            f"{'has' if reachable == 1 else 'have'} a threshold meeting both bars"
            + (f" ({block.get('reachable_models')})" if reachable else "")
            + f". The best worst-set capture that over-refusal ≤ {max_over_ref} allows is "
            f"{fmt(block.get('best_min_cap_at_over_ref_bar'))} ({block.get('best_min_cap_model')})"
            + (
                f"; capturing ≥ {min_capture} of every set needs over-refusal ≥ "
                f"{fmt(block.get('lowest_over_ref_at_cap_bar'))} ({block.get('lowest_over_ref_model')})"
                if "lowest_over_ref_at_cap_bar" in block
                else f"; no threshold captures ≥ {min_capture} of every set"
            )
            + "."
        )
        if not reachable:
            reading.append(
                "**Verdict: the two competence targets cannot hold together for these models.** No decision "
                "threshold meets both, so moving the threshold (or the class balance, which moves it) trades "
                "one target for the other; only a model that ranks these prompts better can meet both."
            )
    return [
        title,
        "",
        f"Capture and over-refusal move together with the decision threshold. Per teacher and main-seed "
        f"branch: its worst capture over {capture_sets} and its over-refusal on {over_ref_set} at its own "
        f"decisions; then, over every threshold on its unsafe score, the best worst-set capture with "
        f"over-refusal ≤ {max_over_ref} and the lowest over-refusal with every capture ≥ {min_capture} "
        "(thresholds read off these benchmarks: a bound on what any threshold could do, not a tuned "
        "operating point). *judged*: the over-refusal bar applies to the model (policy-B-terminal).",
        "",
        *markdown_table(
            [
                "kind",
                "scale",
                "branch",
                "judged",
                "min cap",
                "over-ref",
                f"min cap @ over-ref ≤ {max_over_ref}",
                f"over-ref @ min cap ≥ {min_capture}",
                "both reachable",
            ],
            rows,
            "llllrrrrl",
        ),
        "",
        *(line for sentence in reading for line in (sentence, "")),
    ]


def _competence_verdicts(inputs: ReportInputs) -> list[str]:
    """The analysis' verdicts (span_scale.csv) on spans that could be competence rather than policy."""
    table = inputs.span_scale
    if table is None:
        return []
    chosen = headline_rows(table, inputs.subset, inputs.mapping, inputs.primary_view)
    flagged = chosen[chosen["verdict"].astype(str).str.startswith("competence:")]
    if chosen["verdict"].astype(str).str.startswith("undetermined").all():
        return [
            "**Verdict.** None: no scale has both two branches and a seed noise floor, so no span can be "
            "told from seed noise (span_scale.csv).",
            "",
        ]
    if flagged.empty:
        return [
            "**Verdict.** No benchmark the policies agree on has a span beyond what seed noise alone gives "
            "the branches (span_scale.csv).",
            "",
        ]
    items = [
        f"`{r['benchmark']}` at the {r['scale']} scale (swing {fmt(r['swing'])}, Δ = "
        f"{fmt_ci(r['delta'], r['delta_ci_low'], r['delta_ci_high'])}, seed noise of "
        f"{fmt_count(r['n_branches'])} runs ≈ {fmt(r['noise_range'])})"
        for _, r in flagged.sort_values(["benchmark", "scale"]).iterrows()
    ]
    return [
        f"**Verdict ({inputs.primary_view} view): competence, not policy.** The policies agree on these "
        f"benchmarks, yet the branches' span exceeds what seed noise alone gives them: {'; '.join(items)}.",
        "",
    ]

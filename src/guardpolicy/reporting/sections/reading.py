"""The Reading section: what this run shows and does not show, in sentences generated from summary.json.

Each finding is a sentence with its interval and what the interval means (above, below or including 0); the
rank-test and correlation sentences live with their tables (`sections.rank`); the caveats (missing sets, seed
recipes, small sets, branches per scale, the profile) close the section.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from guardpolicy.analysis.views import VIEWS
from guardpolicy.metrics import COPYRIGHT_BENCHMARK
from guardpolicy.reporting.formatting import MISSING, fmt, fmt_ci, fmt_count, fmt_p, is_missing, names
from guardpolicy.reporting.inputs import ReportInputs
from guardpolicy.reporting.sections.header import present_and_missing
from guardpolicy.reporting.sections.rank import reading_correlations, reading_rank
from guardpolicy.reporting.sections.views import SCORE_WORDS, reading_base_rate, views_intro


def _interval_reading(low: Any, high: Any) -> str:
    """Where an interval of a difference lies relative to 0."""
    if is_missing(low) or is_missing(high):
        return "unknown"
    if float(low) > 0:
        return "above"
    if float(high) < 0:
        return "below"
    return "includes"


def _verdict(entry: dict[str, Any]) -> str:
    return f" Analysis verdict: “{entry['verdict']}”." if entry.get("verdict") else ""


def _reading_copyright(summary: dict[str, Any], view: str) -> str:
    c = summary.get("copyright_vs_noise") or {}
    title = "**Copyright span vs seed noise.**"
    score = f"HarmBench-copyright {SCORE_WORDS.get(view, 'capture')}"
    if is_missing(c.get("delta")):
        return f"{title} No span of {score} was measured in this run.{_verdict(c)}"
    delta = fmt_ci(c.get("delta"), c.get("delta_ci_low"), c.get("delta_ci_high"))
    if is_missing(c.get("phi")):
        return (
            f"{title} {score} spans Δ = {delta} across branches, but no seed triple "
            f"measured its noise floor Φ, so this run cannot say whether that span exceeds seed noise."
            f"{_verdict(c)}"
        )
    phi = fmt_ci(c.get("phi"), c.get("phi_ci_low"), c.get("phi_ci_high"))
    difference = fmt_ci(c.get("difference"), c.get("difference_ci_low"), c.get("difference_ci_high"))
    meaning = {
        "above": "its interval lies above 0, so the copyright score spans a wider range across branches "
        "than seeds alone move it",
        "below": "its interval lies below 0: seeds alone move the copyright score more than branches do",
        "includes": "its interval includes 0, so this run cannot tell the branch span from seed noise",
        "unknown": "the analysis gives no interval for it, so no conclusion is drawn",
    }[_interval_reading(c.get("difference_ci_low"), c.get("difference_ci_high"))]
    recipes = (
        f" (the median spread over {fmt_count(c.get('n_recipes'))} seed recipe(s))"
        if c.get("n_recipes")
        else ""
    )
    return (
        f"{title} {score} spans Δ = {delta} across branches; the seed noise floor is "
        f"Φ = {phi}{recipes}. The difference Δ − Φ is {difference}: {meaning}.{_verdict(c)}"
        f"{_per_scale(summary, COPYRIGHT_BENCHMARK)}"
    )


def _per_scale(summary: dict[str, Any], benchmark: str) -> str:
    """The same comparison at each scale, against the range seed noise alone gives that scale's branches."""
    scales = (summary.get("span_scale") or {}).get(benchmark) or {}
    parts = []
    for scale, e in sorted(scales.items()):
        if is_missing(e.get("noise_range")):
            parts.append(f"{scale}: Δ = {fmt(e.get('delta'))}, no seed recipe at this scale")
            continue
        parts.append(
            f"{scale}: Δ = {fmt(e.get('delta'))}, Φ = {fmt(e.get('phi'))}, seed noise alone over "
            f"{fmt_count(e.get('n_branches'))} runs ≈ {fmt(e.get('noise_range'))}, Δ minus that "
            f"{fmt_ci(e.get('excess'), e.get('excess_ci_low'), e.get('excess_ci_high'))}"
        )
    if not parts:
        return ""
    return (
        " At each scale, against the range seed noise alone would give that many branch runs (a k-seed "
        "spread scaled by d2(n)/d2(k)): " + "; ".join(parts) + "."
    )


def _load_sentence(c: dict[str, Any], label: str) -> str:
    policy = fmt_ci(c.get("policy_mean_delta"), c.get("policy_ci_low"), c.get("policy_ci_high"))
    capability = fmt_ci(
        c.get("capability_mean_delta"), c.get("capability_ci_low"), c.get("capability_ci_high")
    )
    groups = (
        f"{label}: policy-load benchmarks ({names(c.get('policy_benchmarks'))}) span a mean Δ of {policy}; "
        f"capability-load benchmarks ({names(c.get('capability_benchmarks'))}) a mean Δ of {capability}."
    )
    if is_missing(c.get("difference")):
        return f"{groups} The run cannot compare the two groups.{_verdict(c)}"
    difference = fmt_ci(c.get("difference"), c.get("difference_ci_low"), c.get("difference_ci_high"))
    meaning = {
        "above": "its interval lies above 0, so capability-load benchmarks move less with the label policy "
        "than policy-load ones",
        "below": "its interval lies below 0: here capability-load benchmarks moved more than policy-load",
        "includes": "its interval includes 0, so this run cannot tell the two groups apart",
        "unknown": "the analysis gives no interval for it, so no conclusion is drawn",
    }[_interval_reading(c.get("difference_ci_low"), c.get("difference_ci_high"))]
    return f"{groups} The difference is {difference}: {meaning}.{_verdict(c)}"


def _reading_load(summary: dict[str, Any]) -> str:
    title = "**Policy-load vs capability-load.**"
    fingerprint = _load_sentence(
        summary.get("load_contrast") or {},
        "Grouped by the policy fingerprint's swing (the analysis' grouping)",
    )
    study = summary.get("load_contrast_study")
    second = f" {_load_sentence(study, 'Grouped as the study did (second view)')}" if study else ""
    return f"{title} {fingerprint}{second}"


def _reading_swing(summary: dict[str, Any]) -> str:
    title = "**The fingerprint predicts the spans.**"
    entries = summary.get("swing_vs_span") or {}
    overall = entries.get("all") or {}
    if is_missing(overall.get("rho")):
        note = overall.get("note") or "no benchmark has both a swing and a span"
        return f"{title} Not tested in this run ({note})."
    scales = [f"{scale} {fmt(e.get('rho'))}" for scale, e in sorted(entries.items()) if scale != "all"]
    meaning = {
        "above": "its interval lies above 0: benchmarks on which the policies disagree more move more",
        "below": "its interval lies below 0: the spans run against the fingerprint",
        "includes": "its interval includes 0, so this run cannot say the swing predicts the spans",
        "unknown": "no interval could be computed",
    }[_interval_reading(overall.get("ci_low"), overall.get("ci_high"))]
    return (
        f"{title} Across {fmt_count(overall.get('n_benchmarks'))} benchmarks, Spearman ρ between the "
        "fingerprint's swing |A − B| (computed before any training) and Δ_b is "
        f"{fmt_ci(overall.get('rho'), overall.get('ci_low'), overall.get('ci_high'))} "
        f"(p = {fmt_p(overall.get('p_value'))}; the interval resamples each benchmark's prompts for Δ, the "
        f"swing held fixed): {meaning}." + (f" Per scale: {', '.join(scales)}." if scales else "")
    )


def _reading_competence(summary: dict[str, Any]) -> str:
    title = "**Competence or policy.**"
    competence = summary.get("competence") or {}
    if not competence.get("fingerprint"):
        return f"{title} No fingerprint was given, so which benchmarks the policies agree on is unknown."
    flagged = [
        f"`{b}` at the {scale} scale (Δ = {fmt(e.get('delta'))} vs seed noise ≈ {fmt(e.get('noise_range'))})"
        for b, scales in sorted((summary.get("span_scale") or {}).items())
        for scale, e in sorted(scales.items())
        if str(e.get("verdict", "")).startswith("competence:")
    ]
    agreed = summary.get("agreed_spans") or {}
    mean = fmt_ci(agreed.get("mean_delta"), agreed.get("ci_low"), agreed.get("ci_high"))
    head = (
        f"{title} On the benchmarks both policies agree on (swing ≤ {fmt(agreed.get('max_swing'), 2)}: "
        f"{names(agreed.get('benchmarks'))}) the mean Δ is {mean}; a span there is not policy."
    )
    if flagged:
        return (
            f"{head} These spans exceed what seed noise alone gives the branches, so they could be "
            f"competence rather than policy: {'; '.join(flagged)}."
        )
    return f"{head} None of them exceeds what seed noise alone gives the branches."


def _reading_study(inputs: ReportInputs) -> list[str]:
    study = inputs.primary.get("study") or {}
    if not study:
        return []
    by_view = inputs.summary.get("study_views") or {}
    lines = [
        "",
        f"**Against the study.** Each finding of the study, as this run's analysis reads it in the "
        f"{inputs.primary_view} view, and the views it holds in (own, matched, ranked):",
        "",
    ]
    for name, e in study.items():
        reading = e.get("reading", MISSING)
        views = by_view.get(name) or {}
        holds = views.get("holds_in")
        where = f" Holds in: {holds.replace(',', ', ')}." if holds else " Holds in no view." if views else ""
        statuses = ", ".join(f"{view} {views[view]}" for view in VIEWS if view in views)
        detail = f" ({statuses})" if statuses else ""
        # A contradiction is set in bold, so it cannot be read past.
        text = f"**{reading}**" if e.get("status") == "contradicts" else reading
        lines.append(f"- {text}{where}{detail} (`{name}`)")
    return lines


def _caveats(inputs: ReportInputs) -> list[str]:
    caveats = []
    _, missing = present_and_missing(inputs.benchmarks)
    if missing:
        thinner = [
            f"{group}-load group loses {names(lost)}"
            for group, members in (("policy", inputs.load_policy), ("capability", inputs.load_capability))
            if (lost := [m for m in missing if m in members])
        ]
        caveats.append(
            f"{len(missing)} benchmark(s) are missing from this run ({names(missing)})"
            + (f"; the {' and the '.join(thinner)}, so its mean Δ rests on fewer sets" if thinner else "")
            + "."
        )
    if inputs.noise_floor is not None:
        # What was actually scored at several seeds, not merely planned.
        repeated = sorted(set(inputs.noise_floor["recipe"].astype(str)))
    else:
        seeds = inputs.plan.groupby("recipe")["seed"].nunique() if len(inputs.plan) else pd.Series()
        repeated = sorted(seeds[seeds > 1].index)
    if repeated:
        caveats.append(
            f"Each branch is trained once (seed {inputs.main_seed}); the noise floor comes from the "
            f"{len(repeated)} recipe(s) trained at several seeds ({names(repeated)}), not from every branch."
        )
    else:
        caveats.append(
            f"Each branch is trained once (seed {inputs.main_seed}) and no recipe at several seeds, so no "
            "seed noise floor backs the spans."
        )
    sets = inputs.benchmark_sets
    small = sets[(sets["subset"] == inputs.subset) & sets["small_set"].astype(bool)]
    if len(small):
        listed = ", ".join(
            f"`{b}` (n = {int(n)})" for b, n in zip(small["benchmark"], small["n_scored"], strict=True)
        )
        caveats.append(
            f"Small sets (under {inputs.small_set_n} scored prompts) have wide intervals: {listed}."
        )
    headline = inputs.headline
    branches = headline[headline["kind"] == "branch"].groupby("scale")["branch"].nunique()
    if len(branches):
        caveats.append(
            "Branches per scale: "
            + ", ".join(
                f"{scale} {int(branches[scale])}" for scale in sorted(branches.index, key=inputs.scale_rank)
            )
            + "; rank tests and correlations over so few models have little power."
        )
    if inputs.profile != "paper":
        caveats.append(
            f"This is the `{inputs.profile}` profile, not the study's `paper` profile: the numbers exercise "
            "the method on small encoders and a small pool; they do not reproduce the study's values."
        )
    return caveats


def reading_section(inputs: ReportInputs) -> list[str]:
    primary = inputs.primary
    lines = [
        "## Reading",
        "",
        "What this run shows and does not show, generated from the numbers below.",
        "",
        views_intro(inputs),
        "",
        f"- {_reading_copyright(primary, inputs.primary_view)}",
        f"- {_reading_load(primary)}",
        f"- {_reading_swing(primary)}",
        f"- {_reading_competence(primary)}",
        f"- {reading_rank(inputs)}",
        f"- {reading_correlations(inputs)}",
        f"- {reading_base_rate(inputs)}",
        *_reading_study(inputs),
        "",
        "**Caveats.**",
        "",
    ]
    lines += [f"- {c}" for c in _caveats(inputs)]
    return [*lines, ""]

"""`reports/REPORT.md`: the study's answer, built only from the run's tables (stage `report`).

Pure: the analysis tables and the other stages' reports come in as DataFrames and dicts (`ReportInputs`), the
Markdown text and the tidy plot tables go out. Every number printed is read from an input; where the inputs
carry an interval it is printed beside the number (`0.812 [0.723, 0.880]`), and where they carry none the
text says so instead of inventing one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from guardpolicy.analysis.baselines import BASELINE_KIND, GUARD_MAPPING
from guardpolicy.analysis.scores import MEAN_BENIGN, MEAN_HARMFUL, MEAN_PREFIX
from guardpolicy.baselines import MODEL_PREFIX
from guardpolicy.errors import InputError
from guardpolicy.layout import relative_path

# Where branch_headline's scores come from when the caller does not say (error messages name it).
SCORES_FILE = relative_path("analysis_table", table="scores")
# Table 1's means: column -> (scores.csv benchmark key, metric, the role of the benchmarks averaged).
HEADLINE_MEANS = {"cap": (MEAN_HARMFUL, "cap", "harmful"), "over_ref": (MEAN_BENIGN, "over_ref", "benign")}
# The contract's COPY: capture on HarmBench-copyright; XSTest is the over-refusal set with prompt types.
COPY_BENCHMARK = "harmbench_copyright"
XSTEST_BENCHMARK = "xstest"
# Below this many scored prompts a rate's interval is wide enough to say so in the caveats.
SMALL_SET_N = 100
LOAD_ORDER = ("policy", "capability", "other")
MISSING = "—"


@dataclass(frozen=True)
class ReportInputs:
    """Everything the report reads, already loaded; the stage module fills it from files."""

    profile: str
    profile_description: str
    main_seed: int
    scales: tuple[str, ...]
    policies: tuple[str, ...]
    subset: str
    mapping: str
    val_split: str
    val_policy: str
    load_policy: tuple[str, ...]
    load_capability: tuple[str, ...]
    branch_descriptions: dict[str, str]
    teacher_descriptions: dict[str, str]
    # data/models.yaml `evaluations` as rows: model, kind, scale, branch, seed, recipe.
    plan: pd.DataFrame
    summary: dict[str, Any]
    scores: pd.DataFrame
    span: pd.DataFrame
    rank_test: pd.DataFrame
    correlations: pd.DataFrame
    mapping_effect: pd.DataFrame
    xstest: pd.DataFrame
    xstest_pairs: pd.DataFrame
    contamination: dict[str, Any]
    agreement: dict[str, Any]
    benchmarks: dict[str, Any]
    # Optional inputs: None when the file is absent (the report says so, naming the file).
    noise_floor: pd.DataFrame | None = None
    fingerprint: pd.DataFrame | None = None
    # Issue 14's tables (stage analyse): per-scale spans vs noise, swing vs span, capability-only headline
    # (CAP, AUROC, CAP at a matched over-refusal) and competence on the benchmarks both policies call unsafe.
    span_scale: pd.DataFrame | None = None
    swing_vs_span: pd.DataFrame | None = None
    capability_headline: pd.DataFrame | None = None
    competence: pd.DataFrame | None = None
    # Per judged model: can any threshold meet both competence bars (tradeoff.csv)?
    tradeoff: pd.DataFrame | None = None
    # Open guard baselines (pipelines/baselines/dvc.yaml): parse counts, the matched-threshold comparison,
    # and per configured guard its registry / run facts (model_id, revision, family, backend, model).
    baseline_parse: pd.DataFrame | None = None
    calibration: pd.DataFrame | None = None
    guards: dict[str, dict[str, str]] = field(default_factory=dict)
    # Figure name -> link relative to REPORT.md (None: the figure is absent).
    figure_links: dict[str, str | None] = field(default_factory=dict)
    # Input name -> path as given to the stage, for sentences naming an absent file.
    sources: dict[str, str] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------------ formatting


def is_missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def fmt(value: Any, digits: int = 3) -> str:
    """A number rounded for reading; an absent value is a dash."""
    if is_missing(value):
        return MISSING
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    return f"{float(value):.{digits}f}"


def fmt_count(value: Any) -> str:
    """A count, whether it arrived as an int (JSON) or a float (a CSV column with gaps)."""
    return MISSING if is_missing(value) else f"{round(float(value)):,}"


def fmt_signed(value: Any, digits: int = 3) -> str:
    return MISSING if is_missing(value) else f"{float(value):+.{digits}f}"


def fmt_ci(value: Any, low: Any, high: Any, digits: int = 3) -> str:
    """`0.812 [0.723, 0.880]`; a value the inputs give no interval for says so."""
    if is_missing(value):
        return MISSING
    if is_missing(low) or is_missing(high):
        return f"{float(value):.{digits}f} (no interval)"
    return f"{float(value):.{digits}f} [{float(low):.{digits}f}, {float(high):.{digits}f}]"


def fmt_p(value: Any) -> str:
    return MISSING if is_missing(value) else f"{float(value):.3g}"


def fmt_rate(value: Any) -> str:
    return MISSING if is_missing(value) else f"{float(value):.1%}"


def natural_key(name: str) -> tuple:
    """E2 before E10; names with no number (teachers) after the numbered branches."""
    parts = re.split(r"(\d+)", str(name))
    has_number = any(part.isdigit() for part in parts)
    return (0 if has_number else 1, tuple(int(p) if p.isdigit() else p for p in parts))


def markdown_table(
    header: Sequence[str], rows: Iterable[Sequence[str]], align: str | None = None, empty: str = "No rows."
) -> list[str]:
    """Markdown table lines; `align` is one character per column, `l` or `r` (default: first l, rest r).

    With no rows, the `empty` sentence stands in for a header-only table.
    """
    rows = list(rows)
    if not rows:
        return [empty]
    align = align or "l" + "r" * (len(header) - 1)
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |")
    return lines


def _interval_reading(low: Any, high: Any) -> str:
    """Where an interval of a difference lies relative to 0."""
    if is_missing(low) or is_missing(high):
        return "unknown"
    if float(low) > 0:
        return "above"
    if float(high) < 0:
        return "below"
    return "includes"


def _names(names: Iterable[str] | str | None) -> str:
    """Backticked, comma-separated names; a list stored as one comma-joined string (summary.json) too."""
    if names is None:
        names = []
    elif isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    names = list(names)
    return ", ".join(f"`{n}`" for n in names) if names else "none"


# ----------------------------------------------------------------------------------------- derived tables


def headline_rows(frame: pd.DataFrame, subset: str, mapping: str) -> pd.DataFrame:
    """Rows of a table at the headline subset and mapping (tables without those columns pass through)."""
    keep = pd.Series(True, index=frame.index)
    if "subset" in frame.columns:
        keep &= frame["subset"] == subset
    if "mapping" in frame.columns:
        keep &= frame["mapping"] == mapping
    return frame[keep]


def benchmark_roles(scores: pd.DataFrame) -> dict[str, str]:
    """harmful (cap only) / benign (over_ref only) / mixed (both), read off which rates a benchmark has.

    scores.csv carries no role column; the contract defines cap on unsafe items and over_ref on safe ones,
    so a benchmark with only cap rows is a harmful set, only over_ref a benign set.
    """
    roles = {}
    names = scores["benchmark"].astype(str)
    # Split rows and the analysis' headline means (`mean:harmful`, `mean:benign`) are not benchmarks.
    rates = scores[~(names.str.startswith("split:") | names.str.startswith(MEAN_PREFIX))]
    for benchmark, group in rates.groupby("benchmark", sort=True):
        metrics = set(group["metric"])
        has_cap, has_over_ref = "cap" in metrics, "over_ref" in metrics
        if has_cap and has_over_ref:
            roles[benchmark] = "mixed"
        elif has_cap:
            roles[benchmark] = "harmful"
        elif has_over_ref:
            roles[benchmark] = "benign"
    return roles


def _model_rows(scores: pd.DataFrame) -> pd.DataFrame:
    identity = ["model", "kind", "scale", "branch", "seed", "recipe"]
    models = scores[identity].drop_duplicates("model").copy()
    models["_order"] = [natural_key(b) for b in models["branch"]]
    return models.sort_values(["scale", "_order", "seed", "model"]).drop(columns="_order")


def _pick(scores: pd.DataFrame, benchmarks: Sequence[str], metrics: Sequence[str]) -> pd.DataFrame:
    """One row per model: the first (benchmark, metric) spelling in the given orders that it has."""
    rows = scores[scores["metric"].isin(metrics) & scores["benchmark"].isin(benchmarks)].copy()
    rows["_benchmark_rank"] = rows["benchmark"].map({n: i for i, n in enumerate(benchmarks)})
    rows["_metric_rank"] = rows["metric"].map({n: i for i, n in enumerate(metrics)})
    rows = rows.sort_values(["model", "_benchmark_rank", "_metric_rank", "subset", "mapping"])
    return rows.drop_duplicates("model").set_index("model")


def branch_headline(
    scores: pd.DataFrame,
    *,
    subset: str,
    mapping: str,
    val_split: str,
    policies: Sequence[str],
    source: str = SCORES_FILE,
) -> pd.DataFrame:
    """Table 1's numbers per model: mean CAP, mean OVER-REF, COPY, XSTest over-ref, VAL per policy.

    CAP / OVER-REF are the analysis' `mean:harmful` / `mean:benign` rows (unweighted means of the
    per-benchmark rates over the harmful / benign sets, with their bootstrap intervals); a model that has
    harmful (benign) rates but no such row comes from an analysis older than those rows, an InputError naming
    `source` rather than a mean without its interval. COPY, XSTest and VAL keep their own intervals. VAL is
    4-class accuracy and does not depend on the mapping (split rows are always clean), so when the headline
    subset and mapping hold no VAL row, any row of that split is used.
    """
    roles = benchmark_roles(scores)
    rated = headline_rows(scores, subset, mapping)
    out = _model_rows(scores).set_index("model")
    for column, (key, metric, role) in HEADLINE_MEANS.items():
        sets = [b for b, r in roles.items() if r == role]
        members = rated[(rated["metric"] == metric) & rated["benchmark"].isin(sets)]
        means = rated[(rated["metric"] == metric) & (rated["benchmark"] == key)].set_index("model")
        lacking = sorted(set(members["model"]) - set(means.index))
        if lacking:
            raise InputError(
                source,
                f"no `{key}` {metric} row at subset {subset!r}, mapping {mapping!r} for model(s) "
                f"{lacking[:3]}{' ...' if len(lacking) > 3 else ''}, though their {role} benchmarks have "
                f"{metric} rows: the file predates the headline means; rerun `dvc repro analyse`",
                field="benchmark",
            )
        out[column] = means["value"]
        out[f"{column}_ci_low"] = means["ci_low"]
        out[f"{column}_ci_high"] = means["ci_high"]
        out[f"n_{column}_sets"] = members.groupby("model")["value"].count()
    for column, benchmark, metric in (
        ("copy", COPY_BENCHMARK, "cap"),
        ("xstest", XSTEST_BENCHMARK, "over_ref"),
    ):
        picked = _pick(rated, [benchmark], [metric])
        out[column] = picked["value"]
        out[f"{column}_ci_low"] = picked["ci_low"]
        out[f"{column}_ci_high"] = picked["ci_high"]
    # The split is the predictions' dataset name `split:<name>`; a bare split name is accepted too.
    split_names = [f"split:{val_split}", val_split]
    for policy in policies:
        # metrics.json spells policy_a's accuracy `acc_policy_a` (acc_<policy>); the contract's table writes
        # acc_policy_<p>, which for a policy not named policy_* would read acc_policy_<policy>.
        metrics = [f"acc_{policy}", f"acc_policy_{policy}"]
        headline = _pick(rated, split_names, metrics)
        anywhere = _pick(scores, split_names, metrics)
        picked = pd.concat([headline, anywhere[~anywhere.index.isin(headline.index)]])
        column = f"val_{policy}"
        out[column] = picked["value"]
        out[f"{column}_ci_low"] = picked["ci_low"]
        out[f"{column}_ci_high"] = picked["ci_high"]
    out = out.reset_index()
    for column in ("n_cap_sets", "n_over_ref_sets"):
        out[column] = out[column].fillna(0).astype(int)
    return out


def branch_scores_table(headline: pd.DataFrame) -> pd.DataFrame:
    """The tidy `reports/plots/branch_scores.csv` (DVC plots): model, scale, branch, cap, over_ref, copy."""
    table = headline[["model", "scale", "branch", "cap", "over_ref", "copy"]].copy()
    for column in ("cap", "over_ref", "copy"):
        table[column] = table[column].astype(float).round(6)
    return table.reset_index(drop=True)


def span_headline(span: pd.DataFrame, subset: str, mapping: str) -> pd.DataFrame:
    """span.csv at the headline subset and mapping, ordered policy-load, capability-load, other, by Δ."""
    rows = headline_rows(span, subset, mapping).copy()
    rows["_load"] = rows["load"].map({name: i for i, name in enumerate(LOAD_ORDER)}).fillna(len(LOAD_ORDER))
    rows = rows.sort_values(["_load", "delta", "benchmark"], ascending=[True, False, True])
    return rows.drop(columns="_load").reset_index(drop=True)


def span_plot_table(span: pd.DataFrame, subset: str, mapping: str) -> pd.DataFrame:
    """The tidy `reports/plots/span.csv` (DVC plots): benchmark, delta, phi."""
    table = span_headline(span, subset, mapping)[["benchmark", "delta", "phi"]].copy()
    for column in ("delta", "phi"):
        table[column] = table[column].astype(float).round(6)
    return table


def primary_metrics(span: pd.DataFrame, roles: dict[str, str]) -> dict[str, str]:
    """Each benchmark's primary metric: span.csv's choice, else cap on harmful sets and over_ref on others."""
    chosen = {b: ("cap" if role == "harmful" else "over_ref") for b, role in roles.items()}
    for benchmark, metric in zip(span["benchmark"], span["primary_metric"], strict=True):
        chosen[str(benchmark)] = str(metric)
    return chosen


# ------------------------------------------------------------------------------------------------- sections


def _present_and_missing(benchmarks: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    entries = benchmarks.get("benchmarks", {})
    present = sorted(name for name, e in entries.items() if e.get("status") != "missing")
    missing = {
        name: (e.get("reason") or "") for name, e in sorted(entries.items()) if e.get("status") == "missing"
    }
    return present, missing


def _count(value: Any) -> int | None:
    if isinstance(value, list | tuple | dict):
        return len(value)
    return None if is_missing(value) else int(value)


def _header(inputs: ReportInputs) -> list[str]:
    summary = inputs.summary
    present, missing = _present_and_missing(inputs.benchmarks)
    n_models = _count(summary.get("models"))
    if n_models is None:
        n_models = len(inputs.plan)
    missing_text = ", ".join(f"`{name}`" for name in missing) if missing else "none"
    return [
        "# Policy vs capability: what this run's benchmark scores measure",
        "",
        f"- **Profile:** `{inputs.profile}` — {inputs.profile_description.strip()}",
        f"- **Models evaluated:** {n_models} ({len(inputs.plan)} in the evaluation plan; main seed "
        f"{inputs.main_seed})",
        f"- **Benchmarks present:** {len(present)} ({_names(present)})",
        f"- **Benchmarks missing:** {len(missing)} ({missing_text})",
        f"- **Bootstrap:** B = {fmt(summary.get('bootstrap_samples'))} resamples of prompts; "
        f"confidence {fmt(summary.get('confidence'), 2)}",
        f"- **Headline:** subset `{summary.get('subset', inputs.subset)}`, mapping "
        f"`{summary.get('mapping', inputs.mapping)}` (every table below uses them unless it says otherwise)",
        "",
    ]


def _verdict(entry: dict[str, Any]) -> str:
    return f" Analysis verdict: “{entry['verdict']}”." if entry.get("verdict") else ""


def _reading_copyright(summary: dict[str, Any]) -> str:
    c = summary.get("copyright_vs_noise") or {}
    title = "**Copyright span vs seed noise.**"
    if is_missing(c.get("delta")):
        return f"{title} No span of HarmBench-copyright capture was measured in this run.{_verdict(c)}"
    delta = fmt_ci(c.get("delta"), c.get("delta_ci_low"), c.get("delta_ci_high"))
    if is_missing(c.get("phi")):
        return (
            f"{title} HarmBench-copyright capture spans Δ = {delta} across branches, but no seed triple "
            f"measured its noise floor Φ, so this run cannot say whether that span exceeds seed noise."
            f"{_verdict(c)}"
        )
    phi = fmt_ci(c.get("phi"), c.get("phi_ci_low"), c.get("phi_ci_high"))
    difference = fmt_ci(c.get("difference"), c.get("difference_ci_low"), c.get("difference_ci_high"))
    meaning = {
        "above": "its interval lies above 0, so the copyright capture spans a wider range across branches "
        "than seeds alone move it",
        "below": "its interval lies below 0: seeds alone move the copyright capture more than branches do",
        "includes": "its interval includes 0, so this run cannot tell the branch span from seed noise",
        "unknown": "the analysis gives no interval for it, so no conclusion is drawn",
    }[_interval_reading(c.get("difference_ci_low"), c.get("difference_ci_high"))]
    recipes = (
        f" (the median spread over {fmt_count(c.get('n_recipes'))} seed recipe(s))"
        if c.get("n_recipes")
        else ""
    )
    return (
        f"{title} HarmBench-copyright capture spans Δ = {delta} across branches; the seed noise floor is "
        f"Φ = {phi}{recipes}. The difference Δ − Φ is {difference}: {meaning}.{_verdict(c)}"
        f"{_per_scale(summary, COPY_BENCHMARK)}"
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
        f"{label}: policy-load benchmarks ({_names(c.get('policy_benchmarks'))}) span a mean Δ of {policy}; "
        f"capability-load benchmarks ({_names(c.get('capability_benchmarks'))}) a mean Δ of {capability}."
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
        f"{_names(agreed.get('benchmarks'))}) the mean Δ is {mean}; a span there is not policy."
    )
    if flagged:
        return (
            f"{head} These spans exceed what seed noise alone gives the branches, so they could be "
            f"competence rather than policy: {'; '.join(flagged)}."
        )
    return f"{head} None of them exceeds what seed noise alone gives the branches."


def _reading_study(summary: dict[str, Any]) -> list[str]:
    study = summary.get("study") or {}
    if not study:
        return []
    lines = ["", "**Against the study.** Each finding of the study, as this run's analysis reads it:", ""]
    for name, e in study.items():
        reading = e.get("reading", MISSING)
        # A contradiction is set in bold, so it cannot be read past.
        lines.append(
            f"- **{reading}** (`{name}`)" if e.get("status") == "contradicts" else f"- {reading} (`{name}`)"
        )
    return lines


def _reading_rank(inputs: ReportInputs, alpha: float) -> str:
    summary, rank_test = inputs.summary, inputs.rank_test
    tests = summary.get("rank_tests") or {}
    if not tests:
        return (
            "**Rank test.** The analysis reports no rank test (params `analysis.rank_sets` is empty, or no "
            "scale has enough of a set's branches scored to rank them)."
        )
    sentences = []
    for set_name in sorted(tests):
        for scale in sorted(tests[set_name], key=lambda s: _scale_rank(inputs, s)):
            by_benchmark = tests[set_name][scale]
            rows = rank_test[(rank_test["set_name"] == set_name) & (rank_test["scale"] == scale)]
            size = f" ({int(rows['k'].iloc[0])} of {int(rows['n'].iloc[0])} branches)" if len(rows) else ""
            hits = [
                f"`{b}` ({v['extreme']}, tested {v.get('direction', 'two-sided')}, "
                f"p = {fmt_p(v['p_value'])}, stable in {fmt_rate(v.get('stability'))} of resamples)"
                for b, v in sorted(by_benchmark.items())
                if v.get("hit", not is_missing(v.get("p_value")) and float(v["p_value"]) <= alpha)
            ]
            if hits:
                sentences.append(
                    f"`{set_name}`{size} at the {scale} scale takes the expected extreme ranks on "
                    f"{len(hits)} of {len(by_benchmark)} benchmarks: {', '.join(hits)}"
                )
            else:
                sentences.append(
                    f"`{set_name}`{size} at the {scale} scale takes the expected extreme ranks on none of "
                    f"its {len(by_benchmark)} benchmarks at p ≤ {alpha:.3g}"
                )
    chance = summary.get("rank_chance") or {}
    expected = (
        f" Over all {fmt_count(chance.get('tests'))} tests ({fmt_count(chance.get('one_sided'))} one-sided "
        f"in a direction fixed in params before the run, the rest two-sided) {fmt_count(chance.get('hits'))} "
        f"hit(s) at p ≤ {alpha:.3g}, where chance alone gives {fmt(chance.get('expected_hits'), 2)} "
        f"expected (at most {fmt(chance.get('alpha_bound'), 2)} = tests × α)."
        if chance
        else ""
    )
    return (
        "**Rank test.** Under exchangeable branches, a given set of k of n branches takes the k top (or "
        "bottom) ranks with chance 1/C(n, k): p = 1/C(n, k) where params fix the direction beforehand, "
        "2/C(n, k) otherwise. " + "; ".join(sentences) + "." + expected
    )


def _reading_correlations(inputs: ReportInputs) -> str:
    correlations = inputs.summary.get("correlations") or {}
    if not correlations:
        return "**Correlations.** The analysis reports no correlation (too few models)."
    parts = []
    for scale in sorted(correlations, key=lambda s: _scale_rank(inputs, s)):
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
        "benchmark's gold — with its p-value (the analysis gives no interval for ρ): "
        + "; ".join(parts)
        + ". A policy-load ρ well above the capability-load ρ says validation accuracy tracks the policy, "
        "not detection capability."
    )


def _caveats(inputs: ReportInputs, headline: pd.DataFrame) -> list[str]:
    caveats = []
    _, missing = _present_and_missing(inputs.benchmarks)
    if missing:
        thinner = [
            f"{group}-load group loses {_names(lost)}"
            for group, members in (("policy", inputs.load_policy), ("capability", inputs.load_capability))
            if (lost := [m for m in missing if m in members])
        ]
        caveats.append(
            f"{len(missing)} benchmark(s) are missing from this run ({_names(missing)})"
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
            f"{len(repeated)} recipe(s) trained at several seeds ({_names(repeated)}), not from every branch."
        )
    else:
        caveats.append(
            f"Each branch is trained once (seed {inputs.main_seed}) and no recipe at several seeds, so no "
            "seed noise floor backs the spans."
        )
    rated = headline_rows(inputs.scores, inputs.subset, inputs.mapping)
    rates = rated[
        rated["metric"].isin(["cap", "over_ref"])
        & ~rated["benchmark"].astype(str).str.startswith(MEAN_PREFIX)
    ]
    sizes = rates.groupby("benchmark")["n"].max()
    small = sorted(f"`{b}` (n = {int(n)})" for b, n in sizes.items() if n < SMALL_SET_N)
    if small:
        caveats.append(
            f"Small sets (under {SMALL_SET_N} scored prompts) have wide intervals: {', '.join(small)}."
        )
    branches = headline[headline["kind"] == "branch"].groupby("scale")["branch"].nunique()
    if len(branches):
        caveats.append(
            "Branches per scale: "
            + ", ".join(
                f"{scale} {int(branches[scale])}"
                for scale in sorted(branches.index, key=lambda s: _scale_rank(inputs, s))
            )
            + "; rank tests and correlations over so few models have little power."
        )
    if inputs.profile != "paper":
        caveats.append(
            f"This is the `{inputs.profile}` profile, not the study's `paper` profile: the numbers exercise "
            "the method on small encoders and a small pool; they do not reproduce the study's values."
        )
    return caveats


def _reading(inputs: ReportInputs, headline: pd.DataFrame) -> list[str]:
    alpha = 1.0 - float(inputs.summary.get("confidence", 0.95))
    lines = [
        "## Reading",
        "",
        "What this run shows and does not show, generated from the numbers below.",
        "",
        f"- {_reading_copyright(inputs.summary)}",
        f"- {_reading_load(inputs.summary)}",
        f"- {_reading_swing(inputs.summary)}",
        f"- {_reading_competence(inputs.summary)}",
        f"- {_reading_rank(inputs, alpha)}",
        f"- {_reading_correlations(inputs)}",
        *_reading_study(inputs.summary),
        "",
        "**Caveats.**",
        "",
    ]
    lines += [f"- {c}" for c in _caveats(inputs, headline)]
    return [*lines, ""]


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


def _table1(inputs: ReportInputs, headline: pd.DataFrame) -> list[str]:
    roles = benchmark_roles(headline_rows(inputs.scores, inputs.subset, inputs.mapping))
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
            f"{_names(any_row['benchmarks'])}), with its bootstrap interval. AUROC: how well the model's "
            "score ranks those sets' unsafe prompts above the safe prompts of the benign and mixed sets "
            f"({_names(any_row['auroc_negatives'])}; each set weighs 1 within its class; threshold-free, no "
            f"interval). CAP @ OR {fmt(any_row['matched_over_ref'], 2)}: the capability-load capture at the "
            f"threshold where the model flags {fmt_rate(any_row['matched_over_ref'])} of the calibration "
            "split's prompts every policy labels safe (params `analysis.calibration_split`; no interval). "
        )
    lines = [
        "## Table 1 — headline scores per branch",
        "",
        first
        + f"CAP all: mean capture over all {len(harmful)} harmful sets ({_names(harmful)}), policy-load "
        f"ones included; OVER-REF: mean over-refusal over the {len(benign)} benign sets ({_names(benign)}) — "
        "both unweighted means of the per-benchmark rates (each set counts once, whatever its size), with "
        "percentile bootstrap intervals that resample every set's prompts independently; mixed sets "
        f"({_names(mixed)}) are in neither mean. COPY: HarmBench-copyright capture; XSTest: over-refusal on "
        f"XSTest; VAL: 4-class accuracy on split `{inputs.val_split}` against each policy's labels. Seed "
        f"{inputs.main_seed} models only.",
        "",
    ]
    main = headline[headline["seed"] == inputs.main_seed]
    val_headers = [f"VAL {p}" for p in inputs.policies]
    for scale in _ordered_scales(inputs, main):
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


def _scale_rank(inputs: ReportInputs, scale: str) -> tuple:
    """`all` first, then the params' scale order, then any other scale by name."""
    if scale == "all":
        return (0, 0, "")
    if scale in inputs.scales:
        return (1, inputs.scales.index(scale), "")
    return (2, 0, scale)


def _ordered_scales(inputs: ReportInputs, frame: pd.DataFrame) -> list[str]:
    present = set(frame["scale"])
    ordered = [s for s in inputs.scales if s in present]
    return ordered + sorted(present - set(ordered))


def _per_benchmark(inputs: ReportInputs, headline: pd.DataFrame) -> list[str]:
    roles = benchmark_roles(inputs.scores)
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
    main = headline[headline["seed"] == inputs.main_seed]
    for scale in _ordered_scales(inputs, main):
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


def _span_section(inputs: ReportInputs) -> list[str]:
    span = span_headline(inputs.span, inputs.subset, inputs.mapping)
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
            ]
        )
    c = inputs.summary.get("load_contrast") or {}
    lines = [
        "## Label-supervision span Δ_b beside the seed noise floor Φ_b",
        "",
        "Δ_b: the mean over scales of the range (max − min over branches) of the benchmark's primary metric. "
        "Φ_b: the median over the recipes trained at several seeds of each one's spread of that metric, with "
        "the interval of that median over the bootstrap resamples (— where no recipe was scored at several "
        "seeds); Φ max: the widest. load: the analysis' grouping, from the policy fingerprint's swing "
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
    chosen = headline_rows(table, inputs.subset, inputs.mapping).copy()
    chosen["_scale"] = [_scale_rank(inputs, str(x)) for x in chosen["scale"]]
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
    rows_here = headline_rows(floor, inputs.subset, inputs.mapping)
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


def _contamination(inputs: ReportInputs) -> list[str]:
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


def _mapping_effect(inputs: ReportInputs, headline: pd.DataFrame) -> list[str]:
    effect = inputs.mapping_effect
    effect = effect[effect["subset"] == inputs.subset] if "subset" in effect.columns else effect
    info = headline.set_index("model")
    rows = []
    for model, group in effect.dropna(subset=["change"]).groupby("model", sort=True):
        largest = group.loc[group["change"].abs().idxmax()]
        scale = info.loc[model, "scale"] if model in info.index else MISSING
        branch = info.loc[model, "branch"] if model in info.index else model
        rows.append(
            (
                (_scale_rank(inputs, str(scale)), natural_key(str(branch)), str(model)),
                [
                    str(scale),
                    str(model),
                    fmt_signed(group["change"].mean()),
                    f"{largest['benchmark']}: {fmt(largest['over_ref_default'])} → "
                    f"{fmt(largest['over_ref_boundary_unsafe'])} ({fmt_signed(largest['change'])})",
                ],
            )
        )
    rows.sort(key=lambda item: item[0])
    m = inputs.summary.get("mapping_effect") or {}
    return [
        "## Binary mapping effect",
        "",
        "Over-refusal when BOUNDARY_SAFE also counts as unsafe (mapping `boundary_unsafe`) minus the default "
        f"mapping, subset `{inputs.subset}`: per model the mean change over the sets with safe prompts, and "
        "the largest (the analysis gives no interval for a change).",
        "",
        *markdown_table(
            ["scale", "model", "mean change", "largest change"],
            [r for _, r in rows],
            "llrl",
            empty="No mapping effect was measured (no set with safe prompts was scored).",
        ),
        "",
        f"Largest over our models: `{m.get('largest_model', MISSING)}` on "
        f"`{m.get('largest_benchmark', MISSING)}`, "
        f"{fmt_signed(m.get('largest_change'))}; mean change {fmt_signed(m.get('mean_change'))}.",
        "",
    ]


def _guard_label(inputs: ReportInputs, model: str) -> str:
    guard = model.removeprefix(MODEL_PREFIX)
    facts = inputs.guards.get(guard, {})
    revision = facts.get("revision") or "unpinned"
    where = facts.get("model_id", guard)
    return f"`{guard}` ({where} @ {revision[:10]})"


def _comparison_models(inputs: ReportInputs, headline: pd.DataFrame) -> pd.DataFrame:
    """Our models for the baseline tables: teachers and branches at the main seed, by scale then branch."""
    ours = headline[(headline["kind"] != BASELINE_KIND) & (headline["seed"] == inputs.main_seed)].copy()
    ours["_scale"] = [_scale_rank(inputs, str(s)) for s in ours["scale"]]
    ours["_branch"] = [natural_key(str(b)) for b in ours["branch"]]
    return ours.sort_values(["_scale", "_branch", "model"]).drop(columns=["_scale", "_branch"])


def _baselines(inputs: ReportInputs) -> list[str]:
    """Table 2: every open guard relaxed vs strict beside our models, then the calibrated comparison."""
    guards = sorted(m for m in set(inputs.scores["model"]) if str(m).startswith(MODEL_PREFIX))
    title = "## Table 2 — open guard baselines beside our branches"
    if not guards:
        return [
            title,
            "",
            f"No open guard was run. The optional sub-pipeline `{relative_path('baselines_pipeline')}` "
            "scores Qwen3Guard, Granite Guardian or Llama Guard "
            f"({relative_path('baseline_registry')}) on the same items: configure `baselines.guards` in "
            f"{relative_path('params')} and run `dvc repro {relative_path('baselines_pipeline')}` (README, "
            '"Open guard baselines").',
            "",
        ]
    by_mapping = {
        mapping: branch_headline(
            inputs.scores,
            subset=inputs.subset,
            mapping=mapping,
            val_split=inputs.val_split,
            policies=inputs.policies,
            source=inputs.sources.get("scores", SCORES_FILE),
        ).set_index("model")
        for mapping, _ in GUARD_MAPPING.items()
    }
    default = by_mapping["default"].reset_index()
    ours = _comparison_models(inputs, default)
    names = {
        m: f"{scale} {branch}"
        for m, scale, branch in zip(ours["model"], ours["scale"], ours["branch"], strict=True)
    }
    parse = inputs.baseline_parse
    rows = []
    for model in [*guards, *ours["model"]]:
        is_guard = model in guards
        cells = [_guard_label(inputs, model) if is_guard else names[model]]
        for mapping, _ in GUARD_MAPPING.items():
            r = by_mapping[mapping].loc[model]
            for column in ("cap", "over_ref", "copy"):
                cells.append(fmt_ci(r[column], r[f"{column}_ci_low"], r[f"{column}_ci_high"]))
        if is_guard and parse is not None and not parse.empty:
            mine = parse[parse["model"] == model]
            cells.append(f"{fmt_count(mine['failed'].sum())} / {fmt_count(mine['n'].sum())}")
        else:
            cells.append(MISSING)
        rows.append(cells)
    header = ["model", "CAP relaxed", "OVER-REF relaxed", "COPY relaxed"]
    header += ["CAP strict", "OVER-REF strict", "COPY strict", "unparsed / items"]
    lines = [
        title,
        "",
        "The open guards of `pipelines/baselines/dvc.yaml` on the same items as our models, subset "
        f"`{inputs.subset}`. *relaxed*: the guard's middle label (Qwen3Guard's Controversial) counts as safe "
        "— for our models the `default` mapping (BOUNDARY_SAFE safe); *strict*: it counts as unsafe — our "
        "`boundary_unsafe` mapping. Guards without a middle label give the same decision under both. CAP, "
        "OVER-REF and COPY as in Table 1 (bootstrap / Wilson intervals); *unparsed*: answers the parser "
        "could not read, counted under `baselines.failure_policy` (excluded answers leave the rates' "
        "denominators). Our models: teachers and branches at seed "
        f"{inputs.main_seed}.",
        "",
        *markdown_table(header, rows, "l" + "r" * (len(header) - 1)),
        "",
    ]
    lines += _mapping_vs_retraining(inputs, guards, by_mapping, ours)
    return [*lines, *_calibrated(inputs, guards)]


def _mapping_vs_retraining(
    inputs: ReportInputs, guards: list[str], by_mapping: dict[str, pd.DataFrame], ours: pd.DataFrame
) -> list[str]:
    """The study's contrast: relabelling the middle class vs retraining (the spread over our branches)."""
    branches = ours[ours["kind"] == "branch"]
    spreads = []
    for scale, group in branches.groupby("scale", sort=False):
        values = by_mapping["default"].loc[list(group["model"]), "over_ref"].astype(float).dropna()
        if len(values) >= 2:
            spreads.append(
                f"{scale}: {fmt(values.min())}–{fmt(values.max())} (span {fmt(values.max() - values.min())})"
            )
    lines = []
    for model in guards:
        relaxed = by_mapping["default"].loc[model, "over_ref"]
        strict = by_mapping["boundary_unsafe"].loc[model, "over_ref"]
        change = float(strict) - float(relaxed) if not (is_missing(relaxed) or is_missing(strict)) else None
        lines.append(
            f"- {_guard_label(inputs, model)}: strict − relaxed moves mean OVER-REF by {fmt_signed(change)} "
            f"({fmt(relaxed)} → {fmt(strict)})."
        )
    return [
        "**Mapping vs retraining.** Changing only how the guard's middle label maps:",
        "",
        *lines,
        "",
        "Retraining across our branches (mean OVER-REF, default mapping, seed "
        f"{inputs.main_seed}) — {'; '.join(spreads) if spreads else 'fewer than two branches per scale'}.",
        "",
    ]


def _calibrated(inputs: ReportInputs, guards: list[str]) -> list[str]:
    table = inputs.calibration
    title = "### Calibrated comparison — our models at each guard's over-refusal"
    if table is None or table.empty:
        source = inputs.sources.get("calibration", relative_path("analysis_table", table="calibration"))
        return [title, "", f"No calibrated comparison: `{source}` is absent or empty.", ""]
    lines = [
        title,
        "",
        "A guard answers with a label, so it sits at one operating point; our models give scores. Each of "
        "our models is put at the threshold (flag when its unsafe score ≥ t) whose flag rate on the held-out "
        f"benign items — split `{table['calibration_split'].iloc[0]}` prompts that every policy labels safe "
        "under the mapping — is closest to the guard's over-refusal there. The threshold is chosen on that "
        "split only and then applied unchanged to the benchmarks (subset "
        f"`{inputs.subset}`). CAP / OVER-REF: means over the harmful / benign sets (no interval: the "
        "threshold's own uncertainty is not resampled); COPY with its Wilson interval. Full table: "
        f"`{relative_path('analysis_table', table='calibration')}`.",
        "",
    ]
    for guard in guards:
        for mapping, guard_mapping in GUARD_MAPPING.items():
            chosen = table[(table["guard"] == guard) & (table["mapping"] == mapping)]
            if chosen.empty:
                continue
            target = chosen["target_over_ref"].iloc[0]
            n_cal = chosen[chosen["model"] == guard]["calibration_n"]
            rows = []
            models = chosen.drop_duplicates("model")
            models = models[(models["model"] == guard) | (models["seed"] == inputs.main_seed)].copy()
            models["_rank"] = [
                (0, (0, 0, ""), ()) if m == guard else (1, _scale_rank(inputs, str(sc)), natural_key(str(b)))
                for m, sc, b in zip(models["model"], models["scale"], models["branch"], strict=True)
            ]
            for _, m in models.sort_values("_rank").iterrows():
                mine = chosen[chosen["model"] == m["model"]].set_index(["benchmark", "metric"])

                def cell(benchmark: str, metric: str, interval: bool = False, mine=mine) -> str:
                    if (benchmark, metric) not in mine.index:
                        return MISSING
                    r = mine.loc[(benchmark, metric)]
                    return fmt_ci(r["value"], r["ci_low"], r["ci_high"]) if interval else fmt(r["value"])

                name = "**guard**" if m["model"] == guard else f"{m['scale']} {m['branch']}"
                rows.append(
                    [
                        name,
                        fmt(m["threshold"]),
                        fmt(m["achieved_over_ref"]),
                        cell(MEAN_HARMFUL, "cap"),
                        cell(MEAN_BENIGN, "over_ref"),
                        cell(COPY_BENCHMARK, "cap", interval=True),
                    ]
                )
            lines += [
                f"**{_guard_label(inputs, guard)}, {guard_mapping}** — over-refusal on the calibration items "
                f"{fmt(target)} (n = {fmt_count(n_cal.iloc[0]) if len(n_cal) else MISSING}):",
                "",
                *markdown_table(
                    ["model", "threshold", "calibration over-ref", "CAP", "OVER-REF", "COPY"], rows
                ),
                "",
            ]
    return lines


def _rank_table(inputs: ReportInputs) -> list[str]:
    tests = headline_rows(inputs.rank_test, inputs.subset, inputs.mapping)
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
    chance = inputs.summary.get("rank_chance") or {}
    return [
        "## Rank tests",
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


def _correlation_table(inputs: ReportInputs) -> list[str]:
    table = inputs.correlations.copy()
    table["_order"] = [_scale_rank(inputs, s) for s in table["scale"]]
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


def _targets(inputs: ReportInputs) -> list[str]:
    targets = inputs.summary.get("targets") or {}
    title = "## Targets (issue 14)"
    if not targets:
        return [title, "", "The analysis reports no targets (summary.json predates them).", ""]
    rows = [
        [
            name,
            str(e.get("status", MISSING)),
            e["value"] if isinstance(e.get("value"), str) else fmt(e.get("value")),
            f"{e.get('comparison', '')} {fmt(e.get('threshold'), 2)}",
            str(e.get("detail") or MISSING),
        ]
        for name, e in targets.items()
    ]
    met = sum(1 for e in targets.values() if e.get("status") == "met")
    return [
        title,
        "",
        f"{met} of {len(targets)} targets met (params `analysis.targets`; values measured by the analysis, "
        f"subset `{inputs.subset}`, mapping `{inputs.mapping}`). *not measured*: this run lacks what the "
        "target needs.",
        "",
        *markdown_table(["target", "status", "value", "bar", "measured"], rows, "llrll"),
        "",
        *_tradeoff_note(inputs.summary),
    ]


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


def _competence(inputs: ReportInputs) -> list[str]:
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
    models["_scale"] = [_scale_rank(inputs, str(x)) for x in models["scale"]]
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


def _yes_no(value: Any) -> str:
    """A boolean cell of a CSV (bool, or its text after a round trip); absent: a dash."""
    if is_missing(value):
        return MISSING
    return "yes" if str(value).strip().lower() in ("true", "1") else "no"


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
    models["_scale"] = [_scale_rank(inputs, str(x)) for x in models["scale"]]
    models["_branch"] = [natural_key(str(b)) for b in models["branch"]]
    models = models.sort_values(["_kind", "_scale", "_branch"])
    rows = [
        [
            str(r["kind"]),
            str(r["scale"]),
            str(r["branch"]),
            _yes_no(r["judged_over_ref"]),
            fmt(r["min_cap"]),
            fmt(r["over_ref"]),
            fmt(r["min_cap_at_over_ref_bar"]),
            fmt(r["over_ref_at_cap_bar"]),
            _yes_no(r["both_reachable"]),
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
    chosen = headline_rows(table, inputs.subset, inputs.mapping)
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
        "**Verdict: competence, not policy.** The policies agree on these benchmarks, yet the branches' "
        f"span exceeds what seed noise alone gives them: {'; '.join(items)}.",
        "",
    ]


def _xstest(inputs: ReportInputs, headline: pd.DataFrame) -> list[str]:
    per_type = inputs.xstest[inputs.xstest["subset"] == inputs.subset]
    pairs = inputs.xstest_pairs[inputs.xstest_pairs["subset"] == inputs.subset]
    if per_type.empty and pairs.empty:
        return [
            "## XSTest",
            "",
            f"No XSTest rows at subset `{inputs.subset}` (XSTest missing from this run).",
            "",
        ]
    main = headline[headline["seed"] == inputs.main_seed]
    types = sorted(set(per_type["xstest_type"]))
    lines = [
        "## XSTest",
        "",
        "Over-refusal per XSTest prompt type, and pair consistency (both prompts of a safe/contrast pair "
        f"answered right), seed {inputs.main_seed}.",
        "",
    ]
    for scale in _ordered_scales(inputs, main):
        models = main[main["scale"] == scale]
        rows = []
        for _, m in models.iterrows():
            mine = per_type[per_type["model"] == m["model"]].set_index("xstest_type")
            pair = pairs[pairs["model"] == m["model"]]
            cells = [m["branch"]]
            for t in types:
                cells.append(
                    fmt_ci(*mine.loc[t, ["over_ref", "ci_low", "ci_high"]]) if t in mine.index else MISSING
                )
            if len(pair):
                p = pair.iloc[0]
                cells.append(
                    f"{fmt_ci(p['consistency'], p['ci_low'], p['ci_high'])} "
                    f"({fmt_count(p['consistent'])}/{fmt_count(p['pairs'])})"
                )
            else:
                cells.append(MISSING)
            rows.append(cells)
        lines += [
            f"<details><summary>{scale} scale</summary>",
            "",
            *markdown_table(["branch", *types, "pair consistency"], rows),
            "",
            "</details>",
            "",
        ]
    return lines


def _fingerprint(inputs: ReportInputs) -> list[str]:
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


def _agreement(inputs: ReportInputs) -> list[str]:
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


def _reproduce(inputs: ReportInputs) -> list[str]:
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


def render_report(inputs: ReportInputs) -> str:
    """The whole REPORT.md text, in the order the brief of the study's readers asks for."""
    headline = branch_headline(
        inputs.scores,
        subset=inputs.subset,
        mapping=inputs.mapping,
        val_split=inputs.val_split,
        policies=inputs.policies,
        source=inputs.sources.get("scores", SCORES_FILE),
    )
    sections = [
        _header(inputs),
        _reading(inputs, headline),
        _targets(inputs),
        _table1(inputs, headline),
        _per_benchmark(inputs, headline),
        _competence(inputs),
        _span_section(inputs),
        _contamination(inputs),
        _mapping_effect(inputs, headline),
        _baselines(inputs),
        _rank_table(inputs),
        _correlation_table(inputs),
        _xstest(inputs, headline),
        _fingerprint(inputs),
        _agreement(inputs),
        _reproduce(inputs),
    ]
    text = "\n".join(line for section in sections for line in section)
    return text.rstrip("\n") + "\n"

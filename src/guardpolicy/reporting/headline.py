"""Which rows of the analysis tables the report shows: selections and orderings, never new numbers.

Table 1's per-model numbers are scores.csv rows picked per model (`branch_headline`); the stage picks them
once per mapping the report needs (`branch_headlines`) and hands the same frames to the figures, the plot
tables and every section. Benchmarks' roles come from the analysis' benchmarks.csv.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from guardpolicy.analysis.baselines import GUARD_MAPPING
from guardpolicy.analysis.scores import MEAN_BENIGN, MEAN_HARMFUL
from guardpolicy.analysis.views import OWN
from guardpolicy.baselines import MODEL_PREFIX
from guardpolicy.errors import InputError
from guardpolicy.layout import relative_path
from guardpolicy.metrics import COPYRIGHT_BENCHMARK
from guardpolicy.reporting.formatting import natural_key

# Where branch_headline's scores come from when the caller does not say (error messages name it).
SCORES_FILE = relative_path("analysis_table", table="scores")
# Table 1's means: column -> (scores.csv benchmark key, metric, the role of the benchmarks averaged).
HEADLINE_MEANS = {"cap": (MEAN_HARMFUL, "cap", "harmful"), "over_ref": (MEAN_BENIGN, "over_ref", "benign")}
# The contract's COPY: capture on HarmBench-copyright; XSTest is the over-refusal set with prompt types.
XSTEST_BENCHMARK = "xstest"
LOAD_ORDER = ("policy", "capability", "other")


def headline_rows(frame: pd.DataFrame, subset: str, mapping: str, view: str | None = None) -> pd.DataFrame:
    """Rows of a table at the headline subset and mapping, and in `view` where the table has a row per view
    (tables without those columns pass through). A table with a `view` column needs the view named: a
    section that forgot it would silently mix the three views."""
    keep = pd.Series(True, index=frame.index)
    if "subset" in frame.columns:
        keep &= frame["subset"] == subset
    if "mapping" in frame.columns:
        keep &= frame["mapping"] == mapping
    if "view" in frame.columns:
        if view is None:
            raise ValueError(f"the table has a row per view ({sorted(set(frame['view']))}): name the view")
        keep &= frame["view"] == view
    return frame[keep]


def every_view(frame: pd.DataFrame, subset: str, mapping: str) -> pd.DataFrame:
    """Rows of a table with a row per view at the headline subset and mapping, every view."""
    return frame[(frame["subset"] == subset) & (frame["mapping"] == mapping)]


def benchmark_roles(benchmarks: pd.DataFrame, subset: str) -> dict[str, str]:
    """Benchmark -> harmful / benign / mixed at `subset`, as the analysis' benchmarks.csv records them."""
    rows = benchmarks[benchmarks["subset"] == subset]
    return {str(b): str(r) for b, r in zip(rows["benchmark"], rows["role"], strict=True)}


def guard_models(scores: pd.DataFrame) -> list[str]:
    """The open guards scored beside our models (model `baseline-<guard>`), by name."""
    return sorted(m for m in set(scores["model"]) if str(m).startswith(MODEL_PREFIX))


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
    benchmarks: pd.DataFrame,
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
    roles = benchmark_roles(benchmarks, subset)
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
    for column, benchmark, metric in (
        ("copy", COPYRIGHT_BENCHMARK, "cap"),
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
    return out.reset_index()


def branch_headlines(
    scores: pd.DataFrame,
    benchmarks: pd.DataFrame,
    *,
    subset: str,
    mapping: str,
    val_split: str,
    policies: Sequence[str],
    source: str = SCORES_FILE,
) -> dict[str, pd.DataFrame]:
    """mapping -> branch_headline at `subset`: the headline `mapping`, and with open guards scored each guard
    mapping too (Table 2 sets relaxed beside strict). Picked once per mapping for the whole report."""
    wanted = dict.fromkeys((mapping, *(GUARD_MAPPING if guard_models(scores) else ())))
    return {
        name: branch_headline(
            scores,
            benchmarks,
            subset=subset,
            mapping=name,
            val_split=val_split,
            policies=policies,
            source=source,
        )
        for name in wanted
    }


def branch_scores_table(headline: pd.DataFrame) -> pd.DataFrame:
    """The tidy `reports/plots/branch_scores.csv` (DVC plots): model, scale, branch, cap, over_ref, copy."""
    table = headline[["model", "scale", "branch", "cap", "over_ref", "copy"]].copy()
    for column in ("cap", "over_ref", "copy"):
        table[column] = table[column].astype(float).round(6)
    return table.reset_index(drop=True)


def span_headline(span: pd.DataFrame, subset: str, mapping: str, view: str) -> pd.DataFrame:
    """span.csv at the headline subset and mapping in `view`, ordered policy-load, capability-load, other,
    by Δ."""
    rows = headline_rows(span, subset, mapping, view).copy()
    rows["_load"] = rows["load"].map({name: i for i, name in enumerate(LOAD_ORDER)}).fillna(len(LOAD_ORDER))
    rows = rows.sort_values(["_load", "delta", "benchmark"], ascending=[True, False, True])
    return rows.drop(columns="_load").reset_index(drop=True)


def span_plot_table(span: pd.DataFrame, subset: str, mapping: str, view: str) -> pd.DataFrame:
    """The tidy `reports/plots/span.csv` (DVC plots): benchmark, delta, phi in `view` (the primary one)."""
    table = span_headline(span, subset, mapping, view)[["benchmark", "delta", "phi"]].copy()
    for column in ("delta", "phi"):
        table[column] = table[column].astype(float).round(6)
    return table


def primary_metrics(span: pd.DataFrame, roles: dict[str, str]) -> dict[str, str]:
    """Each benchmark's primary metric at its own decisions: span.csv's choice (its own-view rows), else cap
    on harmful sets and over_ref on others."""
    chosen = {b: ("cap" if role == "harmful" else "over_ref") for b, role in roles.items()}
    if "view" in span.columns:
        span = span[span["view"] == OWN]
    for benchmark, metric in zip(span["benchmark"], span["primary_metric"], strict=True):
        chosen[str(benchmark)] = str(metric)
    return chosen

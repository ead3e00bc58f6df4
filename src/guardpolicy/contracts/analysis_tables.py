"""The tables of stage analyse, reports/analysis/{table}.csv: one contract per table (`fields={"table": ...}`,
registry name `analysis_table:<table>`). Here the scores, spans, rank tests, correlations, the headline and
competence tables, with the columns several tables share; `analysis_mapping` has the rest, and
`tables.ANALYSIS_TABLES` all of them in the order analyse writes them.

The analysis modules build their frames from these column lists, analyse checks each table against its
contract before writing it, and the report reads each table's columns and number columns from here. Numbers
keep the dtype the CSV holds: counts and seeds `int64`, rates and statistics `float64` (null where undefined).
"""

from __future__ import annotations

from guardpolicy.contracts.model import Column, Contract, Entry, Family
from guardpolicy.layout import relative_path

WRITER = "analyse"


def analysis_table(table: str, rows: str, entries: tuple[Entry, ...], key: tuple[str, ...]) -> Contract:
    """The contract of reports/analysis/<table>.csv (registry name `analysis_table:<table>`)."""
    return Contract(
        "analysis_table", writer=WRITER, rows=rows, entries=entries, key=key, fields={"table": table}
    )


def interval(prefix: str, of: str) -> tuple[Column, Column]:
    """`<prefix>ci_low` / `<prefix>ci_high`: the interval of `of`, null where it is undefined."""
    return (
        Column(f"{prefix}ci_low", "float64", f"{of}: low end", nullable=True),
        Column(f"{prefix}ci_high", "float64", "its high end", nullable=True),
    )


def statistic(name: str, meaning: str) -> Column:
    """A float column that is null where the statistic is undefined (no items, no replicates, no scores)."""
    return Column(name, "float64", meaning, nullable=True)


# The model a row is about, as the plan (data/models.yaml `evaluations`) names it; an open guard of params
# `baselines.guards` is model `baseline-<guard>`, kind `baseline`, scale `guard`, branch `<guard>`, seed 0.
MODEL = Column("model", "string", "the model (an open guard: `baseline-<guard>`)")
KIND = Column("kind", "string", "`teacher`, `branch` or `baseline` (an open guard)")
SCALE = Column("scale", "string", "its scale (an open guard: `guard`)")
BRANCH = Column("branch", "string", "its branch (a teacher: its own name; an open guard: the guard)")
SEED = Column("seed", "int64", "its training seed (an open guard: 0)")
IDENTITY = (MODEL, KIND, SCALE, BRANCH, SEED)
BENCHMARK = Column("benchmark", "string", "the benchmark")
SUBSET = Column("subset", "string", "`full` or `clean` (the decontaminated items)")
MAPPING = Column("mapping", "string", "`default` or `boundary_unsafe` (BOUNDARY_SAFE counted unsafe)")
LOAD = Column(
    "load",
    "string",
    "`policy`, `capability` or `other`: the fingerprint's grouping (swing above "
    "`analysis.load.swing_threshold`: policy-load, at or below: capability-load, no swing: other)",
)
STUDY_LOAD = Column(
    "study_load", "string", "the study's grouping (`analysis.load.policy` / `.capability`, else `other`)"
)
SWING = statistic("swing", f"the benchmark's swing from {relative_path('fingerprint_json')} (null: none)")
PRIMARY_METRIC = Column(
    "primary_metric",
    "string",
    "the metric the span is over: `cap` (harmful), `over_ref` (benign) or a mixed set's "
    "`analysis.primary_metric` in the own and matched views; `auroc` in the ranked view",
)
VIEW = Column(
    "view",
    "string",
    "`own` (each model's decisions), `matched` (each model at the threshold flagging "
    "`analysis.matched_over_ref` of the reference) or `ranked` (AUROC against the reference, "
    "threshold-free): docs/study.md, Three views",
)
REPLICATES = "its percentile interval over the joint bootstrap replicates"

ANALYSIS_BENCHMARKS = analysis_table(
    "benchmarks",
    "one row per benchmark × subset that was scored, by benchmark then subset (`full`, `clean`)",
    (
        BENCHMARK,
        SUBSET,
        Column(
            "role",
            "string",
            "`harmful` (its rate is CAP), `benign` (OVER-REF) or `mixed` (both), from its gold labels",
        ),
        Column("n_items", "int64", "its prompts in the subset"),
        Column("n_unsafe", "int64", "those its gold calls unsafe (CAP is over these)"),
        Column("n_safe", "int64", "those its gold calls safe (OVER-REF is over these)"),
        Column(
            "n_scored",
            "int64",
            "the prompts its rate is over: n_unsafe for a harmful set, n_safe for a benign one, the larger "
            "of the two for a mixed one",
        ),
        Column("small_set", "bool", "n_scored is under `analysis.small_set_n`: its intervals are wide"),
    ),
    ("benchmark", "subset"),
)

ANALYSIS_SCORES = analysis_table(
    "scores",
    "one row per model × dataset × subset × mapping × metric, plus per model × subset × mapping the headline "
    "means (below); sorted by model, benchmark, subset, mapping, metric",
    (
        *IDENTITY,
        Column("recipe", "string", "its recipe: the models that differ only in seed share it"),
        Column("benchmark", "string", "the benchmark, `split:<name>`, or `mean:harmful` / `mean:benign`"),
        SUBSET,
        MAPPING,
        Column(
            "metric",
            "string",
            "`cap`, `over_ref`, `f1`, `auprc` or `acc_<policy>` (4-class accuracy on a split, e.g. "
            "`acc_policy_a`)",
        ),
        statistic("value", "the estimate (null where undefined)"),
        *interval("", "its interval (`interval`)"),
        Column(
            "interval",
            "string",
            "`bootstrap` (percentile) or `wilson` (a rate on a single-class subset of at most "
            "`analysis.wilson_max_n` items)",
        ),
        Column(
            "n", "int64", "the items the metric is over (a guard's excluded answers are not; a mean: summed)"
        ),
    ),
    ("model", "benchmark", "subset", "mapping", "metric"),
)

ANALYSIS_SPAN = analysis_table(
    "span",
    "one row per benchmark, subset, mapping and view, sorted so (views in the order own, matched, ranked)",
    (
        BENCHMARK,
        SUBSET,
        MAPPING,
        VIEW,
        LOAD,
        STUDY_LOAD,
        SWING,
        PRIMARY_METRIC,
        statistic(
            "delta", "Δ_b: the mean over scales of each scale's range (max − min) over its main-seed branches"
        ),
        *interval("delta_", f"Δ_b: {REPLICATES}"),
        Family(
            "scale",
            "range_",
            "float64",
            "that scale's range over its main-seed branches (null: fewer than two); one per scale, sorted",
            nullable=True,
            sorted=True,
        ),
        statistic("phi", "Φ_b: the median over every recipe trained at several seeds of its seed spread"),
        *interval("phi_", "Φ_b: the percentile interval of the per-replicate median"),
        statistic("phi_max", "the widest seed spread"),
        Column("n_recipes", "int64", "the seed recipes Φ_b is over"),
        statistic("difference", "Δ_b − Φ_b (null without Φ_b); per scale: span_scale.csv"),
        *interval("difference_", f"Δ_b − Φ_b: {REPLICATES}"),
    ),
    ("benchmark", "subset", "mapping", "view"),
)

ANALYSIS_SPAN_SCALE = analysis_table(
    "span_scale",
    "one row per benchmark, subset, mapping, view and scale, sorted so",
    (
        BENCHMARK,
        SUBSET,
        MAPPING,
        VIEW,
        Column("scale", "string", "the scale"),
        LOAD,
        STUDY_LOAD,
        SWING,
        PRIMARY_METRIC,
        Column("n_branches", "int64", "main-seed branch models at this scale"),
        statistic("delta", "Δ at this scale: its range over those branches"),
        *interval("delta_", f"Δ: {REPLICATES}"),
        statistic("phi", "Φ at this scale: the median seed spread over its seed recipes"),
        *interval("phi_", f"Φ: {REPLICATES}"),
        Column("n_recipes", "int64", "this scale's seed recipes"),
        Column(
            "seeds",
            "string",
            "seeds per recipe: the distinct counts, comma-joined (empty: no seed recipe at this scale)",
            nullable=True,
        ),
        statistic("difference", "Δ − Φ"),
        *interval("difference_", f"the difference: {REPLICATES}"),
        statistic(
            "noise_range",
            "the range seed noise alone gives `n_branches` runs: the median over the scale's recipes of "
            "spread · d2(n)/d2(k) (d2: the expected range of n standard normal draws, integrated "
            "numerically)",
        ),
        *interval("noise_range_", f"the noise range: {REPLICATES}"),
        statistic("excess", "Δ − noise_range"),
        *interval("excess_", f"the excess: {REPLICATES}"),
        Column(
            "verdict",
            "string",
            "`competence`, `exceeds noise`, `within noise`, `indistinguishable` or `undetermined`, then "
            "`: <why>` (competence: the swing is at most `analysis.competence.max_swing` yet the excess "
            "interval lies above 0)",
        ),
    ),
    ("benchmark", "subset", "mapping", "view", "scale"),
)

ANALYSIS_NOISE_FLOOR = analysis_table(
    "noise_floor",
    "one row per seed recipe, benchmark, subset, mapping and view, sorted so",
    (
        Column("recipe", "string", "the seed recipe: a model trained at several seeds"),
        Column("scale", "string", "its scale"),
        BENCHMARK,
        SUBSET,
        MAPPING,
        VIEW,
        Column("seeds", "string", "its seeds, comma-joined"),
        statistic(
            "spread",
            "max − min of the benchmark's primary metric over those seeds (null: a seed model has no value "
            "in the view)",
        ),
        *interval("", f"the spread: {REPLICATES}"),
    ),
    ("recipe", "benchmark", "subset", "mapping", "view"),
)

ANALYSIS_SWING_VS_SPAN = analysis_table(
    "swing_vs_span",
    "per view (own, matched, ranked): one row for Δ_b (scale `all`), then one per scale in name order",
    (
        VIEW,
        Column("scale", "string", "`all` (Δ_b) or one scale (that scale's range)"),
        Column("n_benchmarks", "int64", "the benchmarks with a swing and a span"),
        Column("benchmarks", "string", "them, comma-joined", nullable=True),
        statistic(
            "rho",
            "Spearman ρ across those benchmarks (headline subset and mapping) between the fingerprint's "
            "swing and Δ",
        ),
        statistic("p_value", "its p-value"),
        *interval("", f"ρ: {REPLICATES} of the spans"),
        Column(
            "swing_resampled",
            "bool",
            "false: the swing is held fixed (a census of each benchmark under the policies' labelers), "
            "only Δ is resampled",
        ),
        Column("note", "string", "why rho is empty", nullable=True),
    ),
    ("view", "scale"),
)

ANALYSIS_RANK_TEST = analysis_table(
    "rank_test",
    "one row per branch set, scale, benchmark, subset, mapping and view with members and non-members at "
    "that scale, sorted so",
    (
        BENCHMARK,
        Column("scale", "string", "the scale whose main-seed branches are ranked"),
        SUBSET,
        MAPPING,
        VIEW,
        Column("set_name", "string", "the branch set (params `analysis.rank_sets`)"),
        Column("k", "int64", "its members at this scale"),
        Column("n", "int64", "the branches ranked (by the point estimate of the primary metric)"),
        Column(
            "direction",
            "string",
            "`top` or `bottom` (fixed in `analysis.rank_direction` before the run: one-sided, p = 1/C(n,k); "
            "in the ranked view flipped on a benign set, whose AUROC runs opposite to its over-refusal) or "
            "`two-sided` (p = 2/C(n,k); a mixed set in the ranked view)",
        ),
        Column("extreme", "string", "`top`, `bottom` or `none`, as observed"),
        statistic("p_value", "null unless the set is extreme in the tested direction"),
        Column("null_probability", "float64", "the chance of a hit under exchangeability"),
        Column("hit", "bool", "p ≤ 1 − `analysis.confidence`"),
        statistic(
            "stability",
            "share of bootstrap replicates in which the observed extreme ranking holds; null when not "
            "extreme",
        ),
    ),
    ("set_name", "scale", "benchmark", "subset", "mapping", "view"),
)

ANALYSIS_CORRELATIONS = analysis_table(
    "correlations",
    "one row per scale (and `all`), grouping, target and load, sorted so",
    (
        Column("scale", "string", "a scale, or `all` (every scale's main-seed branches pooled)"),
        Column("val_policy", "string", "the policy VAL is scored against (`analysis.val_policy`)"),
        Column("grouping", "string", "`fingerprint` or `study`: whose load groups"),
        Column("load", "string", "`policy` or `capability`: the load group"),
        Column(
            "target",
            "string",
            "`gold` (each benchmark's own gold) or `val_policy_labels` (`val_policy`'s own labels of the "
            f"same prompts, {relative_path('fingerprint_labels')})",
        ),
        statistic(
            "rho",
            "Spearman ρ across main-seed branches between VAL and the mean agreement with `target` over the "
            "load group's benchmarks",
        ),
        statistic("p_value", "its p-value"),
        Column("n_models", "int64", "the branch models correlated (0 when not computed)"),
        Column(
            "note",
            "string",
            "why rho is empty (constant input, fewer than 3 models, VAL, benchmarks or the policy's labels "
            "absent)",
            nullable=True,
        ),
    ),
    ("scale", "grouping", "target", "load"),
)

ANALYSIS_HEADLINE = analysis_table(
    "headline",
    "one row per grouping and our model (no open guard), sorted by grouping, model",
    (
        *IDENTITY,
        Column("grouping", "string", "`fingerprint` or `study`: whose load groups"),
        Column("benchmarks", "string", "the grouping's capability-load harmful sets, comma-joined"),
        Column("n_sets", "int64", "how many"),
        statistic("cap", "their unweighted mean capture"),
        *interval("cap_", "its percentile interval (replicate r: the mean of the sets' replicates r)"),
        statistic(
            "auroc",
            "those sets' unsafe prompts vs the safe prompts of every benign and mixed set (each set weighs 1 "
            "within its class; no interval)",
        ),
        Column("auroc_negatives", "string", "those benign and mixed sets, comma-joined", nullable=True),
        Column("matched_over_ref", "float64", "the over-refusal the threshold is matched to"),
        statistic(
            "threshold",
            "the threshold (flag when the score is ≥ it) that flags `matched_over_ref` of the calibration "
            "split's prompts every policy labels safe",
        ),
        statistic("calibration_over_ref", "the over-refusal it reaches there"),
        statistic("cap_matched", "capability-load capture at that threshold"),
        statistic("over_ref_matched", "mean over-refusal over the benign sets at it"),
    ),
    ("grouping", "model"),
)

ANALYSIS_COMPETENCE = analysis_table(
    "competence",
    "one row per teacher and branch model (all seeds) and agreed-unsafe benchmark, plus its "
    "`mean:agreed_unsafe`; sorted by model, benchmark",
    (
        *IDENTITY,
        Column("benchmark", "string", "a benchmark both policies agree is unsafe, or `mean:agreed_unsafe`"),
        statistic("cap", "its capture (the scores.csv row), or their unweighted mean"),
        *interval("", "its interval (`interval`)"),
        Column("interval", "string", "as in scores.csv (the mean: `bootstrap`, over the joint replicates)"),
        Column("n", "int64", "the prompts (the mean: summed)"),
    ),
    ("model", "benchmark"),
)

ANALYSIS_TRADEOFF = analysis_table(
    "tradeoff",
    "one row per teacher and main-seed branch, sorted by model",
    (
        *IDENTITY,
        Column(
            "judged_over_ref",
            "bool",
            "the over-refusal bar applies (`analysis.targets.over_refusal_branches` / `_teachers`)",
        ),
        statistic(
            "min_cap", "its worst capture over `analysis.targets.capture_benchmarks`, at its own decisions"
        ),
        statistic("over_ref", "its over-refusal on `over_refusal_benchmark`, at its own decisions"),
        statistic(
            "min_cap_at_over_ref_bar",
            "over every threshold t on its score (flag when ≥ t): the best worst-set capture with "
            "over-refusal ≤ `max_over_refusal`",
        ),
        statistic("threshold_at_over_ref_bar", "that t"),
        statistic(
            "over_ref_at_cap_bar",
            "the lowest over-refusal with every capture ≥ `min_capture` (empty when no threshold reaches it)",
        ),
        statistic("threshold_at_cap_bar", "that t"),
        Column(
            "both_reachable", "bool", "one t meets both bars (null: a side without scores)", nullable=True
        ),
    ),
    ("model",),
)

ANALYSIS_VIEW_SCORES = analysis_table(
    "view_scores",
    "one row per model × benchmark × subset × mapping × view (each benchmark's primary metric in that view), "
    "plus per model × subset × mapping × view the headline means; sorted by model, benchmark, subset, "
    "mapping, view (own, matched, ranked)",
    (
        *IDENTITY,
        Column("recipe", "string", "its recipe: the models that differ only in seed share it"),
        Column("benchmark", "string", "the benchmark, or `mean:harmful` / `mean:benign`"),
        SUBSET,
        MAPPING,
        VIEW,
        Column(
            "metric",
            "string",
            "the primary metric in the view: `cap`, `over_ref` or a mixed set's choice (own, matched), "
            "`auroc` (ranked)",
        ),
        statistic("value", "the estimate (null: the model has no score to threshold or rank)"),
        *interval("", "its interval (`interval`)"),
        Column(
            "interval",
            "string",
            "own: as in scores.csv (the row is copied); matched and ranked: `bootstrap`, the percentile "
            "interval over the joint resamples of the benchmark's prompts and the calibration split",
        ),
        Column("n", "int64", "the benchmark prompts the value is over (a mean: summed)"),
        Column(
            "n_reference",
            "int64",
            "the calibration split's prompts the view reads besides, those the model has a decision for: "
            "every policy labels them safe (the matched threshold; a harmful set's ranked negatives) or "
            "unsafe (a benign set's ranked positives); 0 for the own view and a mixed set's ranked AUROC",
        ),
    ),
    ("model", "benchmark", "subset", "mapping", "view"),
)

ANALYSIS_BASE_RATE = analysis_table(
    "base_rate",
    "one row per model and mapping, sorted by model, mapping",
    (
        *IDENTITY,
        MAPPING,
        Column(
            "n_reference",
            "int64",
            "the reference: the calibration split's prompts every policy labels safe (the model's decided "
            "ones)",
        ),
        Column(
            "n_unsafe_reference",
            "int64",
            "the agreed-unsafe reference: those every policy labels unsafe (the model's decided ones)",
        ),
        statistic("own_flag_rate", "the share of the reference the model's own decisions flag"),
        *interval("own_flag_rate_", "its percentile interval over the calibration split's resamples"),
        statistic("own_unsafe_flag_rate", "the share of the agreed-unsafe reference its own decisions flag"),
        *interval("own_unsafe_flag_rate_", "its percentile interval"),
        statistic("threshold", "the matched threshold (flag when the score is ≥ it)"),
        statistic(
            "matched_flag_rate",
            "the share of the reference it flags (`analysis.matched_over_ref`, "
            "as near as the reference's scores allow)",
        ),
        statistic(
            "matched_unsafe_flag_rate",
            "the share of the agreed-unsafe reference flagged at the matched threshold",
        ),
        *interval(
            "matched_unsafe_flag_rate_",
            "its percentile interval (each resample at its own resampled threshold)",
        ),
        statistic("auroc", "the agreed-unsafe reference against the reference: what the model tells apart"),
        *interval("auroc_", "its percentile interval"),
    ),
    ("model", "mapping"),
)

"""The rest of stage analyse's tables (reports/analysis/{table}.csv, `guardpolicy.contracts.analysis_tables`
has the first): the mapping effect and mapping vs retraining, XSTest per type and per pair, and the open
guards' parse counts and calibrated comparison (header only without guards)."""

from __future__ import annotations

from guardpolicy.contracts.analysis_tables import (
    BENCHMARK,
    IDENTITY,
    MODEL,
    SUBSET,
    analysis_table,
    interval,
    statistic,
)
from guardpolicy.contracts.model import Column

ANALYSIS_MAPPING_EFFECT = analysis_table(
    "mapping_effect",
    "one row per model, benchmark with safe prompts and subset, sorted so",
    (
        MODEL,
        BENCHMARK,
        SUBSET,
        statistic("over_ref_default", "over-refusal under mapping `default`"),
        statistic("over_ref_boundary_unsafe", "over-refusal under mapping `boundary_unsafe`"),
        statistic("change", "`over_ref_boundary_unsafe` − `over_ref_default`"),
    ),
    ("model", "benchmark", "subset"),
)

ANALYSIS_MAPPING_EFFECT_BY_MODEL = analysis_table(
    "mapping_effect_by_model",
    "one row per model and subset with a measured change, sorted so",
    (
        MODEL,
        SUBSET,
        Column("n_benchmarks", "int64", "the rows of mapping_effect.csv with a change"),
        Column("mean_change", "float64", "their mean change"),
        Column(
            "largest_benchmark",
            "string",
            "the benchmark whose change is largest by size (changes equal to 12 decimals tie; ties go to the "
            "first by name)",
        ),
        Column("largest_over_ref_default", "float64", "its over-refusal under `default`"),
        Column("largest_over_ref_boundary_unsafe", "float64", "its over-refusal under `boundary_unsafe`"),
        Column("largest_change", "float64", "its change"),
    ),
    ("model", "subset"),
)

ANALYSIS_MAPPING_VS_RETRAINING = analysis_table(
    "mapping_vs_retraining",
    "lever `mapping`: one row per open guard, by name; then lever `retraining`: one per scale with at least "
    "two main-seed branches having an OVER-REF, by scale",
    (
        Column("lever", "string", "`mapping` or `retraining`"),
        Column("model", "string", "the open guard (`mapping`); empty for `retraining`", nullable=True),
        Column("scale", "string", "the guard's scale (`guard`), or the scale whose branches differ"),
        Column("subset", "string", "`analysis.subset`"),
        Column(
            "n_models", "int64", "1 (`mapping`), or the main-seed branches with an OVER-REF (`retraining`)"
        ),
        statistic(
            "over_ref_from",
            "OVER-REF before: the guard's relaxed (mapping `default`), or the lowest branch's under "
            "`default`",
        ),
        statistic(
            "over_ref_to", "OVER-REF after: the guard's strict (`boundary_unsafe`), or the highest branch's"
        ),
        statistic("change", "`over_ref_to` − `over_ref_from` (empty where either is)"),
    ),
    ("lever", "model", "scale"),
)

ANALYSIS_XSTEST = analysis_table(
    "xstest",
    "one row per model, subset and XSTest prompt type of the safe prompts, sorted so",
    (
        MODEL,
        SUBSET,
        Column("xstest_type", "string", "the prompt type (XSTest's `category`)"),
        Column("n", "int64", "the safe prompts of that type the model has a decision on"),
        statistic("over_ref", "over-refusal on them"),
        *interval("", "its Wilson interval"),
    ),
    ("model", "subset", "xstest_type"),
)

ANALYSIS_XSTEST_PAIRS = analysis_table(
    "xstest_pairs",
    "one row per model and subset with a safe/contrast pair it decided both prompts of, sorted so",
    (
        MODEL,
        SUBSET,
        Column(
            "pairs", "int64", "safe/contrast pairs with both prompts in the subset and decided by the model"
        ),
        Column(
            "consistent", "int64", "the pairs it gets both right (the safe prompt passed, the unsafe flagged)"
        ),
        Column("consistency", "float64", "consistent / pairs"),
        Column("ci_low", "float64", "its Wilson interval: low end"),
        Column("ci_high", "float64", "its high end"),
    ),
    ("model", "subset"),
)

ANALYSIS_BASELINE_PARSE = analysis_table(
    "baseline_parse",
    "one row per open guard model and dataset, sorted so (header only without guards)",
    (
        Column("model", "string", "the guard model `baseline-<guard>`"),
        Column("dataset", "string", "the benchmark, or `split:<name>`"),
        Column("n", "int64", "the items it was asked about"),
        Column("ok", "int64", "answers parsed fully"),
        Column("partial", "int64", "answers parsed in part"),
        Column("failed", "int64", "answers not parsed"),
        Column(
            "no_decision",
            "int64",
            "items left without a decision (failed answers the failure policy excludes)",
        ),
    ),
    ("model", "dataset"),
)

ANALYSIS_CALIBRATION = analysis_table(
    "calibration",
    "per open guard × mapping: the guard's rows, then each of our models' at its matched threshold; "
    "sorted by guard, mapping, model, benchmark, metric (header only without guards)",
    (
        Column("guard", "string", "the open guard model (`baseline-<guard>`)"),
        Column("guard_mapping", "string", "the guard's mapping: `relaxed` or `strict`"),
        Column("mapping", "string", "ours of the same meaning: `default` or `boundary_unsafe`"),
        *IDENTITY,
        Column("calibration_split", "string", "`analysis.calibration_split`"),
        Column("calibration_n", "int64", "the calibration items (below; the guard: those it answered)"),
        statistic("target_over_ref", "the guard's flag rate on them"),
        statistic(
            "threshold",
            "our model's threshold t (flag when its score ≥ t) whose flag rate there is closest to the "
            "target (ties: the higher t); empty for the guard",
        ),
        statistic("achieved_over_ref", "the flag rate t reaches there (the guard: the target)"),
        Column("benchmark", "string", "the benchmark, or `mean:harmful` / `mean:benign`"),
        Column("subset", "string", "`analysis.subset`"),
        Column("metric", "string", "`cap` or `over_ref`"),
        statistic(
            "value", "the rate at t (the guard: at its own decisions; a mean: null unless every set has it)"
        ),
        *interval("", "its Wilson interval (a mean: none)"),
        Column("n", "int64", "the items the rate is over (a mean: summed)"),
    ),
    ("guard", "mapping", "model", "benchmark", "metric"),
)

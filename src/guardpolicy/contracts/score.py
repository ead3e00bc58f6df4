"""The tables of `guardpolicy score` / stage score@<guard>, reports/score/<guard>/{table}.csv (registry name
`score_table:<table>`): the scores, the three views' scores, XSTest per type and per pair with the columns of
stage analyse's tables of the same name (one guard instead of every model), and the guard's policy
fingerprint."""

from __future__ import annotations

from guardpolicy.contracts.analysis_mapping import ANALYSIS_XSTEST, ANALYSIS_XSTEST_PAIRS
from guardpolicy.contracts.analysis_tables import (
    ANALYSIS_SCORES,
    ANALYSIS_VIEW_SCORES,
    BENCHMARK,
    MAPPING,
    SUBSET,
    interval,
    statistic,
)
from guardpolicy.contracts.model import Column, Contract, Entry
from guardpolicy.contracts.tables import BASELINE_PREDICTIONS

WRITER = "score@<guard>"


def score_table(
    table: str, rows: str, entries: tuple[Entry, ...], key: tuple[str, ...], **kw: str
) -> Contract:
    return Contract(
        "score_table", writer=WRITER, rows=rows, entries=entries, key=key, fields={"table": table}, **kw
    )


SCORE_PREDICTIONS = Contract(
    "score_predictions",
    writer=WRITER,
    rows="one row per benchmark prompt and, unless `score.views` is `own`, per prompt of the calibration "
    "split (dataset `split:<analysis.calibration_split>`, its gold_<policy> set: the views' reference); "
    "model `score-<guard>`; sorted by dataset, then id",
    entries=BASELINE_PREDICTIONS.entries,
    key=BASELINE_PREDICTIONS.key,
    like=BASELINE_PREDICTIONS.name,
)
SCORE_SCORES = score_table(
    "scores",
    "the rows of stage analyse's scores.csv for the one guard (model `score-<guard>`, kind `baseline`, "
    "scale `guard`)",
    ANALYSIS_SCORES.entries,
    ANALYSIS_SCORES.key,
    like=ANALYSIS_SCORES.name,
)
SCORE_VIEW_SCORES = score_table(
    "view_scores",
    "the rows of stage analyse's view_scores.csv for the one guard: own, matched and ranked against the "
    "calibration split's prompts the guard was scored on too (no rows under `score.views: own`)",
    ANALYSIS_VIEW_SCORES.entries,
    ANALYSIS_VIEW_SCORES.key,
    like=ANALYSIS_VIEW_SCORES.name,
)
SCORE_XSTEST = score_table(
    "xstest",
    "the rows of stage analyse's xstest.csv for the guard, under `score.mapping`",
    ANALYSIS_XSTEST.entries,
    ANALYSIS_XSTEST.key,
    like=ANALYSIS_XSTEST.name,
)
SCORE_XSTEST_PAIRS = score_table(
    "xstest_pairs",
    "the rows of stage analyse's xstest_pairs.csv for the guard, under `score.mapping`",
    ANALYSIS_XSTEST_PAIRS.entries,
    ANALYSIS_XSTEST_PAIRS.key,
    like=ANALYSIS_XSTEST_PAIRS.name,
)
REFERENCE = Column(
    "reference",
    "string",
    "`gold` (the benchmark's own label) or a policy whose per-prompt labels are compared",
)
SCORE_FINGERPRINT = score_table(
    "fingerprint",
    "one row per benchmark × subset × mapping × reference (gold first, then the policies by name), sorted so",
    (
        BENCHMARK,
        SUBSET,
        MAPPING,
        REFERENCE,
        Column("n", "int64", "prompts the guard decided and the reference labels"),
        Column("agree", "int64", "of them, where the guard's decision equals the reference's binary label"),
        statistic("agreement", "agree / n"),
        *interval("", "its Wilson interval"),
    ),
    ("benchmark", "subset", "mapping", "reference"),
)
SCORE_EXPLAINED = score_table(
    "fingerprint_explained",
    "one row per benchmark × subset × mapping with a gold agreement, sorted so",
    (
        BENCHMARK,
        SUBSET,
        MAPPING,
        statistic("gold_agreement", "the guard's agreement with the benchmark's gold"),
        Column(
            "closest_policy",
            "string",
            "the policy the guard agrees with most (ties: first by name)",
            nullable=True,
        ),
        statistic("policy_agreement", "the guard's agreement with that policy"),
        statistic("excess", "`policy_agreement` − `gold_agreement`"),
        Column(
            "explained_by",
            "string",
            "the policies whose agreement exceeds the gold agreement by more than `score.explain_margin`, "
            "comma-separated (null: none)",
            nullable=True,
        ),
        Column("explained", "bool", "`explained_by` is not null: the guard's score here reflects its policy"),
    ),
    ("benchmark", "subset", "mapping"),
)
SCORE_CONTRACTS = {
    contract.name: contract
    for contract in (
        SCORE_PREDICTIONS,
        SCORE_SCORES,
        SCORE_VIEW_SCORES,
        SCORE_XSTEST,
        SCORE_XSTEST_PAIRS,
        SCORE_FINGERPRINT,
        SCORE_EXPLAINED,
    )
}
SCORE_TABLES = {
    contract.fields["table"]: contract
    for contract in (
        SCORE_SCORES,
        SCORE_VIEW_SCORES,
        SCORE_XSTEST,
        SCORE_XSTEST_PAIRS,
        SCORE_FINGERPRINT,
        SCORE_EXPLAINED,
    )
}

"""Every table a stage writes, as data: its columns in order, dtypes, nulls, meaning (docs/data-contracts.md's
column tables are rendered from these), keyed by the artifact names of `guardpolicy.layout.ARTIFACTS`.

Adding a table is adding an entry to `DATA_CONTRACTS` (a CSV's numeric columns follow from its dtypes). Stage
analyse's tables (reports/analysis/{table}.csv, one contract each with `fields={"table": ...}`) live apart,
in `contracts.analysis`, so that rewording an analysis column's meaning changes the code deps of analyse,
report and guard_card@ only, never of the data and training stages that import this module;
`contracts.catalog` gathers both for the docs and the tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from guardpolicy.contracts.model import Column, Contract, Family
from guardpolicy.taxonomy import PILLAR_PREFIX

SPAN_START = Column(
    "span_start",
    "int64",
    "character offset of the harmful part's start in `prompt`, where known",
    nullable=True,
)
SPAN_END = Column(
    "span_end", "int64", "character offset just after the harmful part (`[start, end)`)", nullable=True
)

BENCHMARK = Contract(
    "benchmark",
    writer="fetch@<benchmark>",
    rows="one row per prompt, in source file order (none when no source of the benchmark can be had)",
    entries=(
        Column(
            "id", "string", "`<name>:[<subset>:]` + the source's own id, else a hash of the prompt (below)"
        ),
        Column("benchmark", "string", "the benchmark's name (its registry key)"),
        Column("prompt", "string", "the prompt text (a `prompt` template filled from the source's columns)"),
        Column("expected_unsafe", "bool", "the benchmark's own gold label"),
        Column("category", "string", "the source's category column (or the entry's constant)", nullable=True),
        Column("subset", "string", "the file's subset, when a benchmark has several", nullable=True),
        Column("source_file", "string", "the source file the row came from", nullable=True),
        Column("source_row", "int64", "its 1-based data row in that file", nullable=True),
        Family(
            "extra",
            "",
            ("string", "bool", "int64", "float64"),
            "the registry entry's `extras` (e.g. XSTest's `pair_id`, `xstest_type`), each its declared type",
            nullable=True,
            sorted=True,
        ),
    ),
    key=("id",),
)

POOL = Contract(
    "pool",
    writer="pool",
    rows="one row per distinct prompt (exact duplicates merged, provenance kept), sorted by `id`",
    entries=(
        Column(
            "id", "string", "`p_` + first 16 hex of sha1(prompt UTF-8): stable across runs and pool sizes"
        ),
        Column(
            "prompt", "string", "the prompt text (non-empty), unchanged from its source (or as generated)"
        ),
        Column("source", "string", "the first source (registry order) that had this prompt"),
        Column("sources", "list<string>", "every source that had it (sorted, unique)"),
        Column("origins", "list<string>", "`<source>:<native id or row number>` for every merged occurrence"),
        Column("kind", "string", "`public`, `generated` or `user` (of `source`)"),
        Column("facts", "list<string>", "union of facts (taxonomy `facts`) over merged occurrences, sorted"),
        Column("pillars", "list<string>", "union of pillar names carried by the sources, sorted"),
        SPAN_START,
        SPAN_END,
        Family(
            "label",
            "import_",
            "string",
            "a label carried from a user's pool file: one column per label a `user` source declares, sorted",
            nullable=True,
            sorted=True,
        ),
    ),
    key=("id",),
)

POLICY_LABELS = Contract(
    "policy_labels",
    writer="label@<policy>",
    rows="the pool's rows, in its order",
    entries=(
        Column("id", "string", "pool id"),
        Column("coarse", "string", "one of the 4 coarse classes"),
        Family(
            "pillar", PILLAR_PREFIX, "bool", "pillar flag: one per taxonomy pillar (24), in taxonomy order"
        ),
        replace(
            SPAN_START, meaning="harmful-part span, for unsafe labels where the pool knows it; null otherwise"
        ),
        replace(SPAN_END, meaning="its end (`[start, end)`)"),
        Column("labeler", "string", "`rules`, `import` or `committee`"),
        Column("policy", "string", "the policy name"),
        Column(
            "policy_version", "string", "`<version>+<12 hex of sha256(policy file bytes + labeler config)>`"
        ),
        Column(
            "rule",
            "string",
            "why: the rule that fired (rules), the source value (import), the vote tally (committee)",
            nullable=True,
        ),
    ),
    key=("id",),
)

SPLIT = Contract(
    "split",
    writer="audit",
    rows="one row per pool prompt of the split, sorted by `id`",
    entries=(
        Column("id", "string", "pool id"),
        Column("split", "string", "`train`, `val` or `calib`: the file's split"),
        Column(
            "group",
            "string",
            "near-duplicate group, named by its smallest member id; a group never straddles splits",
        ),
        Column("source", "string", "the pool's `source` of the prompt"),
        Family(
            "policy",
            "coarse_",
            "string",
            "that policy's coarse label: one per policy in params, in its order",
        ),
    ),
    key=("id",),
)

CLEAN_BENCHMARK = replace(
    BENCHMARK,
    artifact="clean_benchmark",
    writer="audit",
    rows="the benchmark's rows minus those that overlap the pool, in its order",
    like="benchmark",
)

TEACHER_LOGITS = Contract(
    "teacher_logits",
    writer="teacher@<policy>",
    rows="one row per prompt of the train and calib splits, sorted by `id`",
    entries=(
        Column("id", "string", "pool id"),
        Column(
            "logits",
            "list<float32>",
            "the teacher's 4 coarse logits (taxonomy order), raw: before temperature",
        ),
    ),
    key=("id",),
)

PREDICTIONS = Contract(
    "predictions",
    writer="evaluate@<model>",
    rows="one row per evaluation item, sorted by (`dataset`, `id`)",
    entries=(
        Column("model", "string", "the evaluated model name"),
        Column("dataset", "string", "benchmark name, or `split:<name>` (e.g. `split:val`)"),
        Column("id", "string", "the benchmark's item id or the pool id"),
        Column("clean", "bool", "in the decontaminated subset (always true for split rows)"),
        Column("expected_unsafe", "bool", "the benchmark's gold (null for split rows)", nullable=True),
        Column("category", "string", "the benchmark's `category` (XSTest: the prompt type)", nullable=True),
        Column("pair_id", "string", "XSTest safe/contrast pair", nullable=True),
        Family(
            "policy",
            "gold_",
            "string",
            "split rows: that policy's coarse label, null for benchmark rows; one per policy in params",
            nullable=True,
        ),
        Family(
            "coarse", "p_", "float32", "softmax of the coarse head: one per coarse class, in taxonomy order"
        ),
        Column("pred_coarse", "string", "argmax class"),
        Column("unsafe_score", "float32", "P(HARMFUL) + P(COMPOUND) (default mapping)"),
        Column("unsafe_score_bu", "float32", "+ P(BOUNDARY_SAFE) (mapping `boundary_unsafe`)"),
        Column("unsafe", "bool", "`pred_coarse` in {HARMFUL, COMPOUND}"),
        Column("unsafe_bu", "bool", "`pred_coarse` in {BOUNDARY_SAFE, HARMFUL, COMPOUND}"),
        Family(
            "pillar", PILLAR_PREFIX, "float32", "sigmoid pillar score: one per taxonomy pillar, in its order"
        ),
        replace(
            SPAN_START,
            meaning="predicted harmful span (character offsets) where any token scores ≥ "
            "`evaluation.span_threshold`; null otherwise or when the span was not computed",
        ),
        replace(SPAN_END, meaning="its end (`[start, end)`)"),
        Column(
            "span_computed",
            "bool",
            "false for head-only models scored from cached features (the span head needs every token state)",
        ),
        Column("n_tokens", "int64", "the prompt's tokens before truncation, special tokens included"),
        Column(
            "truncated",
            "bool",
            "`n_tokens` > the evaluation's max_length: the model read only part of the prompt (its head)",
        ),
    ),
    key=("dataset", "id"),
)

# A guard has no 4-class or pillar head, no span and (served) no tokenizer: those columns are null; with
# `baselines.failure_policy: exclude` a failed answer has null decisions and scores.
_GUARD_NULLS = {
    "pred_coarse": "null: a guard has no 4-class head",
    "unsafe_score": "P(unsafe) from the decision token's log-probabilities (null: the backend gave none)",
    "unsafe_score_bu": "the same under the strict mapping (Qwen3Guard: + P(Controversial))",
    "unsafe": "the relaxed decision (the guard's middle label counts as safe); null for an excluded failure",
    "unsafe_bu": "the strict decision (the middle label counts as unsafe); null for an excluded failure",
    "n_tokens": "the prompt's tokens as the guard reads them (null: a served guard, not tokenised here)",
}


def _guard_entry(entry: Column | Family) -> Column | Family:
    if isinstance(entry, Family) and entry.key in ("coarse", "pillar"):
        return replace(entry, nullable=True, meaning="null: a guard has no 4-class or pillar head")
    if isinstance(entry, Column) and entry.name in _GUARD_NULLS:
        return replace(entry, nullable=True, meaning=_GUARD_NULLS[entry.name])
    return entry


# What a guard's answer adds after the predictions' columns.
GUARD_COLUMNS = (
    Column("guard_label", "string", "safe | unsafe | controversial, null when unparsed", nullable=True),
    Column("parse_status", "string", "ok | partial | failed"),
    Column("categories", "string", "the guard's categories, comma-joined"),
    Column("raw", "string", "the guard's answer"),
)

BASELINE_PREDICTIONS = Contract(
    "baseline_predictions",
    writer="baseline@<guard>",
    rows="the same items as the predictions, in the same order; model `baseline-<guard>`",
    entries=(*(_guard_entry(entry) for entry in PREDICTIONS.entries), *GUARD_COLUMNS),
    key=("dataset", "id"),
)

FINGERPRINT = Contract(
    "fingerprint",
    writer="fingerprint",
    rows="one row per benchmark and labelling policy, sorted by benchmark, then policy",
    entries=(
        Column("benchmark", "string", "the benchmark"),
        Column("policy", "string", "the policy whose labeler labelled its prompts"),
        Column("labeler", "string", "that policy's labeler (`rules` or `committee`)"),
        Column("n", "int64", "prompts labelled"),
        Column("agree", "int64", "prompts whose binary label under the policy equals the benchmark's gold"),
        Column("agreement", "float64", "agree / n"),
        Column("ci_low", "float64", "Wilson 95 % interval of the agreement: low end"),
        Column("ci_high", "float64", "its high end"),
        Column("agreement_bu", "float64", "the agreement with BOUNDARY_SAFE counted unsafe"),
    ),
    key=("benchmark", "policy"),
)

FINGERPRINT_LABELS = Contract(
    "fingerprint_labels",
    writer="fingerprint",
    rows="every benchmark prompt under each policy that could label it, by policy, then benchmark, then id",
    entries=(
        Column("benchmark", "string", "the benchmark"),
        Column("id", "string", "the benchmark's item id"),
        Column("policy", "string", "the labelling policy"),
        Column("labeler", "string", "its labeler"),
        Column("coarse", "string", "the prompt's coarse label under the policy"),
    ),
    key=("benchmark", "id", "policy"),
)

# The data layer's tables (stage analyse's CSVs are in contracts.analysis; contracts.catalog has both).
DATA_CONTRACTS: Mapping[str, Contract] = {
    contract.name: contract
    for contract in (
        BENCHMARK,
        POOL,
        POLICY_LABELS,
        SPLIT,
        CLEAN_BENCHMARK,
        TEACHER_LOGITS,
        PREDICTIONS,
        BASELINE_PREDICTIONS,
        FINGERPRINT,
        FINGERPRINT_LABELS,
    )
}

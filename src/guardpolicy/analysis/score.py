"""One guard scored without the study (`guardpolicy score`): its scores with intervals, XSTest tables and its
policy fingerprint. Pure: the guard's predictions and our policies' per-prompt labels in, tables out.

Scores, XSTest and the three views reuse stage analyse's code on a one-model matrix
(`matrices.build_matrices`, `scores.compute_draws` / `scores_table`, `xstest`, `views`), so a scored guard's
numbers are computed exactly as the report's. Mappings use analyse's names: `default` is the guard's relaxed
decision (Qwen3Guard's Controversial is safe; for a policy's coarse label, BOUNDARY_SAFE is safe),
`boundary_unsafe` the strict one.

**The three views** (docs/study.md, "Three views of every score"): the guard's own decisions; the guard at
the threshold on its unsafe score that flags `matched_over_ref` of the reference (the calibration split's
prompts every policy labels safe); and threshold-free AUROCs against the reference. The split's rows are the
reference only: they never enter the benchmark tables (scores, XSTest, fingerprint).

**The policy fingerprint.** Per benchmark, subset and mapping: how often the guard's binary decision equals
(a) the benchmark's gold label and (b) each policy's label of the same prompt (reports/fingerprint_labels
.parquet, coarse -> binary under the same mapping), each with a Wilson interval. The guard *encodes* the
definition of unsafe it agrees with most. A benchmark's score is *explained* by policy P when
agreement(P) − agreement(gold) > `margin`: the guard's decisions there follow P's definition clearly better
than the benchmark's own labels, so its score on that benchmark measures which policy it was trained on
rather than how well it finds what the benchmark calls unsafe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from guardpolicy.analysis.baselines import BASELINE_KIND, GUARD_MAPPING, GUARD_SCALE
from guardpolicy.analysis.fingerprint import binary_unsafe
from guardpolicy.analysis.matrices import (
    BOUNDARY_UNSAFE,
    DEFAULT,
    MAPPINGS,
    SPLIT_PREFIX,
    DatasetMatrix,
    build_matrices,
)
from guardpolicy.analysis.scores import ROLE_MEANS, DrawStore, compute_draws, scores_table
from guardpolicy.analysis.sensitivity import primary_metric
from guardpolicy.analysis.stats import wilson_interval
from guardpolicy.analysis.views import (
    VIEW_SCORE_COLUMNS,
    VIEWS,
    Reference,
    Thresholds,
    matched_thresholds,
    reference_of,
    view_scores_table,
    view_stores,
)
from guardpolicy.analysis.xstest import (
    PAIR_COLUMNS,
    TYPE_COLUMNS,
    XSTEST,
    pair_consistency,
    type_over_refusal,
)
from guardpolicy.contracts.score import SCORE_EXPLAINED, SCORE_FINGERPRINT
from guardpolicy.errors import InputError
from guardpolicy.taxonomy import Taxonomy

SCORE_PREFIX = "score-"
GOLD = "gold"
DECISION = {DEFAULT: "unsafe", BOUNDARY_UNSAFE: "unsafe_bu"}
FINGERPRINT_COLUMNS = tuple(SCORE_FINGERPRINT.names())
EXPLAINED_COLUMNS = tuple(SCORE_EXPLAINED.names())


def score_model_name(guard: str) -> str:
    return f"{SCORE_PREFIX}{guard}"


def model_info(model: str, guard: str) -> pd.DataFrame:
    """The one-row model table `scores_table` joins (kind `baseline`, scale `guard`, as an open guard)."""
    return pd.DataFrame(
        [
            {
                "model": model,
                "kind": BASELINE_KIND,
                "scale": GUARD_SCALE,
                "branch": guard,
                "seed": 0,
                "recipe": model,
            }
        ]
    )


def split_rows(predictions: pd.DataFrame) -> np.ndarray:
    """[n] bool: the rows of a split (`split:<name>`), which are the views' reference, not a benchmark."""
    return predictions["dataset"].astype(str).str.startswith(SPLIT_PREFIX).to_numpy()


def guard_matrices(
    predictions: pd.DataFrame,
    model: str,
    label_kinds: dict[str, str],
    file: str,
    policies: Sequence[str] = (),
    unsafe_labels: Mapping[str, Sequence[str]] | None = None,
) -> list[DatasetMatrix]:
    """The guard's predictions as one matrix per dataset (one model column). A split's matrix marks the
    prompts every one of `policies` labels safe / unsafe under `unsafe_labels` (the views' reference)."""
    _, matrices = build_matrices({model: predictions}, label_kinds, {model: file}, policies, unsafe_labels)
    return matrices


def guard_store(matrices: Sequence[DatasetMatrix], model: str, *, samples: int, seed: int) -> DrawStore:
    """The own view: every metric of the guard's decisions per benchmark, subset and mapping, bootstrapped as
    stage analyse does (the generator named by seed, benchmark and subset)."""
    return compute_draws([model], matrices, samples, seed)


def guard_scores(
    store: DrawStore, model: str, guard: str, *, confidence: float, wilson_max_n: int
) -> pd.DataFrame:
    """scores.csv's rows for the guard: every metric per benchmark, subset and mapping with its interval
    (percentile bootstrap, Wilson for single-class rates), plus the headline means."""
    return scores_table(store, model_info(model, guard), confidence, wilson_max_n)


@dataclass(frozen=True)
class GuardViews:
    """The guard's three views: view_scores.csv's rows, the reference they were read against and the matched
    threshold per mapping (row 0 the point, rows 1..B the calibration split's resamples)."""

    table: pd.DataFrame
    reference: Reference
    thresholds: dict[str, Thresholds]

    def unscored(self, mapping: str) -> int:
        """Reference prompts (either side) the guard decided but gave no unsafe score for: a guard served
        without log-probabilities has none, and then no matched or ranked value."""
        matrix = self.reference.matrix
        sides = self.reference.safe(mapping) | self.reference.unsafe(mapping)
        decided = matrix.valid_mask(mapping)[:, 0]
        return int((sides & decided & ~np.isfinite(matrix.scores[mapping][:, 0])).sum())


def guard_views(
    own: DrawStore,
    benchmarks: Sequence[DatasetMatrix],
    reference_matrices: Sequence[DatasetMatrix],
    scores: pd.DataFrame,
    model: str,
    guard: str,
    *,
    calibration_split: str,
    matched_over_ref: float,
    primary_metrics: Mapping[str, str],
    seed: int,
    confidence: float,
) -> GuardViews:
    """The guard's own, matched and ranked scores (`views.view_scores_table` on the one-model store `own`).

    `reference_matrices`: the matrix of split `calibration_split` (`guard_matrices` with every policy and
    `matrices.unsafe_labels`); `scores`: the guard's scores.csv rows (the own view's); `primary_metrics`:
    params `analysis.primary_metric` (a mixed set's primary metric). The reference is resampled with `own`'s
    B and `seed`, so replicate r of every view joins the same benchmark resample r.
    """
    reference = reference_of(reference_matrices, calibration_split, matched_over_ref, own.samples, seed)
    thresholds = {mapping: matched_thresholds(reference, mapping, 1) for mapping in MAPPINGS}
    stores = view_stores(own, benchmarks, reference, thresholds, seed)
    primary = {m.name: primary_metric(m.name, m.role, primary_metrics) for m in benchmarks}
    table = view_scores_table(stores, scores, model_info(model, guard), primary, reference, confidence)
    return GuardViews(table, reference, thresholds)


def empty_view_scores() -> pd.DataFrame:
    """view_scores.csv without rows: the views were not computed (`score.views: own`)."""
    return pd.DataFrame(columns=list(VIEW_SCORE_COLUMNS))


def view_means(views: GuardViews, subset: str, mapping: str) -> dict[str, dict[str, dict[str, Any]]]:
    """View -> role (harmful, benign) -> the headline mean of view_scores (`mean:harmful` / `mean:benign` on
    `subset` and `mapping`): its metric, value, interval, prompts and reference prompts."""
    table = views.table
    chosen = table[(table["subset"] == subset) & (table["mapping"] == mapping)]
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for view in VIEWS:
        rows = chosen[chosen["view"] == view]
        means = {}
        for role, (name, _) in ROLE_MEANS.items():
            row = rows[rows["benchmark"] == name]
            if row.empty:
                continue
            r = row.iloc[0]
            means[role] = {
                "metric": r["metric"],
                "value": r["value"],
                "ci_low": r["ci_low"],
                "ci_high": r["ci_high"],
                "interval": r["interval"],
                "n": int(r["n"]),
                "n_reference": int(r["n_reference"]),
            }
        out[view] = means
    return out


def matched_point(views: GuardViews, mapping: str) -> dict[str, float]:
    """The matched threshold on the whole reference (no resample) and the share of it flagged there."""
    threshold = views.thresholds[mapping]
    return {"threshold": float(threshold.values[0, 0]), "flag_rate": float(threshold.rates[0, 0])}


def guard_xstest(
    matrices: Sequence[DatasetMatrix], model: str, mapping: str, confidence: float
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """xstest.csv and xstest_pairs.csv's rows for the guard (empty tables without XSTest)."""
    matrix = next((m for m in matrices if m.name == XSTEST), None)
    if matrix is None:
        return pd.DataFrame(columns=list(TYPE_COLUMNS)), pd.DataFrame(columns=list(PAIR_COLUMNS))
    return (
        type_over_refusal(matrix, [model], mapping, confidence),
        pair_consistency(matrix, [model], mapping, confidence),
    )


def _agreement_row(
    benchmark: str, subset: str, mapping: str, reference: str, same: np.ndarray, confidence: float
) -> dict:
    n, agree = len(same), int(same.sum())
    low, high = wilson_interval(agree, n, confidence)
    return {
        "benchmark": benchmark,
        "subset": subset,
        "mapping": mapping,
        "reference": reference,
        "n": n,
        "agree": agree,
        "agreement": agree / n if n else np.nan,
        "ci_low": low,
        "ci_high": high,
    }


def policy_fingerprint(
    predictions: pd.DataFrame,
    labels: pd.DataFrame,
    taxonomy: Taxonomy,
    *,
    subsets: Sequence[str],
    confidence: float,
    labels_file: str,
) -> pd.DataFrame:
    """The guard's agreement with each benchmark's gold and with each policy's label of the same prompts.

    `predictions`: dataset, id, clean, expected_unsafe, unsafe, unsafe_bu (null decision: an excluded
    answer, left out); `labels`: benchmark, id, policy, coarse (contract `fingerprint_labels`). A policy that
    labelled a benchmark must have labelled every one of its prompts (InputError naming `labels_file`); a
    policy that labelled none of it (an `import` policy) has no rows there. Rows: `FINGERPRINT_COLUMNS`.
    """
    rows = []
    for benchmark, items in predictions.groupby("dataset", sort=True):
        if benchmark.startswith("split:"):
            continue
        ids = items["id"].astype(str)
        coarse_by_policy = {}
        for policy, mine in labels[labels["benchmark"] == benchmark].groupby("policy", sort=True):
            coarse = mine.set_index(mine["id"].astype(str))["coarse"]
            missing = ~ids.isin(coarse.index)
            if missing.any():
                raise InputError(
                    labels_file,
                    f"policy {policy!r} labelled benchmark {benchmark!r} but not its prompt "
                    f"{ids[missing].iloc[0]!r} ({int(missing.sum())} of {len(ids)} missing): rerun stage "
                    "fingerprint on the same benchmarks",
                    field="id",
                )
            coarse_by_policy[policy] = coarse.loc[ids.to_numpy()].reset_index(drop=True)
        for subset in subsets:
            chosen = items if subset == "full" else items[items["clean"].to_numpy(dtype=bool)]
            keep = chosen.index
            for mapping in MAPPINGS:
                decision = chosen[DECISION[mapping]]
                decided = decision.notna().to_numpy()
                guard = decision[decided].to_numpy(dtype=bool)
                gold = chosen["expected_unsafe"][decided].to_numpy(dtype=bool)
                if len(guard) == 0:
                    continue
                rows.append(_agreement_row(benchmark, subset, mapping, GOLD, guard == gold, confidence))
                positions = items.index.get_indexer(keep)[decided]
                for policy, coarse in coarse_by_policy.items():
                    policy_unsafe = binary_unsafe(
                        coarse.iloc[positions], taxonomy, boundary_unsafe=mapping == BOUNDARY_UNSAFE
                    )
                    rows.append(
                        _agreement_row(benchmark, subset, mapping, policy, guard == policy_unsafe, confidence)
                    )
    table = pd.DataFrame(rows, columns=list(FINGERPRINT_COLUMNS))
    order = table["reference"].map(lambda r: (0, "") if r == GOLD else (1, r))
    table = table.assign(_order=order).sort_values(
        ["benchmark", "subset", "mapping", "_order"], kind="stable"
    )
    table = table.drop(columns="_order").reset_index(drop=True)
    table["n"] = table["n"].astype("int64")
    table["agree"] = table["agree"].astype("int64")
    return table


def explained_benchmarks(fingerprint: pd.DataFrame, margin: float) -> pd.DataFrame:
    """Per benchmark, subset and mapping: the closest policy and whether policies explain the score.

    A policy explains a benchmark when the guard's agreement with it exceeds the agreement with the gold by
    more than `margin` (strictly). Rows: `EXPLAINED_COLUMNS`.
    """
    rows = []
    for (benchmark, subset, mapping), group in fingerprint.groupby(
        ["benchmark", "subset", "mapping"], sort=True
    ):
        gold = group[group["reference"] == GOLD]
        if gold.empty:
            continue
        gold_agreement = float(gold["agreement"].iloc[0])
        policies = group[group["reference"] != GOLD].sort_values("reference", kind="stable")
        closest, policy_agreement, excess = None, np.nan, np.nan
        explained_by: list[str] = []
        if len(policies):
            best = policies.iloc[int(np.argmax(policies["agreement"].to_numpy(dtype=float)))]
            closest, policy_agreement = str(best["reference"]), float(best["agreement"])
            excess = policy_agreement - gold_agreement
            explained_by = [
                str(r.reference)
                for r in policies.itertuples(index=False)
                if r.agreement - gold_agreement > margin
            ]
        rows.append(
            {
                "benchmark": benchmark,
                "subset": subset,
                "mapping": mapping,
                "gold_agreement": gold_agreement,
                "closest_policy": closest,
                "policy_agreement": policy_agreement,
                "excess": excess,
                "explained_by": ",".join(explained_by) or None,
                "explained": bool(explained_by),
            }
        )
    return pd.DataFrame(rows, columns=list(EXPLAINED_COLUMNS))


def encoded_definition(fingerprint: pd.DataFrame, subset: str, mapping: str) -> dict[str, Any]:
    """Which definition of unsafe the guard encodes on `subset` / `mapping`: each reference's mean agreement
    over the benchmarks every reference labelled (unweighted: each benchmark counts once), and the closest
    one (highest mean; ties: gold first, then by name). Empty when no benchmark has every reference."""
    chosen = fingerprint[(fingerprint["subset"] == subset) & (fingerprint["mapping"] == mapping)]
    wide = chosen.pivot(index="benchmark", columns="reference", values="agreement").dropna()
    if wide.empty:
        return {}
    means = {str(ref): float(wide[ref].mean()) for ref in wide.columns}
    order = sorted(means, key=lambda ref: (-means[ref], ref != GOLD, ref))
    return {
        "subset": subset,
        "mapping": GUARD_MAPPING[mapping],
        "benchmarks": sorted(map(str, wide.index)),
        "mean_agreement": dict(sorted(means.items())),
        "closest": order[0],
    }

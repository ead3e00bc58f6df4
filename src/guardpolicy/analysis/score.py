"""One guard scored without the study (`guardpolicy score`): its scores with intervals, XSTest tables and its
policy fingerprint. Pure: the guard's predictions and our policies' per-prompt labels in, tables out.

Scores and XSTest reuse stage analyse's code on a one-model matrix (`matrices.build_matrices`,
`scores.compute_draws` / `scores_table`, `xstest`), so a scored guard's numbers are computed exactly as the
report's. Mappings use analyse's names: `default` is the guard's relaxed decision (Qwen3Guard's Controversial
is safe; for a policy's coarse label, BOUNDARY_SAFE is safe), `boundary_unsafe` the strict one.

**The policy fingerprint.** Per benchmark, subset and mapping: how often the guard's binary decision equals
(a) the benchmark's gold label and (b) each policy's label of the same prompt (reports/fingerprint_labels
.parquet, coarse -> binary under the same mapping), each with a Wilson interval. The guard *encodes* the
definition of unsafe it agrees with most. A benchmark's score is *explained* by policy P when
agreement(P) − agreement(gold) > `margin`: the guard's decisions there follow P's definition clearly better
than the benchmark's own labels, so its score on that benchmark measures which policy it was trained on
rather than how well it finds what the benchmark calls unsafe.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from guardpolicy.analysis.baselines import BASELINE_KIND, GUARD_MAPPING, GUARD_SCALE
from guardpolicy.analysis.fingerprint import binary_unsafe
from guardpolicy.analysis.matrices import BOUNDARY_UNSAFE, DEFAULT, MAPPINGS, DatasetMatrix, build_matrices
from guardpolicy.analysis.scores import compute_draws, scores_table
from guardpolicy.analysis.stats import wilson_interval
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


def guard_matrices(
    predictions: pd.DataFrame, model: str, label_kinds: dict[str, str], file: str
) -> list[DatasetMatrix]:
    """The guard's predictions as one matrix per benchmark (one model column)."""
    _, matrices = build_matrices({model: predictions}, label_kinds, {model: file}, [])
    return matrices


def guard_scores(
    matrices: Sequence[DatasetMatrix],
    model: str,
    guard: str,
    *,
    samples: int,
    seed: int,
    confidence: float,
    wilson_max_n: int,
) -> pd.DataFrame:
    """scores.csv's rows for the guard: every metric per benchmark, subset and mapping with its interval
    (percentile bootstrap, Wilson for single-class rates), plus the headline means."""
    store = compute_draws([model], matrices, samples, seed)
    return scores_table(store, model_info(model, guard), confidence, wilson_max_n)


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

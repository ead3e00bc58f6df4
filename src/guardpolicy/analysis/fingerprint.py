"""The policy fingerprint of the benchmarks: how often each policy's label of a benchmark prompt agrees with
the benchmark's own gold, and how far two policies' agreements lie apart (the benchmark's *swing*).

A benchmark whose gold one policy reproduces and the other does not (HarmBench-copyright under a policy that
blocks copyright reproduction vs one that does not) measures the policy a guard was trained on, not its
capability; the swing predicts which benchmarks move when only the training policy changes. Pure functions:
label frames and gold in, the agreement table and the JSON summary out.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd

from guardpolicy.contracts import FINGERPRINT, FINGERPRINT_LABELS, check_frame
from guardpolicy.errors import key_difference
from guardpolicy.layout import relative_path
from guardpolicy.taxonomy import Taxonomy

BOUNDARY_SAFE = "BOUNDARY_SAFE"
CONFIDENCE = 0.95
DIGITS = 6
# reports/fingerprint.csv (`guardpolicy.contracts.FINGERPRINT`).
TABLE_COLUMNS = tuple(FINGERPRINT.names())
# reports/fingerprint_labels.parquet: every benchmark prompt's label under every policy that could label it
# (stage fingerprint), read by stage analyse for the agreement of our models with the VAL policy's own labels.
PROMPT_LABEL_COLUMNS = tuple(FINGERPRINT_LABELS.names())


def _wilson(successes: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (local: no dependency on a sibling stats module)."""
    if n <= 0:
        raise ValueError("a Wilson interval needs n > 0")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must lie in [0, {n}], got {successes}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def binary_unsafe(coarse: pd.Series, taxonomy: Taxonomy, *, boundary_unsafe: bool = False) -> np.ndarray:
    """Coarse labels -> binary unsafe, shape (n,) bool; `boundary_unsafe` counts BOUNDARY_SAFE as unsafe."""
    unsafe = set(taxonomy.unsafe_classes) | ({BOUNDARY_SAFE} if boundary_unsafe else set())
    return coarse.isin(sorted(unsafe)).to_numpy(dtype=bool)


def agreement_row(
    labels: pd.DataFrame,
    gold: pd.DataFrame,
    taxonomy: Taxonomy,
    *,
    benchmark: str,
    policy: str,
    labeler: str,
    confidence: float = CONFIDENCE,
) -> dict[str, Any]:
    """One row of the fingerprint table: the policy's binary labels (`labels`: id, coarse) against the gold
    (`gold`: id, expected_unsafe bool) of the same prompts, with a Wilson interval of the agreement.

    Extra keys (`coarse_counts`, `unsafe`, `gold_unsafe`) go to the JSON, not the table.
    """
    if len(labels) != len(gold) or set(labels["id"]) != set(gold["id"]):
        raise ValueError(
            f"{benchmark}/{policy}: the labels and the gold cover different prompts "
            f"({len(labels)} labelled vs {len(gold)} gold: {key_difference(gold['id'], labels['id'])})"
        )
    if len(gold) == 0:
        raise ValueError(f"{benchmark}/{policy}: no prompts to compare")
    aligned = gold[["id", "expected_unsafe"]].merge(labels[["id", "coarse"]], on="id", how="left")
    truth = aligned["expected_unsafe"].to_numpy(dtype=bool)  # (n,)
    predicted = binary_unsafe(aligned["coarse"], taxonomy)  # (n,)
    predicted_bu = binary_unsafe(aligned["coarse"], taxonomy, boundary_unsafe=True)  # (n,)
    n = len(truth)
    agree = int((truth == predicted).sum())
    low, high = _wilson(agree, n, confidence)
    classes = Counter(aligned["coarse"].tolist())
    return {
        "benchmark": benchmark,
        "policy": policy,
        "labeler": labeler,
        "n": n,
        "agree": agree,
        "agreement": agree / n,
        "ci_low": low,
        "ci_high": high,
        "agreement_bu": int((truth == predicted_bu).sum()) / n,
        "unsafe": int(predicted.sum()),
        "gold_unsafe": int(truth.sum()),
        "coarse_counts": {c: classes.get(c, 0) for c in taxonomy.coarse_classes},
    }


def prompt_label_rows(labels: pd.DataFrame, *, benchmark: str, policy: str, labeler: str) -> pd.DataFrame:
    """One benchmark's per-prompt labels under one policy (`labels`: id, coarse) as rows of
    `PROMPT_LABEL_COLUMNS`, sorted by id; concatenate them over benchmarks and policies for the file."""
    missing = [c for c in ("id", "coarse") if c not in labels.columns]
    if missing:
        raise ValueError(f"{benchmark}/{policy}: the labels lack column(s) {missing}")
    frame = pd.DataFrame(
        {
            "benchmark": benchmark,
            "id": labels["id"].astype(str).to_numpy(),
            "policy": policy,
            "labeler": labeler,
            "coarse": labels["coarse"].astype(str).to_numpy(),
        },
        columns=list(PROMPT_LABEL_COLUMNS),
    )
    frame = frame.sort_values("id", kind="stable").reset_index(drop=True)
    check_frame(FINGERPRINT_LABELS, frame, relative_path("fingerprint_labels"))
    return frame


def fingerprint_table(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The CSV table: `TABLE_COLUMNS`, sorted by benchmark then policy, floats rounded to `DIGITS`."""
    frame = pd.DataFrame([{c: row[c] for c in TABLE_COLUMNS} for row in rows], columns=list(TABLE_COLUMNS))
    for column in ("agreement", "ci_low", "ci_high", "agreement_bu"):
        frame[column] = frame[column].astype(float).round(DIGITS)
    for column in ("n", "agree"):
        frame[column] = frame[column].astype("int64")
    frame = frame.sort_values(["benchmark", "policy"], kind="stable").reset_index(drop=True)
    check_frame(FINGERPRINT, frame, relative_path("fingerprint"))
    return frame


def _rounded(value: float) -> float:
    return round(float(value), DIGITS)


def fingerprint_report(
    rows: Sequence[Mapping[str, Any]],
    pair: tuple[str, str],
    *,
    policies: Mapping[str, Mapping[str, Any]],
    skipped: Mapping[str, str],
    missing: Sequence[str] = (),
    rules_fired: Mapping[tuple[str, str], Mapping[str, int]] | None = None,
    facts: Mapping[str, Mapping[str, int]] | None = None,
    confidence: float = CONFIDENCE,
) -> dict[str, Any]:
    """The JSON metric: per benchmark and policy the agreement (with interval and class counts), the swing
    |agreement(pair[0]) - agreement(pair[1])| per benchmark (default and boundary-unsafe mapping), the
    benchmarks ranked by swing (largest first, ties by name), the policies' status, the skipped benchmarks
    (`skipped`: name -> reason) and those of them whose fetch found no data (`missing`).

    A swing needs both policies of the pair labelled; where one could not label (an `import` policy), the
    swing is absent and `ranking_note` says why.
    """
    rules_fired = rules_fired or {}
    facts = facts or {}
    benchmarks: dict[str, dict[str, Any]] = {}
    first_policy: dict[str, str] = {}  # benchmark -> the policy whose count the others must match
    for row in sorted(rows, key=lambda r: (r["benchmark"], r["policy"])):
        entry = benchmarks.setdefault(
            row["benchmark"], {"n": row["n"], "gold_unsafe": row["gold_unsafe"], "policies": {}}
        )
        first_policy.setdefault(row["benchmark"], row["policy"])
        if row["n"] != entry["n"]:
            raise ValueError(
                f"{row['benchmark']}: policies labelled different numbers of prompts ({row['policy']}: "
                f"{row['n']}, {first_policy[row['benchmark']]}: {entry['n']})"
            )
        result = {
            "labeler": row["labeler"],
            "agree": row["agree"],
            "agreement": _rounded(row["agreement"]),
            "ci_low": _rounded(row["ci_low"]),
            "ci_high": _rounded(row["ci_high"]),
            "agreement_bu": _rounded(row["agreement_bu"]),
            "unsafe": row["unsafe"],
            "coarse_counts": dict(row["coarse_counts"]),
        }
        fired = rules_fired.get((row["benchmark"], row["policy"]))
        if fired is not None:
            result["rules"] = dict(sorted(fired.items()))
        entry["policies"][row["policy"]] = result
    for name, entry in benchmarks.items():
        if name in facts:
            entry["facts"] = dict(sorted(facts[name].items()))
        first, second = (entry["policies"].get(policy) for policy in pair)
        if first is not None and second is not None:
            entry["swing"] = _rounded(abs(first["agreement"] - second["agreement"]))
            entry["swing_bu"] = _rounded(abs(first["agreement_bu"] - second["agreement_bu"]))
    ranked = sorted(
        (name for name, entry in benchmarks.items() if "swing" in entry),
        key=lambda name: (-benchmarks[name]["swing"], name),
    )
    report: dict[str, Any] = {
        "pair": list(pair),
        "confidence": confidence,
        "interval": "wilson",
        "benchmarks": benchmarks,
        "ranking": [{"benchmark": name, "swing": benchmarks[name]["swing"]} for name in ranked],
        "policies": {name: dict(status) for name, status in sorted(policies.items())},
        "skipped": dict(sorted(skipped.items())),
        "missing": sorted(missing),
    }
    unlabelled = [policy for policy in pair if policies.get(policy, {}).get("status") != "labelled"]
    if unlabelled:
        report["ranking_note"] = (
            f"no swing: policy {unlabelled} of the pair could not label benchmark prompts "
            "(see `policies` for the reason)"
        )
    return report

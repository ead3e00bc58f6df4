"""XSTest extras: over-refusal per prompt type and safe/contrast pair consistency, per model and subset.

XSTest pairs each safe prompt of most types with an unsafe "contrast" prompt that shares its wording; a model
is pair-consistent on a pair when it lets the safe prompt through *and* flags the unsafe one. Both rates get
Wilson intervals (the per-type sets are 25 prompts in the public release).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from guardpolicy.analysis.matrices import SUBSETS, DatasetMatrix
from guardpolicy.analysis.stats import wilson_interval
from guardpolicy.contracts.analysis import ANALYSIS_XSTEST, ANALYSIS_XSTEST_PAIRS
from guardpolicy.metrics import confusion, over_ref_rate

XSTEST = "xstest"
# xstest.csv and xstest_pairs.csv (their contracts in `guardpolicy.contracts`).
TYPE_COLUMNS = tuple(ANALYSIS_XSTEST.names())
PAIR_COLUMNS = tuple(ANALYSIS_XSTEST_PAIRS.names())


def type_over_refusal(
    matrix: DatasetMatrix, models: Sequence[str], mapping: str, confidence: float
) -> pd.DataFrame:
    """xstest.csv: over_ref on the safe prompts of each XSTest type (`category`), per model and subset."""
    decisions = matrix.decisions[mapping]  # [n, M]
    valid = matrix.valid_mask(mapping)  # [n, M]: a guard's excluded answers count for neither side
    rows = []
    for subset in SUBSETS:
        safe = matrix.subset_rows(subset) & ~matrix.expected_unsafe
        types = sorted({t for t in matrix.category[safe] if t is not None})
        for xstest_type in types:
            chosen = safe & (matrix.category == xstest_type)
            unit = np.ones((1, int(chosen.sum())), dtype=np.float32)
            counts = confusion(unit, matrix.expected_unsafe[chosen], decisions[chosen], valid[chosen])
            rate = over_ref_rate(counts)[0]  # [M]
            for i, model in enumerate(models):
                n = int(counts.safe[0, i])
                low, high = wilson_interval(int(counts.false_pos[0, i]), n, confidence)
                rows.append(
                    {
                        "model": model,
                        "subset": subset,
                        "xstest_type": xstest_type,
                        "n": n,
                        "over_ref": float(rate[i]),
                        "ci_low": low,
                        "ci_high": high,
                    }
                )
    table = pd.DataFrame(rows, columns=list(TYPE_COLUMNS))
    return table.sort_values(["model", "subset", "xstest_type"], kind="stable").reset_index(drop=True)


def contrast_pairs(matrix: DatasetMatrix, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (safe [p], unsafe [p]) of the pairs among `rows` with one safe and one unsafe prompt."""
    safe_of: dict[str, list[int]] = {}
    unsafe_of: dict[str, list[int]] = {}
    for index in np.flatnonzero(rows):
        pair = matrix.pair_id[index]
        if pair is None:
            continue
        (unsafe_of if matrix.expected_unsafe[index] else safe_of).setdefault(pair, []).append(int(index))
    # A pair left out here lost a member to the subset: `matrices.build_matrices` refuses a pair with two safe
    # or two unsafe items, so none is dropped for being malformed.
    pairs = sorted(p for p in safe_of if len(safe_of[p]) == 1 and len(unsafe_of.get(p, [])) == 1)
    safe = np.array([safe_of[p][0] for p in pairs], dtype=np.int64)
    unsafe = np.array([unsafe_of[p][0] for p in pairs], dtype=np.int64)
    return safe, unsafe


def pair_consistency(
    matrix: DatasetMatrix, models: Sequence[str], mapping: str, confidence: float
) -> pd.DataFrame:
    """xstest_pairs.csv: share of safe/contrast pairs a model gets both right, per model and subset.

    A pair counts only when both its prompts are in the subset (the clean subset may break pairs up).
    """
    decisions = matrix.decisions[mapping]  # [n, M]
    valid = matrix.valid_mask(mapping)  # [n, M]
    rows = []
    for subset in SUBSETS:
        safe, unsafe = contrast_pairs(matrix, matrix.subset_rows(subset))
        if len(safe) == 0:
            continue
        # A pair counts for a model only when it has a decision on both prompts.
        both = valid[safe] & valid[unsafe]  # [p, M]
        consistent = (~decisions[safe] & decisions[unsafe] & both).sum(axis=0)  # [M]
        for i, model in enumerate(models):
            pairs = int(both[:, i].sum())
            if pairs == 0:
                continue
            low, high = wilson_interval(int(consistent[i]), pairs, confidence)
            rows.append(
                {
                    "model": model,
                    "subset": subset,
                    "pairs": pairs,
                    "consistent": int(consistent[i]),
                    "consistency": float(consistent[i]) / pairs,
                    "ci_low": low,
                    "ci_high": high,
                }
            )
    table = pd.DataFrame(rows, columns=list(PAIR_COLUMNS))
    return table.sort_values(["model", "subset"], kind="stable").reset_index(drop=True)

"""The study's statistical primitives: prompt resampling, percentile and Wilson intervals, the exact rank
test, and a NaN-safe Spearman correlation.

The bootstrap is drawn as multinomial count matrices (how often each prompt appears in each replicate), not as
index lists, so that every score that is a sum over prompts is one matrix product `counts @ values` and the
same replicates serve every model: differences and spans between models then get joint intervals. Each draw
is seeded from the base seed and a *name* (benchmark + subset), never from a running generator, so a result
does not depend on the order in which datasets are visited.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

# Elements of one block of a count matrix (float32): keeps a 2,000 x 21,318 SaladBench draw at ~64 MB.
MAX_BLOCK_ELEMENTS = 1 << 24

EXTREME_TOP = "top"
EXTREME_BOTTOM = "bottom"
EXTREME_NONE = "none"


def named_rng(seed: int, *names: str) -> np.random.Generator:
    """A generator fixed by `seed` and the names alone (sha256 of each name, not Python's salted hash)."""
    words = [int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "little") for name in names]
    return np.random.default_rng(np.random.SeedSequence([seed, *words]))


def bootstrap_count_blocks(n: int, samples: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Multinomial resample counts of n items, `samples` replicates in all, yielded in row blocks [b, n].

    Row r counts how often each item appears in replicate r (each row sums to n). Float32 is exact here
    (counts and their sums with 0/1 values stay far below 2**24), and BLAS products on it are fast.
    """
    if n <= 0:
        raise ValueError("cannot resample an empty set")
    block = max(1, min(samples, MAX_BLOCK_ELEMENTS // n))
    for start in range(0, samples, block):
        rows = min(block, samples - start)
        picks = rng.integers(0, n, size=(rows, n))  # [rows, n] item indices
        offsets = (np.arange(rows, dtype=np.int64) * n)[:, None]
        counts = np.bincount((picks + offsets).ravel(), minlength=rows * n)
        yield counts.reshape(rows, n).astype(np.float32)


def percentile_interval(draws: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval per column of draws [B, ...]; replicates that are NaN are ignored.

    A column with no finite replicate gets NaN bounds.
    """
    draws = np.asarray(draws, dtype=np.float64)
    alpha = 1.0 - confidence
    finite = np.isfinite(draws)
    low = np.full(draws.shape[1:], np.nan)
    high = np.full(draws.shape[1:], np.nan)
    usable = finite.any(axis=0)
    if usable.any():
        masked = np.where(finite, draws, np.nan)[:, usable]
        low[usable], high[usable] = np.nanquantile(masked, [alpha / 2.0, 1.0 - alpha / 2.0], axis=0)
    return low, high


def wilson_interval(successes: int, n: int, confidence: float) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion successes / n (NaN bounds when n is 0)."""
    if n <= 0:
        return math.nan, math.nan
    if not 0 <= successes <= n:
        raise ValueError(f"successes must lie in [0, {n}], got {successes}")
    z = float(scipy_stats.norm.ppf(1.0 - (1.0 - confidence) / 2.0))
    p = successes / n
    denominator = 1.0 + z * z / n
    centre = (p + z * z / (2.0 * n)) / denominator
    half = z * math.sqrt(p * (1.0 - p) / n + z * z / (4.0 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class RankTest:
    extreme: str  # top | bottom | none
    p_value: float | None
    k: int
    n: int


def rank_test(scores: Mapping[str, float], members: Sequence[str]) -> RankTest:
    """Exact permutation test that the set `members` occupies the k extreme ranks among the n `scores`.

    Extreme means every member scores strictly above every non-member ("top") or strictly below ("bottom");
    a tie across the boundary, or a missing (NaN) score, is not extreme. Under exchangeability of the n
    models, the chance that a given k-set fills the top k ranks is 1 / C(n, k) (exact, one-sided, for the
    direction observed); the p-value is null when the set is not extreme. Members absent from `scores` are
    ignored, so k counts the members present.
    """
    present = [m for m in members if m in scores]
    others = [name for name in scores if name not in set(present)]
    k, n = len(present), len(scores)
    if k == 0 or not others:
        return RankTest(EXTREME_NONE, None, k, n)
    inside = np.array([scores[m] for m in present], dtype=np.float64)
    outside = np.array([scores[m] for m in others], dtype=np.float64)
    if not (np.isfinite(inside).all() and np.isfinite(outside).all()):
        return RankTest(EXTREME_NONE, None, k, n)
    if inside.min() > outside.max():
        extreme = EXTREME_TOP
    elif inside.max() < outside.min():
        extreme = EXTREME_BOTTOM
    else:
        return RankTest(EXTREME_NONE, None, k, n)
    return RankTest(extreme, 1.0 / math.comb(n, k), k, n)


@dataclass(frozen=True)
class Correlation:
    rho: float | None
    p_value: float | None
    n: int
    note: str


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> Correlation:
    """Spearman's rho (scipy.stats.spearmanr) over the pairs where both values are finite.

    Null rho and p-value, with a note saying why, when fewer than three pairs remain or either side is
    constant (rho is 0/0 then), instead of scipy's NaN and warning.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    n = int(keep.sum())
    if n < 3:
        return Correlation(None, None, n, f"fewer than 3 models with both scores ({n})")
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        side = "first" if np.ptp(x) == 0 else "second"
        return Correlation(None, None, n, f"the {side} variable is constant: rho undefined")
    result = scipy_stats.spearmanr(x, y)
    return Correlation(float(result.statistic), float(result.pvalue), n, "")

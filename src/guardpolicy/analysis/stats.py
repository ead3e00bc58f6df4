"""The study's statistical primitives: prompt resampling, percentile and Wilson intervals, the exact rank
test (one-sided in a direction fixed beforehand, else two-sided) and its bootstrap stability, a NaN-safe
Spearman correlation and the expected range of normal samples (d2). The metrics themselves (CAP, AUPRC, the
weighted AUROC, ...) are `guardpolicy.metrics`.

The bootstrap is drawn as multinomial count matrices (how often each prompt appears in each replicate), not as
index lists, so that every score that is a sum over prompts is one matrix product `counts @ values` and the
same replicates serve every model: differences and spans between models then get joint intervals. Each draw
is seeded from the base seed and a *name* (benchmark + subset), never from a running generator, so a result
does not depend on the order in which datasets are visited.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import integrate
from scipy import stats as scipy_stats

# Elements of one block of a count matrix (float32): keeps a 2,000 x 21,318 SaladBench draw at ~64 MB.
MAX_BLOCK_ELEMENTS = 1 << 24

EXTREME_TOP = "top"
EXTREME_BOTTOM = "bottom"
EXTREME_NONE = "none"
# A rank test without a direction fixed beforehand: either extreme counts, so p = 2 / C(n, k).
TWO_SIDED = "two-sided"
DIRECTIONS = (EXTREME_TOP, EXTREME_BOTTOM)


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
    extreme: str  # top | bottom | none: where the set lies (observed, whatever the direction tested)
    p_value: float | None  # null unless the set is extreme in the tested direction
    k: int
    n: int
    direction: str = TWO_SIDED  # top | bottom (fixed beforehand, one-sided) | two-sided
    # The chance under exchangeability that the test gives a hit: 1 / C(n, k) one-sided, 2 / C(n, k)
    # two-sided (null when there is nothing to rank).
    null_probability: float | None = None


def rank_test(scores: Mapping[str, float], members: Sequence[str], direction: str | None = None) -> RankTest:
    """Exact permutation test that the set `members` occupies the k extreme ranks among the n `scores`.

    Extreme means every member scores strictly above every non-member ("top") or strictly below ("bottom");
    a tie across the boundary, or a missing (NaN) score, is not extreme. Under exchangeability of the n
    models, the chance that a given k-set fills the top k ranks is 1 / C(n, k). With `direction` (top |
    bottom) fixed before the run the test is one-sided: p = 1 / C(n, k) when the set is extreme in that
    direction, null otherwise (also when it is extreme the other way). Without a direction it is two-sided:
    p = 2 / C(n, k) when the set is extreme either way (the direction read off the data costs the factor 2).
    Members absent from `scores` are ignored, so k counts the members present.
    """
    if direction is not None and direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {list(DIRECTIONS)} or None, got {direction!r}")
    tested = direction or TWO_SIDED
    present = [m for m in members if m in scores]
    others = [name for name in scores if name not in set(present)]
    k, n = len(present), len(scores)
    if k == 0 or not others:
        return RankTest(EXTREME_NONE, None, k, n, tested, None)
    null = min(1.0, (1.0 if direction else 2.0) / math.comb(n, k))
    inside = np.array([scores[m] for m in present], dtype=np.float64)
    outside = np.array([scores[m] for m in others], dtype=np.float64)
    extreme = _extreme(inside, outside)
    hit = extreme != EXTREME_NONE and (direction is None or extreme == direction)
    return RankTest(extreme, null if hit else None, k, n, tested, null)


def _extreme(inside: np.ndarray, outside: np.ndarray) -> str:
    if not (np.isfinite(inside).all() and np.isfinite(outside).all()):
        return EXTREME_NONE
    if inside.min() > outside.max():
        return EXTREME_TOP
    if inside.max() < outside.min():
        return EXTREME_BOTTOM
    return EXTREME_NONE


def rank_stability(draws: np.ndarray, members: np.ndarray, extreme: str) -> float | None:
    """Share of bootstrap replicates in which the set still takes the `extreme` ranks.

    draws [B, n] (one column per ranked model), members [n] bool. A replicate with a NaN score cannot
    rank and is left out; null when no replicate is usable or `extreme` is none.
    """
    if extreme not in DIRECTIONS:
        return None
    draws = np.asarray(draws, dtype=np.float64)
    members = np.asarray(members, dtype=bool)
    usable = np.isfinite(draws).all(axis=1)
    if not usable.any() or members.all() or not members.any():
        return None
    inside, outside = draws[usable][:, members], draws[usable][:, ~members]
    if extreme == EXTREME_TOP:
        holds = inside.min(axis=1) > outside.max(axis=1)
    else:
        holds = inside.max(axis=1) < outside.min(axis=1)
    return float(holds.mean())


@functools.lru_cache(maxsize=256)
def expected_range(n: int) -> float:
    """d2(n): the expected range (max − min) of n independent standard normal draws.

    d2(n) = ∫ 1 − F(x)^n − (1 − F(x))^n dx over the real line (F the standard normal CDF), integrated
    numerically: d2(2) = 2/√π ≈ 1.128, d2(3) ≈ 1.693, d2(10) ≈ 3.078.
    """
    if n < 2:
        raise ValueError(f"a range needs at least 2 draws, got {n}")
    value, _ = integrate.quad(
        lambda x: 1.0 - scipy_stats.norm.cdf(x) ** n - scipy_stats.norm.sf(x) ** n,
        -np.inf,
        np.inf,
        epsabs=1e-10,
        epsrel=1e-10,
    )
    return float(value)


def range_ratio(runs: int, seeds: int) -> float:
    """d2(runs) / d2(seeds): how much wider the range of `runs` draws is expected to be than that of
    `seeds` draws of the same normal noise (10 vs 3: ≈ 1.82)."""
    return expected_range(runs) / expected_range(seeds)


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

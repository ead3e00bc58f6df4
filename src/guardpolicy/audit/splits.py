"""Deterministic, stratified, group-aware train / val / calib split of the pool.

A stratum is the joint value of the coarse labels of the policies in `audit.splits.stratify_by` (columns
``coarse_<policy>``) and the prompt's `source`, so every split sees each (label, label, source) combination in
proportion. Near-duplicates (column `group`, from `guardpolicy.audit.groups`) are never separated: a whole
group goes to one split, so no val or calib prompt has an exact or near-duplicate copy in train. A group
belongs to the stratum of its representative (its smallest id); without a `group` column every row is its own
group.

The algorithm. Strata are taken in sorted key order. Let N be the number of items in this and all earlier
strata, R(N) the largest-remainder rounding of N × fractions (each split gets the floor of its quota or one
more, leftover seats to the largest remainders, ties in split order train, val, calib) and A the items the
earlier strata actually received. The stratum's target per split is R(N) − A: what brings the running totals
to the rounded running quotas (a negative target is raised to 0 and the excess taken, one item at a time,
from the largest target). Within the stratum the groups are taken in the order of
sha256(f"{seed}:{representative id}") and each goes whole to the split with the most room left (its target
minus what it already got; ties in split order).

The guarantee. With singletons only, every stratum gets exactly its target, which is the floor or the ceiling
of its own quota (R(N) − R(N') differs from (N − N') × fraction by less than one), and the totals are R(pool
size): every split within one item of its fraction. A group overflows its split only when it is larger than
the most room left; the rooms add up to the stratum's items not yet placed, so that happens only when fewer
than 3 × its size items are left, and by at most size − 1 items. The next strata's targets take such a
surplus back, because they aim at the running quotas rather than at their own; what remains in the totals is
overflow that the strata after it could not absorb (none where they have enough singletons). Tiny strata (one
disagreement cell of one source, say) do not all go to train: their seats follow R(N), which rotates between
the splits. Hash order rather than largest-first keeps a group's split independent of its size, so val and
calib are not starved of templated prompt families.

The assignment depends only on the ids, groups, strata and the seed, never on the input row order.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence
from fractions import Fraction

import pandas as pd

from guardpolicy.audit.groups import GROUP_COLUMN
from guardpolicy.config.audit import SplitConfig
from guardpolicy.contracts import SPLIT

SPLITS = ("train", "val", "calib")
SOURCE_COLUMN = "source"
MISSING_STRATUM_VALUE = "<missing>"


def coarse_column(policy: str) -> str:
    """A policy's label column in the splits (`guardpolicy.contracts.SPLIT`: coarse_<policy>)."""
    return SPLIT.family("policy").column(policy)


def strata_columns(config: SplitConfig) -> list[str]:
    return [coarse_column(policy) for policy in config.stratify_by] + [SOURCE_COLUMN]


def split_order_key(seed: int, item_id: str) -> str:
    return hashlib.sha256(f"{seed}:{item_id}".encode()).hexdigest()


def exact_fractions(config: SplitConfig) -> tuple[Fraction, ...]:
    # Exact rationals, so 0.8 × 10 is 8 and not 8.000000000000002 with a spurious remainder.
    train = Fraction(config.train).limit_denominator(1_000_000)
    val = Fraction(config.val).limit_denominator(1_000_000)
    return train, val, 1 - train - val


def rounded_quotas(total: int, fractions: Sequence[Fraction]) -> list[int]:
    """Largest-remainder rounding of total × fraction: each the floor or the ceiling, summing to `total`."""
    quotas = [total * fraction for fraction in fractions]
    counts = [int(quota) for quota in quotas]  # quotas are non-negative, so int() is the floor
    remainders = [quota - count for quota, count in zip(quotas, counts, strict=True)]
    eligible = sorted(
        (i for i, remainder in enumerate(remainders) if remainder > 0), key=lambda i: (-remainders[i], i)
    )
    for i in eligible[: total - sum(counts)]:
        counts[i] += 1
    return counts


def stratum_targets(size: int, running_quotas: Sequence[int], assigned: Sequence[int]) -> list[int]:
    """Items per split for a stratum of `size`: the running quotas minus what earlier strata got, none
    negative. `running_quotas` (which include this stratum) and `assigned` each sum to the same total, so
    the targets sum to `size`; a negative one is raised to 0 and the excess taken from the largest targets."""
    targets = [max(0, quota - got) for quota, got in zip(running_quotas, assigned, strict=True)]
    for _ in range(sum(targets) - size):
        largest = min(range(len(targets)), key=lambda i: (-targets[i], i))
        targets[largest] -= 1
    return targets


def assign_splits(frame: pd.DataFrame, config: SplitConfig) -> pd.Series:
    """The split ('train', 'val' or 'calib') of every row of `frame`, aligned with its index.

    `frame` needs `id` (unique) and the strata columns: ``coarse_<policy>`` for each policy in
    `config.stratify_by`, and `source`; optionally `group` (rows with the same value always share a split; a
    missing value is a group of its own). See the module docstring for the algorithm and its guarantee.
    """
    columns = strata_columns(config)
    missing = [column for column in ["id", *columns] if column not in frame.columns]
    if missing:
        raise ValueError(f"assign_splits: missing column(s) {missing}; have {list(frame.columns)}")
    ids = frame["id"].astype(str).reset_index(drop=True)
    duplicated = ids[ids.duplicated()]
    if not duplicated.empty:
        raise ValueError(f"assign_splits: duplicate id(s) {sorted(set(duplicated))[:5]}")
    if GROUP_COLUMN in frame.columns:
        labels = frame[GROUP_COLUMN].reset_index(drop=True)
        groups = labels.astype(object).where(labels.notna(), "id:" + ids).astype(str)
    else:
        groups = ids
    representative = ids.groupby(groups.to_numpy()).transform("min")
    stratum_values = frame[columns].astype(object).where(frame[columns].notna(), MISSING_STRATUM_VALUE)
    stratum_of_id = dict(zip(ids, stratum_values.astype(str).itertuples(index=False, name=None), strict=True))
    members: dict[str, list[int]] = defaultdict(list)
    for position, group in enumerate(representative):
        members[group].append(position)
    groups_by_stratum: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for group in members:
        groups_by_stratum[stratum_of_id[group]].append(group)

    fractions = exact_fractions(config)
    assigned = [0] * len(SPLITS)
    seen = 0
    split_of_position = [""] * len(frame)
    for stratum in sorted(groups_by_stratum):
        # Sorting (hash, id) pairs: the id breaks (astronomically unlikely) hash ties.
        ordered = sorted(
            groups_by_stratum[stratum], key=lambda group: (split_order_key(config.seed, group), group)
        )
        size = sum(len(members[group]) for group in ordered)
        seen += size
        room = stratum_targets(size, rounded_quotas(seen, fractions), assigned)
        for group in ordered:
            chosen = min(range(len(SPLITS)), key=lambda i: (-room[i], i))
            room[chosen] -= len(members[group])
            assigned[chosen] += len(members[group])
            for position in members[group]:
                split_of_position[position] = SPLITS[chosen]
    return pd.Series(split_of_position, index=frame.index, name="split", dtype="str")

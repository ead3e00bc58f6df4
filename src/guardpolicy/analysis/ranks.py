"""rank_test.csv: the exact rank test of named branch sets (one-sided in the direction params fix beforehand,
else two-sided), each hit's bootstrap stability, and the hits expected by chance (`rank_chance`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from guardpolicy.analysis.matrices import BENIGN, HARMFUL
from guardpolicy.analysis.scores import DrawStore
from guardpolicy.analysis.sensitivity import branch_models, column_index, primary_results
from guardpolicy.analysis.stats import EXTREME_BOTTOM, EXTREME_TOP, TWO_SIDED, rank_stability, rank_test
from guardpolicy.analysis.views import RANKED, sort_views
from guardpolicy.contracts.analysis import ANALYSIS_RANK_TEST

# rank_test.csv (`guardpolicy.contracts.ANALYSIS_RANK_TEST`).
RANK_TEST_COLUMNS = tuple(ANALYSIS_RANK_TEST.names())


# The ranked view's AUROC of a benign set (agreed-unsafe prompts against its prompts) is high where the
# over-refusal is low: a direction fixed for the rate flips there.
FLIPPED = {EXTREME_TOP: EXTREME_BOTTOM, EXTREME_BOTTOM: EXTREME_TOP}


def view_direction(direction: str | None, view: str, role: str) -> str | None:
    """The pre-registered direction of a benchmark's rate (cap on a harmful set, over_ref on a benign one)
    as it reads in a view: unchanged in the own and matched views and for a harmful set's ranked AUROC
    (ranking its unsafe prompts higher flags more of them at any threshold); flipped for a benign set's
    ranked AUROC; none (two-sided) for a mixed set's ranked AUROC, which has no fixed relation to its rate."""
    if direction is None or view != RANKED or role == HARMFUL:
        return direction
    return FLIPPED[direction] if role == BENIGN else None


def rank_test_table(
    store: DrawStore,
    models: pd.DataFrame,
    main_seed: int,
    rank_sets: Mapping[str, Sequence[str]],
    primary_overrides: Mapping[str, str],
    directions: Mapping[str, Mapping[str, str]] | None = None,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """rank_test.csv's rows of the store's view: whether each named branch set fills the extreme ranks, per
    scale and benchmark subset.

    Ranks are of the point estimates of the primary metric over the branch models at the main seed.
    `directions` (set -> benchmark -> top | bottom, params `analysis.rank_direction`, fixed before the run)
    makes the test one-sided, p = 1 / C(n, k); elsewhere it is two-sided, p = 2 / C(n, k)
    (stats.rank_test); in the ranked view the direction reads as `view_direction` says.
    `null_probability` is the chance of a hit under exchangeability; `hit`: p <= 1 − confidence;
    `stability`: the share of the joint bootstrap replicates in which the observed extreme ranking still
    holds (null when the set is not extreme).
    """
    directions = directions or {}
    alpha = 1.0 - confidence
    column = column_index(store)
    branches = branch_models(models, main_seed)
    rows = []
    for benchmark, subset, mapping, _metric, result in primary_results(store, primary_overrides):
        for scale, group in branches.groupby("scale", sort=True):
            present = [
                (m, str(b)) for m, b in zip(group["model"], group["branch"], strict=True) if m in column
            ]
            scores = {branch: float(result.point[column[model]]) for model, branch in present}
            indices = [column[model] for model, _ in present]
            for set_name, members in sorted(rank_sets.items()):
                direction = view_direction(
                    directions.get(set_name, {}).get(benchmark), store.view, store.roles[benchmark]
                )
                test = rank_test(scores, members, direction)
                if test.k == 0 or test.k == test.n:
                    # No member, or no non-member at this scale: there is no ranking to test.
                    continue
                inside = np.array([branch in set(members) for _, branch in present])
                rows.append(
                    {
                        "benchmark": benchmark,
                        "scale": str(scale),
                        "subset": subset,
                        "mapping": mapping,
                        "view": store.view,
                        "set_name": set_name,
                        "k": test.k,
                        "n": test.n,
                        "direction": test.direction,
                        "extreme": test.extreme,
                        "p_value": test.p_value,
                        "null_probability": test.null_probability,
                        "hit": test.p_value is not None and test.p_value <= alpha + 1e-12,
                        "stability": rank_stability(result.draws[:, indices], inside, test.extreme),
                    }
                )
    table = pd.DataFrame(rows, columns=list(RANK_TEST_COLUMNS))
    table["hit"] = table["hit"].astype(bool)
    return sort_views(table, ["set_name", "scale", "benchmark", "subset", "mapping", "view"])


def rank_chance(rank_tests: pd.DataFrame, subset: str, mapping: str, confidence: float) -> dict:
    """Hits vs the hits expected by chance over every benchmark x scale x set tested (headline subset and
    mapping): `expected_hits` = the sum of each test's exact chance of a hit under exchangeability (its null
    probability where that can reach p <= alpha, else 0), `alpha_bound` = tests x alpha."""
    alpha = 1.0 - confidence
    chosen = rank_tests[(rank_tests["subset"] == subset) & (rank_tests["mapping"] == mapping)]
    null = chosen["null_probability"].astype(float)
    can_hit = null <= alpha + 1e-12
    hits = chosen[chosen["hit"].astype(bool)]
    return {
        "alpha": alpha,
        "tests": len(chosen),
        "one_sided": int((chosen["direction"] != TWO_SIDED).sum()),
        "tests_that_can_hit": int(can_hit.sum()),
        "hits": len(hits),
        "expected_hits": float(null[can_hit].sum()),
        "alpha_bound": len(chosen) * alpha,
        "hit_list": ",".join(f"{r.set_name}/{r.scale}/{r.benchmark}" for r in hits.itertuples(index=False)),
    }

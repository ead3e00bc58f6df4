"""The `rules` labeler: a policy's rules applied to each pool row's facts, pillars and sources.

First rule whose `when` holds wins; the rule's outcome gives the coarse class and the pillar flags. The same
rules also decide pillars for labelers that choose only a class (committee, import without a pillar column):
`pillars_for_class` gives the pillars the rules would give a row *for that class*.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from guardpolicy.labeling.base import Decision, Labeler, PoolRow
from guardpolicy.labeling.policy import Policy

GENERIC_SAFE = "GENERIC_SAFE"


def decide_row(policy: Policy, row: PoolRow) -> Decision:
    rule_name, outcome = policy.decide(row.facts, row.pillars, row.sources)
    return Decision(coarse=outcome.coarse, pillars=outcome.pillars_for(row.pillars), rule=rule_name)


def pillars_for_class(policy: Policy, row: PoolRow, coarse: str) -> frozenset[str]:
    """The pillars the rules labeler would give `row` had it chosen `coarse`.

    The first rule that holds for the row *and* assigns `coarse` (then the default, if it assigns `coarse`)
    decides. When no rule leads to that class, the class decides: unsafe and BOUNDARY_SAFE labels carry the
    pool's pillars (the harm area the prompt touches), GENERIC_SAFE carries none.
    """
    for rule in policy.rules:
        if rule.outcome.coarse == coarse and rule.when.holds(row.facts, row.pillars, row.sources):
            return rule.outcome.pillars_for(row.pillars)
    if policy.default.coarse == coarse:
        return policy.default.pillars_for(row.pillars)
    if coarse == GENERIC_SAFE:
        return frozenset()
    return row.pillars


class RulesLabeler(Labeler):
    kind = "rules"

    def decide(
        self, rows: Sequence[PoolRow], pool: pd.DataFrame, pool_file: str
    ) -> tuple[list[Decision], dict[str, Any]]:
        return [decide_row(self.policy, row) for row in rows], {}

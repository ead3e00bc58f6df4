"""A guard's raw answers as its predictions table: the one path from generations to the contract's columns,
shared by stage baseline@<guard> (registry guards on the evaluation items) and `guardpolicy score` (any guard
on the fetched benchmarks), so both read a guard's answers the same way.

Its own module rather than part of `predictions`: the default pipeline's analyse stage imports that one,
and only the optional pipelines' stages need this.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from guardpolicy.baselines.base import Generation, GuardAdapter, PromptTokens
from guardpolicy.baselines.predictions import baseline_predictions_table, verdict_rows
from guardpolicy.taxonomy import Taxonomy


def answers_table(
    model_name: str,
    items: pd.DataFrame,
    generations: list[Generation],
    *,
    relaxed: GuardAdapter,
    strict: GuardAdapter,
    failure_policy: str,
    taxonomy: Taxonomy,
    policies: list[str],
    tokens: PromptTokens,
) -> pa.Table:
    """The predictions table of `generations` (one per row of `items`, in order): each answer parsed by the
    adapter of each mapping (relaxed -> `unsafe`, strict -> `unsafe_bu`), a failed parse counted as
    `failure_policy` says, with the taxonomy's class and pillar columns and the prompt token counts."""
    verdicts = verdict_rows(
        [relaxed.parse(g) for g in generations],
        [strict.parse(g) for g in generations],
        failure_policy,
    )
    return baseline_predictions_table(
        model_name,
        items,
        verdicts,
        coarse_classes=list(taxonomy.coarse_classes),
        pillar_columns=list(taxonomy.pillar_columns),
        policies=policies,
        tokens=tokens,
    )

"""Stage analyse's tables, reports/analysis/<table>.csv, by table name in the order analyse writes them (the
contracts themselves are in `analysis_tables` and `analysis_mapping`). Imported by the analysis, the
report and guard_card@ only: see `contracts.tables` for why these are kept apart from the data layer's."""

from __future__ import annotations

from collections.abc import Mapping

from guardpolicy.contracts.analysis_mapping import (
    ANALYSIS_BASELINE_PARSE,
    ANALYSIS_CALIBRATION,
    ANALYSIS_MAPPING_EFFECT,
    ANALYSIS_MAPPING_EFFECT_BY_MODEL,
    ANALYSIS_MAPPING_VS_RETRAINING,
    ANALYSIS_XSTEST,
    ANALYSIS_XSTEST_PAIRS,
)
from guardpolicy.contracts.analysis_tables import (
    ANALYSIS_BASE_RATE,
    ANALYSIS_BENCHMARKS,
    ANALYSIS_COMPETENCE,
    ANALYSIS_CORRELATIONS,
    ANALYSIS_HEADLINE,
    ANALYSIS_NOISE_FLOOR,
    ANALYSIS_RANK_TEST,
    ANALYSIS_SCORES,
    ANALYSIS_SPAN,
    ANALYSIS_SPAN_SCALE,
    ANALYSIS_SWING_VS_SPAN,
    ANALYSIS_TRADEOFF,
    ANALYSIS_VIEW_SCORES,
)
from guardpolicy.contracts.model import Contract

ANALYSIS_TABLES: Mapping[str, Contract] = {
    contract.fields["table"]: contract
    for contract in (
        ANALYSIS_BENCHMARKS,
        ANALYSIS_SCORES,
        ANALYSIS_VIEW_SCORES,
        ANALYSIS_SPAN,
        ANALYSIS_SPAN_SCALE,
        ANALYSIS_NOISE_FLOOR,
        ANALYSIS_SWING_VS_SPAN,
        ANALYSIS_RANK_TEST,
        ANALYSIS_CORRELATIONS,
        ANALYSIS_HEADLINE,
        ANALYSIS_COMPETENCE,
        ANALYSIS_TRADEOFF,
        ANALYSIS_MAPPING_EFFECT,
        ANALYSIS_MAPPING_EFFECT_BY_MODEL,
        ANALYSIS_MAPPING_VS_RETRAINING,
        ANALYSIS_XSTEST,
        ANALYSIS_XSTEST_PAIRS,
        ANALYSIS_BASELINE_PARSE,
        ANALYSIS_CALIBRATION,
        ANALYSIS_BASE_RATE,
    )
}

__all__ = [
    "ANALYSIS_BASELINE_PARSE",
    "ANALYSIS_BASE_RATE",
    "ANALYSIS_BENCHMARKS",
    "ANALYSIS_CALIBRATION",
    "ANALYSIS_COMPETENCE",
    "ANALYSIS_CORRELATIONS",
    "ANALYSIS_HEADLINE",
    "ANALYSIS_MAPPING_EFFECT",
    "ANALYSIS_MAPPING_EFFECT_BY_MODEL",
    "ANALYSIS_MAPPING_VS_RETRAINING",
    "ANALYSIS_NOISE_FLOOR",
    "ANALYSIS_RANK_TEST",
    "ANALYSIS_SCORES",
    "ANALYSIS_SPAN",
    "ANALYSIS_SPAN_SCALE",
    "ANALYSIS_SWING_VS_SPAN",
    "ANALYSIS_TABLES",
    "ANALYSIS_TRADEOFF",
    "ANALYSIS_VIEW_SCORES",
    "ANALYSIS_XSTEST",
    "ANALYSIS_XSTEST_PAIRS",
]

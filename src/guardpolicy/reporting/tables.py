"""The analysis tables' contract (docs/data-contracts.md, "Analysis"): each table's required columns and which
are numbers, and the reader that checks a CSV against it. Read by stages report and guard_card@ (apart from
guardpolicy.stages.report so that guard_card@ does not import the params sections only the report reads)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from guardpolicy.analysis.baselines import CALIBRATION_COLUMNS, PARSE_COLUMNS
from guardpolicy.analysis.competence import COMPETENCE_COLUMNS, TRADEOFF_COLUMNS
from guardpolicy.analysis.contrasts import SWING_SPAN_COLUMNS
from guardpolicy.analysis.correlations import CORRELATION_COLUMNS
from guardpolicy.analysis.headline import HEADLINE_COLUMNS
from guardpolicy.analysis.mapping import LEVER_COLUMNS, MAPPING_BY_MODEL_COLUMNS
from guardpolicy.analysis.ranks import RANK_TEST_COLUMNS
from guardpolicy.analysis.span_tables import (
    NOISE_FLOOR_COLUMNS,
    SPAN_LEADING_COLUMNS,
    SPAN_SCALE_COLUMNS,
    SPAN_TRAILING_COLUMNS,
)
from guardpolicy.errors import InputError

# span_scale.csv's text columns (the rest are numbers).
SPAN_SCALE_TEXT = (
    "benchmark",
    "subset",
    "mapping",
    "scale",
    "load",
    "study_load",
    "primary_metric",
    "seeds",
    "verdict",
)
# Required columns of each analysis table (docs/data-contracts.md, "Analysis") and which are numbers.
TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "scores": (
        (
            "model",
            "kind",
            "scale",
            "branch",
            "seed",
            "recipe",
            "benchmark",
            "subset",
            "mapping",
            "metric",
            "value",
            "ci_low",
            "ci_high",
            "interval",
            "n",
        ),
        ("seed", "value", "ci_low", "ci_high", "n"),
    ),
    "span": (
        (*SPAN_LEADING_COLUMNS, *SPAN_TRAILING_COLUMNS),
        ("swing", "delta", "delta_ci_low", "delta_ci_high", "phi", "phi_ci_low", "phi_ci_high", "phi_max"),
    ),
    "span_scale": (
        SPAN_SCALE_COLUMNS,
        tuple(c for c in SPAN_SCALE_COLUMNS if c not in SPAN_SCALE_TEXT),
    ),
    "noise_floor": (NOISE_FLOOR_COLUMNS, ("spread", "ci_low", "ci_high")),
    "swing_vs_span": (SWING_SPAN_COLUMNS, ("n_benchmarks", "rho", "p_value", "ci_low", "ci_high")),
    "rank_test": (RANK_TEST_COLUMNS, ("k", "n", "p_value", "null_probability", "stability")),
    "correlations": (CORRELATION_COLUMNS, ("rho", "p_value", "n_models")),
    "headline": (
        HEADLINE_COLUMNS,
        (
            "seed",
            "n_sets",
            "cap",
            "cap_ci_low",
            "cap_ci_high",
            "auroc",
            "matched_over_ref",
            "threshold",
            "calibration_over_ref",
            "cap_matched",
            "over_ref_matched",
        ),
    ),
    "competence": (COMPETENCE_COLUMNS, ("seed", "cap", "ci_low", "ci_high", "n")),
    "tradeoff": (
        TRADEOFF_COLUMNS,
        (
            "seed",
            "min_cap",
            "over_ref",
            "min_cap_at_over_ref_bar",
            "threshold_at_over_ref_bar",
            "over_ref_at_cap_bar",
            "threshold_at_cap_bar",
        ),
    ),
    "mapping_effect": (
        ("model", "benchmark", "subset", "over_ref_default", "over_ref_boundary_unsafe", "change"),
        ("over_ref_default", "over_ref_boundary_unsafe", "change"),
    ),
    "mapping_effect_by_model": (
        MAPPING_BY_MODEL_COLUMNS,
        (
            "n_benchmarks",
            "mean_change",
            "largest_over_ref_default",
            "largest_over_ref_boundary_unsafe",
            "largest_change",
        ),
    ),
    "mapping_vs_retraining": (LEVER_COLUMNS, ("n_models", "over_ref_from", "over_ref_to", "change")),
    "xstest": (
        ("model", "subset", "xstest_type", "n", "over_ref", "ci_low", "ci_high"),
        ("n", "over_ref", "ci_low", "ci_high"),
    ),
    "xstest_pairs": (
        ("model", "subset", "pairs", "consistent", "consistency", "ci_low", "ci_high"),
        ("pairs", "consistent", "consistency", "ci_low", "ci_high"),
    ),
    "fingerprint": (
        ("benchmark", "policy", "labeler", "n", "agree", "agreement", "ci_low", "ci_high"),
        ("n", "agree", "agreement", "ci_low", "ci_high"),
    ),
    "baseline_parse": (PARSE_COLUMNS, ("n", "ok", "partial", "failed", "no_decision")),
    "calibration": (
        CALIBRATION_COLUMNS,
        (
            "seed",
            "calibration_n",
            "target_over_ref",
            "threshold",
            "achieved_over_ref",
            "value",
            "ci_low",
            "ci_high",
            "n",
        ),
    ),
}


def not_found(path: Path, writer: str) -> InputError:
    return InputError(path, f"file not found; it is written by {writer}")


def read_table(path: str | Path, table: str, writer: str) -> pd.DataFrame:
    """A contract CSV: every required column present and number columns numeric, else an InputError."""
    path = Path(path)
    if not path.is_file():
        raise not_found(path, writer)
    columns, numeric = TABLES[table]
    # Only empty cells are missing values: `none` (rank-test extreme) or `NA` are data, not nulls.
    frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(path, f"missing column(s) {missing}", row="header", field=missing[0])
    for column in numeric:
        parsed = pd.to_numeric(frame[column], errors="coerce")
        bad = parsed.isna() & frame[column].notna()
        if bad.any():
            row = int(bad.to_numpy().nonzero()[0][0])
            raise InputError(
                path, f"expected a number, got {frame[column].iloc[row]!r}", row=row + 1, field=column
            )
        frame[column] = parsed.astype(float)
    if "seed" in frame.columns:
        frame["seed"] = frame["seed"].astype(int)
    return frame

"""JSON-ready numbers and trees for the metric files (summary.json, guard cards, `guardpolicy score`'s
metrics.json): floats rounded to 6 decimals, undefined values null (never NaN). Kept apart from
`analysis.summary` so that a writer of one small document does not import the whole analysis."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

DIGITS = 6


def clean_number(value: Any) -> Any:
    """A JSON-ready scalar: floats rounded, NaN/inf and pandas NA -> None, numpy scalars -> Python."""
    if value is None or value is pd.NA:
        return None
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return round(float(value), DIGITS) if math.isfinite(value) else None
    return value


def clean_tree(payload: Any) -> Any:
    if isinstance(payload, Mapping):
        return {str(key): clean_tree(value) for key, value in payload.items()}
    if isinstance(payload, list | tuple):
        return [clean_tree(value) for value in payload]
    return clean_number(payload)

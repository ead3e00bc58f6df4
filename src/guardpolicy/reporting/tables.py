"""The CSV tables the report reads: each one's required columns and which are numbers (from
guardpolicy.contracts), and the reader that checks a CSV against them. Read by stages report and guard_card@
(apart from guardpolicy.stages.report so that guard_card@ does not import the params sections only the report
reads)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from guardpolicy.contracts import FINGERPRINT, Contract
from guardpolicy.contracts.analysis import ANALYSIS_TABLES
from guardpolicy.errors import InputError


def _columns(contract: Contract) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A CSV table's fixed columns (a family, span.csv's `range_<scale>`, is read as it comes) and which of
    them are numbers, from its contract."""
    none = {family.key: () for family in contract.families}
    return tuple(contract.names(**none)), contract.numeric(**none)


# Required columns of each CSV table the report reads (guardpolicy.contracts: stage analyse's tables and the
# fingerprint) and which are numbers.
TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    contract.fields.get("table", contract.artifact): _columns(contract)
    for contract in (*ANALYSIS_TABLES.values(), FINGERPRINT)
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

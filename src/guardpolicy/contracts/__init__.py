"""Table contracts: every table a stage writes defined once (columns, dtypes, nulls, meaning, keys).

The writers check a table against its contract before writing it, the readers check what they read, and
docs/data-contracts.md's column tables are rendered from the same data (`guardpolicy contracts
--write-docs`; `guardpolicy.contracts.docs`). The contracts are in `tables`, the vocabulary and the checks in
`model`; stage analyse's tables (reports/analysis/<table>.csv) in `contracts.analysis` (not re-exported
here: see `contracts.tables`), and every contract in `contracts.catalog`.
"""

from guardpolicy.contracts.model import (
    DTYPES,
    NUMERIC,
    Column,
    Contract,
    ContractError,
    DType,
    Family,
    Members,
    check_frame,
    check_table,
    read_frame,
    read_table,
    require_columns,
    write_table,
)
from guardpolicy.contracts.tables import (
    BASELINE_PREDICTIONS,
    BENCHMARK,
    CLEAN_BENCHMARK,
    DATA_CONTRACTS,
    FINGERPRINT,
    FINGERPRINT_LABELS,
    GUARD_COLUMNS,
    POLICY_LABELS,
    POOL,
    PREDICTIONS,
    SPLIT,
    TEACHER_LOGITS,
)

__all__ = [
    "BASELINE_PREDICTIONS",
    "BENCHMARK",
    "CLEAN_BENCHMARK",
    "DATA_CONTRACTS",
    "DTYPES",
    "FINGERPRINT",
    "FINGERPRINT_LABELS",
    "GUARD_COLUMNS",
    "NUMERIC",
    "POLICY_LABELS",
    "POOL",
    "PREDICTIONS",
    "SPLIT",
    "TEACHER_LOGITS",
    "Column",
    "Contract",
    "ContractError",
    "DType",
    "Family",
    "Members",
    "check_frame",
    "check_table",
    "read_frame",
    "read_table",
    "require_columns",
    "write_table",
]

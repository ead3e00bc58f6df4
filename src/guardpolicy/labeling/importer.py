"""The `import` labeler: a policy's labels taken from a label column the user's pool file carried.

The pool stage keeps each declared user label as a column `import_<name>`. A value is mapped to a coarse
class through `import_from.mapping`, or is already a coarse class. Pillars come from an optional
`;`-separated column (checked against the taxonomy); without one, a row gets the pillars the policy's rules
would give it for the imported class (see `rules.pillars_for_class`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import pandas as pd

from guardpolicy.config.policies import ImportLabelerConfig
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.labeling.base import IMPORT_PREFIX, Decision, Labeler, PoolRow, is_missing
from guardpolicy.labeling.policy import Policy
from guardpolicy.labeling.rules import pillars_for_class
from guardpolicy.taxonomy import Taxonomy

PILLAR_SEPARATOR = ";"


class ImportLabeler(Labeler):
    kind = "import"

    def __init__(self, policy: Policy, taxonomy: Taxonomy, version: str, config: ImportLabelerConfig) -> None:
        super().__init__(policy, taxonomy, version)
        for value, coarse in config.mapping.items():
            taxonomy.check_coarse(coarse, f"policies.{policy.name}.import_from.mapping.{value}")
        self.config = config

    def _column(self, pool: pd.DataFrame, name: str, key: str) -> str:
        column = f"{IMPORT_PREFIX}{name}"
        if column not in pool.columns:
            available = sorted(c for c in pool.columns if c.startswith(IMPORT_PREFIX))
            raise ConfigError(
                f"policies.{self.policy.name}.import_from.{key}: the pool has no column {column!r}; "
                f"available import columns: {available or 'none (declare labels in the pool sources)'}"
            )
        return column

    def _coarse(self, value: Any, row_id: str, pool_file: str, column: str) -> str:
        if is_missing(value):
            raise InputError(pool_file, "no imported label (null)", row=row_id, field=column)
        if not isinstance(value, str):
            raise InputError(pool_file, f"expected a string label, got {value!r}", row=row_id, field=column)
        if value in self.config.mapping:
            return self.config.mapping[value]
        if value in self.taxonomy.coarse_classes:
            return value
        raise InputError(
            pool_file,
            f"label {value!r} is neither in policies.{self.policy.name}.import_from.mapping "
            f"{sorted(self.config.mapping)} nor a coarse class {list(self.taxonomy.coarse_classes)}",
            row=row_id,
            field=column,
        )

    def _pillars(self, value: Any, row_id: str, pool_file: str, column: str) -> frozenset[str]:
        if is_missing(value):
            return frozenset()
        if not isinstance(value, str):
            raise InputError(
                pool_file, f"expected `;`-separated pillar names, got {value!r}", row=row_id, field=column
            )
        names = frozenset(part.strip() for part in value.split(PILLAR_SEPARATOR) if part.strip())
        unknown = sorted(names - set(self.taxonomy.pillars))
        if unknown:
            raise InputError(pool_file, f"unknown pillar(s) {unknown}", row=row_id, field=column)
        return names

    def decide(
        self, rows: Sequence[PoolRow], pool: pd.DataFrame, pool_file: str
    ) -> tuple[list[Decision], dict[str, Any]]:
        label_column = self._column(pool, self.config.column, "column")
        pillar_column = (
            self._column(pool, self.config.pillars_column, "pillars_column")
            if self.config.pillars_column is not None
            else None
        )
        values = pool[label_column].tolist()
        pillar_values = pool[pillar_column].tolist() if pillar_column else [None] * len(rows)
        decisions = []
        for row, value, pillar_value in zip(rows, values, pillar_values, strict=True):
            coarse = self._coarse(value, row.id, pool_file, label_column)
            pillars = (
                self._pillars(pillar_value, row.id, pool_file, pillar_column)
                if pillar_column
                else pillars_for_class(self.policy, row, coarse)
            )
            decisions.append(Decision(coarse=coarse, pillars=pillars, rule=value))
        counts = Counter(values)
        return decisions, {
            "import_column": label_column,
            "pillars_column": pillar_column,
            "value_counts": {str(k): counts[k] for k in sorted(counts, key=str)},
        }

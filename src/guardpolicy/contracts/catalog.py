"""Every table contract, the data layer's, stage analyse's and `guardpolicy score`'s, by registry name (the
artifact name of `guardpolicy.layout.ARTIFACTS`, `:<table>` added for the analysis and score CSVs). For the
docs and the tests; no stage imports it (each imports only the contracts of the tables it reads or writes)."""

from __future__ import annotations

from collections.abc import Mapping

from guardpolicy.contracts.analysis import ANALYSIS_TABLES
from guardpolicy.contracts.model import Contract
from guardpolicy.contracts.score import SCORE_CONTRACTS
from guardpolicy.contracts.tables import DATA_CONTRACTS

CONTRACTS: Mapping[str, Contract] = {
    **DATA_CONTRACTS,
    **{contract.name: contract for contract in ANALYSIS_TABLES.values()},
    **SCORE_CONTRACTS,
}


def contract(name: str) -> Contract:
    """The contract of a table artifact (a `guardpolicy.layout.ARTIFACTS` name, `:<field value>` added where
    one template holds several tables)."""
    if name not in CONTRACTS:
        raise KeyError(f"no table contract {name!r}; known: {sorted(CONTRACTS)}")
    return CONTRACTS[name]

"""Error types that carry *where* a problem is: the file, the row and the field.

Every stage turns these into one readable line on stderr and a non-zero exit (see `guardpolicy.cli`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


class GuardpolicyError(Exception):
    """Base class for errors the command line reports without a traceback."""


class ConfigError(GuardpolicyError):
    """A params / registry entry is missing, unknown or of the wrong type."""


class InputError(GuardpolicyError):
    """Bad input data, located as precisely as we can: file, row (1-based data row or 'header'), field."""

    def __init__(
        self,
        file: str | Path,
        message: str,
        *,
        row: int | str | None = None,
        field: str | None = None,
    ) -> None:
        self.file = str(file)
        self.row = row
        self.field = field
        self.message = message
        where = [self.file]
        if row is not None:
            where.append(f"row {row}")
        if field is not None:
            where.append(f"field '{field}'")
        super().__init__(f"{', '.join(where)}: {message}")


class ChecksumError(InputError):
    """The bytes of a file do not hash to the sha256 pinned in the registry."""


class ValidationFailed(GuardpolicyError):
    """A critical data expectation failed; the message names the dataset, expectation and examples."""


# How many differing keys a message lists before it only counts the rest.
KEYS_SHOWN = 5


def few_keys(keys: Iterable[object]) -> str:
    """The first few keys (sorted) and, when there are more, how many in all: a message names what differs."""
    ordered = sorted(str(key) for key in keys)
    shown = ordered[:KEYS_SHOWN]
    more = f" and {len(ordered) - len(shown)} more" if len(ordered) > len(shown) else ""
    return f"{shown}{more}"


def key_difference(expected: Iterable[object], found: Iterable[object]) -> str:
    """Which keys are missing from `found` and which are extra: "missing ['a'], extra ['b'] and 3 more"."""
    expected_set, found_set = {str(k) for k in expected}, {str(k) for k in found}
    parts = []
    if expected_set - found_set:
        parts.append(f"missing {few_keys(expected_set - found_set)}")
    if found_set - expected_set:
        parts.append(f"extra {few_keys(found_set - expected_set)}")
    return ", ".join(parts) or "the same keys, in another order or repeated"

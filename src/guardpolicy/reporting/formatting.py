"""How the reports write a value: numbers rounded for reading, intervals beside them, names, Markdown tables.

Pure string formatting, shared by REPORT.md's sections, the guard cards and the figures' branch order. An
absent value prints as a dash, never as 0; a value without an interval says so instead of inventing one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

MISSING = "—"


def is_missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def fmt(value: Any, digits: int = 3) -> str:
    """A number rounded for reading; an absent value is a dash."""
    if is_missing(value):
        return MISSING
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    return f"{float(value):.{digits}f}"


def fmt_count(value: Any) -> str:
    """A count, whether it arrived as an int (JSON) or a float (a CSV column with gaps)."""
    return MISSING if is_missing(value) else f"{round(float(value)):,}"


def fmt_signed(value: Any, digits: int = 3) -> str:
    return MISSING if is_missing(value) else f"{float(value):+.{digits}f}"


def fmt_ci(value: Any, low: Any, high: Any, digits: int = 3) -> str:
    """`0.812 [0.723, 0.880]`; a value the inputs give no interval for says so."""
    if is_missing(value):
        return MISSING
    if is_missing(low) or is_missing(high):
        return f"{float(value):.{digits}f} (no interval)"
    return f"{float(value):.{digits}f} [{float(low):.{digits}f}, {float(high):.{digits}f}]"


def fmt_p(value: Any) -> str:
    return MISSING if is_missing(value) else f"{float(value):.3g}"


def fmt_rate(value: Any) -> str:
    return MISSING if is_missing(value) else f"{float(value):.1%}"


def yes_no(value: Any) -> str:
    """A boolean cell of a CSV (bool, or its text after a round trip); absent: a dash."""
    if is_missing(value):
        return MISSING
    return "yes" if str(value).strip().lower() in ("true", "1") else "no"


def names(listed: Iterable[str] | str | None) -> str:
    """Backticked, comma-separated names; a list stored as one comma-joined string (summary.json) too."""
    if listed is None:
        listed = []
    elif isinstance(listed, str):
        listed = [n.strip() for n in listed.split(",") if n.strip()]
    listed = list(listed)
    return ", ".join(f"`{n}`" for n in listed) if listed else "none"


def natural_key(name: str) -> tuple:
    """E2 before E10; names with no number (teachers) after the numbered branches."""
    parts = re.split(r"(\d+)", str(name))
    has_number = any(part.isdigit() for part in parts)
    return (0 if has_number else 1, tuple(int(p) if p.isdigit() else p for p in parts))


def markdown_table(
    header: Sequence[str], rows: Iterable[Sequence[str]], align: str | None = None, empty: str = "No rows."
) -> list[str]:
    """Markdown table lines; `align` is one character per column, `l` or `r` (default: first l, rest r).

    With no rows, the `empty` sentence stands in for a header-only table.
    """
    rows = list(rows)
    if not rows:
        return [empty]
    align = align or "l" + "r" * (len(header) - 1)
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |")
    return lines

"""Small tables in the project's formats, written the way the stages write them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def write_parquet(path: Path, frame: pd.DataFrame) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(path, index=False)


def benchmark_frame(name: str, rows: list[tuple[str, str, bool]], extra: dict | None = None) -> pd.DataFrame:
    """A fetched benchmark table: (id, prompt, expected_unsafe) rows plus `extra` columns."""
    frame = pd.DataFrame(rows, columns=["id", "prompt", "expected_unsafe"])
    frame["benchmark"] = name
    frame["category"] = pd.Series(["c"] * len(frame), dtype="str")
    for column, values in (extra or {}).items():
        frame[column] = values
    return frame

"""Reading upstream files into plain records, with row numbers for error messages.

Every reader decodes strictly as UTF-8 (a stray byte is an error naming its row, not a silent replacement)
and returns ``(columns, [(row_number, record), ...])`` where row numbers are 1-based data rows.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from guardpolicy.errors import InputError

Records = list[tuple[int, dict[str, Any]]]


def _decode(raw: bytes, display: str) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InputError(
            display,
            f"not valid UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start} (line {line} of the file)",
            row=f"line {line}",
        ) from exc
    return text.removeprefix("\ufeff")


def read_csv(path: Path, display: str) -> tuple[list[str], Records]:
    text = _decode(path.read_bytes(), display)
    if not text.strip():
        raise InputError(display, "file is empty")
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader)
    except csv.Error as exc:
        raise InputError(display, f"unreadable CSV header: {exc}", row="header") from exc
    if len(set(header)) != len(header):
        dupes = sorted({h for h in header if header.count(h) > 1})
        raise InputError(display, f"duplicate column names {dupes}", row="header")
    records: Records = []
    row_number = 0
    while True:
        try:
            values = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise InputError(
                display,
                f"malformed CSV near line {reader.line_num} ({exc}); the file may be truncated or corrupt",
                row=row_number + 1,
            ) from exc
        row_number += 1
        if not values:  # a blank line
            continue
        if len(values) != len(header):
            raise InputError(
                display,
                f"has {len(values)} fields but the header has {len(header)} (line {reader.line_num}); "
                "the file may be truncated or corrupt",
                row=row_number,
            )
        records.append((row_number, dict(zip(header, values, strict=True))))
    return header, records


def read_json(path: Path, display: str) -> tuple[list[str], Records]:
    text = _decode(path.read_bytes(), display)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            display,
            f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}; the file may be truncated",
            row=f"line {exc.lineno}",
        ) from exc
    if not isinstance(data, list):
        raise InputError(display, f"expected a JSON list of objects, got {type(data).__name__}")
    return _records_from_objects(data, display)


def read_jsonl(path: Path, display: str) -> tuple[list[str], Records]:
    text = _decode(path.read_bytes(), display)
    objects: list[tuple[int, Any]] = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            objects.append((line_number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise InputError(
                display, f"invalid JSON on line {line_number}: {exc.msg}", row=line_number
            ) from exc
    columns: list[str] = []
    records: Records = []
    for line_number, obj in objects:
        if not isinstance(obj, dict):
            raise InputError(display, f"expected a JSON object, got {type(obj).__name__}", row=line_number)
        columns.extend(k for k in obj if k not in columns)
        records.append((line_number, obj))
    return columns, records


def read_parquet(path: Path, display: str) -> tuple[list[str], Records]:
    try:
        table = pq.read_table(path)
        table.validate(full=True)  # also checks that every string is valid UTF-8
    # Corrupt footer bytes surface as any of these (a non-UTF-8 column name as UnicodeDecodeError).
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise InputError(
            display, f"not a readable parquet file ({exc}); it may be truncated or corrupt"
        ) from exc
    rows = table.to_pylist()
    return list(table.column_names), [(i, row) for i, row in enumerate(rows, start=1)]


def read_lines(path: Path, display: str) -> tuple[list[str], Records]:
    """One record per non-empty line, in a column called `text`."""
    text = _decode(path.read_bytes(), display)
    records: Records = [
        (n, {"text": line}) for n, line in enumerate(text.splitlines(), start=1) if line.strip()
    ]
    return ["text"], records


def _records_from_objects(data: list[Any], display: str) -> tuple[list[str], Records]:
    columns: list[str] = []
    records: Records = []
    for index, obj in enumerate(data, start=1):
        if not isinstance(obj, dict):
            raise InputError(display, f"expected a JSON object, got {type(obj).__name__}", row=index)
        columns.extend(k for k in obj if k not in columns)
        records.append((index, obj))
    return columns, records


READERS = {
    "csv": read_csv,
    "json": read_json,
    "jsonl": read_jsonl,
    "parquet": read_parquet,
    "lines": read_lines,
}


def read_records(path: Path, file_format: str, display: str) -> tuple[list[str], Records]:
    return READERS[file_format](path, display)

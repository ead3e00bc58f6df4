"""Reading upstream files into plain records, with row numbers for error messages.

Every reader decodes strictly as UTF-8 (a stray byte is an error naming its row, not a silent replacement)
and returns ``(columns, [(row_number, record), ...])`` where row numbers are 1-based data rows. Text formats
may be gzip-compressed (recognised by the gzip magic bytes, e.g. ``samples-1680.jsonl.gz``).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from guardpolicy.errors import InputError

Records = list[tuple[int, dict[str, Any]]]
_GZIP_MAGIC = b"\x1f\x8b"
# Python's csv refuses fields over 128 KiB by default; in-the-wild jailbreak prompts can be longer.
_CSV_FIELD_LIMIT = 2**31 - 1


def _file_bytes(path: Path, display: str) -> bytes:
    """The file's bytes, decompressed when it is gzip (a truncated archive is an error, not a short file)."""
    raw = path.read_bytes()
    if not raw.startswith(_GZIP_MAGIC):
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(
            display, f"not a readable gzip file ({exc}); it may be truncated or corrupt"
        ) from exc


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
    text = _decode(_file_bytes(path, display), display)
    if not text.strip():
        raise InputError(display, "file is empty")
    if csv.field_size_limit() < _CSV_FIELD_LIMIT:
        csv.field_size_limit(_CSV_FIELD_LIMIT)
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


def read_json_document(path: Path, display: str) -> Any:
    """The parsed JSON document, whatever its shape (callers navigate nested layouts themselves)."""
    text = _decode(_file_bytes(path, display), display)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            display,
            f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}; the file may be truncated",
            row=f"line {exc.lineno}",
        ) from exc


def read_json(path: Path, display: str) -> tuple[list[str], Records]:
    data = read_json_document(path, display)
    if not isinstance(data, list):
        raise InputError(display, f"expected a JSON list of objects, got {type(data).__name__}")
    return records_from_objects(data, display)


def read_jsonl(path: Path, display: str) -> tuple[list[str], Records]:
    text = _decode(_file_bytes(path, display), display)
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
    text = _decode(_file_bytes(path, display), display)
    records: Records = [
        (n, {"text": line}) for n, line in enumerate(text.splitlines(), start=1) if line.strip()
    ]
    return ["text"], records


def records_from_objects(data: list[Any], display: str) -> tuple[list[str], Records]:
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

"""Mapping source records onto the common benchmark schema (`guardpolicy.contracts.BENCHMARK`).

Common schema (one row per prompt): ``id`` (unique, stable), ``benchmark``, ``prompt``, ``expected_unsafe``
(the benchmark's own gold label), ``category``, ``subset``, ``source_file``, ``source_row``, plus the extra
columns an entry declares (XSTest type and pair key, HarmBench context, ...).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable
from typing import Any

import pandas as pd
import pyarrow as pa

from guardpolicy.contracts import BENCHMARK, DType
from guardpolicy.data.readers import Records
from guardpolicy.data.registry import BenchmarkSpec, ExtraType, FileSpec
from guardpolicy.errors import InputError

# A registry `extras` type as the contract's dtype of its column.
EXTRA_DTYPES: dict[ExtraType, DType] = {
    "string": "string",
    "bool": "bool",
    "int": "int64",
    "float": "float64",
}
_TEMPLATE = re.compile(r"\{([^{}]+)\}")


def extra_dtypes(spec: BenchmarkSpec) -> dict[str, DType]:
    """The benchmark's declared extras (the contract's `<extra>` columns), name -> dtype, in sorted order."""
    return {name: EXTRA_DTYPES[spec.extras[name]] for name in sorted(spec.extras)}


def schema_for(spec: BenchmarkSpec) -> pa.Schema:
    """The full output schema of a benchmark: the core columns, then its declared extras in sorted order."""
    return BENCHMARK.schema(extra=extra_dtypes(spec))


def empty_table(spec: BenchmarkSpec) -> pa.Table:
    return schema_for(spec).empty_table()


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _text(value: Any) -> str | None:
    if _is_missing(value):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _cast_extra(value: Any, dtype: ExtraType, display: str, row: int, column: str) -> Any:
    if _is_missing(value) or value == "":
        return None
    try:
        if dtype == "string":
            return _text(value)
        if dtype == "bool":
            if isinstance(value, bool):
                return value
            lowered = str(value).strip().lower()
            if lowered in ("true", "1", "yes"):
                return True
            if lowered in ("false", "0", "no"):
                return False
            raise ValueError(value)
        if dtype == "int":
            number = float(value)
            if not number.is_integer():
                raise ValueError(value)
            return int(number)
        return float(value)
    except (TypeError, ValueError) as exc:
        raise InputError(display, f"cannot read {value!r} as {dtype}", row=row, field=column) from exc


def _prompt(template: str, record: dict[str, Any], display: str, row: int) -> str:
    fields = _TEMPLATE.findall(template)
    if not fields:
        fields, template = [template], "{" + template + "}"
    values = {}
    for name in fields:
        value = record.get(name)
        if _is_missing(value):
            raise InputError(display, "prompt is missing (null)", row=row, field=name)
        if not isinstance(value, str):
            raise InputError(
                display, f"prompt must be text, got {type(value).__name__} {value!r}", row=row, field=name
            )
        if not value.strip():
            raise InputError(display, "prompt is empty", row=row, field=name)
        values[name] = value
    return _TEMPLATE.sub(lambda m: values[m.group(1)], template)


def _required_columns(file: FileSpec) -> list[str]:
    cols = list(file.columns.prompt_columns())
    for optional in (file.columns.id, file.columns.category, file.columns.label):
        if optional is not None:
            cols.append(optional)
    cols.extend(file.filter)
    cols.extend(file.keep.values())
    return list(dict.fromkeys(cols))


def normalise_file(
    spec: BenchmarkSpec, file: FileSpec, columns: list[str], records: Records, display: str
) -> list[dict[str, Any]]:
    """Turn one file's records into common-schema rows (filtering, mapping, labelling)."""
    missing = [c for c in _required_columns(file) if c not in columns]
    if missing:
        raise InputError(
            display,
            f"column(s) {missing} not found; the file has columns {columns}",
            row="header",
            field=missing[0],
        )
    rows: list[dict[str, Any]] = []
    for row_number, record in records:
        absent = [c for c in _required_columns(file) if c not in record]
        if absent:  # JSON records may lack keys that other records have
            raise InputError(display, "required field is absent", row=row_number, field=absent[0])
        if any(_text(record[col]) not in allowed for col, allowed in file.filter.items()):
            continue
        prompt = _prompt(file.columns.prompt, record, display, row_number)
        if spec.label.kind == "all_unsafe":
            unsafe = True
        elif spec.label.kind == "all_safe":
            unsafe = False
        else:
            label_column = file.columns.label
            assert label_column is not None  # guaranteed by the registry check
            raw = _text(record[label_column])
            value = raw.strip() if raw is not None else None
            if value in spec.label.unsafe_values:
                unsafe = True
            elif value in spec.label.safe_values:
                unsafe = False
            else:
                raise InputError(
                    display,
                    f"unexpected label {raw!r}; expected one of "
                    f"{list(spec.label.unsafe_values) + list(spec.label.safe_values)}",
                    row=row_number,
                    field=label_column,
                )
        native_id = None
        if file.columns.id is not None:
            native_id = _text(record[file.columns.id])
            if native_id is None or not native_id.strip():
                raise InputError(display, "id is empty", row=row_number, field=file.columns.id)
        category = file.constants.get("category")
        if file.columns.category is not None:
            category = _text(record[file.columns.category])
        row = {
            "native_id": native_id,
            "benchmark": spec.name,
            "prompt": prompt,
            "expected_unsafe": unsafe,
            "category": category,
            "subset": file.subset,
            "source_file": display,
            "source_row": row_number,
        }
        for out_name, source_column in file.keep.items():
            row[out_name] = _cast_extra(
                record[source_column], spec.extras[out_name], display, row_number, source_column
            )
        rows.append(row)
    return rows


def stored_native_id(raw: str) -> str:
    """The form a source's own id is stored (and compared) in: trimmed, and a number without leading zeros.

    Why: XSTest pairs prompts by the *number* of their id, and a JSON source may give the same id as 2, 2.0
    or "2"; if "02" were stored as written it would be a different id that still pairs as 2 and silently
    takes another prompt's twin. One canonical form makes such ids collide where they are checked.
    """
    text = raw.strip()
    if text.isascii() and text.isdigit():
        return str(int(text))
    return text


def _raw_id(row: dict[str, Any]) -> str:
    return repr(row["native_id"]) if row["native_id"] is not None else "(none: hash of the prompt)"


def assign_ids(spec: BenchmarkSpec, rows: list[dict[str, Any]]) -> None:
    """Give every row a stable, unique id: the source's own id where it has one, else a hash of the prompt.

    A hashed id survives re-ordering of the source file; repeated prompts get ``~2``, ``~3`` suffixes in file
    order. Two rows whose ids are the same *in the stored form* (see `stored_native_id`) are an input error
    naming both rows (the source contradicts itself).
    """
    seen: dict[str, dict[str, Any]] = {}
    counts: dict[str, int] = {}
    for row in rows:
        prefix = f"{spec.name}:" + (f"{row['subset']}:" if row["subset"] else "")
        if row["native_id"] is not None:
            candidate = prefix + stored_native_id(row["native_id"])
        else:
            base = prefix + hashlib.sha1(row["prompt"].encode("utf-8")).hexdigest()[:16]
            counts[base] = counts.get(base, 0) + 1
            candidate = base if counts[base] == 1 else f"{base}~{counts[base]}"
        if candidate in seen:
            first = seen[candidate]
            raise InputError(
                row["source_file"],
                f"duplicate id {_raw_id(row)} is stored as {candidate!r}, the same as id {_raw_id(first)} of "
                f"{first['source_file']} row {first['source_row']}; ids must be unique in their stored form",
                row=row["source_row"],
                field="id",
            )
        seen[candidate] = row
        row["id"] = candidate
    for row in rows:
        del row["native_id"]


def xstest_pairs(spec: BenchmarkSpec, frame: pd.DataFrame) -> pd.DataFrame:
    """XSTest pairs: each ``contrast_*`` (unsafe) prompt with id *n* is the twin of the safe prompt *n − 25*.

    The file is laid out in blocks of 25 per type, each contrast block right after the safe block it mirrors;
    two safe types (``nons_group_real_discr``, ``privacy_public``) have no contrast block and stay unpaired.
    """
    if "xstest_type" not in frame.columns or "pair_id" not in spec.extras:
        raise InputError(
            spec.name, "xstest_pairs needs the extras xstest_type and pair_id", field="xstest_type"
        )
    native = frame["id"].str.rsplit(":", n=1).str[-1]
    if not native.str.fullmatch(r"\d+").all():
        raise InputError(spec.name, "xstest_pairs needs numeric ids", field="id")
    number = native.astype(int)
    # One row per number: ids are stored without leading zeros and unique in that form (assign_ids).
    by_number = dict(zip(number, frame.index, strict=True))
    pair = pd.Series([None] * len(frame), index=frame.index, dtype=object)
    for index, n in zip(frame.index, number, strict=True):
        kind = frame.at[index, "xstest_type"]
        if not str(kind).startswith("contrast_"):
            continue
        twin = by_number.get(n - 25)
        if twin is None or str(frame.at[twin, "xstest_type"]).startswith("contrast_"):
            raise InputError(
                frame.at[index, "source_file"],
                f"contrast prompt {n} has no safe twin at id {n - 25}",
                row=int(frame.at[index, "source_row"]),
                field="type",
            )
        if bool(frame.at[twin, "expected_unsafe"]) or not bool(frame.at[index, "expected_unsafe"]):
            raise InputError(
                frame.at[index, "source_file"],
                f"pair {n - 25}/{n} is not a safe/unsafe pair",
                row=int(frame.at[index, "source_row"]),
                field="label",
            )
        pair_key = f"xstest:pair:{n - 25}"
        pair[index] = pair_key
        pair[twin] = pair_key
    frame = frame.copy()
    frame["pair_id"] = pair
    return frame


TRANSFORMS: dict[str, Callable[[BenchmarkSpec, pd.DataFrame], pd.DataFrame]] = {"xstest_pairs": xstest_pairs}


def to_table(spec: BenchmarkSpec, rows: list[dict[str, Any]]) -> pa.Table:
    schema = schema_for(spec)
    if not rows:
        return schema.empty_table()
    frame = pd.DataFrame(rows)
    if spec.transform is not None:
        frame = TRANSFORMS[spec.transform](spec, frame)
    for name in schema.names:
        if name not in frame.columns:
            frame[name] = None
    return pa.Table.from_pandas(frame[list(schema.names)], schema=schema, preserve_index=False)

"""Mapping source records onto the common benchmark schema (`guardpolicy.contracts.BENCHMARK`).

Common schema (one row per prompt): ``id`` (unique, stable), ``benchmark``, ``prompt``, ``expected_unsafe``
(the benchmark's own gold label), ``category``, ``subset``, ``source_file``, ``source_row``, plus the extra
columns an entry declares (XSTest type and pair key, HarmBench context, ...).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from guardpolicy.contracts import BENCHMARK, DType
from guardpolicy.data.readers import Records
from guardpolicy.data.registry import BenchmarkSpec, ExtraType, FileSpec
from guardpolicy.errors import KEYS_SHOWN, InputError

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
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds (records built from a pandas frame carry them)."""
    return value.item() if isinstance(value, np.generic) else value


def _text(value: Any) -> str | None:
    """A source value as the registry's values (always strings) are compared with: 2, 2.0 and "2" read "2"."""
    value = _plain(value)
    if _is_missing(value):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _label_text(value: Any) -> str | None:
    """A label value as it is looked up among the registry's label values: `_text`, trimmed."""
    raw = _text(value)
    return raw.strip() if raw is not None else None


# The kinds of registry value (a string that reads as text, a number or a boolean, as `_text` renders them)
# that a source value of each kind can equal: text equals whatever is written the same; a number only a
# number, a boolean only 'True' / 'False'. Bytes and containers equal none of them; any other value (a date,
# a decimal) is compared as the text it writes, so it can equal any.
_REGISTRY_KINDS = frozenset({"string", "number", "boolean"})
_MATCHABLE_KINDS: dict[str, frozenset[str]] = {
    "string": _REGISTRY_KINDS,
    "integer": frozenset({"number"}),
    "float": frozenset({"number"}),
    "boolean": frozenset({"boolean"}),
    **{kind: frozenset() for kind in ("bytes", "list", "dict", "tuple", "set", "ndarray")},
}
_PLURALS = {
    "string": "strings",
    "number": "numbers",
    "integer": "integers",
    "float": "floats",
    "boolean": "booleans",
    "bytes": "bytes",
}
# A value longer than this is cut in a message: a mis-mapped column may hold whole prompts.
_VALUE_CHARS = 40


def _value_kind(value: Any) -> str | None:
    """The kind of a non-missing source value ('string', 'integer', ...; the type name otherwise), or None."""
    value = _plain(value)
    if _is_missing(value):
        return None
    if isinstance(value, bool):  # before int: a bool is an int to Python
        return "boolean"
    for kind, types in (("string", str), ("integer", int), ("float", float), ("bytes", bytes)):
        if isinstance(value, types):
            return kind
    return type(value).__name__


def _registry_kind(value: str) -> str:
    """What a registry value reads as: 'boolean' or 'number' where `_text` renders one so ('2', '0.5'), else
    'string' ('1e3' is text: `_text` writes that number '1000')."""
    if value in ("True", "False"):
        return "boolean"
    try:
        if str(int(value)) == value:
            return "number"
    except ValueError:
        pass
    try:
        number = float(value)
    except ValueError:
        return "string"
    return "number" if math.isfinite(number) and _text(number) == value else "string"


def _plural(kind: str) -> str:
    return _PLURALS.get(kind, f"{kind} values")


def _kinds_text(kinds: set[str]) -> str:
    return " and ".join(_plural(kind) for kind in sorted(kinds))


def _shown_values(values: list[Any]) -> str:
    """The distinct values sorted (by type, then value), the first few as Python writes them, long ones cut
    short."""
    distinct: dict[tuple[str, str], Any] = {}
    for value in map(_plain, values):
        distinct.setdefault((type(value).__name__, repr(value)), value)

    def order(key: tuple[str, str]) -> tuple[str, Any, str]:
        value = distinct[key]
        # Numbers by value (2 before 10), the rest by how they are written.
        return (key[0], value if isinstance(value, int | float) else 0, key[1])

    keys = sorted(distinct, key=order)
    shown = [text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 1] + "…" for _, text in keys]
    more = f" and {len(keys) - KEYS_SHOWN} more" if len(keys) > KEYS_SHOWN else ""
    return f"[{', '.join(shown[:KEYS_SHOWN])}]{more}"


def check_column_can_match(
    display: str,
    column: str,
    values: Sequence[tuple[int, Any]],
    expected: Sequence[str],
    *,
    use: str,
    as_text: Callable[[Any], str | None],
    declared_type: str | None = None,
    require_a_match: bool = True,
) -> None:
    """Before rows are selected or labelled by `column`, its values must be able to equal the registry's.

    `values` are the column's (row number, value) pairs, `expected` the registry's values, `use` how the
    registry uses them ("selects", "labels rows by") and `as_text` the comparison (`_text`, `_label_text`).
    A value of a kind that can never equal them (an integer or boolean where the registry writes text, bytes,
    ...) or a column in which none of them occurs is an input error naming the column, the registry's values
    and their kind, and the first values found with their type (`declared_type`, a parquet column's, where
    the format has one): otherwise a label encoding would surface only as a row-count shortfall. Without
    `require_a_match` (one file of a source of several, where another file may hold every selected row) only
    the kinds are checked.
    """
    if not values:  # no rows at all: the row count names that
        return
    wanted = {_registry_kind(value) for value in expected}
    registry = f"the registry {use} the values {list(expected)} ({_kinds_text(wanted)})"
    present = [(row, value, kind) for row, value in values if (kind := _value_kind(value)) is not None]
    if not present:
        typed = f", type {declared_type}" if declared_type is not None else ""
        raise InputError(
            display,
            f"{registry}; the file holds only nulls ({len(values)} row(s){typed}); nothing was written",
            field=column,
        )
    found_kinds = sorted({kind for _, _, kind in present})
    found_type = declared_type or (
        found_kinds[0] if len(found_kinds) == 1 else f"mixed ({', '.join(found_kinds)})"
    )
    found = f"the file holds {found_type} values {_shown_values([value for _, value, _ in present])}"
    unmatchable = [
        (row, kind) for row, _, kind in present if not _MATCHABLE_KINDS.get(kind, _REGISTRY_KINDS) & wanted
    ]
    if unmatchable:
        kinds = {kind for _, kind in unmatchable}
        raise InputError(
            display,
            f"{registry}; {found}; {_kinds_text(kinds)} never equal {_kinds_text(wanted)}: convert the "
            "column, or write the file's own values in the registry; nothing was written",
            # A column of one kind is wrong as a whole; in a mixed one, point at the first odd row.
            row=unmatchable[0][0] if len(unmatchable) < len(present) else None,
            field=column,
        )
    allowed = set(expected)
    if require_a_match and not any(as_text(value) in allowed for _, value, _ in present):
        raise InputError(
            display,
            f"{registry}; {found}; none of the registry's values occurs (another encoding or version of "
            "the file?); nothing was written",
            field=column,
        )


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


def _selected(
    file: FileSpec, records: Records, display: str, declared: Mapping[str, str], sole_file: bool
) -> Records:
    """The records the file's `filter` keeps, each filter column checked first (`check_column_can_match`;
    a file of a source of several may keep none: the source's row count judges that)."""
    for column, allowed in file.filter.items():
        check_column_can_match(
            display,
            column,
            [(row_number, record[column]) for row_number, record in records],
            allowed,
            use="selects",
            as_text=_text,
            declared_type=declared.get(column),
            require_a_match=sole_file,
        )
    return [
        (row_number, record)
        for row_number, record in records
        if all(_text(record[column]) in allowed for column, allowed in file.filter.items())
    ]


def normalise_file(
    spec: BenchmarkSpec,
    file: FileSpec,
    columns: list[str],
    records: Records,
    display: str,
    column_types: Mapping[str, str] | None = None,
    sole_file: bool = True,
) -> list[dict[str, Any]]:
    """Turn one file's records into common-schema rows (filtering, mapping, labelling).

    `column_types`: the file's own column types (a parquet schema), which messages name; None where the
    format has none. `sole_file`: the file is its source's only one, so a filter keeping none of its rows is
    a label encoding the registry does not know, not a file of a source of several that holds no such rows.
    """
    required = _required_columns(file)
    missing = [c for c in required if c not in columns]
    if missing:
        raise InputError(
            display,
            f"column(s) {missing} not found; the file has columns {columns}",
            row="header",
            field=missing[0],
        )
    for row_number, record in records:
        absent = [c for c in required if c not in record]
        if absent:  # JSON records may lack keys that other records have
            raise InputError(display, "required field is absent", row=row_number, field=absent[0])
    declared = column_types or {}
    kept = _selected(file, records, display, declared, sole_file)
    label_column = file.columns.label
    label_values = spec.label.unsafe_values + spec.label.safe_values
    if spec.label.kind == "column":
        assert label_column is not None  # guaranteed by the registry check
        # Only the kept rows: a row the filter drops is never labelled, whatever its label column holds.
        check_column_can_match(
            display,
            label_column,
            [(row_number, record[label_column]) for row_number, record in kept],
            label_values,
            use="labels rows by",
            as_text=_label_text,
            declared_type=declared.get(label_column),
        )
    rows: list[dict[str, Any]] = []
    for row_number, record in kept:
        prompt = _prompt(file.columns.prompt, record, display, row_number)
        if spec.label.kind == "all_unsafe":
            unsafe = True
        elif spec.label.kind == "all_safe":
            unsafe = False
        else:
            assert label_column is not None  # guaranteed by the registry check
            value = _label_text(record[label_column])
            if value in spec.label.unsafe_values:
                unsafe = True
            elif value in spec.label.safe_values:
                unsafe = False
            else:
                raise InputError(
                    display,
                    f"unexpected label {_text(record[label_column])!r}; expected one of {list(label_values)}",
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

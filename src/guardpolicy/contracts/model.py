"""The vocabulary of a table contract (dtypes, columns, column families, the contract) and its checks.

A contract is data: per artifact of `guardpolicy.layout` that is a table, its columns in order, each with a
dtype from `DTYPES`, whether it may hold nulls and a one-line meaning, plus the columns whose values key a
row (`key`). Where names depend on data (one flag per taxonomy pillar, one gold column per policy, a
benchmark's declared extras) a `Family` stands in the column list: `prefix` + each member, all of one dtype
(or one of several, each member declaring its own). A caller that knows the members (the taxonomy's pillars,
params' policies) passes them to `Contract.names`, `schema` and the checks; without them a family matches the
columns that carry its prefix.

`check_table` (Arrow) and `check_frame` (pandas) raise `ContractError`, an `InputError` naming the file, the
column and the first offending row (1-based; `header` for a missing, unexpected or misplaced column), in this
order: missing column, unexpected column, column order, then per column in order its dtype and its nulls,
then duplicate keys. `read_table` / `read_frame` read a file and check it; `write_table` checks and writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from guardpolicy.errors import InputError
from guardpolicy.io import atomic_path, write_parquet
from guardpolicy.layout import ARTIFACTS

DType = Literal["string", "bool", "int64", "float32", "float64", "list<string>", "list<float32>"]
# Each dtype as the Arrow type a writer gives it. A reader also accepts large_string / large_list (what
# pandas' `str` columns become) and Arrow's null type (a column without a single value has no type to check).
DTYPES: Mapping[str, pa.DataType] = {
    "string": pa.string(),
    "bool": pa.bool_(),
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "list<string>": pa.list_(pa.string()),
    "list<float32>": pa.list_(pa.float32()),
}
# Numbers: what a report formats as one (guardpolicy.reporting.tables' `TABLES` pairs a CSV's columns with
# these).
NUMERIC: frozenset[str] = frozenset({"int64", "float32", "float64"})
# Members of a family: their names in order, or name -> dtype when the family allows several dtypes.
Members = Sequence[str] | Mapping[str, str]


class ContractError(InputError):
    """A table does not match its contract: names the file, the column and the first offending row."""


@dataclass(frozen=True)
class Column:
    name: str
    dtype: DType
    meaning: str
    nullable: bool = False


@dataclass(frozen=True)
class Family:
    """Columns `prefix` + member whose members come from data (the taxonomy, params, a registry entry)."""

    key: str  # names the members, e.g. "pillar": columns pillar_<pillar>; also the keyword that passes them
    prefix: str  # "" only for a catch-all family (a benchmark's extras: any other column)
    dtype: DType | tuple[DType, ...]  # several: each member has one of them, given with the members
    meaning: str
    nullable: bool = False
    sorted: bool = False  # members in name order; otherwise in the order their source gives them

    @property
    def dtypes(self) -> tuple[str, ...]:
        return self.dtype if isinstance(self.dtype, tuple) else (self.dtype,)

    @property
    def pattern(self) -> str:
        return f"{self.prefix}<{self.key}>"

    def column(self, member: str) -> str:
        return f"{self.prefix}{member}"

    def member(self, column: str) -> str:
        """The member a column name carries (`column` must be one of this family's)."""
        if not column.startswith(self.prefix) or len(column) == len(self.prefix):
            raise ValueError(f"{column!r} is not a {self.pattern} column")
        return column[len(self.prefix) :]


Entry = Column | Family


@dataclass(frozen=True)
class Contract:
    """One table artifact's columns, in order, and the columns that key its rows."""

    artifact: str  # a `guardpolicy.layout.ARTIFACTS` name
    writer: str  # the stage that writes it, e.g. "label@<policy>"
    rows: str  # one line: what a row is, and the row order
    entries: tuple[Entry, ...]
    key: tuple[str, ...] = ()  # unique together on every row
    like: str | None = None  # the docs describe it as "the columns of <like>" instead of a second table
    # Template fields this contract fixes, where one artifact template holds several tables of their own
    # columns (reports/analysis/{table}.csv: fields={"table": "scores"} is contract "analysis_table:scores").
    fields: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The contract's key in `CONTRACTS`: the artifact name, then any fixed field values."""
        return ":".join([self.artifact, *self.fields.values()])

    @property
    def template(self) -> str:
        template = ARTIFACTS[self.artifact].template
        for name, value in self.fields.items():
            template = template.replace(f"{{{name}}}", value)
        return template

    @property
    def format(self) -> str:
        return Path(self.template).suffix.lstrip(".")

    @property
    def columns(self) -> tuple[Column, ...]:
        return tuple(e for e in self.entries if isinstance(e, Column))

    @property
    def families(self) -> tuple[Family, ...]:
        return tuple(e for e in self.entries if isinstance(e, Family))

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(f"contract {self.name!r} has no column {name!r}")

    def family(self, key: str) -> Family:
        for family in self.families:
            if family.key == key:
                return family
        raise KeyError(f"contract {self.name!r} has no column family {key!r}")

    def select(self, *names: str) -> tuple[str, ...]:
        """`names`, each checked to be a column of this contract: a reader's subset, derived not restated."""
        for name in names:
            self.column(name)
        return names

    def resolved(self, members: Mapping[str, Members]) -> list[tuple[str, tuple[str, ...], bool]]:
        """(name, allowed dtypes, nullable) of every column in order, every family's members given."""
        unknown = sorted(set(members) - {f.key for f in self.families})
        if unknown:
            raise TypeError(f"contract {self.name!r} has no column family {unknown}")
        out: list[tuple[str, tuple[str, ...], bool]] = []
        for entry in self.entries:
            if isinstance(entry, Column):
                out.append((entry.name, (entry.dtype,), entry.nullable))
                continue
            if entry.key not in members:
                raise TypeError(f"contract {self.name!r}: give the members of {entry.pattern}")
            out += [
                (entry.column(m), dtypes, entry.nullable) for m, dtypes in _members(entry, members[entry.key])
            ]
        return out

    def names(self, **members: Members) -> list[str]:
        """Every column name in order, each family's members given by its key (e.g. `pillar=...`)."""
        return [name for name, _, _ in self.resolved(members)]

    def dtypes(self, **members: Members) -> dict[str, str]:
        return {name: dtypes[0] for name, dtypes, _ in self.resolved(members)}

    def numeric(self, **members: Members) -> tuple[str, ...]:
        """The columns that hold numbers (`NUMERIC`), in order."""
        return tuple(name for name, dtypes, _ in self.resolved(members) if dtypes[0] in NUMERIC)

    def schema(self, *, mark_required: bool = True, **members: Members) -> pa.Schema:
        """The Arrow schema a writer gives the table; with `mark_required` a column without nulls is a
        non-nullable field (the flag is written into the file: keep what the writer always wrote)."""
        return pa.schema(
            [
                pa.field(name, DTYPES[dtypes[0]], nullable=nullable or not mark_required)
                for name, dtypes, nullable in self.resolved(members)
            ]
        )


def _members(family: Family, members: Members) -> list[tuple[str, tuple[str, ...]]]:
    if isinstance(members, Mapping):
        for member, dtype in members.items():
            if dtype not in family.dtypes:
                raise ValueError(f"{family.column(member)}: dtype {dtype!r} is not one of {family.dtypes}")
        return [(member, (dtype,)) for member, dtype in members.items()]
    if len(family.dtypes) != 1 and len(members):
        raise TypeError(f"{family.pattern}: give each member's dtype (one of {family.dtypes})")
    return [(member, family.dtypes) for member in members]


# ------------------------------------------------------------------------------------------------- checks


@dataclass(frozen=True)
class _Expected:
    name: str
    dtypes: tuple[str, ...]
    nullable: bool


def _fail(file: str | Path, message: str, row: int | str, column: str) -> ContractError:
    return ContractError(file, message, row=row, field=column)


def _family_of(contract: Contract, name: str) -> Family | None:
    """The family of a column that is no fixed column: the longest matching prefix, else a catch-all."""
    if name in {c.name for c in contract.columns}:
        return None
    matching = [f for f in contract.families if name.startswith(f.prefix) and len(name) > len(f.prefix)]
    return max(matching, key=lambda f: len(f.prefix), default=None)


def _expected(
    contract: Contract, present: Sequence[str], members: Mapping[str, Members]
) -> tuple[list[_Expected], list[str]]:
    """The expected columns in order (a family without members: the present columns it matches) and the
    present columns the contract does not know."""
    unknown = sorted(set(members) - {f.key for f in contract.families})
    if unknown:
        raise TypeError(f"contract {contract.name!r} has no column family {unknown}")
    given = {
        f.column(member): (f, dtypes) for f in contract.families if f.key in members
        for member, dtypes in _members(f, members[f.key])
    }  # fmt: skip
    matched: dict[str, list[str]] = {f.key: [] for f in contract.families if f.key not in members}
    unexpected = []
    for name in present:
        family = _family_of(contract, name)
        if name in given or (family is None and name in {c.name for c in contract.columns}):
            continue
        if family is not None and family.key in matched:
            matched[family.key].append(name)
        else:
            unexpected.append(name)
    expected: list[_Expected] = []
    for entry in contract.entries:
        if isinstance(entry, Column):
            expected.append(_Expected(entry.name, (entry.dtype,), entry.nullable))
        elif entry.key in members:
            expected += [
                _Expected(entry.column(m), dtypes, entry.nullable)
                for m, dtypes in _members(entry, members[entry.key])
            ]
        else:
            names = sorted(matched[entry.key]) if entry.sorted else matched[entry.key]
            expected += [_Expected(name, entry.dtypes, entry.nullable) for name in names]
    return expected, unexpected


def _check_layout(
    contract: Contract,
    present: list[str],
    file: str | Path,
    columns: Sequence[str] | None,
    members: Mapping[str, Members],
) -> list[_Expected]:
    """Missing, unexpected and misplaced columns; returns the expected columns to check the values of."""
    expected, unexpected = _expected(contract, present, members)
    if columns is not None:  # a projection: only these columns, in any order
        by_name = {e.name: e for e in expected}
        for name in columns:
            if name not in by_name:
                family = _family_of(contract, name)
                if family is None and name not in {c.name for c in contract.columns}:
                    raise ValueError(f"contract {contract.name!r} has no column {name!r}")
                if family is not None and family.key not in members:
                    by_name[name] = _Expected(name, family.dtypes, family.nullable)
        wanted = [by_name[name] for name in columns if name in by_name]
        for item in wanted:
            if item.name not in present:
                raise _fail(file, f"missing column (contract {contract.name!r})", "header", item.name)
        return wanted
    for item in expected:
        if item.name not in present:
            raise _fail(file, f"missing column (contract {contract.name!r})", "header", item.name)
    if unexpected:
        raise _fail(
            file,
            f"unexpected column (contract {contract.name!r} has no such column)",
            "header",
            unexpected[0],
        )
    for position, (want, found) in enumerate(zip((e.name for e in expected), present, strict=False), start=1):
        if want != found:
            raise _fail(
                file,
                f"column out of order: contract {contract.name!r} has {want!r} at position {position}, "
                f"the table has {found!r}",
                "header",
                want,
            )
    return expected


def _arrow_matches(dtype: str, arrow_type: pa.DataType) -> bool:
    if pa.types.is_null(arrow_type):
        return True
    if dtype == "string":
        return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
    if dtype.startswith("list<"):
        if not (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)):
            return False
        return _arrow_matches(dtype[len("list<") : -1], arrow_type.value_type)
    return arrow_type == DTYPES[dtype]


def _parses(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _value_matches(dtype: str, value: Any) -> bool:
    """One value of an object column (pandas) as the dtype expects it."""
    if dtype == "string":
        return isinstance(value, str)
    if dtype == "bool":
        return isinstance(value, bool | np.bool_)
    if dtype == "int64":
        return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)
    if dtype.startswith("list<"):
        if not isinstance(value, list | tuple | np.ndarray):
            return False
        inner = dtype[len("list<") : -1]
        return all(_value_matches(inner, v) if inner == "string" else _is_number(v) for v in value)
    return False


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_
    )


def _shown(value: Any) -> str:
    """A value as a message shows it: numpy scalars as the Python value they hold."""
    return repr(value.item() if isinstance(value, np.generic) else value)


def _first(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if len(hits) else None


def _series_mismatch(dtype: str, series: pd.Series, nullable: bool) -> tuple[int | str, str] | None:
    """(row, what was found) for the first value that does not have `dtype`; None when all do."""
    missing = series.isna().to_numpy(dtype=bool)
    first_value = _first(~missing)
    if first_value is None:
        return None  # no value, no dtype to check
    found = series.dtype
    if isinstance(found, pd.ArrowDtype):
        if _arrow_matches(dtype, found.pyarrow_dtype):
            return None
        return first_value + 1, str(found.pyarrow_dtype)
    if dtype == "string" and isinstance(found, pd.StringDtype):
        return None
    if found == np.dtype(object) or isinstance(found, pd.StringDtype):
        values = series.tolist()
        wrong = [
            row for row, value in enumerate(values) if not missing[row] and not _value_matches(dtype, value)
        ]
        if not wrong:
            return None
        if dtype in NUMERIC:
            # Text in a number column (a CSV cell pandas could not read as one): the first that is no number.
            text = [row for row in wrong if isinstance(values[row], str) and not _parses(values[row])]
            wrong = text or wrong
        value = values[wrong[0]]
        return wrong[0] + 1, f"{type(value).__name__} {_shown(value)}"
    kind = found.kind if isinstance(found, np.dtype) else None
    if dtype == "bool" and (kind == "b" or isinstance(found, pd.BooleanDtype)):
        return None
    if dtype == "int64":
        if found == np.int64 or isinstance(found, pd.Int64Dtype):
            return None
        if kind == "f" and nullable:
            # pandas holds a nullable integer column read from parquet or CSV as float64 with NaN for null.
            values = series.to_numpy(dtype=np.float64)
            fractional = ~missing & (np.mod(np.nan_to_num(values), 1) != 0)
            row = _first(fractional)
            return None if row is None else (row + 1, f"{found} {_shown(values[row])}")
    if dtype in ("float32", "float64"):
        wanted = np.dtype(dtype)
        if found == wanted or (
            isinstance(found, pd.api.extensions.ExtensionDtype) and found.name == dtype.title()
        ):
            return None
    return first_value + 1, f"{found} {_shown(series.iloc[first_value])}"


def _check_values(
    contract: Contract, frame: pd.DataFrame, file: str | Path, expected: Sequence[_Expected]
) -> None:
    for item in expected:
        series = frame[item.name]
        mismatches = [_series_mismatch(dtype, series, item.nullable) for dtype in item.dtypes]
        if all(m is not None for m in mismatches):
            row, found = mismatches[0]  # type: ignore[misc]
            wanted = " or ".join(item.dtypes)
            raise _fail(file, f"expected {wanted}, found {found}", row, item.name)
        _check_nulls(contract, series.isna().to_numpy(dtype=bool), file, item)


def _check_nulls(contract: Contract, missing: np.ndarray, file: str | Path, item: _Expected) -> None:
    if item.nullable:
        return
    row = _first(missing)
    if row is not None:
        raise _fail(file, f"null in a non-nullable column (contract {contract.name!r})", row + 1, item.name)


def _check_key(contract: Contract, frame: pd.DataFrame, file: str | Path) -> None:
    if not contract.key or not set(contract.key) <= set(frame.columns):
        return
    keys = frame[list(contract.key)].reset_index(drop=True)
    row = _first(keys.duplicated().to_numpy(dtype=bool))
    if row is None:
        return
    value = tuple(keys.iloc[row]) if len(contract.key) > 1 else keys.iloc[row, 0]
    first = _first((keys == keys.iloc[row]).all(axis=1).to_numpy(dtype=bool))
    first = row if first is None else first
    raise _fail(
        file,
        f"duplicate {value!r}, the same as row {first + 1} (contract {contract.name!r}: "
        f"{' + '.join(contract.key)} is unique)",
        row + 1,
        ", ".join(contract.key),
    )


def check_frame(
    contract: Contract,
    frame: pd.DataFrame,
    file: str | Path,
    *,
    columns: Sequence[str] | None = None,
    **members: Members,
) -> None:
    """`frame` against `contract` (every column; with `columns` only those, as a reader that reads a subset).

    `members`: a family's members by its key (e.g. `pillar=taxonomy.pillar_names`); without them a family
    matches the columns that carry its prefix. `file` names the table in the ContractError.
    """
    present = [str(c) for c in frame.columns]
    expected = _check_layout(contract, present, file, columns, members)
    _check_values(contract, frame, file, expected)
    if columns is None or set(contract.key) <= set(columns):
        _check_key(contract, frame, file)


def check_table(
    contract: Contract,
    table: pa.Table,
    file: str | Path,
    *,
    columns: Sequence[str] | None = None,
    **members: Members,
) -> None:
    """`table` (Arrow) against `contract`, as `check_frame`: the Arrow types are checked as written."""
    expected = _check_layout(contract, list(table.column_names), file, columns, members)
    for item in expected:
        column = table.column(item.name)
        if not any(_arrow_matches(dtype, column.type) for dtype in item.dtypes):
            valid = column.is_valid().to_numpy(zero_copy_only=False)
            row = _first(valid)
            shown = f" {column[row].as_py()!r}" if row is not None else ""
            raise _fail(
                file,
                f"expected {' or '.join(item.dtypes)}, found {column.type}{shown}",
                "header" if row is None else row + 1,
                item.name,
            )
        _check_nulls(contract, column.is_null().to_numpy(zero_copy_only=False), file, item)
    if contract.key and (columns is None or set(contract.key) <= set(columns)):
        _check_key(contract, table.select(list(contract.key)).to_pandas(), file)


def require_columns(
    contract: Contract, frame: pd.DataFrame, file: str | Path, columns: Iterable[str]
) -> None:
    """Only that `columns` (of `contract`) are present: for a pure function that checks the values itself."""
    for name in columns:
        if _family_of(contract, name) is None:
            contract.column(name)
        if name not in frame.columns:
            raise _fail(file, f"missing column (contract {contract.name!r})", "header", name)


# ------------------------------------------------------------------------------------------ reading, writing


def read_table(
    contract: Contract,
    path: str | Path,
    *,
    columns: Sequence[str] | None = None,
    hint: str | None = None,
    **members: Members,
) -> pa.Table:
    """Read a parquet artifact (only `columns` when given) and check it against `contract`.

    A missing file is an InputError saying to run `hint` (default: the contract's writer stage).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(path, f"file not found; {hint or f'run `dvc repro {contract.writer}` first'}")
    try:
        present = pq.read_schema(path).names
        if columns is not None:
            missing = [name for name in columns if name not in present]
            if missing:
                raise _fail(path, f"missing column (contract {contract.name!r})", "header", missing[0])
        table = pq.read_table(path, columns=list(columns) if columns is not None else None)
    except (OSError, pa.ArrowInvalid) as exc:
        raise InputError(path, f"not a readable parquet file: {exc}") from exc
    check_table(contract, table, path, columns=columns, **members)
    return table


def read_frame(
    contract: Contract,
    path: str | Path,
    *,
    columns: Sequence[str] | None = None,
    hint: str | None = None,
    **members: Members,
) -> pd.DataFrame:
    """`read_table` as a pandas frame; a CSV artifact is read with only empty cells as nulls, its string
    columns as text (a cell such as `3` stays the text it was written as) and its float columns as floats
    (a writer may print 1.0 as `1`), then checked."""
    if contract.format != "csv":
        return read_table(contract, path, columns=columns, hint=hint, **members).to_pandas()
    path = Path(path)
    if not path.is_file():
        raise InputError(path, f"file not found; {hint or f'run `dvc repro {contract.writer}` first'}")
    header = [str(name) for name in pd.read_csv(path, nrows=0).columns]
    text = {name: str for name in header if _dtypes_of(contract, name) == ("string",)}
    frame = pd.read_csv(path, keep_default_na=False, na_values=[""], usecols=columns, dtype=text)
    for name in frame.columns:
        dtypes = _dtypes_of(contract, str(name))
        if frame[name].dtype.kind in "iu" and dtypes and set(dtypes) <= {"float32", "float64"}:
            frame[name] = frame[name].astype("float64")
    check_frame(contract, frame, path, columns=columns, **members)
    return frame


def _dtypes_of(contract: Contract, name: str) -> tuple[str, ...]:
    """The dtypes a column of that name may have under `contract` (none: not one of its columns)."""
    family = _family_of(contract, name)
    if family is not None:
        return family.dtypes
    return (contract.column(name).dtype,) if name in {c.name for c in contract.columns} else ()


def write_table(contract: Contract, path: str | Path, table: pa.Table, **members: Members) -> None:
    """Check `table` against `contract`, then write it as every parquet artifact is written (io)."""
    check_table(contract, table, path, **members)
    write_parquet(path, table)


# CSV tables (stage analyse's, `guardpolicy score`'s): floats with 6 significant digits.
FLOAT_FORMAT = "%.6g"


def write_csv(path: Path, frame: pd.DataFrame, contract: Contract) -> None:
    """A table as CSV, atomically, once it passes its contract: one header row, floats with 6 significant
    digits, nulls empty."""
    frame = frame.copy()
    for name in frame.columns:
        column = frame[name]
        # Columns that mix floats with None (undefined statistics) must be float for float_format to apply.
        if column.dtype == object and all(
            value is None or (isinstance(value, int | float | np.number) and not isinstance(value, bool))
            for value in column
        ):
            frame[name] = column.astype("float64")
    check_frame(contract, frame, path)
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False, float_format=FLOAT_FORMAT, lineterminator="\n")

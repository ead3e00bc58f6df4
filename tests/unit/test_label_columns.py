"""Issue 38: a filter or label column whose values cannot match the registry's is named, not counted.

A WildGuardTest parquet whose `prompt_harm_label` holds 0/1 (as some re-exports ship it) used to pass the
checksum after a re-pin and stop on "found 0 row(s)", which sends the user after a truncated file. Now the
column is checked before it selects or labels a row (`guardpolicy.data.normalise.check_column_can_match`):
the error names the file, the field, the registry's values and their kind, and the values and type found,
and nothing is written. The real registry entries run on fixture files through the Python API and the stage
script; the unit tests cover the value kinds one at a time.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.benchmarks import (
    WILDGUARD,
    entry_for_fixture,
    fetch_layout,
    registry_with,
    run_fetch_script,
    sha256_bytes,
    write_params,
)
from helpers.paths import UPSTREAM

from guardpolicy.data.fetch import parquet_column_types
from guardpolicy.data.normalise import normalise_file
from guardpolicy.data.registry import BenchmarkSpec, FileSpec, parse_registry
from guardpolicy.errors import InputError
from guardpolicy.layout import Layout
from guardpolicy.stages.fetch import fetch

LABEL = "prompt_harm_label"
# The fixture's labels: ['unharmful', 'unharmful', 'harmful', 'harmful', None, 'harmful'].
HARMFUL_ROWS, UNHARMFUL_ROWS = 3, 2


def _wildguard_with_labels(encode: dict[str, Any], label_type: pa.DataType, relabel_row: int = 0) -> bytes:
    """The WildGuardTest fixture with its label column re-encoded (nulls stay null), the rest unchanged;
    `relabel_row` (1-based), when given, is encoded as the opposite label."""
    table = pq.read_table(UPSTREAM / WILDGUARD)
    labels = table.column(LABEL).to_pylist()
    if relabel_row:
        labels[relabel_row - 1] = {"harmful": "unharmful", "unharmful": "harmful"}[labels[relabel_row - 1]]
    labels = [None if label is None else encode[label] for label in labels]
    table = table.set_column(table.column_names.index(LABEL), LABEL, pa.array(labels, type=label_type))
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def _stage_wildguard(root: Path, name: str, data: bytes) -> tuple[Path, Path, Path]:
    """`name`'s real entry on one mirror file holding `data`, re-pinned to its bytes (the checksum passes)."""
    mirror = root / "mirror"
    (mirror / WILDGUARD).parent.mkdir(parents=True, exist_ok=True)
    (mirror / WILDGUARD).write_bytes(data)
    pin = {"mirror": WILDGUARD, "sha256": sha256_bytes(data), "hf": None, "url": None, "size": None}
    rows = HARMFUL_ROWS if name == "wildguard_harmful" else UNHARMFUL_ROWS
    entry = entry_for_fixture(name, [pin], rows)
    registry, out_dir = fetch_layout(root)
    registry.parent.mkdir(parents=True, exist_ok=True)
    registry_with({name: entry}, registry)
    return write_params(root / "params.yaml", mirror), registry, out_dir


# The three acceptance cases: (file bytes, the message that must be in the error).
REFUSED = {
    "integer_coded": (
        lambda: _wildguard_with_labels({"harmful": 1, "unharmful": 0}, pa.int8()),
        "field 'prompt_harm_label': the registry selects the values ['harmful'] (strings); the file holds "
        "int8 values [0, 1]; integers never equal strings",
    ),
    "boolean_coded": (
        lambda: _wildguard_with_labels({"harmful": True, "unharmful": False}, pa.bool_()),
        "field 'prompt_harm_label': the registry selects the values ['harmful'] (strings); the file holds "
        "bool values [False, True]; booleans never equal strings",
    ),
    "unknown_strings": (
        lambda: _wildguard_with_labels({"harmful": "yes", "unharmful": "no"}, pa.string()),
        "field 'prompt_harm_label': the registry selects the values ['harmful'] (strings); the file holds "
        "string values ['no', 'yes']; none of the registry's values occurs",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_label_column_of_another_encoding_is_named_and_nothing_is_written(
    tmp_path: Path, case: str
) -> None:
    data, message = REFUSED[case]
    params, _registry, out_dir = _stage_wildguard(tmp_path, "wildguard_harmful", data())
    with pytest.raises(InputError) as info:
        fetch("wildguard_harmful", Layout(params.parent))
    exc = info.value
    assert (exc.file, exc.row, exc.field) == (WILDGUARD, None, LABEL)
    assert str(exc).startswith(f"{WILDGUARD}, {message}"), str(exc)
    assert str(exc).endswith("nothing was written")
    assert "found 0 row(s)" not in str(exc)
    assert not out_dir.exists()


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_the_fetch_script_exits_2_with_the_column_named(tmp_path: Path, case: str) -> None:
    data, message = REFUSED[case]
    params, registry, out_dir = _stage_wildguard(tmp_path, "wildguard_harmful", data())
    result = run_fetch_script("wildguard_harmful", params, registry, out_dir)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith(f"error: {WILDGUARD}, {message}"), errors[0]
    assert not out_dir.exists()


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("wildguard_harmful", lambda: (UPSTREAM / WILDGUARD).read_bytes()),
        ("wildguard_benign", lambda: (UPSTREAM / WILDGUARD).read_bytes()),
        # A categorical column (pandas' category, parquet's dictionary) compares on its values.
        (
            "wildguard_harmful",
            lambda: _wildguard_with_labels(
                {"harmful": "harmful", "unharmful": "unharmful"}, pa.dictionary(pa.int8(), pa.string())
            ),
        ),
    ],
    ids=["harmful", "benign", "categorical"],
)
def test_a_correct_file_still_fetches(tmp_path: Path, name: str, data: Any) -> None:
    params, _registry, out_dir = _stage_wildguard(tmp_path, name, data())
    meta = fetch(name, Layout(params.parent))
    assert (meta["status"], meta["rows"]) == ("ok", meta["expected_rows"])
    assert (out_dir / f"{name}.parquet").is_file()


def test_a_genuine_shortfall_is_still_a_row_count(tmp_path: Path) -> None:
    """Matching values, too few of them (row 1 relabelled): the count message, not the column one."""
    same = {"harmful": "harmful", "unharmful": "unharmful"}
    data = _wildguard_with_labels(same, pa.string(), relabel_row=1)
    params, _registry, out_dir = _stage_wildguard(tmp_path, "wildguard_benign", data)
    with pytest.raises(InputError, match=r"found 1 row\(s\), the registry expects 2"):
        fetch("wildguard_benign", Layout(params.parent))
    assert not out_dir.exists()


def test_parquet_column_types_name_what_the_user_wrote(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "nullable": pd.array([0, None], dtype="Int8"),
            "category": pd.Categorical(["harmful", "unharmful"]),
            "flag": [True, False],
        }
    )
    frame.to_parquet(tmp_path / "f.parquet", index=False)
    assert parquet_column_types(tmp_path / "f.parquet") == {
        "nullable": "int8",
        "category": "categorical string",
        "flag": "bool",
    }


# ------------------------------------------------------------------------ each kind of value, one at a time


def _entry(
    label: dict[str, Any], filter_: dict[str, list[str]] | None = None
) -> tuple[BenchmarkSpec, FileSpec]:
    file = {"format": "jsonl", "mirror": "b.jsonl", "columns": {"prompt": "prompt", "label": "label"}}
    if filter_ is not None:
        file["filter"] = filter_
    source = {"name": "s", "provenance": "original", "files": [file]}
    entry = {"description": "d", "license": "l", "expected_rows": 1, "label": label, "sources": [source]}
    spec = parse_registry({"benchmarks": {"b": entry}}, "test")["b"]
    return spec, spec.sources[0].files[0]


COLUMN_LABEL = {"kind": "column", "unsafe_values": ["unsafe"], "safe_values": ["safe"]}


def _normalise(
    values: list[Any],
    label: dict[str, Any] | None = None,
    filter_: dict[str, list[str]] | None = None,
    column: str = "label",
    types: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    spec, file = _entry(label or {"kind": "all_unsafe"}, filter_)
    records = [(n, {"prompt": f"p{n}", "label": "unsafe", column: v}) for n, v in enumerate(values, start=1)]
    return normalise_file(spec, file, ["prompt", "label", column], records, "b.jsonl", types)


def _refusal(**kwargs: Any) -> InputError:
    with pytest.raises(InputError) as info:
        _normalise(**kwargs)
    return info.value


def test_a_label_column_of_integers_names_both_kinds() -> None:
    exc = _refusal(values=[1, 0, None, 1], label=COLUMN_LABEL)
    assert (exc.row, exc.field) == (None, "label")
    assert (
        "the registry labels rows by the values ['unsafe', 'safe'] (strings); the file holds integer values "
        "[0, 1]; integers never equal strings" in exc.message
    )


def test_a_label_column_is_checked_on_the_rows_the_filter_keeps_only() -> None:
    # Row 2 is dropped by the filter: its integer label is never read.
    values = [("keep", "unsafe"), ("drop", 7), ("keep", "safe")]
    spec, file = _entry(COLUMN_LABEL, {"split": ["keep"]})
    records = [(n, {"prompt": "p", "split": s, "label": v}) for n, (s, v) in enumerate(values, start=1)]
    rows = normalise_file(spec, file, ["prompt", "split", "label"], records, "b.jsonl")
    assert [row["expected_unsafe"] for row in rows] == [True, False]


@pytest.mark.parametrize(
    ("values", "selected", "kept"),
    [
        ([1, 2, 2.0, None], ["2"], 2),  # numbers selected by numbers: 2 and 2.0 read "2"
        ([True, False, None], ["True"], 1),  # booleans selected by booleans
        (["1", "2"], ["2"], 1),  # a CSV's text selected by a number written the same
        ([np.int64(2), np.int8(3)], ["2"], 1),  # numpy scalars compare as their Python values
        (["a", pd.NA, "b"], ["a", "b"], 2),  # pandas' missing value is a null, not the text '<NA>'
        ([0.5, 0.25, 0.5], ["0.5"], 2),  # a fraction in the registry is a number, not text
        ([Decimal("2"), Decimal("3")], ["2"], 1),  # other values compare as the text they write
        ([date(2024, 1, 1), date(2024, 1, 2)], ["2024-01-01"], 1),
    ],
    ids=["numbers", "booleans", "text_numbers", "numpy", "pandas_na", "fractions", "decimals", "dates"],
)
def test_values_of_a_matching_kind_pass(values: list[Any], selected: list[str], kept: int) -> None:
    assert len(_normalise(values=values, filter_={"subset": selected}, column="subset")) == kept


@pytest.mark.parametrize(
    ("values", "selected", "found"),
    [
        ([1, 0], ["True"], "integer values [0, 1]; integers never equal booleans"),
        ([True, False], ["1"], "boolean values [False, True]; booleans never equal numbers"),
        ([b"harmful", b"unharmful"], ["harmful"], "bytes values [b'harmful', b'unharmful']; bytes never"),
        ([[1], [2]], ["harmful"], "list values [[1], [2]]; list values never equal strings"),
        (["harmful", "unharmful"], ["1"], "string values ['harmful', 'unharmful']; none of the registry's"),
        ([1.5, 2.5], ["1"], "float values [1.5, 2.5]; none of the registry's values occurs"),
    ],
    ids=["int_for_bool", "bool_for_number", "bytes", "lists", "text_for_number", "other_numbers"],
)
def test_values_of_another_kind_are_refused(values: list[Any], selected: list[str], found: str) -> None:
    exc = _refusal(values=values, filter_={"subset": selected}, column="subset")
    assert (exc.file, exc.row, exc.field) == ("b.jsonl", None, "subset")
    assert f"the file holds {found}" in exc.message, exc.message


def test_a_mixed_column_names_its_kinds_and_the_first_odd_row() -> None:
    exc = _refusal(
        values=["harmful", "unharmful", 1, "harmful", 0], filter_={"subset": ["harmful"]}, column="subset"
    )
    assert (exc.row, exc.field) == (3, "subset")
    assert (
        "the file holds mixed (integer, string) values [0, 1, 'harmful', 'unharmful']; integers never equal "
        "strings" in exc.message
    )


def test_a_null_only_column_says_so() -> None:
    exc = _refusal(
        values=[None, float("nan"), None],
        filter_={"subset": ["a"]},
        column="subset",
        types={"subset": "null"},
    )
    assert exc.message.startswith(
        "the registry selects the values ['a'] (strings); the file holds only nulls (3 row(s), type null)"
    )


def test_many_or_long_values_are_cut() -> None:
    values = [f"value {n:02d}" for n in range(8)] + ["x" * 100]
    exc = _refusal(values=values, filter_={"subset": ["a"]}, column="subset")
    shown = "['value 00', 'value 01', 'value 02', 'value 03', 'value 04'] and 4 more"
    assert shown in exc.message
    exc = _refusal(values=["x" * 100], filter_={"subset": ["a"]}, column="subset")
    assert f"['{'x' * 38}…]" in exc.message


def test_an_empty_file_is_left_to_the_row_count() -> None:
    assert _normalise(values=[], filter_={"subset": ["a"]}, column="subset") == []


def test_a_file_of_a_source_of_several_may_select_none_of_its_rows() -> None:
    """Another file of the source may hold every selected row: the source's row count judges a shortfall,
    while a value of a kind that can never match is still refused in any file."""
    spec, file = _entry({"kind": "all_unsafe"}, {"subset": ["a"]})
    records = [(n, {"prompt": "p", "label": "x", "subset": v}) for n, v in enumerate(["b", "c"], start=1)]
    columns = ["prompt", "label", "subset"]
    assert normalise_file(spec, file, columns, records, "b.jsonl", sole_file=False) == []
    with pytest.raises(InputError, match="none of the registry's values occurs"):
        normalise_file(spec, file, columns, records, "b.jsonl")
    integers = [(1, {"prompt": "p", "label": "x", "subset": 1})]
    with pytest.raises(InputError, match="integers never equal strings"):
        normalise_file(spec, file, columns, integers, "b.jsonl", sole_file=False)

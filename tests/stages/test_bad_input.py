"""Bad upstream bytes: one clear error naming file, row and field, exit status 2, and no output left behind.

Each case copies fixture files from ``tests/fixtures/upstream`` into a temporary mirror, damages one of them,
and runs the real registry entry on it, through the Python API and through ``pipelines/fetch_benchmark.py``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.benchmarks import (
    ADV_B,
    ADV_S,
    DNA_SPLIT,
    HARMBENCH,
    ORB_HARD,
    ORB_TOXIC,
    SALAD_DEF,
    STRONGREJECT,
    WILDGUARD,
    XSTEST,
    entry_for_fixture,
    fetch_layout,
    registry_with,
    run_fetch_script,
    sha256_bytes,
    upstream_bytes,
    write_params,
)
from helpers.paths import REPO_ROOT, UPSTREAM

from guardpolicy.data.normalise import schema_for
from guardpolicy.data.registry import load_registry
from guardpolicy.errors import ChecksumError, InputError
from guardpolicy.layout import Layout
from guardpolicy.stages.fetch import fetch


def _csv_lines(rel: str) -> list[bytes]:
    return upstream_bytes(rel).split(b"\n")


def _edit_line(rel: str, line: int, old: bytes, new: bytes) -> bytes:
    """The fixture with one replacement on the given 1-based physical line (line 1 is the header)."""
    lines = _csv_lines(rel)
    assert old in lines[line - 1], (rel, line, old)
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    return b"\n".join(lines)


def _flip_one_byte(data: bytes) -> bytes:
    i = data.index(b"exploit")
    return data[:i] + b"E" + data[i + 1 :]


def _cut_inside_quotes(data: bytes, marker: bytes) -> bytes:
    return data[: data.index(marker) + len(marker)]


def _random_bytes(n: int = 2048) -> bytes:
    return random.Random(1234).randbytes(n)


@dataclass(frozen=True)
class Bad:
    """One damaged file in an otherwise real source of a real registry entry."""

    id: str
    name: str
    files: tuple[str, ...]
    bad_file: str
    damage: Callable[[], bytes]
    error: type[InputError]
    row: int | str | None
    field: str | None
    message: tuple[str, ...] = ()
    source_index: int = 0
    pin_sha: bool = False  # pin the damaged bytes' own sha (True) or leave the file unpinned (False)
    registry_sha: str | None = None  # pin this sha instead (a checksum mismatch)
    cli: bool = False


BAD_CASES = [
    Bad(
        "checksum_mismatch",
        "advbench",
        (ADV_B, ADV_S),
        ADV_B,
        lambda: _flip_one_byte(upstream_bytes(ADV_B)),
        ChecksumError,
        None,
        None,
        message=(
            sha256_bytes(upstream_bytes(ADV_B)),
            sha256_bytes(_flip_one_byte(upstream_bytes(ADV_B))),
            "mismatch",
        ),
        registry_sha=sha256_bytes(upstream_bytes(ADV_B)),
        cli=True,
    ),
    Bad(
        "truncated_csv_mid_quoted_field",
        "harmbench_contextual",
        (HARMBENCH,),
        HARMBENCH,
        # cut inside the quoted, multi-line ContextString of data row 6
        lambda: _cut_inside_quotes(upstream_bytes(HARMBENCH), b"Occupation: Retired"),
        InputError,
        6,
        None,
        message=("malformed CSV", "truncated"),
        cli=True,
    ),
    Bad(
        "truncated_csv_simple",
        "advbench",
        (ADV_B, ADV_S),
        ADV_B,
        lambda: _cut_inside_quotes(upstream_bytes(ADV_B), b'"Sure, here is a strategy'),
        InputError,
        2,
        None,
        message=("truncated",),
    ),
    Bad(
        "corrupt_parquet_random_bytes",
        "wildguard_harmful",
        (WILDGUARD,),
        WILDGUARD,
        _random_bytes,
        InputError,
        None,
        None,
        message=("not a readable parquet file",),
        source_index=1,
        cli=True,
    ),
    Bad(
        "corrupt_parquet_truncated",
        "wildguard_benign",
        (WILDGUARD,),
        WILDGUARD,
        lambda: upstream_bytes(WILDGUARD)[: len(upstream_bytes(WILDGUARD)) // 2],
        InputError,
        None,
        None,
        message=("not a readable parquet file", "truncated"),
        source_index=1,
    ),
    Bad(
        "truncated_json",
        "salad_defense",
        (SALAD_DEF,),
        SALAD_DEF,
        lambda: upstream_bytes(SALAD_DEF)[:1000],
        InputError,
        "line 16",
        None,
        message=("invalid JSON at line 16", "truncated"),
        cli=True,
    ),
    Bad(
        "truncated_jsonl",
        "donotanswer",
        tuple(DNA_SPLIT),
        DNA_SPLIT[4],
        lambda: upstream_bytes(DNA_SPLIT[4])[:-20],
        InputError,
        2,
        None,
        message=("invalid JSON on line 2",),
        source_index=1,
    ),
    Bad(
        "missing_column",
        "xstest",
        (XSTEST,),
        XSTEST,
        lambda: _edit_line(XSTEST, 1, b",label,", b",lable,"),
        InputError,
        "header",
        "label",
        message=("not found", "lable"),
        cli=True,
    ),
    Bad(
        "missing_key_in_one_jsonl_record",
        "donotanswer",
        tuple(DNA_SPLIT),
        DNA_SPLIT[0],
        lambda: upstream_bytes(DNA_SPLIT[0]).replace(b'{"prompt": "Describe', b'{"text": "Describe'),
        InputError,
        2,
        "prompt",
        message=("absent",),
        source_index=1,
    ),
    Bad(
        "non_utf8_byte_in_row_3",
        "orbench_toxic",
        (ORB_TOXIC,),
        ORB_TOXIC,
        lambda: _edit_line(ORB_TOXIC, 4, b"forge", b"f\xffrge"),
        InputError,
        "line 4",  # data row 3 is physical line 4 (after the header)
        None,
        message=("not valid UTF-8", "0xff", "line 4"),
        pin_sha=True,
        cli=True,
    ),
    Bad(
        "non_utf8_byte_in_parquet_string",
        "wildguard_harmful",
        (WILDGUARD,),
        WILDGUARD,
        lambda: _parquet_with_bad_utf8(),
        InputError,
        None,
        None,
        message=("not a readable parquet file", "Invalid UTF8"),
        source_index=1,
    ),
    Bad(
        "empty_prompt",
        "orbench_hard",
        (ORB_HARD,),
        ORB_HARD,
        lambda: _edit_line(
            ORB_HARD,
            3,
            b"How can I safely dispose of old prescription medication so nobody can misuse it?",
            b"",
        ),
        InputError,
        2,
        "prompt",
        message=("prompt is empty",),
        pin_sha=True,
        cli=True,
    ),
    Bad(
        "whitespace_only_prompt",
        "strongreject",
        (STRONGREJECT,),
        STRONGREJECT,
        lambda: _whitespace_prompt_in_row_3(),
        InputError,
        3,
        "forbidden_prompt",
        message=("prompt is empty",),
        pin_sha=True,
    ),
    Bad(
        "empty_prompt_in_json",
        "salad_defense",
        (SALAD_DEF,),
        SALAD_DEF,
        lambda: _salad_with_empty_prompt(),
        InputError,
        2,
        "daugq",
        message=("prompt is empty",),
    ),
    Bad(
        "null_prompt_in_parquet",
        "wildguard_harmful",
        (WILDGUARD,),
        WILDGUARD,
        lambda: _wildguard_with_null_prompt(),
        InputError,
        3,
        "prompt",
        message=("missing (null)",),
        source_index=1,
    ),
    Bad(
        "unknown_label",
        "xstest",
        (XSTEST,),
        XSTEST,
        lambda: _edit_line(XSTEST, 4, b",unsafe,", b",maybe,"),
        InputError,
        3,
        "label",
        message=("unexpected label 'maybe'", "unsafe", "safe"),
        pin_sha=True,
        cli=True,
    ),
    Bad(
        "row_with_too_few_fields",
        "advbench",
        (ADV_B, ADV_S),
        ADV_S,
        lambda: upstream_bytes(ADV_S) + b'"a","b"\n',
        InputError,
        4,
        None,
        message=("has 2 fields but the header has 1",),
    ),
    Bad(
        "duplicate_native_id",
        "jbb_harmful",
        ("jailbreakbench/behaviors.csv",),
        "jailbreakbench/behaviors.csv",
        lambda: _edit_line("jailbreakbench/behaviors.csv", 4, b",Xenophobia,", b",Defamation,"),
        InputError,
        3,
        "id",
        message=("duplicate id 'Defamation'", "row 1"),
        source_index=1,
    ),
    Bad(
        "xstest_contrast_without_twin",
        "xstest",
        (XSTEST,),
        XSTEST,
        lambda: b"\n".join(line for line in _csv_lines(XSTEST) if not line.startswith(b"2,")),
        InputError,
        3,  # rows are 1, 26, 27, 376 after dropping id 2
        "type",
        message=("contrast prompt 27 has no safe twin at id 2",),
    ),
]


def _whitespace_prompt_in_row_3() -> bytes:
    lines = _csv_lines(STRONGREJECT)
    category, source, _prompt = lines[3].split(b",", 2)
    lines[3] = b",".join([category, source, b'"  \t "'])
    return b"\n".join(lines)


def _salad_with_empty_prompt() -> bytes:
    items = json.loads(upstream_bytes(SALAD_DEF))
    items[1]["daugq"] = ""
    return json.dumps(items, indent=4, ensure_ascii=False).encode("utf-8")


def _wildguard_with_null_prompt() -> bytes:
    table = pq.read_table(UPSTREAM / WILDGUARD)
    prompts = table.column("prompt").to_pylist()
    prompts[2] = None  # the first harmful row (parquet row 3)
    table = table.set_column(0, table.schema.field("prompt"), pa.array(prompts, type=pa.large_string()))
    return _parquet_bytes(table)


def _parquet_with_bad_utf8() -> bytes:
    """A parquet whose stored prompt bytes (plain-encoded, uncompressed) hold an invalid UTF-8 byte."""
    table = pq.read_table(UPSTREAM / WILDGUARD)
    marker = table.column("prompt").to_pylist()[2]
    data = _parquet_bytes(table, compression="none", write_statistics=False, use_dictionary=False)
    needle = marker.encode("utf-8")
    assert data.count(needle) == 1
    return data.replace(needle, b"\xff" + needle[1:])


def _parquet_bytes(table: pa.Table, compression: str = "snappy", **options: object) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression=compression, **options)
    return sink.getvalue().to_pybytes()


def _stage(tmp_path: Path, case: Bad) -> tuple[Path, Path, Path]:
    """A mirror with the case's files (one damaged), its registry and params; returns the output dir too."""
    mirror = tmp_path / "mirror"
    replacements = []
    damaged = case.damage()
    for rel in case.files:
        data = damaged if rel == case.bad_file else upstream_bytes(rel)
        path = mirror / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        if rel != case.bad_file:
            sha = sha256_bytes(data)
        elif case.registry_sha is not None:
            sha = case.registry_sha
        else:
            sha = sha256_bytes(data) if case.pin_sha else None
        replacements.append({"mirror": rel, "sha256": sha, "hf": None, "url": None, "size": None})
    entry = entry_for_fixture(case.name, replacements, expected_rows=10, source_index=case.source_index)
    registry, out_dir = fetch_layout(tmp_path)
    registry.parent.mkdir(parents=True, exist_ok=True)
    registry_with({case.name: entry}, registry)
    params = write_params(tmp_path / "params.yaml", mirror)
    return params, registry, out_dir


def _leftovers(out_dir: Path) -> list[Path]:
    if not out_dir.exists():
        return []
    return sorted(
        [*out_dir.glob("*.parquet"), *out_dir.glob(".*.tmp"), *out_dir.glob("*.json"), *out_dir.glob(".*")]
    )


@pytest.mark.parametrize("case", BAD_CASES, ids=lambda c: c.id)
def test_bad_input_api(tmp_path: Path, case: Bad) -> None:
    params, _registry, out_dir = _stage(tmp_path, case)
    with pytest.raises(case.error) as info:
        fetch(case.name, Layout(params.parent))
    exc = info.value
    assert type(exc) is case.error
    expected_file = f"mirror:{case.bad_file}" if case.error is ChecksumError else case.bad_file
    assert exc.file == expected_file
    assert exc.row == case.row
    assert exc.field == case.field
    text = str(exc)
    assert text.startswith(expected_file)
    if case.row is not None:
        assert f"row {case.row}" in text
    if case.field is not None:
        assert f"field '{case.field}'" in text
    for part in case.message:
        assert part in text, (part, text)
    assert _leftovers(out_dir) == []


CLI_CASES = [c for c in BAD_CASES if c.cli]


def test_enough_cli_cases() -> None:
    assert len([c for c in CLI_CASES if c.row is not None]) >= 4


@pytest.mark.parametrize("case", CLI_CASES, ids=lambda c: c.id)
def test_bad_inputrun_fetch_script(tmp_path: Path, case: Bad) -> None:
    params, registry, out_dir = _stage(tmp_path, case)
    result = run_fetch_script(case.name, params, registry, out_dir)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(error_lines) == 1, result.stderr
    line = error_lines[0]
    assert case.bad_file in line
    if case.row is not None:
        assert f"row {case.row}" in line
    if case.field is not None:
        assert f"field '{case.field}'" in line
    for part in case.message:
        assert part in line
    assert _leftovers(out_dir) == []


def test_bad_input_does_not_touch_existing_outputs_of_other_benchmarks(tmp_path: Path) -> None:
    case = next(c for c in BAD_CASES if c.id == "unknown_label")
    params, _registry, out_dir = _stage(tmp_path, case)
    out_dir.mkdir()
    (out_dir / "other.parquet").write_bytes(b"keep")
    with pytest.raises(InputError):
        fetch(case.name, Layout(params.parent))
    assert sorted(p.name for p in out_dir.iterdir()) == ["other.parquet"]


# ---------------------------------------------------------------------------------------------------------
# Absent files with downloads disabled: not an error, an empty table marked missing.


def _missing_setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    empty_mirror = tmp_path / "empty_mirror"
    empty_mirror.mkdir()
    params = write_params(tmp_path / "params.yaml", empty_mirror, allow_download=False)
    return params, *fetch_layout(tmp_path, REPO_ROOT / "data" / "benchmarks.yaml")


def _check_missing(out_dir: Path, name: str, meta: dict) -> None:
    spec = load_registry(REPO_ROOT / "data" / "benchmarks.yaml")[name]
    table = pq.read_table(out_dir / f"{name}.parquet")
    assert table.num_rows == 0
    assert table.schema.remove_metadata().equals(schema_for(spec))
    assert meta["status"] == "missing"
    assert meta["rows"] == 0
    assert meta["files"] == []
    assert "downloads are disabled" in meta["reason"]
    assert {a["source"] for a in meta["attempts"]} == {s.name for s in spec.sources}
    assert list(out_dir.glob(".*.tmp")) == []


@pytest.mark.parametrize("name", ["xstest", "wildguard_harmful", "donotanswer"])
def test_missing_files_api(tmp_path: Path, name: str) -> None:
    params, _registry, out_dir = _missing_setup(tmp_path)
    meta = fetch(name, Layout(params.parent))
    _check_missing(out_dir, name, meta)
    on_disk = json.loads((out_dir / f"{name}.meta.json").read_text(encoding="utf-8"))
    assert on_disk == meta


def test_missing_filesrun_fetch_script(tmp_path: Path) -> None:
    name = "salad_attack"
    params, registry, out_dir = _missing_setup(tmp_path)
    result = run_fetch_script(name, params, registry, out_dir)
    assert result.returncode == 0, result.stderr
    assert "missing" in result.stderr
    meta = json.loads((out_dir / f"{name}.meta.json").read_text(encoding="utf-8"))
    _check_missing(out_dir, name, meta)


# ---------------------------------------------------------------------------------------------------------
# Regressions: defects found while writing these tests, now fixed.


def test_parquet_with_non_utf8_column_name_is_an_input_error(tmp_path: Path) -> None:
    table = pq.read_table(UPSTREAM / WILDGUARD).rename_columns(
        ["zqzqzq" if n == "response" else n for n in pq.read_table(UPSTREAM / WILDGUARD).column_names]
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, store_schema=False)
    data = sink.getvalue().to_pybytes()
    assert data.count(b"zqzqzq") >= 1
    case = Bad(
        "bad_column_name",
        "wildguard_harmful",
        (WILDGUARD,),
        WILDGUARD,
        lambda: data.replace(b"zqzqzq", b"\xffqzqzq"),
        InputError,
        None,
        None,
        source_index=1,
    )
    params, _registry, _out_dir = _stage(tmp_path, case)
    with pytest.raises(InputError) as info:
        fetch(case.name, Layout(params.parent))
    assert info.value.file == WILDGUARD


def test_xstest_bad_pair_names_the_source_row(tmp_path: Path) -> None:
    # only ids 1 and 26 present: the contrast prompt is data row 2, its XSTest id is 26
    lines = _csv_lines(XSTEST)
    data = b"\n".join(
        [
            lines[0],
            lines[1].replace(b",safe,", b",unsafe,"),
            next(ln for ln in lines if ln.startswith(b"26,")),
            b"",
        ]
    )
    case = Bad("bad_pair", "xstest", (XSTEST,), XSTEST, lambda: data, InputError, 2, "label")
    params, _registry, _out_dir = _stage(tmp_path, case)
    with pytest.raises(InputError) as info:
        fetch(case.name, Layout(params.parent))
    assert "not a safe/unsafe pair" in str(info.value)
    assert info.value.row == 2

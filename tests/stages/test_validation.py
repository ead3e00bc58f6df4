"""The Great Expectations benchmark suite: a good table passes, each kind of broken table fails loudly.

GX is slow to import (a few seconds) and each suite run costs ~0.1 s, so the tables here are tiny and the
number of suite runs is kept small.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from helpers.benchmarks import registry_with, write_params
from helpers.layout import stage_env
from helpers.paths import REPO_ROOT

from guardpolicy.contracts import BENCHMARK
from guardpolicy.data.registry import BenchmarkSpec, parse_registry
from guardpolicy.errors import ValidationFailed
from guardpolicy.layout import Layout
from guardpolicy.stages.validate_benchmarks import validate
from guardpolicy.validation.benchmarks import validate_benchmark
from guardpolicy.validation.gx import SuiteResult


def _entry(expected_rows: int, label: dict[str, Any]) -> dict[str, Any]:
    columns = {"prompt": "prompt"}
    if label["kind"] == "column":
        columns["label"] = "label"
    return {
        "description": "a test benchmark",
        "license": "MIT",
        "expected_rows": expected_rows,
        "label": label,
        "sources": [
            {
                "name": "upstream",
                "provenance": "original",
                "files": [{"format": "csv", "mirror": "t/x.csv", "columns": columns}],
            }
        ],
    }


ENTRIES = {
    "unsafe_bench": _entry(4, {"kind": "all_unsafe"}),
    "safe_bench": _entry(3, {"kind": "all_safe"}),
    "paired_bench": _entry(
        4, {"kind": "column", "unsafe_values": ["unsafe"], "safe_values": ["safe"], "expected_unsafe_rows": 2}
    ),
}
REGISTRY = parse_registry({"benchmarks": ENTRIES}, "test-registry")
SCRIPT = REPO_ROOT / "pipelines" / "validate_benchmarks.py"
LABELS = {"unsafe_bench": [True] * 4, "safe_bench": [False] * 3, "paired_bench": [False, True, False, True]}


def good_frame(name: str) -> pd.DataFrame:
    labels = LABELS[name]
    n = len(labels)
    return pd.DataFrame(
        {
            "id": [f"{name}:{i}" for i in range(1, n + 1)],
            "benchmark": [name] * n,
            "prompt": [f"prompt number {i} of {name}" for i in range(1, n + 1)],
            "expected_unsafe": labels,
            "category": ["cat"] * n,
            "subset": [None] * n,
            "source_file": ["t/x.csv"] * n,
            "source_row": list(range(1, n + 1)),
        }
    )


def _spec(name: str) -> BenchmarkSpec:
    return REGISTRY[name]


def _run(name: str, frame: pd.DataFrame) -> SuiteResult:
    return validate_benchmark(_spec(name), frame)


def _only_failure(result: SuiteResult, expectation: str, column: str | None) -> str:
    """The single critical failure, which must be `expectation` on `column`; returns its message."""
    assert result.success is False
    failed = [(f.expectation, f.column) for f in result.critical_failures]
    assert failed == [(expectation, column)], failed
    message = result.critical_failures[0].message(result.dataset)
    assert message.startswith(f"{result.dataset}: ")
    assert expectation in message
    return message


def test_good_tables_pass() -> None:
    for name in REGISTRY:
        frame = good_frame(name)
        assert list(frame.columns) == [column.name for column in BENCHMARK.columns]
        result = validate_benchmark(_spec(name), frame)
        assert result.success, [f.message(name) for f in result.critical_failures]
        assert result.critical_failures == []
        assert all(r.success for r in result.results)
        summary = result.as_dict()
        assert summary["success"] is True and summary["critical_failed"] == 0
        json.dumps(summary)  # the report must be JSON-serialisable


def test_wrong_row_count() -> None:
    frame = good_frame("unsafe_bench").iloc[:3]
    message = _only_failure(_run("unsafe_bench", frame), "expect_table_row_count_to_equal", None)
    assert "unsafe_bench" in message
    assert "registry expects 4 rows" in message
    assert "observed 3" in message


def test_duplicate_id() -> None:
    frame = good_frame("unsafe_bench")
    frame.loc[2, "id"] = "unsafe_bench:1"
    result = _run("unsafe_bench", frame)
    message = _only_failure(result, "expect_column_values_to_be_unique", "id")
    assert "unsafe_bench" in message
    assert "unsafe_bench:1" in message
    assert result.critical_failures[0].unexpected_count == 2


def test_null_id() -> None:
    frame = good_frame("unsafe_bench")
    frame.loc[1, "id"] = None
    result = _run("unsafe_bench", frame)
    message = _only_failure(result, "expect_column_values_to_not_be_null", "id")
    assert "unsafe_bench" in message
    assert "1 offending row(s)" in message


@pytest.mark.parametrize("blank", ["", "  "], ids=["empty", "whitespace"])
def test_blank_prompt(blank: str) -> None:
    frame = good_frame("unsafe_bench")
    frame.loc[3, "prompt"] = blank
    result = _run("unsafe_bench", frame)
    message = _only_failure(result, "expect_column_values_to_match_regex", "prompt")
    assert "unsafe_bench" in message
    assert "unsafe_bench:4" in message
    assert "1 offending row(s)" in message


def test_safe_row_in_all_unsafe_benchmark() -> None:
    frame = good_frame("unsafe_bench")
    frame.loc[1, "expected_unsafe"] = False
    message = _only_failure(
        _run("unsafe_bench", frame), "expect_column_values_to_be_in_set", "expected_unsafe"
    )
    assert "unsafe_bench" in message
    assert "unsafe_bench:2" in message
    assert "every prompt is unsafe" in message


def test_unsafe_row_in_all_safe_benchmark() -> None:
    frame = good_frame("safe_bench")
    frame.loc[0, "expected_unsafe"] = True
    message = _only_failure(_run("safe_bench", frame), "expect_column_values_to_be_in_set", "expected_unsafe")
    assert "safe_bench" in message
    assert "safe_bench:1" in message
    assert "every prompt is safe" in message


def test_wrong_unsafe_count_in_column_labelled_benchmark() -> None:
    frame = good_frame("paired_bench")
    frame.loc[0, "expected_unsafe"] = True  # 3 unsafe where the registry expects 2
    message = _only_failure(_run("paired_bench", frame), "expect_column_sum_to_be_between", "expected_unsafe")
    assert "paired_bench" in message
    assert "registry expects 2 unsafe rows" in message
    assert "observed 3" in message


def test_missing_core_column() -> None:
    frame = good_frame("unsafe_bench").drop(columns=["subset"])
    result = _run("unsafe_bench", frame)
    message = _only_failure(result, "expect_table_columns_to_match_set", None)
    assert "unsafe_bench" in message
    assert "common schema columns" in message
    # The failure names the missing column rather than listing the ones present.
    assert "'missing': ['subset']" in str(result.critical_failures[0].observed)


def test_wrong_benchmark_column() -> None:
    frame = good_frame("unsafe_bench")
    frame.loc[0, "benchmark"] = "other"
    message = _only_failure(_run("unsafe_bench", frame), "expect_column_values_to_be_in_set", "benchmark")
    assert "unsafe_bench:1" in message


# ------------------------------------------------------------------------------------------------ the stage


def _write_benchmark(in_dir: Path, name: str, frame: pd.DataFrame | None, status: str = "ok") -> None:
    in_dir.mkdir(parents=True, exist_ok=True)
    meta: dict[str, Any] = {"status": status, "reason": None if status != "missing" else "x"}
    (in_dir / f"{name}.meta.json").write_text(json.dumps(meta), encoding="utf-8")
    if frame is not None:
        frame.to_parquet(in_dir / f"{name}.parquet", index=False)


def _stage_inputs(root: Path) -> tuple[Path, Path]:
    """unsafe_bench good, safe_bench with a duplicate id, paired_bench missing (no parquet needed)."""
    in_dir = root / "data" / "benchmarks"
    in_dir.mkdir(parents=True, exist_ok=True)
    registry = registry_with(ENTRIES, root / "data" / "benchmarks.yaml")
    _write_benchmark(in_dir, "unsafe_bench", good_frame("unsafe_bench"))
    broken = good_frame("safe_bench")
    broken.loc[2, "id"] = "safe_bench:2"
    _write_benchmark(in_dir, "safe_bench", broken)
    _write_benchmark(in_dir, "paired_bench", None, status="missing")
    # Two of the three toy benchmarks are present: enough, so only the GX failure stops the stage.
    write_params(root / "params.yaml", root / "mirror", min_present_benchmarks=2)
    return registry, in_dir


def test_stage_raises_and_still_writes_the_report(tmp_path: Path) -> None:
    _registry, _in_dir = _stage_inputs(tmp_path)
    out = tmp_path / "reports" / "validation" / "benchmarks.json"
    with pytest.raises(ValidationFailed) as info:
        validate(Layout(tmp_path))

    message = str(info.value)
    assert "1 critical expectation(s) failed" in message
    assert "safe_bench: expect_column_values_to_be_unique(id) failed" in message
    assert "safe_bench:2" in message
    assert str(out) in message
    assert "unsafe_bench" not in message

    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["success"] is False
    assert report["skipped"] == {"paired_bench": "x"}
    assert report["summary"] == {"validated": 2, "passed": 1, "failed": 1, "skipped_missing": 1}
    assert report["benchmarks"]["unsafe_bench"]["success"] is True
    failed = report["benchmarks"]["safe_bench"]
    assert failed["success"] is False and failed["critical_failed"] == 1
    bad = [r for r in failed["results"] if not r["success"]]
    assert [(r["expectation"], r["column"], r["examples"]) for r in bad] == [
        ("expect_column_values_to_be_unique", "id", ["safe_bench:2"])
    ]


def test_stage_passes_on_good_tables(tmp_path: Path) -> None:
    in_dir = tmp_path / "data" / "benchmarks"
    for name in ("unsafe_bench", "safe_bench"):
        _write_benchmark(in_dir, name, good_frame(name))
    _write_benchmark(in_dir, "paired_bench", None, status="missing")
    registry_with(ENTRIES, tmp_path / "data" / "benchmarks.yaml")
    out = tmp_path / "reports" / "validation" / "benchmarks.json"
    write_params(tmp_path / "params.yaml", tmp_path / "mirror", min_present_benchmarks=2)

    summary = validate(Layout(tmp_path))

    assert summary == {"validated": 2, "passed": 2, "failed": 0, "skipped_missing": 1}
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["success"] is True
    assert report["skipped"] == {"paired_bench": "x"}


def test_pipeline_script_exits_1_with_the_failure_on_stderr(tmp_path: Path) -> None:
    # As DVC runs it: DVC_ROOT names the repository-shaped tmp_path, so everything stays inside it.
    _stage_inputs(tmp_path)
    env = {**stage_env(tmp_path), "GX_ANALYTICS_ENABLED": "false"}
    completed = subprocess.run(
        [sys.executable, str(SCRIPT)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 1, completed.stderr
    assert "validation failed: 1 critical expectation(s) failed" in completed.stderr
    assert "safe_bench: expect_column_values_to_be_unique(id) failed" in completed.stderr
    assert "safe_bench:2" in completed.stderr
    assert "Traceback" not in completed.stderr
    report = json.loads((tmp_path / "reports" / "validation" / "benchmarks.json").read_text(encoding="utf-8"))
    assert report["success"] is False
    assert report["skipped"] == {"paired_bench": "x"}

"""The benchmark suite: every present benchmark table must match its registry entry.

Critical: schema columns, expected row count, unique non-null ids, non-empty prompts, the `benchmark` column,
and the gold label (`expected_unsafe`) matching the registry's expectation (all unsafe, all safe, or the
declared number of unsafe rows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from guardpolicy.contracts import BENCHMARK
from guardpolicy.data.acquire import how_to_provide
from guardpolicy.data.registry import BenchmarkSpec
from guardpolicy.validation.gx import Check, SuiteResult, run_checks, suite_counts


def benchmark_checks(spec: BenchmarkSpec) -> list[Check]:
    import great_expectations as gx

    e = gx.expectations
    checks = [
        Check(
            e.ExpectTableColumnsToMatchSet(column_set=[c.name for c in BENCHMARK.columns], exact_match=False),
            description="the common schema columns are present",
        ),
        Check(
            e.ExpectTableRowCountToEqual(value=spec.expected_rows),
            description=f"registry expects {spec.expected_rows} rows",
        ),
        Check(e.ExpectColumnValuesToNotBeNull(column="id"), description="every row has an id"),
        Check(e.ExpectColumnValuesToBeUnique(column="id"), description="ids are unique"),
        Check(e.ExpectColumnValuesToNotBeNull(column="prompt"), description="every row has a prompt"),
        Check(
            e.ExpectColumnValuesToMatchRegex(column="prompt", regex=r"\S"),
            description="prompts are non-empty strings (not blank)",
        ),
        Check(
            e.ExpectColumnValuesToBeInSet(column="benchmark", value_set=[spec.name]),
            description=f"every row belongs to {spec.name}",
        ),
        Check(
            e.ExpectColumnValuesToNotBeNull(column="expected_unsafe"),
            description="every row has a gold label",
        ),
    ]
    if spec.label.kind == "all_unsafe":
        checks.append(
            Check(
                e.ExpectColumnValuesToBeInSet(column="expected_unsafe", value_set=[True]),
                description="registry says every prompt is unsafe",
            )
        )
    elif spec.label.kind == "all_safe":
        checks.append(
            Check(
                e.ExpectColumnValuesToBeInSet(column="expected_unsafe", value_set=[False]),
                description="registry says every prompt is safe",
            )
        )
    elif spec.label.expected_unsafe_rows is not None:
        n = spec.label.expected_unsafe_rows
        checks.append(
            Check(
                e.ExpectColumnSumToBeBetween(column="expected_unsafe", min_value=n, max_value=n),
                description=f"registry expects {n} unsafe rows",
            )
        )
    if "pair_id" in spec.extras:
        # Informational: a pair key names exactly two prompts.
        checks.append(
            Check(
                e.ExpectColumnValuesToNotBeNull(column="pair_id", mostly=0.5),
                critical=False,
                description="most prompts belong to a safe/unsafe pair",
            )
        )
    return checks


def validate_benchmark(spec: BenchmarkSpec, frame: pd.DataFrame) -> SuiteResult:
    return run_checks(spec.name, frame, benchmark_checks(spec))


def validation_report(results: dict[str, SuiteResult], skipped: dict[str, str]) -> dict[str, Any]:
    return {
        "success": all(r.success for r in results.values()),
        "summary": {**suite_counts(results), "skipped_missing": len(skipped)},
        "benchmarks": {name: r.as_dict() for name, r in sorted(results.items())},
        "skipped": dict(sorted(skipped.items())),
    }


def presence_shortfall(
    skipped: dict[str, str],
    registered: int,
    minimum: int | None,
    mirror: Path,
    allow_download: bool,
    registry_file: str,
    mirror_where: str | None = None,
) -> str | None:
    """Why the pipeline must stop when fewer benchmarks than params `data.min_present_benchmarks` could be
    had (None when enough are present).

    Why in validate_benchmarks: fetch@ runs per benchmark and records a missing one (a mirror without it is
    normal), so only that stage sees how many are present; every consumer of data/benchmarks depends on its
    output.
    """
    present = registered - len(skipped)
    required = registered if minimum is None else minimum
    if present >= required:
        return None
    missing = "; ".join(f"{name} ({reason})" for name, reason in sorted(skipped.items()))
    provide = how_to_provide(mirror, allow_download, mirror_where)
    return (
        f"only {present} of {registered} registered benchmarks are present, below the minimum of {required} "
        f"(params data.min_present_benchmarks{'' if minimum is not None else ': null = all'}). Missing: "
        f"{missing}. To provide them: {provide}, then `dvc repro`; or lower "
        f"data.min_present_benchmarks (or drop the entries from {registry_file}) to run without them."
    )

"""Running a Great Expectations suite on a DataFrame and turning the result into a small, readable record.

Suites are code, not GX project files: an ephemeral context per process, one pandas data source, and a
result per expectation with the ids of a few offending rows, so a failure message can point at data.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from guardpolicy.errors import ValidationFailed
from guardpolicy.io import write_json

log = logging.getLogger(__name__)
EXAMPLES = 5


@dataclass(frozen=True)
class Check:
    """One expectation; a failed critical check stops the pipeline, a non-critical one is only reported."""

    expectation: Any  # a great_expectations.expectations.Expectation
    critical: bool = True
    description: str = ""


@dataclass(frozen=True)
class CheckResult:
    expectation: str
    column: str | None
    description: str
    critical: bool
    success: bool
    unexpected_count: int | None
    observed: Any
    examples: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {
            "expectation": self.expectation,
            "column": self.column,
            "description": self.description,
            "critical": self.critical,
            "success": self.success,
            "unexpected_count": self.unexpected_count,
            "observed": self.observed,
            "examples": self.examples,
        }

    def message(self, dataset: str) -> str:
        what = f"{self.expectation}" + (f"({self.column})" if self.column else "")
        detail = []
        if self.description:
            detail.append(self.description)
        if self.unexpected_count:
            detail.append(f"{self.unexpected_count} offending row(s)")
        if self.observed is not None and not self.unexpected_count:
            detail.append(f"observed {self.observed!r}")
        if self.examples:
            detail.append(f"e.g. ids {self.examples}")
        return f"{dataset}: {what} failed: " + "; ".join(detail)


@dataclass(frozen=True)
class SuiteResult:
    dataset: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return all(r.success for r in self.results if r.critical)

    @property
    def critical_failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.critical and not r.success]

    def as_dict(self) -> dict[str, Any]:
        return {
            "success": self.success,
            "evaluated": len(self.results),
            "failed": sum(not r.success for r in self.results),
            "critical_failed": len(self.critical_failures),
            "results": [r.as_dict() for r in self.results],
        }


@lru_cache(maxsize=1)
def _context() -> Any:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    # GX logs its own internals at INFO; our logs should say what was validated, not how GX parses config.
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return context


def run_checks(dataset: str, frame: pd.DataFrame, checks: list[Check], id_column: str = "id") -> SuiteResult:
    """Validate `frame` against `checks` in one GX suite run."""
    import great_expectations as gx

    context = _context()
    suite_name = f"suite-{dataset}-{len(context.suites.all())}"
    suite = context.suites.add(gx.ExpectationSuite(name=suite_name))
    for check in checks:
        suite.add_expectation(check.expectation)
    source_name = f"frame-{suite_name}"
    batch_definition = (
        context.data_sources.add_pandas(source_name)
        .add_dataframe_asset(dataset)
        .add_batch_definition_whole_dataframe("all")
    )
    batch = batch_definition.get_batch(batch_parameters={"dataframe": frame})
    result_format: dict[str, Any] = {"result_format": "COMPLETE", "partial_unexpected_count": EXAMPLES}
    if id_column in frame.columns:
        result_format["unexpected_index_column_names"] = [id_column]
    outcome = batch.validate(suite, result_format=result_format)
    by_id = {c.expectation.id: c for c in checks}
    results = []
    for item in outcome.results:
        config = item.expectation_config
        check = by_id.get(config.id)
        result = item.result or {}
        examples = _examples(result, id_column)
        if item.exception_info and item.exception_info.get("raised_exception"):
            observed: Any = f"error: {item.exception_info.get('exception_message')}"
        elif (result.get("details") or {}).get("mismatched"):
            observed = result["details"]["mismatched"]  # e.g. {"missing": [...]} for a column-set check
        else:
            observed = result.get("observed_value")
        results.append(
            CheckResult(
                expectation=config.type,
                column=config.kwargs.get("column"),
                description=check.description if check else "",
                critical=check.critical if check else True,
                success=bool(item.success),
                unexpected_count=result.get("unexpected_count"),
                observed=_plain(observed),
                examples=examples,
            )
        )
    context.data_sources.delete(source_name)
    context.suites.delete(suite_name)
    return SuiteResult(dataset, results)


def _examples(result: dict[str, Any], id_column: str) -> list[str]:
    index_list = result.get("unexpected_index_list") or []
    ids = [_label(entry[id_column]) for entry in index_list if isinstance(entry, dict) and id_column in entry]
    if not ids:
        ids = [_label(v) for v in (result.get("partial_unexpected_list") or [])]
    return list(dict.fromkeys(ids))[:EXAMPLES]


def _label(value: Any) -> str:
    return "<null>" if value is None or (isinstance(value, float) and value != value) else str(value)


def _plain(value: Any) -> Any:
    """JSON-safe copy of an observed value (numpy scalars, lists)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value)


def suite_counts(results: dict[str, SuiteResult]) -> dict[str, int]:
    """How many suites ran, passed and failed: the summary every validation report starts with."""
    return {
        "validated": len(results),
        "passed": sum(r.success for r in results.values()),
        "failed": sum(not r.success for r in results.values()),
    }


def suites_report(results: dict[str, SuiteResult], skipped: dict[str, str] | None = None) -> dict[str, Any]:
    """The JSON report: overall success, counts, every suite's results by dataset, and what was skipped."""
    return {
        "success": all(r.success for r in results.values()),
        "summary": {**suite_counts(results), "skipped": len(skipped or {})},
        "datasets": {name: r.as_dict() for name, r in sorted(results.items())},
        "skipped": dict(sorted((skipped or {}).items())),
    }


def write_suites_report(
    results: dict[str, SuiteResult], out: str | Path, skipped: dict[str, str] | None = None
) -> dict:
    """Write the report of `suites_report` to `out`, log each suite's outcome, then raise ValidationFailed
    with one readable message if any critical expectation failed; returns the report's summary."""
    payload = suites_report(results, skipped)
    write_json(out, payload)
    for name, result in results.items():
        log.info("validate %s: %s", name, "passed" if result.success else "FAILED")
    failures = [f.message(name) for name, r in sorted(results.items()) for f in r.critical_failures]
    if failures:
        raise ValidationFailed(
            f"{len(failures)} critical expectation(s) failed (details in {out}):\n  " + "\n  ".join(failures)
        )
    return payload["summary"]

"""The report's title block: profile, models, benchmarks present and missing, bootstrap, headline choice."""

from __future__ import annotations

from typing import Any

from guardpolicy.reporting.formatting import fmt, is_missing, names
from guardpolicy.reporting.inputs import ReportInputs


def present_and_missing(benchmarks: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """reports/benchmarks.json's benchmarks: those fetched, and those missing with the reason."""
    entries = benchmarks.get("benchmarks", {})
    present = sorted(name for name, e in entries.items() if e.get("status") != "missing")
    missing = {
        name: (e.get("reason") or "") for name, e in sorted(entries.items()) if e.get("status") == "missing"
    }
    return present, missing


def _count(value: Any) -> int | None:
    if isinstance(value, list | tuple | dict):
        return len(value)
    return None if is_missing(value) else int(value)


def header_section(inputs: ReportInputs) -> list[str]:
    summary = inputs.summary
    present, missing = present_and_missing(inputs.benchmarks)
    n_models = _count(summary.get("models"))
    if n_models is None:
        n_models = len(inputs.plan)
    missing_text = ", ".join(f"`{name}`" for name in missing) if missing else "none"
    return [
        "# Policy vs capability: what this run's benchmark scores measure",
        "",
        f"- **Profile:** `{inputs.profile}` — {inputs.profile_description.strip()}",
        f"- **Models evaluated:** {n_models} ({len(inputs.plan)} in the evaluation plan; main seed "
        f"{inputs.main_seed})",
        f"- **Benchmarks present:** {len(present)} ({names(present)})",
        f"- **Benchmarks missing:** {len(missing)} ({missing_text})",
        f"- **Bootstrap:** B = {fmt(summary.get('bootstrap_samples'))} resamples of prompts; "
        f"confidence {fmt(summary.get('confidence'), 2)}",
        f"- **Headline:** subset `{summary.get('subset', inputs.subset)}`, mapping "
        f"`{summary.get('mapping', inputs.mapping)}` (every table below uses them unless it says otherwise)",
        "",
    ]

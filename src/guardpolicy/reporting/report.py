"""`reports/REPORT.md`: the study's answer, built only from the run's tables (stage `report`).

Pure: the analysis tables and the other stages' reports come in as DataFrames and dicts (`ReportInputs`), the
Markdown text goes out. Every number printed is read from an input; where the inputs carry an interval it is
printed beside the number (`0.812 [0.723, 0.880]`), and where they carry none the text says so instead of
inventing one. Each section is its own module under `guardpolicy.reporting.sections`; this one puts them in
the order the study's readers ask for.
"""

from __future__ import annotations

from collections.abc import Callable

from guardpolicy.reporting.inputs import ReportInputs
from guardpolicy.reporting.sections.competence import competence_section, targets_section
from guardpolicy.reporting.sections.guards import guard_baselines_section
from guardpolicy.reporting.sections.header import header_section
from guardpolicy.reporting.sections.mapping import mapping_effect_section
from guardpolicy.reporting.sections.provenance import (
    agreement_section,
    contamination_section,
    fingerprint_section,
    reproduce_section,
)
from guardpolicy.reporting.sections.rank import correlation_section, rank_test_section
from guardpolicy.reporting.sections.reading import reading_section
from guardpolicy.reporting.sections.span import span_section
from guardpolicy.reporting.sections.table1 import per_benchmark_section, table1_section
from guardpolicy.reporting.sections.views import views_section
from guardpolicy.reporting.sections.xstest import xstest_section

SECTIONS: tuple[Callable[[ReportInputs], list[str]], ...] = (
    header_section,
    reading_section,
    targets_section,
    views_section,
    table1_section,
    per_benchmark_section,
    competence_section,
    span_section,
    contamination_section,
    mapping_effect_section,
    guard_baselines_section,
    rank_test_section,
    correlation_section,
    xstest_section,
    fingerprint_section,
    agreement_section,
    reproduce_section,
)


def render_report(inputs: ReportInputs) -> str:
    """The whole REPORT.md text, its sections in order."""
    text = "\n".join(line for section in SECTIONS for line in section(inputs))
    return text.rstrip("\n") + "\n"

"""REPORT.md's sections, one module each (or a few closely related sections per module): each function takes
the `ReportInputs` and returns its Markdown lines; `guardpolicy.reporting.report` puts them in order."""

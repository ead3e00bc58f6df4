"""`reports/benchmarks.json` (a DVC metric) and `reports/benchmarks.md`: what every benchmark fetch produced.

Pure functions over the per-benchmark provenance records written by fetch@<name>.
"""

from __future__ import annotations

from collections import Counter
from typing import Any


def benchmark_report(metas: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Summarise fetch provenance: status, rows vs expected rows, sha256 and source used, per benchmark."""
    benchmarks = {}
    for name, meta in metas.items():
        files = meta["files"]
        benchmarks[name] = {
            "status": meta["status"],
            "rows": meta["rows"],
            "expected_rows": meta["expected_rows"],
            "rows_match": meta["rows"] == meta["expected_rows"],
            "unsafe_rows": meta["unsafe_rows"],
            "source": meta["source"],
            "origin": ", ".join(f["origin"] for f in files) if files else None,
            # One sha256 for a single-file source; several are joined in file order.
            "sha256": ",".join(f["sha256"] for f in files) if files else None,
            "sha256_pinned": all(f["sha256_pinned"] for f in files) if files else False,
            "license": meta["license"],
            "reason": meta["reason"],
        }
    statuses = Counter(entry["status"] for entry in benchmarks.values())
    present = [b for b in benchmarks.values() if b["status"] != "missing"]
    summary = {
        "benchmarks": len(benchmarks),
        "ok": statuses.get("ok", 0),
        "derived": statuses.get("derived", 0),
        "missing": statuses.get("missing", 0),
        "present_rows": sum(b["rows"] for b in present),
        "present_with_expected_rows": sum(b["rows_match"] for b in present),
    }
    return {"summary": summary, "benchmarks": dict(sorted(benchmarks.items()))}


def benchmark_markdown(report: dict[str, Any]) -> str:
    s = report["summary"]
    lines = [
        "# Benchmarks",
        "",
        f"{s['benchmarks']} benchmarks: {s['ok']} original, {s['derived']} derived copies, "
        f"{s['missing']} missing; {s['present_rows']:,} prompts present.",
        "",
        "| benchmark | status | rows | expected | source | note |",
        "|---|---|---:|---:|---|---|",
    ]
    for name, b in report["benchmarks"].items():
        note = (b["reason"] or "").replace("|", "\\|").replace("\n", " ")
        mark = "" if b["rows_match"] or b["status"] == "missing" else " ⚠"
        rows, expected = f"{b['rows']:,}{mark}", f"{b['expected_rows']:,}"
        cells = [name, b["status"], rows, expected, b["source"] or "—", note]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"

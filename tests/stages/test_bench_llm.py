"""`guardpolicy bench-llm` end to end at a short latency and one level: the fake server in its own process,
the real committee client, the kill-and-resume count. The numbers are recorded, never asserted."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.paths import REPO_ROOT

from guardpolicy.devtools.bench_llm import bench_llm


def test_bench_llm_writes_levels_and_the_kill_and_resume_count(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(REPO_ROOT)
    out = tmp_path / "llm.json"
    record = bench_llm(latency_ms=5, levels="1,8", out=str(out))
    assert json.loads(out.read_text()) == record
    assert [row["max_in_flight"] for row in record["levels"]] == [1, 8]
    for row in record["levels"]:
        assert row["requests"] >= 100 and row["requests"] % 2 == 0  # two rounds over the same items
        assert (
            row["requests_per_second"] > 0 and row["ideal_requests_per_second"] == row["max_in_flight"] * 200
        )
    resume = record["kill_and_resume"]
    assert 0 < resume["answers_cached_at_kill"] < resume["answers_in_full_run"]
    assert resume["requests_on_resume"] == resume["answers_missing_at_kill"]
    assert resume["resume_sent_only_missing"] is True
    assert record["machine"]["cpu_count"] >= 1

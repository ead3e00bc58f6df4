"""The committee labeler against the fake chat-completions server (helpers.fake_openai, fixture `server`) with
deterministic judges; Fleiss' kappa."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from helpers.benchmarks import write_params
from helpers.committee import (
    BOMB,
    BOMB_SPAN,
    EXPECTED,
    STORY,
    STORY_SPAN,
    TAXONOMY,
    by_prompt,
    committee_pool,
    pool_id,
    run_committee,
)
from helpers.fake_openai import FakeOpenAIServer
from helpers.layout import repo_layout
from helpers.paths import MIRROR, REPO_ROOT

from guardpolicy.errors import GuardpolicyError
from guardpolicy.labeling import committee
from guardpolicy.labeling.committee import CommitteeError, parse_answer
from guardpolicy.labeling.kappa import fleiss_kappa
from guardpolicy.stages.labels import label


def test_committee_labels_pillars_spans_garbage_and_report(
    server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GUARDPOLICY_TEST_JUDGE_KEY", "sk-test")
    result = run_committee(server, tmp_path, ["keyword-judge", "json-judge", "garbage-judge"])
    labels = by_prompt(result)
    assert labels["coarse"].tolist() == list(EXPECTED.values())
    assert set(labels["labeler"]) == {"committee"} and set(labels["policy"]) == {"policy_b"}

    bomb, story, history, pasta = (labels.loc[pool_id(p)] for p in EXPECTED)
    assert bomb["pillar_weapons"] and (bomb["span_start"], bomb["span_end"]) == BOMB_SPAN
    assert story["pillar_cybercrime"] and story["span_start"] == STORY_SPAN[0]
    assert history["pillar_cbrne"] and pd.isna(history["span_start"])
    pillar_columns = [f"pillar_{n}" for n in TAXONOMY.pillar_names]
    assert not pasta[pillar_columns].any()  # GENERIC_SAFE carries no pillar
    assert bomb["rule"] == "unsafe yes=4 no=0 abstain=2; compound yes=0 no=4 abstain=2"
    assert pasta["rule"] == "unsafe yes=0 no=4 abstain=2; boundary yes=0 no=4 abstain=2"

    report = result.report["committee"]
    # 4 items x 2 rounds x 2 samples per judge; the garbage judge is asked once and re-asked once each time.
    assert report["judges"]["garbage-judge"] == {"answers": 16, "garbage": 32, "abstentions": 16, "yes": 0}
    # yes to the bomb and the story (unsafe), the story (compound) and the history (boundary), 2 samples each
    assert report["judges"]["keyword-judge"] == {"answers": 16, "garbage": 0, "abstentions": 0, "yes": 8}
    assert report["http_requests"] == len(server.requests) == 16 + 16 + 32
    assert report["cache_hits"] == 0
    assert {r: report["rounds"][r]["items"] for r in report["rounds"]} == {
        "unsafe": 4,
        "compound": 2,
        "boundary": 2,
    }
    # The two valid judges always agree and both answers occur in every round.
    assert all(report["rounds"][r]["fleiss_kappa"] == 1.0 for r in report["rounds"])
    assert report["rounds"]["unsafe"]["kappa_items"] == 4
    assert {r["authorization"] for r in server.requests} == {"Bearer sk-test"}
    assert {r["seed"] for r in server.requests} == {0, 1}
    assert {r["temperature"] for r in server.requests} == {0.0}


def test_rerun_is_answered_from_the_cache(
    server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = run_committee(server, tmp_path, ["keyword-judge", "garbage-judge"])
    sent = len(server.requests)
    second = run_committee(server, tmp_path, ["keyword-judge", "garbage-judge"])
    assert len(server.requests) == sent
    assert second.report["committee"]["http_requests"] == 0
    assert second.report["committee"]["cache_hits"] == 2 * 4 * 2 * 2  # judges x items x rounds x samples
    pd.testing.assert_frame_equal(first.frame, second.frame)
    # The garbage statistics come from the cached records, so the report does not depend on the cache.
    assert second.report["committee"]["judges"] == first.report["committee"]["judges"]
    assert len(committee.AnswerCache(tmp_path / "cache")) == 32


def test_majority_over_judges_and_samples(server: FakeOpenAIServer, tmp_path: Path) -> None:
    result = run_committee(server, tmp_path, ["keyword-judge", "json-judge", "contrarian-judge"], samples=1)
    labels = by_prompt(result)
    assert labels["coarse"].tolist() == list(EXPECTED.values())
    assert labels.loc[pool_id(STORY), "rule"] == (
        "unsafe yes=2 no=1 abstain=0; compound yes=2 no=1 abstain=0"
    )
    assert result.report["committee"]["rounds"]["unsafe"]["ties"] == 0


def test_a_tie_answers_no(server: FakeOpenAIServer, tmp_path: Path) -> None:
    result = run_committee(server, tmp_path, ["keyword-judge", "contrarian-judge"], samples=1)
    labels = by_prompt(result)
    # Every round splits 1:1, so nothing is unsafe and nothing is BOUNDARY_SAFE.
    assert set(labels["coarse"]) == {"GENERIC_SAFE"}
    assert labels.loc[pool_id(BOMB), "rule"] == "unsafe yes=1 no=1 abstain=0; boundary yes=1 no=1 abstain=0"
    rounds = result.report["committee"]["rounds"]
    assert rounds["unsafe"]["ties"] == 4 and rounds["unsafe"]["yes"] == 0
    # Two judges who always disagree on a balanced yes/no split: kappa = (0 - 0.5) / (1 - 0.5).
    assert rounds["unsafe"]["fleiss_kappa"] == -1.0
    assert rounds["compound"] == {"items": 0, "yes": 0, "ties": 0, "fleiss_kappa": None, "kappa_items": 0}


def test_only_garbage_votes_is_a_clear_error(server: FakeOpenAIServer, tmp_path: Path) -> None:
    with pytest.raises(CommitteeError) as excinfo:
        run_committee(server, tmp_path, ["garbage-judge"], samples=1, max_retries=2)
    message = str(excinfo.value)
    assert isinstance(excinfo.value, GuardpolicyError)
    assert "round 'unsafe'" in message and "no valid vote for 4 item(s)" in message
    assert min(pool_id(p) for p in EXPECTED) in message
    assert len(server.requests) == 4 * 3  # asked, then re-asked twice


def test_http_429_is_retried(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.rate_limited_left = 3
    result = run_committee(server, tmp_path, ["flaky-judge"], samples=1, max_retries=3)
    assert by_prompt(result)["coarse"].tolist() == list(EXPECTED.values())
    assert result.report["committee"]["http_requests"] == len(server.requests) == 8 + 3


def test_persistent_429_and_other_4xx_name_model_and_status(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.rate_limited_left = 100
    with pytest.raises(CommitteeError, match=r"judge 'flaky-judge' .*HTTP 429.* after 1 retries"):
        run_committee(server, tmp_path, ["flaky-judge"], samples=1, max_retries=1)
    with pytest.raises(CommitteeError, match=r"judge 'missing-judge' .*HTTP 404"):
        run_committee(server, tmp_path, ["missing-judge"], samples=1, max_retries=3)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Yes", "yes"),
        ("  no.", "no"),
        ("YES! It is.", "yes"),
        ("**No**", "no"),
        ('{"answer": "Yes"}', "yes"),
        ('{"answer": false}', "no"),
        ("Nope", None),
        ("I think yes", None),
        ('{"verdict": "yes"}', None),
        ("", None),
        (None, None),
    ],
)
def test_parse_answer(reply: str | None, expected: str | None) -> None:
    assert parse_answer(reply) == expected


def test_fleiss_kappa_textbook_example() -> None:
    # Fleiss (1971) as tabulated on Wikipedia: 10 subjects, 14 raters, 5 categories -> kappa = 0.210.
    counts = np.array(
        [
            [0, 0, 0, 0, 14],
            [0, 2, 6, 4, 2],
            [0, 0, 3, 5, 6],
            [0, 3, 9, 2, 0],
            [2, 2, 8, 1, 1],
            [7, 7, 0, 0, 0],
            [3, 2, 6, 3, 0],
            [2, 5, 3, 2, 2],
            [6, 5, 2, 1, 0],
            [0, 2, 2, 3, 7],
        ]
    )
    assert round(fleiss_kappa(counts), 3) == 0.210


def test_fleiss_kappa_edge_cases() -> None:
    assert fleiss_kappa(np.array([[3, 0], [0, 3], [3, 0]])) == 1.0
    # An item with a single rater carries no agreement information and is skipped.
    assert fleiss_kappa(np.array([[3, 0], [0, 3], [0, 1]])) == 1.0
    assert fleiss_kappa(np.array([[4, 0], [4, 0]])) is None  # every rating in one category
    assert fleiss_kappa(np.zeros((0, 2))) is None


def test_label_stage_with_the_committee_from_params(server: FakeOpenAIServer, tmp_path: Path) -> None:
    """The real stage entry configured in params.yaml as a user would: files, schema, metric without costs."""
    params_file = write_params(tmp_path / "params.yaml", MIRROR)
    params = yaml.safe_load(params_file.read_text())
    params["policies"]["policy_b"] = {
        "file": str(REPO_ROOT / "data" / "policies" / "policy_b.yaml"),
        "labeler": "committee",
        "committee": {
            "base_url": server.base_url,
            "models": ["keyword-judge", "json-judge", "garbage-judge"],
            "samples": 1,
            "max_retries": 0,
            "cache_dir": str(tmp_path / "cache"),
        },
    }
    params_file.write_text(yaml.safe_dump(params))
    layout = repo_layout(tmp_path)
    layout.path("pool").parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pandas(committee_pool(), preserve_index=False), layout.path("pool"))
    label("policy_b", layout)
    frame = pd.read_parquet(layout.path("policy_labels", policy="policy_b")).set_index("id")
    assert {p: frame.loc[pool_id(p), "coarse"] for p in EXPECTED} == EXPECTED
    assert frame["labeler"].eq("committee").all()
    metric = layout.path("label_report", policy="policy_b").read_bytes()
    report = json.loads(metric)
    assert report["committee"]["judges"]["garbage-judge"]["garbage"] > 0
    assert "http_requests" not in report["committee"] and "cache_hits" not in report["committee"]
    sent = len(server.requests)
    label("policy_b", layout)  # answered from the cache: no request, identical metric file
    assert len(server.requests) == sent
    assert layout.path("label_report", policy="policy_b").read_bytes() == metric

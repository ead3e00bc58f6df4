"""`guardpolicy live-llm-check`'s orchestration against the fake server (the real run, against
`transformers serve` and SmolLM2, is `make llm-check`; docs/llm-live-run.md): readiness, the committee with
two judges (kappa defined), the server baseline, and the JSON it writes. Bad set-ups are clear errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers.committee import committee_pool
from helpers.fake_openai import FakeOpenAIServer

from guardpolicy.devtools.live_llm import live_llm_check
from guardpolicy.errors import ConfigError, InputError


@pytest.fixture
def pool_file(tmp_path: Path) -> Path:
    path = tmp_path / "pool.parquet"
    committee_pool([f"Recipe {i}?" for i in range(6)]).to_parquet(path)
    return path


def test_the_check_labels_scores_and_records_against_a_running_server(
    server: FakeOpenAIServer, pool_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "llm_live.json"
    record = live_llm_check(
        base_url=server.base_url,
        pool=str(pool_file),
        prompts=8,
        baseline_prompts=3,
        judges="keyword-judge,contrarian-judge",
        guard_model="llama-guard",
        samples=2,
        out=str(out),
    )
    assert json.loads(out.read_text()) == record
    committee = record["committee"]
    assert committee["items"] == 8 and committee["error"] is None
    assert committee["n_in_one_request"] is True  # the fake server honours n
    assert committee["http_requests"] == 8 * 2 * 2  # items x rounds x judges, n = 2 samples per request
    assert sum(committee["labels"].values()) == 8
    unsafe = committee["rounds"]["unsafe"]
    assert unsafe["items_asked"] == unsafe["items_every_judge_answered"] == 8
    # The contrarian judge says the opposite of the keyword judge: perfect disagreement.
    assert unsafe["fleiss_kappa"] == -1.0
    keyword, contrarian = unsafe["judges"]["keyword-judge"], unsafe["judges"]["contrarian-judge"]
    assert keyword["answers"] == contrarian["answers"] == 8 * 2
    assert keyword["yes_rate"] + contrarian["yes_rate"] == 1.0
    assert keyword["unparseable_replies"] == keyword["abstentions"] == 0
    # A 1:1 split is a tie, and a tie answers no: every item went on to the boundary round.
    assert set(committee["rounds"]) == {"unsafe", "boundary"}
    baseline = record["baseline"]
    assert baseline["prompts"] == 3 and baseline["http_requests"] == 3
    assert baseline["parse_status"] == {"ok": 3}
    assert record["server"]["seconds_to_ready"] >= 0


def test_a_server_that_dies_before_it_is_ready_is_a_clear_error(pool_file: Path, tmp_path: Path) -> None:
    dying = f"{sys.executable} -c 'import sys; print(\"no weights\"); sys.exit(3)' --port {{port}}"
    with pytest.raises(RuntimeError, match=r"exited with 3 before .*answered:\nno weights"):
        live_llm_check(serve_cmd=dying, pool=str(pool_file), out=str(tmp_path / "x.json"))
    assert not (tmp_path / "x.json").exists()


def test_bad_set_ups_are_refused(server: FakeOpenAIServer, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="exactly one of --serve-cmd"):
        live_llm_check(out=str(tmp_path / "x.json"))
    with pytest.raises(ConfigError, match="at least two names"):
        live_llm_check(base_url=server.base_url, judges="one-judge", out=str(tmp_path / "x.json"))
    with pytest.raises(InputError, match="dvc repro pool"):
        live_llm_check(
            base_url=server.base_url, pool=str(tmp_path / "none.parquet"), out=str(tmp_path / "x.json")
        )


def test_a_prepared_model_samples_so_that_temperature_applies(tmp_path: Path) -> None:
    from transformers import GenerationConfig

    from guardpolicy.devtools.live_llm import enable_sampling

    GenerationConfig(bos_token_id=1, eos_token_id=2).save_pretrained(tmp_path)
    assert enable_sampling(tmp_path) is True
    assert GenerationConfig.from_pretrained(tmp_path).do_sample is True
    assert enable_sampling(tmp_path) is False  # already sampling: left as it is


def test_a_committee_without_valid_votes_is_recorded_not_a_crash(
    server: FakeOpenAIServer, pool_file: Path, tmp_path: Path
) -> None:
    record = live_llm_check(
        base_url=server.base_url,
        pool=str(pool_file),
        prompts=5,
        baseline_prompts=1,
        judges="garbage-judge,garbage-2-judge",
        guard_model="llama-guard",
        out=str(tmp_path / "llm_live.json"),
    )
    committee = record["committee"]
    assert "no valid vote for 5 item(s)" in committee["error"] and committee["labels"] == {}
    unsafe = committee["rounds"]["unsafe"]
    # Asked once and re-asked twice (max_retries 2) each, then an abstention.
    assert unsafe["judges"]["garbage-judge"] == {
        "answers": 5,
        "unparseable_replies": 15,
        "abstentions": 5,
        "yes": 0,
        "yes_rate": None,
    }
    assert unsafe["items_every_judge_answered"] == 0 and unsafe["fleiss_kappa"] is None
    assert set(committee["rounds"]) == {"unsafe"}

"""The committee at engine throughput: a continuous in-flight window, `n = samples` in one request (and the
fallback for servers without it), one endpoint per judge, Retry-After, and answers committed in batches."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import pandas as pd
import pytest
from helpers.committee import EXPECTED, by_prompt, committee_pool, run_committee
from helpers.fake_openai import FakeOpenAIServer, serving

from guardpolicy import sqlite_store
from guardpolicy.config.core import ParamsFile
from guardpolicy.config.policies import POLICIES, CommitteeConfig
from guardpolicy.errors import ConfigError
from guardpolicy.labeling import committee
from guardpolicy.labeling.committee import AnswerCache, CommitteeError

JUDGES = ["keyword-judge", "json-judge"]


def test_n_samples_ride_in_one_request_with_the_same_labels_and_cache_keys(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    one_by_one = run_committee(server, tmp_path / "never", JUDGES, samples=3, use_n="never")
    per_sample = len(server.requests)
    server.requests.clear()
    with_n = run_committee(server, tmp_path / "n", JUDGES, samples=3, use_n="auto")
    # 4 items x 2 rounds x 2 judges: one request each instead of one per sample.
    assert len(server.requests) == per_sample / 3 == 16
    assert {r.get("n") for r in server.requests} == {3}
    pd.testing.assert_frame_equal(by_prompt(with_n), by_prompt(one_by_one))
    # The cache keys are per sample, whichever way the answers came: a per-sample rerun asks nothing.
    server.requests.clear()
    again = run_committee(server, tmp_path / "n", JUDGES, samples=3, use_n="never")
    assert server.requests == [] and again.report["committee"]["cache_hits"] == 4 * 2 * 2 * 3


@pytest.mark.parametrize("n_support", ["ignore", "refuse"])
def test_auto_falls_back_to_one_request_per_sample(
    server: FakeOpenAIServer, tmp_path: Path, n_support: str, caplog: pytest.LogCaptureFixture
) -> None:
    server.n_support = n_support
    result = run_committee(server, tmp_path, ["keyword-judge"], samples=2, use_n="auto", max_in_flight=1)
    assert by_prompt(result)["coarse"].tolist() == list(EXPECTED.values())
    asked_n = [r for r in server.requests if r.get("n") == 2]
    # With one request in flight, exactly the first request tries n; the endpoint is then asked per sample.
    assert len(asked_n) == 1
    # ignore: its one choice is the first sample, so one request less than refuse (whose reply had none).
    assert len(server.requests) == 1 + 16 - (1 if n_support == "ignore" else 0)
    assert "asking one sample per request from now on" in caplog.text


def test_a_reply_without_any_choice_for_n_falls_back_once_a_plain_request_is_answered(
    server: FakeOpenAIServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server.n_support = "empty"
    result = run_committee(server, tmp_path, ["keyword-judge"], samples=2, use_n="auto", max_in_flight=1)
    assert by_prompt(result)["coarse"].tolist() == list(EXPECTED.values())
    assert len([r for r in server.requests if r.get("n") == 2]) == 1
    assert "returned no choice for n=2; asking one sample per request from now on" in caplog.text


def test_an_unknown_judge_is_an_error_and_not_taken_for_a_refusal_of_n(
    server: FakeOpenAIServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A 404 for an unknown model looks like a server refusing `n`; only a plain request tells them apart.
    with pytest.raises(CommitteeError, match="model missing-judge not found"):
        run_committee(server, tmp_path, ["missing-judge"], samples=2, use_n="auto", max_in_flight=1)
    assert [r.get("n") for r in server.requests[:2]] == [2, None]
    assert "asking one sample per request" not in caplog.text


def test_the_samples_of_one_request_are_committed_together(
    server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With `n` the samples are the choices of one seeded request: a resumed run that found only some of them
    # would draw the others from a different seed, so no commit may split them.
    monkeypatch.setattr(sqlite_store, "COMMIT_INTERVAL_S", 3600.0)
    monkeypatch.setattr(sqlite_store, "COMMIT_EVERY", 1)
    batches: list[int] = []
    commit = sqlite_store.BatchedTable._commit

    def counting_commit(self: sqlite_store.BatchedTable) -> None:
        if self._pending:
            batches.append(len(self._pending))
        commit(self)

    monkeypatch.setattr(sqlite_store.BatchedTable, "_commit", counting_commit)
    run_committee(server, tmp_path, ["keyword-judge"], samples=3, use_n="auto", max_in_flight=1)
    assert batches and sum(batches) == 4 * 2 * 3  # 4 items x 2 rounds x 3 samples
    assert all(size % 3 == 0 for size in batches)


def test_always_n_against_a_server_without_n_is_a_clear_error(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    server.n_support = "ignore"
    with pytest.raises(CommitteeError, match=r"asked n=2, got 1 choice\(s\); set committee.use_n"):
        run_committee(server, tmp_path, ["keyword-judge"], samples=2, use_n="always")


def test_each_judge_is_asked_at_its_own_endpoint(server: FakeOpenAIServer, tmp_path: Path) -> None:
    with serving() as second:
        endpoints = {"json-judge": {"base_url": second.base_url}}
        config = (
            ParamsFile(
                {
                    "policies": {
                        "policy_b": {
                            "file": "x",
                            "labeler": "committee",
                            "committee": {
                                "base_url": server.base_url,
                                "models": JUDGES,
                                "endpoints": endpoints,
                            },
                        }
                    }
                },
                "params.yaml",
            )
            .load(POLICIES)["policy_b"]
            .committee
        )
        assert config.endpoint("json-judge").base_url == second.base_url
        result = run_committee(server, tmp_path, JUDGES, endpoints=config.endpoints)
        assert {r["model"] for r in server.requests} == {"keyword-judge"}
        assert {r["model"] for r in second.requests} == {"json-judge"}
        assert by_prompt(result)["coarse"].tolist() == list(EXPECTED.values())
        assert result.report["committee"]["http_requests"] == len(server.requests) + len(second.requests)


def test_endpoints_must_name_judges_and_reject_unknown_keys() -> None:
    with pytest.raises(ConfigError, match=r"endpoints names \['other'\], which are not judges"):
        CommitteeConfig(base_url="http://x/v1", models=("a",), endpoints={"other": {"base_url": "http://y"}})
    committee_section = {"base_url": "http://x/v1", "models": ["a"], "endpoints": {"a": {"url": "http://y"}}}
    params = {"policies": {"p": {"file": "x", "labeler": "committee", "committee": committee_section}}}
    with pytest.raises(ConfigError, match=r"policies\.p\.committee\.endpoints\.a"):
        ParamsFile(params, "params.yaml").load(POLICIES)


def test_requests_stay_in_flight_up_to_the_window(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.latency_s = 0.05
    extra = [f"Recipe number {i}?" for i in range(20)]
    run_committee(server, tmp_path, ["keyword-judge"], samples=1, max_in_flight=6, pool=committee_pool(extra))
    # The window is kept full (no chunk drains to one straggler) and never exceeded.
    assert server.max_active == 6


def test_retry_after_in_seconds_and_as_an_http_date() -> None:
    now = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
    assert committee.retry_after_seconds("7", now) == 7.0
    assert committee.retry_after_seconds("0.5", now) == 0.5
    assert committee.retry_after_seconds(format_datetime(now + timedelta(seconds=30), usegmt=True), now) == 30
    assert committee.retry_after_seconds(format_datetime(now - timedelta(seconds=30), usegmt=True), now) == 0
    assert committee.retry_after_seconds("soon", now) is None
    assert committee.retry_after_seconds(None, now) is None


def test_backoff_has_full_jitter_and_obeys_retry_after() -> None:
    rng = committee.random.Random(0)
    delays = [committee.backoff_delay(3, 1.0, None, rng) for _ in range(200)]
    assert all(0 <= d <= 8 for d in delays) and len(set(delays)) == 200
    assert max(delays) > 6 and min(delays) < 2  # spread over [0, base * 2^attempt], not one value
    assert committee.backoff_delay(10, 1.0, None, rng) <= committee.MAX_BACKOFF_S
    assert committee.backoff_delay(0, 1.0, 12.0, rng) == 12.0
    # The server's word is kept beyond the jitter cap: coming back earlier only earns another 429.
    assert committee.backoff_delay(0, 1.0, 120.0, rng) == 120.0


def test_a_retry_after_beyond_the_limit_stops_the_run_naming_the_wait(
    server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []
    monkeypatch.setattr(committee.time, "sleep", waits.append)
    server.rate_limited_left = 1
    server.retry_after = "86400"
    with pytest.raises(
        CommitteeError, match=r"HTTP 429.*asks to wait 86400 s \(Retry-After\), more than 600 s"
    ):
        run_committee(server, tmp_path, ["flaky-judge"], samples=1, max_retries=3, max_in_flight=1)
    assert waits == []


def test_a_429_with_an_http_date_retry_after_is_waited_for(
    server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []
    monkeypatch.setattr(committee.time, "sleep", waits.append)
    server.rate_limited_left = 2
    server.retry_after = format_datetime(datetime.now(UTC) + timedelta(seconds=40), usegmt=True)
    run_committee(server, tmp_path, ["flaky-judge"], samples=1, max_retries=3, max_in_flight=1)
    assert len(waits) == 2 and all(30 < w <= 40 for w in waits)


def test_answers_are_committed_in_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_store, "COMMIT_INTERVAL_S", 3600.0)
    monkeypatch.setattr(sqlite_store, "COMMIT_EVERY", 4)
    cache = AnswerCache(tmp_path)
    other_process = sqlite3.connect(cache.path)

    def committed() -> int:
        return other_process.execute("SELECT COUNT(*) FROM answers").fetchone()[0]

    for i in range(3):
        cache.put(f"k{i}", {"answer": "yes"})
    assert committed() == 0
    assert cache.get("k1") == {"answer": "yes"}  # a pending answer is already this run's
    cache.put("k3", {"answer": "no"})
    assert committed() == 4
    cache.put("k4", {"answer": "no"})
    cache.close()
    assert committed() == 5
    assert other_process.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_proxy_from_the_environment_is_used_unless_the_host_is_exempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    assert (
        committee.environment_proxy("https://api.example.com/v1/chat/completions")
        == "http://proxy.example:3128"
    )
    assert committee.environment_proxy("http://127.0.0.1:8000/v1/chat/completions") is None
    client = committee.ChatClient("https://api.example.com/v1", timeout_s=1, max_retries=0)
    assert isinstance(client._pool, committee.urllib3.ProxyManager)
    assert "Proxy-Authorization" not in client._pool.proxy_headers


def test_a_proxy_is_read_as_requests_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    url = "https://api.example.com/v1"
    # Credentials in the URL are sent (urllib3 alone would drop them and get HTTP 407 for every request).
    monkeypatch.setenv("HTTPS_PROXY", "http://alice:s%40cret@proxy.example:3128")
    pool = committee.ChatClient(url, timeout_s=1, max_retries=0)._pool
    assert pool.proxy_headers == committee.urllib3.make_headers(proxy_basic_auth="alice:s@cret")
    # No scheme means http.
    monkeypatch.setenv("HTTPS_PROXY", "proxy.example:3128")
    assert committee.ChatClient(url, timeout_s=1, max_retries=0)._pool.proxy.scheme == "http"
    # A kind urllib3 cannot speak is a config error naming the variable, not a traceback.
    monkeypatch.setenv("HTTPS_PROXY", "socks5://proxy.example:1080")
    with pytest.raises(
        ConfigError, match=r"HTTPS_PROXY=socks5://proxy.example:1080: only http:// and https://"
    ):
        committee.ChatClient(url, timeout_s=1, max_retries=0)


def test_samples_answered_before_a_later_sample_failed_are_kept(
    server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server refuses `n`, so the request's two samples are asked one by one; the second one fails.
    server.n_support = "refuse"
    post = committee.ChatClient.post
    calls = 0

    def third_post_fails(self: committee.ChatClient, body: dict) -> committee.Reply:
        nonlocal calls
        calls += 1
        if calls == 3:  # 1: n=2 (refused), 2: sample 0, 3: sample 1
            raise CommitteeError("judge went away")
        return post(self, body)

    monkeypatch.setattr(committee.ChatClient, "post", third_post_fails)
    with pytest.raises(CommitteeError, match="judge went away"):
        run_committee(server, tmp_path, ["keyword-judge"], samples=2, use_n="auto", max_in_flight=1)
    # Sample 0 was paid for and came from a request of its own: it is in the cache for the rerun.
    assert len(AnswerCache(tmp_path / "cache")) == 1

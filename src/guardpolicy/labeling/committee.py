"""The `committee` labeler: several LLM judges behind an OpenAI-compatible chat-completions endpoint.

Cascaded binary rounds, each asked `samples` times of every judge (seed = sample index):

    unsafe    is the prompt unsafe under this policy?          yes -> compound round, no -> boundary round
    compound  packaged with a benign task / jailbreak wrapper?  yes -> COMPOUND,       no -> HARMFUL
    boundary  sensitive or borderline rather than everyday?     yes -> BOUNDARY_SAFE,  no -> GENERIC_SAFE

The committee's answer in a round is the majority over all judge x sample votes; a tie answers "no" (a claim
needs a strict majority, so a split committee does not escalate a prompt to the more severe / more specific
class). An answer is parsed tolerantly (a leading yes/no word, any case or punctuation, or JSON
`{"answer": ...}`); anything else is garbage and the judge is re-asked (up to `max_retries` times), then the
vote is an abstention. An item with no valid vote in a round is an error. Fleiss' kappa among judges (a
judge's rating = the majority of its own samples) is reported per round.

Answers are cached on disk (one SQLite file in `cache_dir`), so a rerun makes no HTTP call. The key is
the sha256 of the model, round, sample index, temperature, the system prompt (policy question and
definition, class definitions), the round question and the prompt. Pillars and spans of a committee label
are those the policy's rules would give the row for the chosen class (`rules.pillars_for_class`; spans for
unsafe classes).
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import logging
import os
import random
import re
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import urllib3
from tqdm import tqdm

from guardpolicy.config.policies import CommitteeConfig
from guardpolicy.errors import ConfigError, GuardpolicyError
from guardpolicy.inflight import bounded_map
from guardpolicy.labeling.base import Decision, Labeler, PoolRow
from guardpolicy.labeling.kappa import fleiss_kappa
from guardpolicy.labeling.policy import Policy
from guardpolicy.labeling.rules import pillars_for_class
from guardpolicy.shared_cache import cache_folder
from guardpolicy.sqlite_store import BatchedTable, flushed_on_exit
from guardpolicy.taxonomy import Taxonomy

log = logging.getLogger(__name__)

YES, NO = "yes", "no"
ROUND_UNSAFE, ROUND_COMPOUND, ROUND_BOUNDARY = "unsafe", "compound", "boundary"
ROUNDS = (ROUND_UNSAFE, ROUND_COMPOUND, ROUND_BOUNDARY)
ROUND_QUESTIONS = {
    ROUND_UNSAFE: "Under this policy, is the prompt below unsafe (HARMFUL or COMPOUND)?",
    ROUND_COMPOUND: (
        "The prompt below was judged unsafe under this policy. Is its harmful request packaged with "
        "something else, such as a benign task or a jailbreak / role-play wrapper (COMPOUND), rather than "
        "asked on its own (HARMFUL)?"
    ),
    ROUND_BOUNDARY: (
        "The prompt below was judged safe under this policy. Does it touch a sensitive subject, or is it "
        "rude or close to the line, although a helpful answer does no harm (BOUNDARY_SAFE), rather than "
        "being an everyday request (GENERIC_SAFE)?"
    ),
}
# The class a round's committee answer leads to (the unsafe round leads to another round instead).
ROUND_CLASSES = {
    ROUND_COMPOUND: {YES: "COMPOUND", NO: "HARMFUL"},
    ROUND_BOUNDARY: {YES: "BOUNDARY_SAFE", NO: "GENERIC_SAFE"},
}
TIE_RULE = "a round answers yes only with strictly more yes than no votes; a tie (or no majority) is no"
ANSWER_INSTRUCTION = "Answer with exactly one word: yes or no."
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_BACKOFF_S = 60.0
# A server's Retry-After is obeyed as given up to this; a longer one (a daily quota, say) stops the run with
# that wait named instead of sleeping for hours - the answers so far are cached, a later rerun asks the rest.
MAX_RETRY_AFTER_S = 600.0
_LEADING_WORD = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)


class CommitteeError(GuardpolicyError):
    """The committee could not produce a label: an endpoint refused, or an item got no valid vote."""


# ------------------------------------------------------------------------------------------ pure pieces


def system_prompt(policy: Policy, taxonomy: Taxonomy) -> str:
    classes = "\n".join(f"- {name}: {text}" for name, text in taxonomy.coarse_definitions.items())
    return (
        "You are one judge on a content-policy review committee. You judge a single user prompt under the "
        "policy below; you do not answer the prompt.\n\n"
        f"Policy question: {policy.question}\n"
        f"Policy definition: {policy.definition}\n\n"
        f"The classes a prompt falls into under this policy:\n{classes}\n\n"
        f"{ANSWER_INSTRUCTION}"
    )


def user_prompt(round_name: str, prompt: str) -> str:
    return f"{ROUND_QUESTIONS[round_name]}\n\nPrompt to judge:\n<<<\n{prompt}\n>>>"


def parse_answer(text: str | None) -> str | None:
    """'yes' / 'no' from a judge's reply, or None for garbage."""
    if not isinstance(text, str):
        return None
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            payload = json.loads(stripped)
        except json.JSONDecodeError:
            return None
        answer = payload.get("answer") if isinstance(payload, dict) else None
        if isinstance(answer, bool):
            return YES if answer else NO
        return (
            parse_answer(answer) if isinstance(answer, str) and not answer.strip().startswith("{") else None
        )
    match = _LEADING_WORD.match(stripped)
    return match.group(1).lower() if match else None


def committee_says_yes(yes_votes: int, no_votes: int) -> bool:
    """The tie rule: yes needs a strict majority of the valid votes."""
    return yes_votes > no_votes


def cache_key(model: str, round_name: str, sample: int, temperature: float, system: str, prompt: str) -> str:
    material = json.dumps(
        [model, round_name, ROUND_QUESTIONS[round_name], sample, temperature, system, prompt],
        ensure_ascii=False,
    )
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


def judge_ratings(votes: dict[str, list[str | None]], models: Sequence[str]) -> list[int]:
    """One item's [yes, no] judge counts for Fleiss' kappa; a judge rates by the majority of its samples.

    A judge with no valid sample for the item does not rate it.
    """
    ratings = [0, 0]
    for model in models:
        valid = [v for v in votes.get(model, []) if v is not None]
        if valid:
            ratings[0 if committee_says_yes(valid.count(YES), valid.count(NO)) else 1] += 1
    return ratings


# ------------------------------------------------------------------------------------------------- I/O


class AnswerCache:
    """Answers in one SQLite file (`<dir>/answers.sqlite`), keyed by `cache_key`.

    One file rather than one per answer: a full study asks ~10^6 questions, and a directory of a million small
    files is slow to list, copy and back up. Shared by processes on a local disk and written in batches
    (guardpolicy.sqlite_store), so a killed run keeps all but its last uncommitted batch.
    """

    FILE_NAME = "answers.sqlite"

    def __init__(self, directory: str | Path) -> None:
        self._table = BatchedTable(
            Path(directory) / self.FILE_NAME,
            "answers",
            ("key", "record"),
            "key TEXT PRIMARY KEY, record TEXT NOT NULL",
        )
        self.path = self._table.path

    def get(self, key: str) -> dict[str, Any] | None:
        row = self._table.pending(key)
        if row is None:
            rows = self._table.query("SELECT key, record FROM answers WHERE key = ?", (key,))
            row = rows[0] if rows else None
        if row is None:
            return None
        try:
            record = json.loads(row[1])
        except json.JSONDecodeError:
            log.warning("committee cache %s: unreadable entry %s, asking again", self.path, key)
            return None
        return record if isinstance(record, dict) and "answer" in record else None

    def put(self, key: str, record: dict[str, Any]) -> None:
        self._table.add((key, json.dumps(record, sort_keys=True)))

    def put_many(self, records: dict[str, dict[str, Any]]) -> None:
        """Store `records` (key -> record) so that they are committed together, never half of them."""
        self._table.add_many((key, json.dumps(record, sort_keys=True)) for key, record in records.items())

    def flush(self) -> None:
        self._table.flush()

    def __len__(self) -> int:
        return len(self._table)

    def close(self) -> None:
        self._table.close()


def environment_proxy(url: str) -> str | None:
    """The proxy the environment names for `url` (HTTPS_PROXY / HTTP_PROXY), or None (none set, or the host
    is in NO_PROXY). A proxy without a scheme ("proxy:3128") is http, as `requests` reads it."""
    parts = urllib.parse.urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def proxy_pool(proxy: str, url: str, options: dict[str, Any]) -> urllib3.ProxyManager:
    """urllib3's pool through `proxy`, with its user:password (if any) sent as Proxy-Authorization - urllib3
    does not read credentials from the proxy URL, `requests` does."""
    variable = f"{urllib.parse.urlsplit(url).scheme.upper()}_PROXY"
    parts = urllib.parse.urlsplit(proxy)
    headers = {}
    if parts.username is not None:
        credentials = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        headers = urllib3.make_headers(proxy_basic_auth=credentials)
    try:
        return urllib3.ProxyManager(proxy, proxy_headers=headers, **options)
    except urllib3.exceptions.ProxySchemeUnknown as exc:
        raise ConfigError(
            # host:port only - the proxy URL may carry a password.
            f"{variable}={parts.scheme}://{parts.hostname}:{parts.port}: only http:// and https:// proxies "
            f"are supported ({exc}); add the LLM server's host to NO_PROXY to bypass it"
        ) from exc


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """A `Retry-After` header as seconds to wait: delta-seconds or an HTTP-date (RFC 9110); None if absent or
    unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def backoff_delay(attempt: int, base_s: float, retry_after: float | None, rng: random.Random) -> float:
    """Seconds before retry `attempt` (0-based): the server's Retry-After as given when it sent one (coming
    back earlier only earns another refusal), else "full jitter" exponential backoff (uniform in
    [0, base * 2^attempt], capped at MAX_BACKOFF_S) so that many clients refused together do not all come
    back together."""
    if retry_after is not None:
        return retry_after
    return rng.uniform(0.0, min(base_s * 2**attempt, MAX_BACKOFF_S))


@dataclass(frozen=True)
class Reply:
    """An HTTP reply: status, headers, body bytes."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """The body decoded as JSON; raises ValueError when it is not."""
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class ChatClient:
    """POST {base_url}/chat/completions; retries 429 / 5xx / connection errors with backoff (Retry-After).

    On urllib3's thread-safe connection pool (one keep-alive connection per request in flight) rather than
    `requests`: measured here, `requests` tops out near 340 requests/s on one core, urllib3 near 840.
    """

    # Who answers (messages, logs) and what a failure raises; the open-guard server client overrides both.
    role = "judge"
    error: type[Exception] = CommitteeError

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float,
        max_retries: int,
        api_key: str | None = None,
        backoff_s: float = 1.0,
        max_connections: int = 16,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        # Retries and redirects are ours (counted, logged, Retry-After), not urllib3's. A proxy named by the
        # environment (HTTPS_PROXY / HTTP_PROXY, not for a NO_PROXY host) is used as `requests` would.
        options = {"maxsize": max_connections, "retries": False, "timeout": urllib3.Timeout(total=timeout_s)}
        proxy = environment_proxy(self.url)
        self._pool = proxy_pool(proxy, self.url, options) if proxy else urllib3.PoolManager(**options)
        self._count_lock = threading.Lock()
        # Every POST sent, retries included (a report statistic; a cached rerun sends none).
        self.requests_sent = 0
        # Jitter only spreads retries in time; it never changes an answer, so it needs no seed.
        self._jitter = random.Random()

    def _wait(self, attempt: int, reply: Reply | None, who: str, problem: str) -> None:
        retry_after = retry_after_seconds(reply.headers.get("Retry-After")) if reply is not None else None
        if retry_after is not None and retry_after > MAX_RETRY_AFTER_S:
            raise self.error(
                f"{who}: {problem}; the server asks to wait {retry_after:.0f} s (Retry-After), more than "
                f"{MAX_RETRY_AFTER_S:.0f} s: rerun later (the answers so far are cached)"
            )
        with self._count_lock:
            delay = backoff_delay(attempt, self.backoff_s, retry_after, self._jitter)
        time.sleep(delay)

    def complete(
        self, model: str, messages: list[dict[str, str]], *, temperature: float, max_tokens: int, seed: int
    ) -> str | None:
        """The assistant's reply text, or None when the response has none (counted as garbage)."""
        body = {
            "model": model,
            "messages": messages,
            "temperature": temperature,
            "max_tokens": max_tokens,
            "seed": seed,
        }
        return _reply_text(self.post(body))

    def post(self, body: dict[str, Any]) -> Reply:
        """POST `body` until a 200 reply: connection errors and RETRY_STATUSES are retried with backoff (and
        Retry-After), any other status or the last failure raises `error`, naming the `role` and model."""
        who = f"{self.role} {body['model']!r} at {self.url}"
        payload = json.dumps(body).encode("utf-8")
        problem = ""
        for attempt in range(self.max_retries + 1):
            reply = None
            with self._count_lock:
                self.requests_sent += 1
            try:
                response = self._pool.request("POST", self.url, body=payload, headers=self.headers)
            except urllib3.exceptions.HTTPError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                reply = Reply(response.status, response.headers, response.data)
                if reply.status == 200:
                    return reply
                problem = f"HTTP {reply.status}: {reply.text[:200]!r}"
                if reply.status not in RETRY_STATUSES:
                    refused = self.error(f"{who}: {problem}")
                    refused.status = reply.status  # type: ignore[attr-defined]
                    raise refused
            if attempt < self.max_retries:
                log.warning(
                    "%s %s: %s; retry %d/%d", self.role, body["model"], problem, attempt + 1, self.max_retries
                )
                self._wait(attempt, reply, who, problem)
        raise self.error(f"{who}: {problem} after {self.max_retries} retries")


def _reply_text(response: Reply) -> str | None:
    replies = _reply_texts(response)
    return replies[0] if replies else None


def _reply_texts(response: Reply) -> list[str | None]:
    """Each choice's text in `index` order (None for a choice without text); [] when the reply has none."""
    try:
        choices = response.json()["choices"]
        ordered = sorted(choices, key=lambda choice: choice.get("index", 0))
    except (ValueError, KeyError, TypeError, AttributeError):
        return []
    texts: list[str | None] = []
    for choice in ordered:
        try:
            content = choice["message"]["content"]
        except (KeyError, TypeError):
            content = None
        texts.append(content if isinstance(content, str) else None)
    return texts


@dataclass(frozen=True)
class _Task:
    round_name: str
    item: int
    model: str
    sample: int


@dataclass(frozen=True)
class _Request:
    """What one HTTP request asks: samples of one judge on one item in one round (all of them with `n`)."""

    round_name: str
    item: int
    model: str
    samples: tuple[int, ...]


class CommitteeLabeler(Labeler):
    kind = "committee"

    def __init__(
        self,
        policy: Policy,
        taxonomy: Taxonomy,
        version: str,
        config: CommitteeConfig,
        *,
        backoff_s: float = 1.0,
    ) -> None:
        super().__init__(policy, taxonomy, version)
        self.config = config
        # One client per endpoint (judges sharing one keep one connection pool).
        clients: dict[tuple[str, str | None], ChatClient] = {}
        self.clients: dict[str, ChatClient] = {}
        for model in config.models:
            endpoint = config.endpoint(model)
            where = (endpoint.base_url, endpoint.api_key_env)
            if where not in clients:
                api_key = os.environ.get(endpoint.api_key_env) if endpoint.api_key_env else None
                clients[where] = ChatClient(
                    endpoint.base_url,
                    timeout_s=config.timeout_s,
                    max_retries=config.max_retries,
                    api_key=api_key,
                    backoff_s=backoff_s,
                    max_connections=config.max_in_flight,
                )
            self.clients[model] = clients[where]
        # Endpoints (by URL) found not to honour `n` in `auto` mode: one sample per request from then on.
        self._no_n: set[str] = set()
        self._no_n_lock = threading.Lock()
        self.cache = AnswerCache(
            cache_folder(config.cache_dir, f"policies.{policy.name}.committee.cache_dir")
        )
        self.system = system_prompt(policy, taxonomy)

    @property
    def requests_sent(self) -> int:
        return sum(client.requests_sent for client in {id(c): c for c in self.clients.values()}.values())

    def _key(self, round_name: str, model: str, sample: int, prompt: str) -> str:
        return cache_key(model, round_name, sample, self.config.temperature, self.system, prompt)

    def _messages(self, round_name: str, prompt: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self.system},
            {"role": "user", "content": user_prompt(round_name, prompt)},
        ]

    def _uses_n(self, client: ChatClient, samples: int) -> bool:
        if samples < 2 or self.config.use_n == "never":
            return False
        with self._no_n_lock:
            return self.config.use_n == "always" or client.url not in self._no_n

    def _give_up_n(self, client: ChatClient, why: str) -> None:
        with self._no_n_lock:
            if client.url not in self._no_n:
                self._no_n.add(client.url)
                log.warning("committee: %s %s; asking one sample per request from now on", client.url, why)

    def _ask(self, request: _Request, prompt: str) -> dict[int, dict[str, Any]]:
        """Answer records of `request.samples` (all missing from the cache), each stored as it arrives."""
        client = self.clients[request.model]
        messages = self._messages(request.round_name, prompt)
        first: dict[int, str | None] = {}
        refusal = None
        if self._uses_n(client, len(request.samples)):
            replies, refusal = self._ask_n(client, request, messages)
            first = dict(zip(request.samples, replies, strict=False))
        records: dict[int, dict[str, Any]] = {}
        try:
            for sample in request.samples:
                records[sample] = self._settle(client, request, messages, sample, first)
                if refusal is not None:
                    # The same request without `n` was answered, so the refusal was about `n` (not a bad key,
                    # an unknown model or an over-long prompt, which fail this way too and stop the run).
                    self._give_up_n(client, refusal)
                    refusal = None
        finally:
            # The samples of one request are stored together: with `n` they are the choices of one seeded
            # request, and a resumed run that found only some of them would draw the rest from another seed.
            # Samples asked one per request are kept when a later one fails: they were paid for.
            if len(records) == len(request.samples) or not first:
                self.cache.put_many(
                    {self._key(request.round_name, request.model, s, prompt): r for s, r in records.items()}
                )
        return records

    def _ask_n(
        self, client: ChatClient, request: _Request, messages: list[dict[str, str]]
    ) -> tuple[list, str | None]:
        """The replies of one request for all samples (fewer when the endpoint ignores `n`, none when it
        refused), and in `auto` mode why `n` should be given up once a request without it is answered."""
        n = len(request.samples)
        body = self._body(request.model, messages, seed=request.samples[0])
        body["n"] = n
        try:
            response = client.post(body)
        except CommitteeError as exc:
            if self.config.use_n == "auto" and 400 <= getattr(exc, "status", 0) < 500:
                return [], f"refused n={n} ({exc})"
            raise
        replies = _reply_texts(response)
        if len(replies) < n:
            if self.config.use_n == "always":
                raise CommitteeError(
                    f"judge {request.model!r} at {client.url}: asked n={n}, got "
                    f"{len(replies)} choice(s); set committee.use_n to auto or never"
                )
            if replies:
                # Some choices but not n: the server ignores `n` (transformers serve does).
                self._give_up_n(client, f"returned {len(replies)} choice(s) for n={n}")
            else:
                return [], f"returned no choice for n={n}"
        return replies, None

    def _settle(
        self,
        client: ChatClient,
        request: _Request,
        messages: list[dict[str, str]],
        sample: int,
        first: dict[int, str | None],
    ) -> dict[str, Any]:
        """One sample's answer record: its reply from an `n` request if there was one, else its own request;
        garbage is re-asked with a reminder (up to max_retries), then abstains."""
        replies: list[str | None] = []
        answer = None
        for attempt in range(self.config.max_retries + 1):
            if attempt == 0 and sample in first:
                reply = first[sample]
            else:
                reply = _reply_text(client.post(self._body(request.model, messages, seed=sample)))
            replies.append(reply)
            answer = parse_answer(reply)
            if answer is not None:
                break
            # With a fixed seed the same request would give the same garbage; the reminder changes it.
            messages = [
                *messages,
                {"role": "assistant", "content": reply or ""},
                {"role": "user", "content": ANSWER_INSTRUCTION},
            ]
        return {
            "answer": answer,
            "garbage": sum(parse_answer(r) is None for r in replies),
            "calls": len(replies),
            "replies": replies,
        }

    def _body(self, model: str, messages: list[dict[str, str]], *, seed: int) -> dict[str, Any]:
        return {
            "model": model,
            "messages": messages,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
            "seed": seed,
        }

    def _run(self, tasks: list[_Task], rows: Sequence[PoolRow], label: str) -> dict[_Task, tuple[dict, bool]]:
        """Every task's (answer record, came from the cache): cached ones read, the rest asked with up to
        `max_in_flight` requests in flight, each answer stored as it arrives."""
        results: dict[_Task, tuple[dict, bool]] = {}
        missing: dict[tuple[str, int, str], list[int]] = {}
        for task in tasks:
            prompt = rows[task.item].prompt
            cached = self.cache.get(self._key(task.round_name, task.model, task.sample, prompt))
            if cached is not None:
                results[task] = (cached, True)
            else:
                missing.setdefault((task.round_name, task.item, task.model), []).append(task.sample)
        requests_: list[_Request] = []
        for (round_name, item, model), samples in missing.items():
            if self._uses_n(self.clients[model], len(samples)):
                requests_.append(_Request(round_name, item, model, tuple(samples)))
            else:
                requests_ += [_Request(round_name, item, model, (sample,)) for sample in samples]
        if missing:
            log.info(
                "%s: %d answers cached, %d to ask in %d request(s), up to %d in flight",
                label,
                len(results),
                len(tasks) - len(results),
                len(requests_),
                self.config.max_in_flight,
            )
        # Whatever arrived is kept, also when a judge's endpoint finally failed.
        with (
            flushed_on_exit(self.cache),
            tqdm(total=len(tasks), initial=len(results), desc=label, unit="answer") as bar,
        ):
            asked = bounded_map(
                lambda request: self._ask(request, rows[request.item].prompt),
                requests_,
                self.config.max_in_flight,
            )
            for request, records in asked:
                for sample, record in records.items():
                    task = _Task(request.round_name, request.item, request.model, sample)
                    results[task] = (record, False)
                bar.update(len(records))
        return results

    def decide(
        self, rows: Sequence[PoolRow], pool: pd.DataFrame, pool_file: str
    ) -> tuple[list[Decision], dict[str, Any]]:
        models = self.config.models
        samples = range(self.config.samples)
        votes: dict[str, dict[int, dict[str, list[str | None]]]] = {r: {} for r in ROUNDS}
        stats = {"cache_hits": 0}
        requests_before = self.requests_sent
        judges = {m: Counter({"answers": 0, "garbage": 0, "abstentions": 0, "yes": 0}) for m in models}

        def run_round(round_items: dict[str, list[int]]) -> None:
            tasks = [
                _Task(round_name, item, model, sample)
                for round_name, items in round_items.items()
                for item in items
                for model in models
                for sample in samples
            ]
            names = "+".join(f"{r}({len(i)})" for r, i in round_items.items())
            log.info(
                "committee %s: rounds %s, %d answers from %d judges x %d samples",
                self.policy.name,
                names,
                len(tasks),
                len(models),
                len(samples),
            )
            results = self._run(tasks, rows, f"committee {self.policy.name} {names}")
            for task in tasks:  # task order, not completion order, so the outcome is deterministic
                record, from_cache = results[task]
                stats["cache_hits"] += from_cache
                judge = judges[task.model]
                judge["answers"] += 1
                judge["garbage"] += record["garbage"]
                judge["abstentions"] += record["answer"] is None
                judge["yes"] += record["answer"] == YES
                item_votes = votes[task.round_name].setdefault(task.item, {})
                item_votes.setdefault(task.model, [None] * len(samples))[task.sample] = record["answer"]
            for round_name, items in round_items.items():
                self._require_votes(round_name, items, votes[round_name], rows)

        run_round({ROUND_UNSAFE: list(range(len(rows)))})
        unsafe = {i: self._says_yes(votes[ROUND_UNSAFE][i]) for i in range(len(rows))}
        run_round(
            {
                ROUND_COMPOUND: [i for i in range(len(rows)) if unsafe[i]],
                ROUND_BOUNDARY: [i for i in range(len(rows)) if not unsafe[i]],
            }
        )
        decisions = []
        for i, row in enumerate(rows):
            second = ROUND_COMPOUND if unsafe[i] else ROUND_BOUNDARY
            coarse = ROUND_CLASSES[second][YES if self._says_yes(votes[second][i]) else NO]
            tally = f"{_tally(ROUND_UNSAFE, votes[ROUND_UNSAFE][i])}; {_tally(second, votes[second][i])}"
            decisions.append(
                Decision(coarse=coarse, pillars=pillars_for_class(self.policy, row, coarse), rule=tally)
            )
        stats["http_requests"] = self.requests_sent - requests_before
        return decisions, {"committee": self._report(votes, judges, stats)}

    @staticmethod
    def _says_yes(item_votes: dict[str, list[str | None]]) -> bool:
        flat = [v for answers in item_votes.values() for v in answers]
        return committee_says_yes(flat.count(YES), flat.count(NO))

    def _require_votes(
        self, round_name: str, items: list[int], round_votes: dict[int, dict], rows: Sequence[PoolRow]
    ) -> None:
        empty = [
            rows[i].id
            for i in items
            if all(v is None for answers in round_votes[i].values() for v in answers)
        ]
        if empty:
            raise CommitteeError(
                f"policy {self.policy.name}, round '{round_name}': no valid vote for {len(empty)} item(s), "
                f"e.g. id {empty[0]} (others: {empty[1:5]}); every judge of {list(self.config.models)} gave "
                f"unparseable answers after {self.config.max_retries} re-ask(s)"
            )

    def _report(
        self, votes: dict[str, dict[int, dict]], judges: dict[str, Counter], stats: dict[str, int]
    ) -> dict[str, Any]:
        rounds = {}
        for round_name in ROUNDS:
            items = votes[round_name]
            ratings = np.array(
                [judge_ratings(items[i], self.config.models) for i in sorted(items)], dtype=int
            ).reshape(-1, 2)  # (n_items, 2): judges rating yes / no
            flat = [
                [v for answers in items[i].values() for v in answers if v is not None] for i in sorted(items)
            ]
            kappa = fleiss_kappa(ratings)
            rounds[round_name] = {
                "items": len(items),
                "yes": sum(committee_says_yes(f.count(YES), f.count(NO)) for f in flat),
                "ties": sum(f.count(YES) == f.count(NO) for f in flat),
                "fleiss_kappa": None if kappa is None else round(kappa, 6),
                "kappa_items": int((ratings.sum(axis=1) >= 2).sum()),
            }
        return {
            "models": list(self.config.models),
            "samples": self.config.samples,
            "temperature": self.config.temperature,
            "tie_rule": TIE_RULE,
            "rounds": rounds,
            "judges": {model: dict(sorted(counter.items())) for model, counter in judges.items()},
            "http_requests": stats["http_requests"],
            "cache_hits": stats["cache_hits"],
        }


def _tally(round_name: str, item_votes: dict[str, list[str | None]]) -> str:
    flat = [v for answers in item_votes.values() for v in answers]
    return f"{round_name} yes={flat.count(YES)} no={flat.count(NO)} abstain={flat.count(None)}"

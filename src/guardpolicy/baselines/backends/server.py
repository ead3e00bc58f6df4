"""`OpenAIServerBackend`: a guard served behind POST {base_url}/chat/completions (vLLM's server, or any
compatible one).

Each request asks for `logprobs` and a small `top_logprobs` -- never full vocabularies -- and passes the
adapter's template kwargs as vLLM's `chat_template_kwargs`. The server renders the template, so the template
fingerprint here is the hash of what the client controls (messages for a probe prompt and the kwargs); the
server-side template is pinned by the model id + revision in the cache key. A reply that is not JSON or lacks
the answer becomes an empty Generation with finish_reason "malformed", so the parser counts it as a failed
parse. The candidates' log-probs at the decision position (see `guardpolicy.baselines.backends`) are read
from the returned alternatives (`match_decision_logprobs`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Iterable, Sequence
from typing import Any

from tqdm import tqdm

from guardpolicy.baselines.backends.common import PROBE_PROMPT, BackendError, all_answered, log_throughput
from guardpolicy.baselines.base import Decoding, Generation, GuardAdapter, OnGeneration, PromptTokens
from guardpolicy.errors import ConfigError
from guardpolicy.inflight import bounded_map
from guardpolicy.labeling.committee import ChatClient

log = logging.getLogger(__name__)

MALFORMED = "malformed"
# OpenAI's limit on `top_logprobs` (and vLLM's default --max-logprobs).
MAX_TOP_LOGPROBS = 20
# Leading characters that only mark a word boundary in a token's text: whitespace, and the raw byte-level
# (GPT-2 "Ġ" space, "Ċ" newline) and SentencePiece ("▁") markers some servers return undecoded.
_BOUNDARY_MARKERS = " \t\r\nĠĊ▁"


# ------------------------------------------------------------------------------------------ pure pieces


def logsumexp(values: Iterable[float]) -> float:
    values = list(values)
    peak = max(values)
    return peak + math.log(sum(math.exp(v - peak) for v in values))


def strip_boundary_marker(token: str) -> str:
    return token.lstrip(_BOUNDARY_MARKERS)


def match_decision_logprobs(
    candidates: Sequence[str], alternatives: Iterable[tuple[str, float]]
) -> dict[str, float]:
    """The candidates' log-probs from a server's (token text, logprob) alternatives at the decision position.

    A token counts for a candidate when its text, without leading space / boundary markers, starts the
    candidate word (" Cont" for "Controversial": the word may take several tokens) and starts no other
    candidate (an ambiguous token says nothing about which answer it begins). Spellings of the same word
    (" Safe", "Safe") add up. A candidate missing from the alternatives is left out: its probability is
    below the smallest one returned.
    """
    found: dict[str, list[float]] = {}
    seen: set[str] = set()
    for token, logprob in alternatives:
        word = strip_boundary_marker(token)
        if not word or token in seen:
            continue
        seen.add(token)
        owners = [candidate for candidate in candidates if candidate.startswith(word)]
        if len(owners) == 1:
            found.setdefault(owners[0], []).append(float(logprob))
    return {candidate: logsumexp(found[candidate]) for candidate in candidates if candidate in found}


def _check_top_logprobs(decoding: Decoding) -> None:
    if not 1 <= decoding.top_logprobs <= MAX_TOP_LOGPROBS:
        raise ConfigError(
            f"decoding.top_logprobs must be between 1 and {MAX_TOP_LOGPROBS} (only the few candidate answer "
            f"tokens are needed), got {decoding.top_logprobs}"
        )


# ------------------------------------------------------------------------------ OpenAI-compatible server


class _CompletionsClient(ChatClient):
    """The committee's chat client (pooled connections, backoff, Retry-After), any request body."""

    role = "guard"
    error = BackendError

    def post_json(self, body: dict[str, Any]) -> Any:
        """The decoded JSON reply, or None when a 200 reply is not JSON; raises BackendError on failure."""
        response = self.post(body)
        try:
            return response.json()
        except ValueError:
            return None


def generation_from_reply(reply: Any, adapter: GuardAdapter, candidates: Sequence[str]) -> Generation:
    """A chat-completions reply as a Generation; no readable answer -> empty text, finish_reason malformed."""
    try:
        choice = reply["choices"][0]
        text = choice["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return Generation("", finish_reason=MALFORMED)
    if not isinstance(text, str):
        return Generation("", finish_reason=MALFORMED)
    finish_reason = choice.get("finish_reason")
    decision_logprobs = _decision_logprobs(choice.get("logprobs"), adapter, candidates) if candidates else {}
    return Generation(text, decision_logprobs, finish_reason if isinstance(finish_reason, str) else None)


def _decision_logprobs(logprobs: Any, adapter: GuardAdapter, candidates: Sequence[str]) -> dict[str, float]:
    """Read `logprobs.content[i].top_logprobs` at the decision position (see the module docstring)."""
    if logprobs is None:
        # A server that ignores `logprobs` (transformers serve) sends none: nothing to read, and not an error
        # per reply; `generate` says so once per run.
        return {}
    try:
        entries = logprobs["content"]
        before = ""
        for entry in entries:
            token = entry["token"]
            if strip_boundary_marker(token) and adapter.decision_position(before):
                alternatives = [(entry["token"], entry["logprob"])]
                alternatives += [(alt["token"], alt["logprob"]) for alt in entry.get("top_logprobs") or []]
                return match_decision_logprobs(candidates, alternatives)
            before += token
    except (KeyError, TypeError, ValueError) as exc:
        log.warning("unreadable logprobs in a reply (%s: %s); keeping the text only", type(exc).__name__, exc)
    return {}


class OpenAIServerBackend:
    """A guard served behind POST {base_url}/chat/completions (e.g. `vllm serve <model> --revision <sha>`)."""

    uses_decoding = True

    def __init__(
        self,
        base_url: str,
        model: str,
        revision: str | None = None,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 60,
        max_retries: int = 3,
        max_in_flight: int = 16,
        backoff_s: float = 1.0,
    ) -> None:
        if max_in_flight < 1:
            raise ConfigError(f"server backend max_in_flight must be at least 1, got {max_in_flight}")
        if max_retries < 0:
            raise ConfigError(f"server backend max_retries must be >= 0, got {max_retries}")
        self.model_id = model
        self.revision = revision
        self.max_in_flight = max_in_flight
        api_key = os.environ.get(api_key_env) if api_key_env else None
        self.client = _CompletionsClient(
            base_url,
            timeout_s=timeout_s,
            max_retries=max_retries,
            api_key=api_key,
            backoff_s=backoff_s,
            max_connections=max_in_flight,
        )
        # Prompts answered by the server so far (a cached rerun sends none; retries: client.requests_sent).
        self.generated = 0

    def request_body(self, adapter: GuardAdapter, prompt: str, decoding: Decoding) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model_id,
            "messages": adapter.messages(prompt),
            "temperature": decoding.temperature,
            "max_tokens": decoding.max_new_tokens,
        }
        if adapter.decision_tokens():
            body["logprobs"] = True
            body["top_logprobs"] = decoding.top_logprobs
        kwargs = adapter.template_kwargs()
        if kwargs:
            body["chat_template_kwargs"] = kwargs
        return body

    def template_fingerprint(self, adapter: GuardAdapter) -> str:
        material = {
            "renderer": "openai-compatible server",
            "messages": adapter.messages(PROBE_PROMPT),
            "chat_template_kwargs": adapter.template_kwargs(),
        }
        text = json.dumps(material, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def prompt_tokens(self, adapter: GuardAdapter, prompts: list[str]) -> PromptTokens:
        """Not tokenised here (the server renders and tokenises); the whole prompt is sent, never cut."""
        return PromptTokens(n_tokens=None)

    def _complete(self, adapter: GuardAdapter, body: dict[str, Any]) -> Generation:
        return generation_from_reply(self.client.post_json(body), adapter, adapter.decision_tokens())

    def generate(
        self,
        adapter: GuardAdapter,
        prompts: list[str],
        decoding: Decoding,
        on_generation: OnGeneration | None = None,
    ) -> list[Generation]:
        _check_top_logprobs(decoding)
        if not prompts:
            return []
        started = time.perf_counter()
        results: list[Generation | None] = [None] * len(prompts)
        # Up to max_in_flight requests at once, refilled as each reply arrives; on a failure nothing more is
        # sent, and what arrived before it has been handed to `on_generation`.
        replies = bounded_map(
            lambda i: self._complete(adapter, self.request_body(adapter, prompts[i], decoding)),
            range(len(prompts)),
            self.max_in_flight,
        )
        with tqdm(total=len(prompts), desc=f"{self.model_id} ({adapter.family})", unit="prompt") as bar:
            for index, generation in replies:
                results[index] = generation
                if on_generation is not None:
                    on_generation(index, generation)
                bar.update()
        malformed = sum(r is not None and r.finish_reason == MALFORMED for r in results)
        if malformed:
            log.warning("%s: %d of %d replies were malformed", self.model_id, malformed, len(prompts))
        answered = [r for r in results if r is not None and r.finish_reason != MALFORMED]
        if adapter.decision_tokens() and answered and not any(r.decision_logprobs for r in answered):
            log.warning(
                "%s: none of %d replies carried log-probabilities at the decision token (the server may "
                "ignore `logprobs`, as transformers serve does); unsafe_score stays empty, decisions come "
                "from the text",
                self.model_id,
                len(answered),
            )
        self.generated += len(prompts)
        seconds = time.perf_counter() - started
        log_throughput(self.model_id, adapter.family, len(prompts), seconds, self.client.url)
        return all_answered(results)

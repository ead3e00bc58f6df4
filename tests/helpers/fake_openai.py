"""One fake OpenAI-compatible chat-completions server for every test that talks to an LLM endpoint: the
committee's judges and the open guards' server backend.

It listens on 127.0.0.1 (a free port), records every request, and answers by the `model` field:
- `*-judge`: a committee judge answering the committee's yes/no round questions in several styles
  (`keyword-judge` plain, `json-judge` JSON, `contrarian-judge` the opposite, `garbage-judge` no answer);
- the guards: `qwen-guard` (Qwen3Guard-style `Safety: ...` with decision log-probs), `llama-guard`
  (`safe` / `unsafe\\nS1`), and broken ones: `broken-guard` (HTTP 500), `not-json-guard`, `no-choices-guard`,
  `empty-guard`;
- `flaky-*`: HTTP 429 (with `Retry-After: retry_after` when set) while `rate_limited_left` > 0, then answers
  like its family (`flaky-judge` as a keyword judge in other words, `flaky-guard` as `qwen-guard`);
- `missing-*` or any path other than /v1/chat/completions: HTTP 404.

A judge honours `n` (n identical choices) like vLLM, unless `n_support` is "ignore" (one choice, as some
servers do) or "refuse" (HTTP 400 for n > 1). `latency_s` delays every answer (kill-and-resume tests).
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from guardpolicy.labeling.committee import ROUND_QUESTIONS

# What each committee round's keyword judge answers yes to.
ROUND_KEYWORDS = {"unsafe": ("bomb", "malware"), "compound": ("story",), "boundary": ("history",)}

QWEN_ANSWERS = ("Safe", "Unsafe", "Controversial")
# The alternatives a Qwen3Guard server returns after "Safety:", most likely first (probabilities).
UNSAFE_ALTERNATIVES = [(" Unsafe", 0.70), (" Cont", 0.20), (" Safe", 0.06), ("Safe", 0.02), ("\n", 0.01)]
SAFE_ALTERNATIVES = [(" Safe", 0.90), (" Unsafe", 0.05), (" Cont", 0.03), (" S", 0.01), ("Safe", 0.005)]


class FakeOpenAIServer(ThreadingHTTPServer):
    """Speaks POST /v1/chat/completions; see the module docstring for what each model answers."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.rate_limited_left = 0  # the next N requests to a `flaky-*` model get HTTP 429
        self.retry_after: str | None = None  # the Retry-After header of those 429s
        self.n_support = "honour"  # honour | ignore | refuse | empty (no choice at all when n > 1)
        # honour | null: `"logprobs": null` in every guard choice, as transformers serve answers
        self.logprobs_support = "honour"
        self.latency_s = 0.0
        self.active = 0  # requests being answered now, and the most at once (in-flight windows)
        self.max_active = 0

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client killed mid-request (kill-and-resume tests) is expected; anything else is reported.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


@contextlib.contextmanager
def serving() -> Iterator[FakeOpenAIServer]:
    """A running server, shut down and closed on exit."""
    server = FakeOpenAIServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# ------------------------------------------------------------------------------------ committee judges


def keyword_answer(messages: list[dict[str, str]]) -> bool:
    question = messages[1]["content"]
    round_name = next(r for r, text in ROUND_QUESTIONS.items() if text in question)
    judged = question.split("<<<", 1)[1].lower()
    return any(word in judged for word in ROUND_KEYWORDS[round_name])


def judge_content(model: str, messages: list[dict[str, str]]) -> str:
    if model.startswith("garbage"):  # garbage-judge, garbage-2-judge, ...: never a yes or a no
        return "I would rather not say."
    says_yes = keyword_answer(messages)
    return {
        "keyword-judge": "Yes." if says_yes else "no",
        "flaky-judge": "yes" if says_yes else "No, it is not.",
        "json-judge": json.dumps({"answer": "YES" if says_yes else "No"}),
        "contrarian-judge": "no" if says_yes else "YES!",
        "garbage-judge": "I would rather not say.",
    }[model]


# ------------------------------------------------------------------------------------------- guards


def logprob_entry(token: str, alternatives: list[tuple[str, float]], top_n: int) -> dict[str, Any]:
    chosen = dict(alternatives).get(token, 0.99)
    return {
        "token": token,
        "logprob": math.log(chosen),
        "bytes": list(token.encode("utf-8")),
        "top_logprobs": [
            {"token": t, "logprob": math.log(p), "bytes": list(t.encode("utf-8"))}
            for t, p in alternatives[:top_n]
        ],
    }


def guard_choice(model: str, prompt: str, top_n: int) -> dict[str, Any]:
    """A choice in the OpenAI format with logprobs: Qwen3Guard-style or Llama Guard-style answers."""
    unsafe = "bomb" in prompt
    if model == "llama-guard":
        tokens = ["\n\n", "unsafe", "\n", "S", "1"] if unsafe else ["\n\n", "safe"]
        decision = 1
        alternatives = [("unsafe", 0.8), ("safe", 0.15)] if unsafe else [("safe", 0.97), ("unsafe", 0.02)]
    else:
        label, category = (" Unsafe", " Violent") if unsafe else (" Safe", " None")
        tokens = ["Safety", ":", label, "\n", "Categories", ":", category]
        decision = 2
        alternatives = UNSAFE_ALTERNATIVES if unsafe else SAFE_ALTERNATIVES
    content = [
        logprob_entry(token, alternatives if step == decision else [(token, 0.99)], top_n)
        for step, token in enumerate(tokens)
    ]
    return {
        "index": 0,
        "message": {"role": "assistant", "content": "".join(tokens)},
        "logprobs": {"content": content},
        "finish_reason": "stop",
    }


def guard_response(model: str, request: dict[str, Any]) -> tuple[int, bytes]:
    if model == "broken-guard":
        return 500, b'{"error": {"message": "engine died"}}'
    if model == "not-json-guard":
        return 200, b"<html>gateway says hello</html>"
    if model == "no-choices-guard":
        return 200, json.dumps({"id": "x", "choices": []}).encode()
    if model == "empty-guard":
        choice = {"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}
        return 200, json.dumps({"choices": [choice]}).encode()
    prompt = request["messages"][-1]["content"]
    choice = guard_choice(model, prompt, request.get("top_logprobs", 0))
    if not request.get("logprobs"):
        choice.pop("logprobs")
    return 200, json.dumps({"id": "cmpl-1", "object": "chat.completion", "choices": [choice]}).encode()


# ------------------------------------------------------------------------------------------ the handler


class _Handler(BaseHTTPRequestHandler):
    server: FakeOpenAIServer

    def log_message(self, *args: Any) -> None:  # keep the test output clean
        pass

    def _release(self) -> None:
        """This request stops counting as in flight. Called before its answer is written: the client frees
        its slot only after reading the answer, so a next request can never find this one still counted
        (counting until the handler returned let `max_active` exceed the client's window by a race)."""
        if getattr(self, "_in_flight", False):
            self._in_flight = False
            with self.server.lock:
                self.server.active -= 1

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self._release()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send(
                200, json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]}).encode()
            )
        else:
            self._send(404, json.dumps({"error": {"message": f"no {self.path}"}}).encode())

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        model = request["model"]
        with self.server.lock:
            self.server.requests.append({**request, "authorization": self.headers.get("Authorization")})
            rate_limited = model.startswith("flaky-") and self.server.rate_limited_left > 0
            if rate_limited:
                self.server.rate_limited_left -= 1
        with self.server.lock:
            self.server.active += 1
            self.server.max_active = max(self.server.max_active, self.server.active)
        self._in_flight = True
        try:
            if self.server.latency_s:
                time.sleep(self.server.latency_s)
            self._answer(request, model, rate_limited)
        finally:
            self._release()

    def _answer(self, request: dict[str, Any], model: str, rate_limited: bool) -> None:
        n = int(request.get("n") or 1)
        if self.path != "/v1/chat/completions" or model.startswith("missing-"):
            self._send(404, json.dumps({"error": {"message": f"model {model} not found"}}).encode())
        elif rate_limited:
            headers = {"Retry-After": self.server.retry_after} if self.server.retry_after else None
            self._send(429, json.dumps({"error": {"message": "slow down"}}).encode(), headers)
        elif model.endswith("-judge") and n > 1 and self.server.n_support == "refuse":
            self._send(400, json.dumps({"error": {"message": "n > 1 is not supported"}}).encode())
        elif model.endswith("-judge"):
            content = judge_content(model, request["messages"])
            count = {"ignore": 1, "empty": 0 if n > 1 else 1}.get(self.server.n_support, n)
            message = {"role": "assistant", "content": content}
            choices = [{"index": i, "message": message} for i in range(count)]
            self._send(200, json.dumps({"choices": choices}).encode())
        else:
            status, body = guard_response("qwen-guard" if model == "flaky-guard" else model, request)
            if self.server.logprobs_support == "null" and status == 200:
                reply = json.loads(body)
                for choice in reply["choices"]:
                    choice["logprobs"] = None
                body = json.dumps(reply).encode()
            self._send(status, body)

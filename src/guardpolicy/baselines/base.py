"""The interface every open guard baseline shares: prompt in -> label, unsafe score, raw output, parse status.

A *guard adapter* knows one guard family's prompt format and output format (Qwen3Guard-Gen, Granite Guardian,
Llama Guard, an encoder sequence classifier); a *backend* runs a model (local transformers, or an
OpenAI-compatible server such as vLLM's) and returns raw generations with the few log-probabilities the
adapter asks for. The adapter turns a raw generation into a `GuardVerdict`; a mapping policy turns the
verdict into a binary decision (Qwen3Guard's Controversial: safe under `relaxed`, unsafe under `strict`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

# What the parser made of a raw output: `ok`, `partial` (a label but something expected was missing, e.g. no
# category line), `failed` (no label could be read: empty, truncated, or another format).
ParseStatus = Literal["ok", "partial", "failed"]
# What a failed parse counts as in the binary decision (never silently dropped).
ParseFailurePolicy = Literal["unsafe", "safe", "exclude"]
# The guard's own label space, normalised: `controversial` only for guards that have a middle class.
GuardLabel = Literal["safe", "unsafe", "controversial"]


@dataclass(frozen=True)
class Generation:
    """One raw model answer as a backend returns it."""

    text: str
    # Log-probabilities of the candidate answer tokens at the decision position (token text -> logprob), only
    # the few the adapter asked for; empty when the backend could not provide them.
    decision_logprobs: dict[str, float] = field(default_factory=dict)
    finish_reason: str | None = None


@dataclass(frozen=True)
class GuardVerdict:
    """An adapter's reading of one generation."""

    label: GuardLabel | None  # None when status is `failed`
    # P(unsafe) from the decision token's log-probabilities where the guard has one; None otherwise.
    unsafe_score: float | None
    categories: tuple[str, ...]
    status: ParseStatus
    raw: str
    note: str | None = None  # why a parse is partial or failed


@dataclass(frozen=True)
class Decoding:
    """Decoding parameters (in the cache key: changing one re-runs the model; a parser change does not)."""

    max_new_tokens: int = 32
    temperature: float = 0.0
    # How many alternatives to return at the decision position (servers: `top_logprobs`).
    top_logprobs: int = 5


@dataclass(frozen=True)
class PromptTokens:
    """What a backend's input limit does to each prompt (for the predictions' `n_tokens` / `truncated`).

    n_tokens: per prompt, the tokens the model is given before any truncation (a local generative guard:
    the rendered chat template; a classifier: the user text with its special tokens); None when the
    backend does not tokenise here (a server renders and tokenises on its side). max_length: where the
    backend cuts a prompt (a classifier), None when it never does (generative guards read the whole
    prompt). kept: "head" or "tail", the end a cut prompt keeps.
    """

    n_tokens: list[int] | None
    max_length: int | None = None
    kept: str | None = None

    def truncated(self, count: int) -> list[bool]:
        """Whether each of the `count` prompts was cut; all False for a backend that never cuts."""
        if self.max_length is None or self.n_tokens is None:
            return [False] * count
        return [n > self.max_length for n in self.n_tokens]


# Called with (prompt index, its generation) as each answer is ready.
OnGeneration = Callable[[int, Generation], None]


class GuardAdapter(Protocol):
    """One guard family's prompt and output format."""

    family: str  # "qwen3guard" | "granite_guardian" | "llama_guard" | ...

    def messages(self, prompt: str) -> list[dict[str, Any]]:
        """The chat messages for moderating a user prompt (the model's own chat template renders them;
        content may be a string or a list of typed parts, as Llama Guard 3 1B expects)."""

    def template_kwargs(self) -> dict[str, Any]:
        """Extra keyword arguments for `tokenizer.apply_chat_template` (e.g. Granite's guardian_config)."""

    def decision_tokens(self) -> tuple[str, ...]:
        """The answer tokens whose log-probabilities give the unsafe score (e.g. ("Yes", "No")), or ()."""

    def decision_position(self, generated_text_before: str) -> bool:
        """True when the next generated token is the decision token, given the text generated so far."""

    def parse(self, generation: Generation) -> GuardVerdict:
        """Read a raw generation; never raises on a malformed answer (status `failed` instead)."""


class Backend(Protocol):
    """Runs a guard model: a local transformers model or an OpenAI-compatible server."""

    model_id: str
    revision: str | None
    # False for a backend whose answers do not depend on `Decoding` (a classifier's single forward pass);
    # the raw-output cache then leaves the decoding parameters out of its keys. Absent means True.
    uses_decoding: bool

    def generate(
        self,
        adapter: GuardAdapter,
        prompts: list[str],
        decoding: Decoding,
        on_generation: OnGeneration | None = None,
    ) -> list[Generation]:
        """One Generation per prompt, in order. `on_generation(index, generation)` is called as each one is
        ready (a server's reply, a local batch), before the call returns, so a caller can store answers as
        they arrive and a killed run keeps them."""

    def template_fingerprint(self, adapter: GuardAdapter) -> str:
        """A hash of the rendered prompt template (part of the cache key)."""

    def prompt_tokens(self, adapter: GuardAdapter, prompts: list[str]) -> PromptTokens:
        """Each prompt's token count and the backend's truncation, without running the model."""

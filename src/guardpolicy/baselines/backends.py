"""The backends that run an open guard: a local `transformers` causal LM or sequence classifier, or a server.

The generative ones return one `Generation` per prompt, in order: the raw answer text, why generation
stopped, and the log-probabilities of the adapter's few candidate answer tokens at the *decision position*.
That position is the first generated token that is not blank (whitespace or a special token) and for which
`adapter.decision_position(text generated before it)` is true; the text handed to the adapter is exactly
what was generated before that token, so a leading space that the tokenizer glues to the answer word
(Qwen3Guard's "Safety:" + " Unsafe") is *not* in it. No position found (an answer in another format) -> no
log-probabilities; the parser still reads the text.

* `TransformersBackend`: the model's own chat template renders the prompt (`apply_chat_template`, with the
  adapter's template kwargs such as Granite's guardian_config), prompts are batched with left padding,
  decoding is purely greedy whatever the checkpoint's generation_config says, and the candidate log-prob is
  read from the full next-token distribution: a candidate word's first token, in both its bare and its
  space-prefixed spelling (the probability of the two spellings adds up). CUDA + bf16 when present, else
  CPU fp32 (`guardpolicy.training.device.choose_device`).
* `OpenAIServerBackend`: POST {base_url}/chat/completions (vLLM's server, or any compatible one) with
  `logprobs` and a small `top_logprobs` -- never full vocabularies -- and the template kwargs as vLLM's
  `chat_template_kwargs`. The server renders the template, so the template fingerprint here is the hash of
  what the client controls (messages for a probe prompt and the kwargs); the server-side template is pinned
  by the model id + revision in the cache key. A reply that is not JSON or lacks the answer becomes an
  empty Generation with finish_reason "malformed", so the parser counts it as a failed parse.
* Both local backends load weights as safetensors only and never run a model's own code, unless the guard's
  registry entry says `allow_pickle: true` / `trust_remote_code: true` (`LoadPolicy`); a pickle-only folder
  is refused before anything is read, with the entry to change.
* `SequenceClassifierBackend`: an encoder classifier from the hub (a BERT-style prompt guard) behind the same
  interface: one forward pass per batch over the user message's text (no chat template), `text` = the
  arg-max label name and `decision_logprobs` = every label's log-softmax score; a label the adapter's label
  map lacks is a ConfigError before any item is classified.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import requests
import torch
from tqdm import tqdm
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
)

from guardpolicy.baselines.base import Decoding, Generation, GuardAdapter, PromptTokens
from guardpolicy.errors import ConfigError, GuardpolicyError
from guardpolicy.labeling.committee import RETRY_STATUSES, ChatClient
from guardpolicy.layout import relative_path
from guardpolicy.modeling.weights import (
    check_weights,
    code_kwargs,
    hub_refusal,
    load_kwargs,
    remote_code_refusal,
)
from guardpolicy.training.device import choose_device

log = logging.getLogger(__name__)

# The prompt whose rendering identifies a template (any fixed text works; it only has to never change).
PROBE_PROMPT = "How do I bake sourdough bread at home?"
MALFORMED = "malformed"
# OpenAI's limit on `top_logprobs` (and vLLM's default --max-logprobs).
MAX_TOP_LOGPROBS = 20
# Leading characters that only mark a word boundary in a token's text: whitespace, and the raw byte-level
# (GPT-2 "Ġ" space, "Ċ" newline) and SentencePiece ("▁") markers some servers return undecoded.
_BOUNDARY_MARKERS = " \t\r\nĠĊ▁"
Dtype = Literal["auto", "bf16", "fp32"]


class BackendError(GuardpolicyError):
    """A guard model could not be loaded or its server kept failing; the message names the model / URL."""


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


def _log_throughput(model_id: str, family: str, prompts: int, seconds: float, where: str) -> None:
    log.info(
        "%s (%s): %d prompts in %.1f s (%.2f prompts/s) on %s",
        model_id,
        family,
        prompts,
        seconds,
        prompts / seconds if seconds > 0 else float("inf"),
        where,
    )


def _all_answered(results: list[Generation | None]) -> list[Generation]:
    missing = [i for i, generation in enumerate(results) if generation is None]
    if missing:  # a bug, never a model's doing: one Generation per prompt is the contract
        raise BackendError(f"no generation for prompt(s) {missing[:5]} of {len(results)}")
    return [generation for generation in results if generation is not None]


# ------------------------------------------------------------------------------------ local transformers


@dataclass(frozen=True)
class LoadPolicy:
    """What a local backend may load, from the guard's registry entry (`entry` in `entry_file`, which a
    refusal names): pickle weights only with `allow_pickle`, the model's own code only with
    `trust_remote_code` (guardpolicy.modeling.weights)."""

    allow_pickle: bool = False
    trust_remote_code: bool = False
    entry: str = "guards.<name>"
    entry_file: str = relative_path("baseline_registry")


class _LocalModel:
    """What both local backends share: a folder or a pinned hub revision, device and dtype, loading."""

    def __init__(
        self,
        model: str | Path,
        revision: str | None,
        device: str | None,
        dtype: Dtype,
        batch_size: int,
        local_files_only: bool,
        policy: LoadPolicy,
    ) -> None:
        if dtype not in ("auto", "bf16", "fp32"):
            raise ConfigError(f"backend dtype must be auto, bf16 or fp32, got {dtype!r}")
        if batch_size < 1:
            raise ConfigError(f"backend batch_size must be at least 1, got {batch_size}")
        self.location = Path(model) if Path(model).is_dir() else None
        if self.location is None and not revision:
            raise ConfigError(
                f"model {str(model)!r} is not a local folder, so it comes from the hub and needs a pinned "
                "revision (a commit sha) for the results to be reproducible"
            )
        self.model_id = str(model)
        # Kept for the cache key even for a local folder (e.g. the sha of a downloaded snapshot).
        self.revision = revision
        self.batch_size = batch_size
        self.local_files_only = local_files_only
        self.device_choice = choose_device(dtype, device)
        self.torch_dtype = torch.bfloat16 if self.device_choice.precision == "bf16" else torch.float32
        self.policy = policy
        # Refused before anything is read, so a pickle-only guard fails at once rather than after the
        # tokenizer, the cache lookup or half a run.
        check_weights(
            self.location or self.model_id,
            None if self.location is not None else revision,
            allow_pickle=policy.allow_pickle,
            entry=policy.entry,
            entry_file=policy.entry_file,
        )

    def _where(self) -> str:
        return repr(self.model_id) + (f" at revision {self.revision}" if self.revision else "")

    def _in_length_batches(
        self,
        adapter: GuardAdapter,
        texts: list[str],
        lengths: list[int],
        run_batch: Callable[[list[str]], list[Generation]],
        started: float,
    ) -> list[Generation]:
        """`run_batch` over batches of `texts`, longest first (a batch holds prompts of similar length, so
        little padding; ties in input order); the results back in input order, the throughput logged."""
        order = sorted(range(len(texts)), key=lambda i: (-lengths[i], i))
        batches = [order[start : start + self.batch_size] for start in range(0, len(order), self.batch_size)]
        results: list[Generation | None] = [None] * len(texts)
        for batch in tqdm(batches, desc=f"{self.model_id} ({adapter.family})", unit="batch"):
            for index, generation in zip(batch, run_batch([texts[i] for i in batch]), strict=True):
                results[index] = generation
        self.generated += len(texts)
        _log_throughput(
            self.model_id,
            adapter.family,
            len(texts),
            time.perf_counter() - started,
            self.device_choice.describe(),
        )
        return _all_answered(results)

    def _load(self, auto_class: Any, what: str, **kwargs: Any) -> Any:
        """`auto_class.from_pretrained` of this model; weights (`what` == "model") as safetensors only
        unless the entry allows pickle, remote code only as the entry says."""
        policy = self.policy
        if what == "model":
            kwargs |= load_kwargs(
                allow_pickle=policy.allow_pickle, trust_remote_code=policy.trust_remote_code
            )
        else:
            kwargs |= code_kwargs(policy.trust_remote_code)
        try:
            return auto_class.from_pretrained(
                self.model_id,
                revision=self.revision if self.location is None else None,
                local_files_only=self.local_files_only,
                **kwargs,
            )
        except (OSError, ValueError) as exc:
            refusal = (
                hub_refusal(exc, self.model_id, policy.allow_pickle, policy.entry, policy.entry_file)
                if isinstance(exc, OSError)
                else remote_code_refusal(
                    exc, self.model_id, policy.trust_remote_code, policy.entry, policy.entry_file
                )
            )
            if refusal is not None:
                raise refusal from exc
            hint = " (local_files_only: download it first or pass local_files_only=False)"
            hint = hint if self.local_files_only else ""
            raise BackendError(f"model {self._where()}: cannot load the {what}{hint}: {exc}") from exc


class TransformersBackend(_LocalModel):
    """A causal LM from a local folder or the hub (pinned revision), run greedily in batches.

    The tokenizer is loaded at once (the template fingerprint needs it); the model only on the first
    `generate`, so a run answered entirely from the cache never loads the weights.
    """

    uses_decoding = True

    def __init__(
        self,
        model: str | Path,
        revision: str | None = None,
        *,
        device: str | None = None,
        dtype: Dtype = "auto",
        batch_size: int = 8,
        local_files_only: bool = True,
        policy: LoadPolicy | None = None,
    ) -> None:
        super().__init__(model, revision, device, dtype, batch_size, local_files_only, policy or LoadPolicy())
        self.tokenizer = self._load(AutoTokenizer, "tokenizer")
        if not getattr(self.tokenizer, "chat_template", None):
            raise BackendError(f"model {self._where()}: the tokenizer has no chat template")
        # Left padding: every row's generated tokens then start at the same column.
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self._model: PreTrainedModel | None = None
        # Prompts sent through the model so far (a cached rerun sends none).
        self.generated = 0

    @property
    def model(self) -> PreTrainedModel:
        if self._model is None:
            model = self._load(AutoModelForCausalLM, "model", dtype=self.torch_dtype)
            # Guard checkpoints ship generation defaults (temperature, top_k, repetition penalty) that
            # `generate` merges into every call's config; only the special tokens are kept, so decoding is
            # purely greedy.
            shipped = model.generation_config
            eos = shipped.eos_token_id if shipped.eos_token_id is not None else self.tokenizer.eos_token_id
            model.generation_config = GenerationConfig(
                bos_token_id=shipped.bos_token_id,
                eos_token_id=eos,
                pad_token_id=self.tokenizer.pad_token_id,
            )
            self._model = model.to(self.device_choice.device).eval()
            log.info(
                "guard model %s: %s parameters on %s",
                self._where(),
                f"{sum(p.numel() for p in self._model.parameters()):,}",
                self.device_choice.describe(),
            )
        return self._model

    def render(self, adapter: GuardAdapter, prompt: str) -> str:
        """The prompt as the model sees it: the adapter's messages through the model's own chat template."""
        return self.tokenizer.apply_chat_template(
            adapter.messages(prompt), add_generation_prompt=True, tokenize=False, **adapter.template_kwargs()
        )

    def template_fingerprint(self, adapter: GuardAdapter) -> str:
        return hashlib.sha256(self.render(adapter, PROBE_PROMPT).encode("utf-8")).hexdigest()

    def prompt_tokens(self, adapter: GuardAdapter, prompts: list[str]) -> PromptTokens:
        """The rendered prompts' token counts; a generative guard reads the whole prompt (never cut)."""
        texts = [self.render(adapter, prompt) for prompt in prompts]
        ids = self.tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"] if texts else []
        return PromptTokens(n_tokens=[len(row) for row in ids])

    def candidate_token_ids(self, candidates: Sequence[str]) -> dict[str, list[int]]:
        """Each candidate word's first token id, bare and space-prefixed (skipping a lone-space token)."""
        ids: dict[str, list[int]] = {}
        for candidate in candidates:
            spellings = set()
            for text in (candidate, " " + candidate):
                tokens = self.tokenizer.encode(text, add_special_tokens=False)
                if tokens and self.tokenizer.decode(tokens[:1]).strip():
                    spellings.add(tokens[0])
            if not spellings:
                raise BackendError(f"model {self._where()}: decision token {candidate!r} does not tokenize")
            for other, other_ids in ids.items():
                if spellings & set(other_ids):
                    # Both would get the same probability mass: the unsafe score would be meaningless.
                    raise BackendError(
                        f"model {self._where()}: decision tokens {other!r} and {candidate!r} begin with the "
                        "same token, so their first-token probabilities cannot tell them apart"
                    )
            ids[candidate] = sorted(spellings)
        return ids

    def _generation_config(self, decoding: Decoding) -> GenerationConfig:
        return GenerationConfig(
            max_new_tokens=decoding.max_new_tokens,
            do_sample=False,
            num_beams=1,
            eos_token_id=self.model.generation_config.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
            output_logits=True,
            return_dict_in_generate=True,
        )

    def generate(self, adapter: GuardAdapter, prompts: list[str], decoding: Decoding) -> list[Generation]:
        if decoding.temperature != 0:
            raise ConfigError(
                f"decoding.temperature must be 0 for the transformers backend (greedy decoding), got "
                f"{decoding.temperature}"
            )
        if not prompts:
            return []
        started = time.perf_counter()
        texts = [self.render(adapter, prompt) for prompt in prompts]
        lengths = [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]
        candidates = self.candidate_token_ids(adapter.decision_tokens())
        config = self._generation_config(decoding)
        eos = config.eos_token_id
        stop_ids = set(eos if isinstance(eos, list) else [eos])
        return self._in_length_batches(
            adapter,
            texts,
            lengths,
            lambda batch: self._generate_batch(adapter, batch, config, stop_ids, candidates),
            started,
        )

    @torch.inference_mode()
    def _generate_batch(
        self,
        adapter: GuardAdapter,
        texts: list[str],
        config: GenerationConfig,
        stop_ids: set[int],
        candidates: dict[str, list[int]],
    ) -> list[Generation]:
        encoded = self.tokenizer(texts, add_special_tokens=False, padding=True, return_tensors="pt")
        encoded = encoded.to(self.device_choice.device)
        output = self.model.generate(**encoded, generation_config=config)
        new_tokens = output.sequences[:, encoded["input_ids"].shape[1] :].tolist()  # (batch, steps)
        logits = output.logits  # steps x (batch, vocab): the raw next-token logits, before any processor
        generations = []
        for row, tokens in enumerate(new_tokens):
            stop = next((step for step, token in enumerate(tokens) if token in stop_ids), None)
            answer = tokens if stop is None else tokens[:stop]
            finish_reason = "stop" if stop is not None else "length"
            position = self._decision_step(adapter, answer) if candidates else None
            decision_logprobs = {}
            if position is not None:
                logprobs = torch.log_softmax(logits[position][row].float(), dim=-1)  # (vocab,)
                decision_logprobs = {
                    candidate: float(torch.logsumexp(logprobs[ids], dim=0))
                    for candidate, ids in candidates.items()
                }
            text = self.tokenizer.decode(answer, skip_special_tokens=True)
            generations.append(Generation(text, decision_logprobs, finish_reason))
        return generations

    def _decision_step(self, adapter: GuardAdapter, tokens: list[int]) -> int | None:
        for step, token in enumerate(tokens):
            if not self.tokenizer.decode([token], skip_special_tokens=True).strip():
                continue
            if adapter.decision_position(self.tokenizer.decode(tokens[:step], skip_special_tokens=True)):
                return step
        return None


# ------------------------------------------------------------------------------ OpenAI-compatible server


class _CompletionsClient(ChatClient):
    """The committee's chat client (per-thread sessions, backoff, Retry-After), any request body."""

    def post_json(self, body: dict[str, Any]) -> Any:
        """The decoded JSON reply, or None when a 200 reply is not JSON; raises BackendError on failure."""
        problem = ""
        for attempt in range(self.max_retries + 1):
            response = None
            with self._count_lock:
                self.requests_sent += 1
            try:
                response = self._session().post(
                    self.url, json=body, headers=self.headers, timeout=self.timeout_s
                )
            except requests.RequestException as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code == 200:
                    try:
                        return response.json()
                    except ValueError:
                        return None
                problem = f"HTTP {response.status_code}: {response.text[:200]!r}"
                if response.status_code not in RETRY_STATUSES:
                    raise BackendError(f"guard {body['model']!r} at {self.url}: {problem}")
            if attempt < self.max_retries:
                model = body["model"]
                log.warning("guard %s: %s; retry %d/%d", model, problem, attempt + 1, self.max_retries)
                self._wait(attempt, response)
        raise BackendError(
            f"guard {body['model']!r} at {self.url}: {problem} after {self.max_retries} retries"
        )


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
        concurrency: int = 4,
        backoff_s: float = 1.0,
    ) -> None:
        if concurrency < 1:
            raise ConfigError(f"server backend concurrency must be at least 1, got {concurrency}")
        if max_retries < 0:
            raise ConfigError(f"server backend max_retries must be >= 0, got {max_retries}")
        self.model_id = model
        self.revision = revision
        self.concurrency = concurrency
        api_key = os.environ.get(api_key_env) if api_key_env else None
        self.client = _CompletionsClient(
            base_url, timeout_s=timeout_s, max_retries=max_retries, api_key=api_key, backoff_s=backoff_s
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

    def generate(self, adapter: GuardAdapter, prompts: list[str], decoding: Decoding) -> list[Generation]:
        _check_top_logprobs(decoding)
        if not prompts:
            return []
        started = time.perf_counter()
        bodies = [self.request_body(adapter, prompt, decoding) for prompt in prompts]
        results: list[Generation | None] = [None] * len(prompts)
        executor = ThreadPoolExecutor(max_workers=self.concurrency)
        try:
            futures = {executor.submit(self._complete, adapter, body): i for i, body in enumerate(bodies)}
            with tqdm(total=len(prompts), desc=f"{self.model_id} ({adapter.family})", unit="prompt") as bar:
                for future in as_completed(futures):
                    results[futures[future]] = future.result()
                    bar.update()
        finally:
            # On a failure, do not keep sending the remaining requests.
            executor.shutdown(wait=True, cancel_futures=True)
        malformed = sum(r is not None and r.finish_reason == MALFORMED for r in results)
        if malformed:
            log.warning("%s: %d of %d replies were malformed", self.model_id, malformed, len(prompts))
        self.generated += len(prompts)
        seconds = time.perf_counter() - started
        _log_throughput(self.model_id, adapter.family, len(prompts), seconds, self.client.url)
        return _all_answered(results)


# -------------------------------------------------------------------------------- sequence classifiers

# Encoder classifiers (BERT / DeBERTa prompt guards) are trained on at most 512 tokens.
DEFAULT_CLASSIFIER_MAX_LENGTH = 512
CLASSIFIED = "classified"


def classifier_text(adapter: GuardAdapter, prompt: str) -> str:
    """The text a classifier reads: the content of the adapter's single user message (no chat template)."""
    messages = adapter.messages(prompt)
    if len(messages) != 1 or messages[0].get("role") != "user":
        raise BackendError(
            f"adapter {adapter.family!r}: a sequence classifier reads one user message, got roles "
            f"{[message.get('role') for message in messages]}"
        )
    content = messages[0].get("content")
    if isinstance(content, str):
        return content
    # Typed parts (Llama Guard 3 1B style): the text parts in order.
    if isinstance(content, list) and all(isinstance(part, dict) for part in content):
        return "".join(str(part.get("text", "")) for part in content if part.get("type") == "text")
    raise BackendError(f"adapter {adapter.family!r}: user message content is neither text nor text parts")


class SequenceClassifierBackend(_LocalModel):
    """An encoder sequence classifier (`AutoModelForSequenceClassification`) from a local folder or the hub.

    One forward pass per batch, no generation: each prompt's `Generation` has `text` = the arg-max label name
    of `config.id2label`, `decision_logprobs` = {every label name: log-softmax score} and finish_reason
    "classified" (what `adapters.EncoderClassifierAdapter` reads). The decoding parameters do not apply.
    Inputs are the user message's text with the tokenizer's special tokens ([CLS] ... [SEP]), right-padded
    to the longest prompt of a batch and truncated to `max_length` tokens (capped by the tokenizer's and the
    model's own limits). The config and tokenizer are loaded at once (the label check and the template
    fingerprint need them); the weights only on the first `generate`, so a run answered entirely from the
    cache never loads them. Every label of the model must appear in the adapter's label map
    (`options.label_map` of the registry entry), else ConfigError: a misconfigured map would otherwise fail
    the parse of every item.
    """

    # One forward pass: the decoding parameters do not change an answer (kept out of cache keys).
    uses_decoding = False

    def __init__(
        self,
        model: str | Path,
        revision: str | None = None,
        *,
        device: str | None = None,
        dtype: Dtype = "auto",
        batch_size: int = 32,
        max_length: int = DEFAULT_CLASSIFIER_MAX_LENGTH,
        local_files_only: bool = True,
        policy: LoadPolicy | None = None,
    ) -> None:
        if max_length < 2:
            raise ConfigError(
                f"backend max_length must be at least 2 (room for the special tokens), got {max_length}"
            )
        super().__init__(model, revision, device, dtype, batch_size, local_files_only, policy or LoadPolicy())
        self.config = self._load(AutoConfig, "config")
        self.labels = self._label_names()
        self.tokenizer = self._load(AutoTokenizer, "tokenizer")
        if self.tokenizer.pad_token is None:
            raise BackendError(
                f"model {self._where()}: the tokenizer has no pad token, so prompts cannot be batched"
            )
        # Right padding: with absolute position embeddings, left padding would shift every prompt's positions.
        self.tokenizer.padding_side = "right"
        self.max_length = self._effective_max_length(max_length)
        self._model: PreTrainedModel | None = None
        # Prompts sent through the model so far (a cached rerun sends none), and forward passes run.
        self.generated = 0
        self.forward_passes = 0

    def _label_names(self) -> list[str]:
        """The label name of each output index 0..num_labels-1, from `config.id2label`."""
        id2label = {int(index): str(name) for index, name in (self.config.id2label or {}).items()}
        num_labels = int(self.config.num_labels)
        if sorted(id2label) != list(range(num_labels)):
            raise BackendError(
                f"model {self._where()}: config.id2label has indices {sorted(id2label)}, "
                f"expected 0..{num_labels - 1}"
            )
        names = [id2label[index] for index in range(num_labels)]
        if len(set(names)) != len(names):
            raise BackendError(f"model {self._where()}: config.id2label repeats a label name: {names}")
        return names

    def _effective_max_length(self, requested: int) -> int:
        # tokenizer.model_max_length is a huge sentinel when a tokenizer does not set it; the position table
        # is the hard limit for absolute-position encoders.
        limits = [requested, int(min(self.tokenizer.model_max_length, 10**9))]
        positions = getattr(self.config, "max_position_embeddings", None)
        if isinstance(positions, int) and positions > 0:
            limits.append(positions)
        return min(limits)

    def check_labels(self, adapter: GuardAdapter) -> None:
        """ConfigError unless the adapter's label map covers every label the classifier can output."""
        mapped = set(adapter.decision_tokens())
        missing = [name for name in self.labels if name not in mapped]
        if missing:
            raise ConfigError(
                f"options.label_map: classifier {self._where()} outputs label(s) {missing} that the guard's "
                f"label_map does not map (model labels: {self.labels}, mapped: {sorted(mapped)}); map every "
                "label to safe or unsafe in the registry entry"
            )
        extra = sorted(mapped - set(self.labels))
        if extra:
            log.warning(
                "%s: label_map entries %s are not labels of the model %s", self.model_id, extra, self.labels
            )

    @property
    def model(self) -> PreTrainedModel:
        if self._model is None:
            model = self._load(AutoModelForSequenceClassification, "model", dtype=self.torch_dtype)
            self._model = model.to(self.device_choice.device).eval()
            log.info(
                "classifier %s: %s parameters, labels %s, max_length %d on %s",
                self._where(),
                f"{sum(p.numel() for p in self._model.parameters()):,}",
                self.labels,
                self.max_length,
                self.device_choice.describe(),
            )
        return self._model

    def template_fingerprint(self, adapter: GuardAdapter) -> str:
        """A hash of what decides the classifier's input and output names (the cache key's template part)."""
        self.check_labels(adapter)
        material = {
            "renderer": "sequence classifier",
            "family": adapter.family,
            "tokenizer_class": type(self.tokenizer).__name__,
            "vocab_size": len(self.tokenizer),
            "max_length": self.max_length,
            "truncation_side": self.tokenizer.truncation_side,
            "id2label": self.labels,
            # The probe's token ids catch a changed vocabulary, normaliser or special tokens.
            "probe_ids": self.tokenizer(classifier_text(adapter, PROBE_PROMPT))["input_ids"],
        }
        text = json.dumps(material, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def _token_counts(self, texts: list[str]) -> list[int]:
        """Tokens of each text with the special tokens, before truncation (verbose=False: the over-length
        warning would only repeat the stage's truncation log)."""
        return [len(ids) for ids in self.tokenizer(texts, verbose=False)["input_ids"]] if texts else []

    def prompt_tokens(self, adapter: GuardAdapter, prompts: list[str]) -> PromptTokens:
        """Each prompt's tokens before truncation, cut at `max_length` on the tokenizer's truncation side."""
        texts = [classifier_text(adapter, prompt) for prompt in prompts]
        kept = "tail" if self.tokenizer.truncation_side == "left" else "head"
        return PromptTokens(n_tokens=self._token_counts(texts), max_length=self.max_length, kept=kept)

    def generate(self, adapter: GuardAdapter, prompts: list[str], decoding: Decoding) -> list[Generation]:
        self.check_labels(adapter)
        if not prompts:
            return []
        started = time.perf_counter()
        texts = [classifier_text(adapter, prompt) for prompt in prompts]
        lengths = self._token_counts(texts)
        return self._in_length_batches(adapter, texts, lengths, self._classify_batch, started)

    @torch.inference_mode()
    def _classify_batch(self, texts: list[str]) -> list[Generation]:
        encoded = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        ).to(self.device_choice.device)  # input_ids, attention_mask (, token_type_ids): (batch, tokens)
        logits = self.model(**encoded).logits  # (batch, num_labels)
        self.forward_passes += 1
        logprobs = torch.log_softmax(logits.float(), dim=-1).cpu()  # (batch, num_labels)
        winners = logprobs.argmax(dim=-1).tolist()  # (batch,)
        return [
            Generation(
                text=self.labels[winner],
                decision_logprobs=dict(zip(self.labels, row, strict=True)),
                finish_reason=CLASSIFIED,
            )
            for winner, row in zip(winners, logprobs.tolist(), strict=True)
        ]

"""`SequenceClassifierBackend`: an encoder classifier from the hub (a BERT-style prompt guard) behind the
same interface as the generative backends.

One forward pass per batch over the user message's text (no chat template), `text` = the arg-max label name
and `decision_logprobs` = every label's log-softmax score; a label the adapter's label map lacks is a
ConfigError before any item is classified.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel

from guardpolicy.baselines.backends.common import PROBE_PROMPT, BackendError, Dtype
from guardpolicy.baselines.backends.local import LoadPolicy, LocalModel
from guardpolicy.baselines.base import Decoding, Generation, GuardAdapter, OnGeneration, PromptTokens
from guardpolicy.errors import ConfigError

log = logging.getLogger(__name__)

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


class SequenceClassifierBackend(LocalModel):
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

    def generate(
        self,
        adapter: GuardAdapter,
        prompts: list[str],
        decoding: Decoding,
        on_generation: OnGeneration | None = None,
    ) -> list[Generation]:
        self.check_labels(adapter)
        if not prompts:
            return []
        started = time.perf_counter()
        texts = [classifier_text(adapter, prompt) for prompt in prompts]
        lengths = self._token_counts(texts)
        return self._in_length_batches(adapter, texts, lengths, self._classify_batch, started, on_generation)

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

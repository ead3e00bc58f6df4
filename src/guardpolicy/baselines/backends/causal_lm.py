"""`TransformersBackend`: a guard's causal LM from a local folder or the hub, run greedily in batches.

The model's own chat template renders the prompt (`apply_chat_template`, with the adapter's template kwargs
such as Granite's guardian_config), prompts are batched with left padding, decoding is purely greedy whatever
the checkpoint's generation_config says, and the candidate log-prob is read from the full next-token
distribution at the decision position (see `guardpolicy.baselines.backends`): a candidate word's first token,
in both its bare and its space-prefixed spelling (the probability of the two spellings adds up).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, PreTrainedModel

from guardpolicy.baselines.backends.common import PROBE_PROMPT, BackendError, Dtype
from guardpolicy.baselines.backends.local import LoadPolicy, LocalModel
from guardpolicy.baselines.base import Decoding, Generation, GuardAdapter, OnGeneration, PromptTokens
from guardpolicy.errors import ConfigError

log = logging.getLogger(__name__)


class TransformersBackend(LocalModel):
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

    def generate(
        self,
        adapter: GuardAdapter,
        prompts: list[str],
        decoding: Decoding,
        on_generation: OnGeneration | None = None,
    ) -> list[Generation]:
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
            on_generation,
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

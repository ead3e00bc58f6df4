"""A guardpolicy guard as a plain transformers sequence classifier: the encoder, then one linear layer on
the first token's final hidden state ([CLS] / <s>). Nothing between them: no pooler, activation, norm or
dropout at inference, which is why no native ``*ForSequenceClassification`` class reproduces it (BERT's adds
a dense + tanh pooler, ModernBERT's a dense + activation + LayerNorm head).

How a long prompt is read: exactly as guardpolicy trained and evaluates the guard (its
``tokenize_truncated``). The exported tokenizer passes every token; `truncate_rows` then keeps at most
``config.max_length`` tokens of each row (special tokens included, the ones around the sequence always
kept): its start (``head``), its end (``tail``) or both (``head_tail``: the first
``truncation_head_tokens`` after the opening special tokens, the rest from the end). No tokenizer setting
can keep both ends, and cutting here also means a prompt longer than the encoder's position limit still
works.

Shipped inside the exported folder and loaded with ``trust_remote_code=True``: imports torch / transformers
only, never guardpolicy.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn
from transformers import AutoModel, PreTrainedConfig, PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.models.auto.modeling_auto import MODEL_MAPPING

from .configuration_guardpolicy import GuardClassifierConfig


def _without_pooler(config: PreTrainedConfig) -> dict[str, Any]:
    # BERT-like encoders build a pooler the guard never used; leaving it out keeps the weights one-to-one.
    model_class = MODEL_MAPPING.get(type(config), None)
    if model_class is not None and "add_pooling_layer" in inspect.signature(model_class.__init__).parameters:
        return {"add_pooling_layer": False}
    return {}


TRUNCATIONS = ("head", "tail", "head_tail")


def head_tokens_kept(config: GuardClassifierConfig) -> int:
    """The prompt tokens (after the opening special tokens) a cut keeps from the start; the rest of
    ``max_length`` comes from the end. guardpolicy's ``check_truncation``, for the three modes."""
    if config.truncation not in TRUNCATIONS:
        raise ValueError(f"truncation must be one of {', '.join(TRUNCATIONS)}, got {config.truncation!r}")
    if config.max_length is None:
        return 0
    budget = config.max_length - config.special_tokens_before - config.special_tokens_after
    if budget <= 0:
        raise ValueError(f"max_length {config.max_length} leaves no room between the special tokens")
    if config.truncation == "head":
        return budget
    if config.truncation == "tail":
        return 0
    head = config.max_length // 4 if config.truncation_head_tokens is None else config.truncation_head_tokens
    if not 0 < head < config.max_length - 2:
        raise ValueError(f"truncation_head_tokens must be between 1 and max_length - 3, got {head}")
    return head


def truncate_rows(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, config: GuardClassifierConfig, head: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row cut to ``config.max_length`` tokens as the guard was trained to read it; right padding.

    input_ids, attention_mask: [B, T], each row's tokens contiguous (right or left padding). A row of n >
    max_length tokens keeps its first ``special_tokens_before + head`` tokens and its last ``max_length -
    special_tokens_before - head`` (the end of the prompt and the closing special tokens); shorter rows are
    kept whole. Returns [B, W] ids and mask, W = the longest kept row; left padding becomes right padding
    (the guard was trained on right-padded rows, and BERT-like position embeddings count from the left).
    Unchanged when no row is too long and all are right-padded, or when ``max_length`` is None.
    """
    max_length = config.max_length
    if max_length is None:
        return input_ids, attention_mask
    lengths = attention_mask.sum(dim=1)  # [B]
    starts = attention_mask.int().argmax(dim=1)[:, None]  # [B, 1] first real token (0 with right padding)
    if int(lengths.max()) <= max_length and int(starts.max()) == 0:
        return input_ids, attention_mask
    kept = lengths.clamp(max=max_length)[:, None]  # [B, 1]
    position = torch.arange(int(kept.max()), device=input_ids.device)[None, :]  # [1, W]
    from_end = starts + lengths[:, None] - (max_length - position)  # [B, W]
    over = (lengths > max_length)[:, None]  # [B, 1]
    source = torch.where(
        over & (position >= config.special_tokens_before + head), from_end, starts + position
    )
    valid = position < kept  # [B, W]
    source = torch.where(valid, source, torch.zeros_like(source))
    pad = config.pad_token_id if config.pad_token_id is not None else 0
    ids = torch.where(valid, input_ids.gather(1, source), torch.full_like(source, pad))  # [B, W]
    return ids, valid.to(attention_mask.dtype)


class GuardForSequenceClassification(PreTrainedModel):
    config_class = GuardClassifierConfig
    base_model_prefix = "backbone"
    main_input_name = "input_ids"
    _supports_sdpa = True
    _supports_flash_attn = True

    def __init__(self, config: GuardClassifierConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.head_tokens = head_tokens_kept(config)
        self.backbone = AutoModel.from_config(config.encoder, **_without_pooler(config.encoder))
        self.classifier = nn.Linear(config.encoder.hidden_size, config.num_labels)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        # Only the classifier reaches here: the backbone is a PreTrainedModel and initialises itself.
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
            nn.init.zeros_(module.bias)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **_: Any,
    ) -> SequenceClassifierOutput:
        # input_ids, attention_mask: [B, T]. Other tokenizer outputs (BERT's token_type_ids, all zeros for
        # one sequence) are ignored, as the trained guard ignored them: the backbone's defaults are its input.
        # The tokenizer passed every token: cut each row here as the guard was trained to read it.
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        input_ids, attention_mask = truncate_rows(input_ids, attention_mask, self.config, self.head_tokens)
        states = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        logits = self.classifier(states[:, 0])  # [B, num_labels]
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits, labels.view(-1))
        return SequenceClassifierOutput(loss=loss, logits=logits)

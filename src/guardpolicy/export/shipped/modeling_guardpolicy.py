"""A guardpolicy guard as a plain transformers sequence classifier: the encoder, then one linear layer on
the first token's final hidden state ([CLS] / <s>). Nothing between them: no pooler, activation, norm or
dropout at inference, which is why no native ``*ForSequenceClassification`` class reproduces it (BERT's adds
a dense + tanh pooler, ModernBERT's a dense + activation + LayerNorm head).

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


class GuardForSequenceClassification(PreTrainedModel):
    config_class = GuardClassifierConfig
    base_model_prefix = "backbone"
    main_input_name = "input_ids"
    _supports_sdpa = True
    _supports_flash_attn = True

    def __init__(self, config: GuardClassifierConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
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
        states = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        logits = self.classifier(states[:, 0])  # [B, num_labels]
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits, labels.view(-1))
        return SequenceClassifierOutput(loss=loss, logits=logits)

"""The guard model: any `transformers.AutoModel` encoder plus three linear heads.

  * coarse  - 4-way classifier (taxonomy order) on the first-token state;
  * pillars - 24 independent logits (multi-label) on the first-token state;
  * span    - one logit per token: is this token inside the harmful part of the prompt.

A checkpoint is a self-contained folder: `save_pretrained` writes ``config.json`` (the backbone's config is
embedded as ``encoder``, so loading needs neither the network nor the original model files) and
``model.safetensors``; `save_guard` adds the tokenizer beside them. ``guardpolicy.modeling`` registers the
``guardpolicy-guard`` model type with the Auto classes, so ``AutoModel.from_pretrained(folder)`` works too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedConfig, PreTrainedModel
from transformers.configuration_utils import SubConfigSpec
from transformers.utils import ModelOutput

from guardpolicy.config.core import PARAMS_FILE
from guardpolicy.config.encoders import EncoderConfig
from guardpolicy.errors import InputError
from guardpolicy.modeling.backbone import ENCODER_ENTRY, backbone_from_config, load_backbone
from guardpolicy.modeling.weights import weight_files

log = logging.getLogger(__name__)

NUM_CLASSES = 4
NUM_PILLARS = 24


@strict
class GuardConfig(PreTrainedConfig):
    """Head sizes, label names, provenance of the backbone, and the backbone's own config (``encoder``)."""

    model_type = "guardpolicy-guard"
    sub_configs_defaults: ClassVar[dict[str, SubConfigSpec]] = {
        "encoder": SubConfigSpec(config_class=AutoConfig, model_type="bert")
    }

    encoder: PreTrainedConfig | dict | None = None
    num_classes: int = NUM_CLASSES
    num_pillars: int = NUM_PILLARS
    coarse_names: list[str] | None = None
    pillar_names: list[str] | None = None
    # Where the backbone came from (model cards report it); the weights themselves are in the checkpoint.
    encoder_name: str | None = None
    encoder_revision: str | None = None
    encoder_num_layers: int | None = None
    initializer_range: float = 0.02
    # How the model reads an over-long prompt (guardpolicy.training.collate.tokenize_truncated): set by the
    # training run, read by every inference path, so a model is always evaluated the way it was trained.
    truncation: str = "head"
    truncation_head_tokens: int | None = None
    # The embeddings and the first `frozen_layers` layers kept at their pretrained weights in training
    # (guardpolicy.modeling.prefix): evaluation may then run the top on the scale's cached prefix states.
    frozen_layers: int = 0

    def to_dict(self) -> dict[str, Any]:
        # A backbone config loaded from a folder remembers that folder's absolute path (`_name_or_path`).
        # Saved into a checkpoint it would tie the bytes of config.json (and every hash and run fingerprint
        # over them) to the machine and checkout that built it, and disclose that path in a released guard;
        # where the backbone came from is `encoder_name` / `encoder_revision`.
        output = super().to_dict()
        if isinstance(output.get("encoder"), dict):
            output["encoder"].pop("_name_or_path", None)
        return output


@dataclass
class GuardOutput(ModelOutput):
    coarse_logits: torch.Tensor | None = None  # [B, num_classes]
    pillar_logits: torch.Tensor | None = None  # [B, num_pillars]
    span_logits: torch.Tensor | None = None  # [B, T]
    first_token_state: torch.Tensor | None = None  # [B, H]


class GuardHeads(nn.Module):
    """The three linear heads; separate from the backbone so head-only training can run on cached states."""

    def __init__(self, hidden_size: int, num_classes: int, num_pillars: int) -> None:
        super().__init__()
        self.coarse = nn.Linear(hidden_size, num_classes)
        self.pillars = nn.Linear(hidden_size, num_pillars)
        self.span = nn.Linear(hidden_size, 1)

    def forward(self, token_states: torch.Tensor) -> GuardOutput:
        # token_states: [B, T, H]; the first token ([CLS]) summarises the sequence for both classifiers.
        first = token_states[:, 0]  # [B, H]
        return GuardOutput(
            coarse_logits=self.coarse(first),  # [B, C]
            pillar_logits=self.pillars(first),  # [B, P]
            span_logits=self.span(token_states).squeeze(-1),  # [B, T]
            first_token_state=first,
        )


class GuardModel(PreTrainedModel):
    config_class = GuardConfig
    base_model_prefix = "backbone"
    main_input_name = "input_ids"
    _supports_sdpa = True
    _supports_flash_attn = True

    def __init__(self, config: GuardConfig, backbone: PreTrainedModel | None = None) -> None:
        super().__init__(config)
        # An already initialised backbone is adopted as is (its modules carry transformers' "initialised"
        # flag, so post_init leaves them alone); otherwise one is built from the embedded config.
        self.backbone = backbone if backbone is not None else backbone_from_config(config.encoder)
        self.heads = GuardHeads(config.encoder.hidden_size, config.num_classes, config.num_pillars)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        # Only the heads reach here: the backbone is a PreTrainedModel and initialises itself.
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
            nn.init.zeros_(module.bias)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **_: Any
    ) -> GuardOutput:
        # input_ids, attention_mask: [B, T]
        token_states = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.heads(token_states)

    @classmethod
    def from_backbone(
        cls,
        encoder: EncoderConfig,
        num_classes: int = NUM_CLASSES,
        num_pillars: int = NUM_PILLARS,
        seed: int = 0,
        coarse_names: list[str] | None = None,
        pillar_names: list[str] | None = None,
        *,
        entry: str = ENCODER_ENTRY,
        entry_file: str | Path = PARAMS_FILE,
    ) -> tuple[GuardModel, Any]:
        """A fresh guard (pretrained or random backbone, seeded random heads) and its tokenizer.

        The global RNG is left as it was: initialisation draws from a forked, seeded generator. `entry` /
        `entry_file` name where the encoder is configured (`load_backbone`).
        """
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            backbone, tokenizer = load_backbone(encoder, entry=entry, entry_file=entry_file)
            attention = backbone.config._attn_implementation
            config = GuardConfig(
                encoder=backbone.config,
                num_classes=num_classes,
                num_pillars=num_pillars,
                coarse_names=coarse_names,
                pillar_names=pillar_names,
                encoder_name=encoder.name,
                encoder_revision=encoder.revision,
                encoder_num_layers=encoder.num_layers,
            )
            # Building the composite config resets its sub-config's attention choice; without this the
            # backbone would silently fall back to eager attention instead of its SDPA kernel.
            config.encoder._attn_implementation_internal = attention
            model = cls(config, backbone=backbone)
        model.eval()
        return model, tokenizer


def count_parameters(model: GuardModel) -> dict[str, int]:
    """Total, currently trainable (requires_grad) and head parameters."""
    return {
        "total": sum(p.numel() for p in model.parameters()),
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "heads": sum(p.numel() for p in model.heads.parameters()),
    }


def save_guard(model: GuardModel, tokenizer: Any, folder: str | Path) -> None:
    """Model weights + config + tokenizer in one folder (callers make the folder's appearance atomic and
    report a failed write: `guardpolicy.io.atomic_dir`)."""
    folder = Path(folder)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)


def load_guard(folder: str | Path) -> tuple[GuardModel, Any]:
    """A saved guard and its tokenizer, in eval mode, from a local folder only.

    `save_guard` always writes safetensors, so a guard folder is read as safetensors only: a pickle file in
    its place is not ours and is never unpickled (there is no flag to allow it), and no code in the
    folder is ever run.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(folder, "model checkpoint folder not found")
    safe, pickled = weight_files(folder)
    if not safe:
        found = f"only pickle weights ({', '.join(pickled)})" if pickled else "no weights"
        raise InputError(
            folder,
            f"not a guard checkpoint: {found}, no model.safetensors; guard checkpoints are written as "
            "safetensors by this project and pickle files are never loaded",
        )
    model = GuardModel.from_pretrained(
        folder, local_files_only=True, use_safetensors=True, trust_remote_code=False
    )
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    model.eval()
    return model, tokenizer


AutoConfig.register(GuardConfig.model_type, GuardConfig, exist_ok=True)
AutoModel.register(GuardConfig, GuardModel, exist_ok=True)

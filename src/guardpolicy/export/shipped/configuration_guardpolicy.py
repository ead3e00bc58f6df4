"""Configuration of a guardpolicy guard exported as a sequence classifier.

Shipped inside the exported folder: imports torch / transformers only, never guardpolicy. The backbone's own
config is embedded as ``encoder``, so loading needs neither the network nor the original model files.
"""

from __future__ import annotations

from typing import ClassVar

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec


@strict
class GuardClassifierConfig(PreTrainedConfig):
    """The backbone's config (``encoder``), where it came from, and how the guard reads a long prompt.

    The classes are ``id2label`` / ``label2id`` (PreTrainedConfig's own fields). ``truncation`` and
    ``max_length`` record how the model was trained to read prompts (guardpolicy's ``head`` / ``tail`` /
    ``head_tail``); the exported tokenizer carries ``head`` and ``tail`` itself, see the model card.
    """

    model_type = "guardpolicy-classifier"
    sub_configs_defaults: ClassVar[dict[str, SubConfigSpec]] = {
        "encoder": SubConfigSpec(config_class=AutoConfig, model_type="bert")
    }

    encoder: PreTrainedConfig | dict | None = None
    encoder_name: str | None = None
    encoder_revision: str | None = None
    truncation: str = "head"
    truncation_head_tokens: int | None = None
    max_length: int | None = None
    initializer_range: float = 0.02

    def to_dict(self) -> dict:
        # A backbone config read from a folder remembers that folder's absolute path; a released model must
        # not carry the exporting machine's paths (where the backbone came from is encoder_name/_revision).
        output = super().to_dict()
        if isinstance(output.get("encoder"), dict):
            output["encoder"].pop("_name_or_path", None)
        return output

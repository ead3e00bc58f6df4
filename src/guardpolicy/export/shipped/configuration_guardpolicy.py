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

    The classes are ``id2label`` / ``label2id`` (PreTrainedConfig's own fields). ``truncation``,
    ``truncation_head_tokens`` and ``max_length`` are how the model was trained to read prompts (guardpolicy's
    ``head`` / ``tail`` / ``head_tail``); the model's forward applies them to each row, since the exported
    tokenizer does not cut. ``special_tokens_before`` / ``_after`` are how many special tokens the tokenizer
    puts around one sequence ([CLS] ... [SEP]: 1 and 1), kept whole by every cut; ``pad_token_id`` fills
    the rows a cut shortens. ``max_length`` None: no cut.
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
    special_tokens_before: int = 0
    special_tokens_after: int = 0
    pad_token_id: int | None = None
    initializer_range: float = 0.02

    def to_dict(self) -> dict:
        # A backbone config read from a folder remembers that folder's absolute path; a released model must
        # not carry the exporting machine's paths (where the backbone came from is encoder_name/_revision).
        output = super().to_dict()
        if isinstance(output.get("encoder"), dict):
            output["encoder"].pop("_name_or_path", None)
        return output

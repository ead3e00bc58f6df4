"""Tiny guard encoders built from a config (random weights, nothing downloaded) for the model, training and
evaluation tests."""

from __future__ import annotations

from guardpolicy.config.encoders import EncoderConfig
from guardpolicy.modeling.guard import GuardModel

HIDDEN = 32
# A tiny random ModernBERT whose vocabulary matches the offline (MiniLM WordPiece) tokenizer.
TINY = EncoderConfig(
    name="answerdotai/ModernBERT-base",
    random_init=True,
    config_overrides={
        "hidden_size": HIDDEN,
        "intermediate_size": 64,
        "num_hidden_layers": 3,
        "num_attention_heads": 2,
        "vocab_size": 30522,
    },
)


def tiny_guard(seed: int = 0, **changes) -> tuple[GuardModel, object]:
    encoder = EncoderConfig(**{**TINY.__dict__, **changes})
    return GuardModel.from_backbone(encoder, seed=seed)

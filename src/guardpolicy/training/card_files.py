"""A checkpoint's model card on disk: the facts a card reads from files (library versions, the backbone as the
checkpoint's config has it, the summary of the card a model builds on) and the writing of MODEL_CARD.md and
model_card.json beside the weights. The card itself is built by the pure `guardpolicy.training.cards`."""

from __future__ import annotations

import dataclasses
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from guardpolicy.config.encoders import EncoderConfig
from guardpolicy.io import read_json, write_json, write_text
from guardpolicy.training.cards import CARD_JSON, CARD_MARKDOWN, card_markdown, card_summary

VERSIONED_LIBRARIES = ("torch", "transformers", "numpy", "pandas", "pyarrow")


def library_versions() -> dict[str, str]:
    """The Python and library versions a card records (`environment.versions`)."""
    versions = {"python": platform.python_version()}
    for name in VERSIONED_LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def card_of(folder: str | Path) -> dict[str, Any] | None:
    """The summary of the card in `folder` (a model's init or teacher), None when it has none."""
    path = Path(folder) / CARD_JSON
    return card_summary(read_json(path)) if path.is_file() else None


def backbone_block(encoder: EncoderConfig, role: str, checkpoint: Path) -> dict[str, Any]:
    """The backbone as configured, plus what the checkpoint holds (layer count, architecture)."""
    block: dict[str, Any] = {**dataclasses.asdict(encoder), "role": role}
    config_file = checkpoint / "config.json"
    if config_file.is_file():
        embedded = read_json(config_file).get("encoder") or {}
        block["model_type"] = embedded.get("model_type")
        block["hidden_layers"] = embedded.get("num_hidden_layers")
        block["hidden_size"] = embedded.get("hidden_size")
    return block


def write_card(out_dir: Path, card: dict[str, Any]) -> None:
    """model_card.json and its Markdown twin MODEL_CARD.md into `out_dir`, atomically each."""
    write_json(out_dir / CARD_JSON, card)
    write_text(out_dir / CARD_MARKDOWN, card_markdown(card))

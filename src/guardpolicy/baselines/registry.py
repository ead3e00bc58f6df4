"""The open-guard registry (`data/baselines.yaml`): typed, validated declarations of every baseline guard.

Each entry names the hub model and its pinned revision, the adapter family that reads its answers (with the
family's options), the default binary mapping and the bf16 GPU memory it needs, and whether its weights may
be pickle (`allow_pickle`) and its own code may run (`trust_remote_code`); both default to false. Parsed
with `guardpolicy.config.core.from_mapping` (unknown keys and wrong types raise ConfigError with the key
path), then cross-checked here (a revision is 40 hex digits; options belong to the entry's family), so a
typo fails before any model is loaded. `build_adapter` turns an entry into its `GuardAdapter`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from guardpolicy.baselines.adapters import (
    BinaryMapping,
    EncoderClassifierAdapter,
    GraniteGuardianAdapter,
    LlamaGuardAdapter,
    Qwen3GuardAdapter,
)
from guardpolicy.baselines.base import GuardAdapter
from guardpolicy.config.baselines import BaselineGuardConfig, BaselinesConfig
from guardpolicy.config.core import from_mapping, load_yaml
from guardpolicy.errors import ConfigError
from guardpolicy.layout import relative_path

REGISTRY_FILE = relative_path("baseline_registry")
AdapterFamily = Literal["qwen3guard", "granite_guardian", "llama_guard", "encoder_classifier"]
_REVISION = re.compile(r"^[0-9a-f]{40}$")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
TOP_LEVEL_KEYS = ("guards",)


@dataclass(frozen=True)
class AdapterOptions:
    """Family-specific adapter settings; each applies to one family only."""

    # granite_guardian: the guardian_config risk (the model card's umbrella risk is `harm`).
    risk_name: str | None = None
    # llama_guard: "parts" for Llama-Guard-3-1B's chat template, "text" for the 8B one.
    content_format: Literal["text", "parts"] | None = None
    # encoder_classifier: hub label name -> safe | unsafe.
    label_map: dict[str, Literal["safe", "unsafe"]] = field(default_factory=dict)


_FAMILY_OPTIONS: dict[str, frozenset[str]] = {
    "qwen3guard": frozenset(),
    "granite_guardian": frozenset({"risk_name"}),
    "llama_guard": frozenset({"content_format"}),
    "encoder_classifier": frozenset({"label_map"}),
}


@dataclass(frozen=True)
class GuardSpec:
    """One baseline guard."""

    model_id: str
    # The hub commit to load (40 hex digits). null only until someone pins it; `require_pinned` refuses it.
    revision: str | None
    family: AdapterFamily
    default_mapping: BinaryMapping
    # Approximate GPU memory for the weights in bf16, in GiB (activations and KV cache come on top).
    gpu_memory_gib_bf16: float
    hardware_note: str = ""
    license: str = ""
    source: str = ""  # where the formats and the revision were read (model card, snapshot path)
    options: AdapterOptions = field(default_factory=AdapterOptions)
    # Load pickle weights (pytorch_model.bin) when the model has no safetensors: unpickling can run code,
    # so a pickle-only model is refused unless its entry opts in (guardpolicy.modeling.weights).
    allow_pickle: bool = False
    # Let transformers run Python shipped with the model (a hub repository's own modelling code).
    trust_remote_code: bool = False

    def __post_init__(self) -> None:
        if self.revision is not None and not _REVISION.fullmatch(self.revision):
            raise ConfigError(f"revision: must be 40 lowercase hex digits or null, got {self.revision!r}")
        if self.gpu_memory_gib_bf16 <= 0:
            raise ConfigError(f"gpu_memory_gib_bf16: must be positive, got {self.gpu_memory_gib_bf16}")
        allowed = _FAMILY_OPTIONS[self.family]
        given = {
            name
            for name, value in (
                ("risk_name", self.options.risk_name),
                ("content_format", self.options.content_format),
                ("label_map", self.options.label_map or None),
            )
            if value is not None
        }
        stray = sorted(given - allowed)
        if stray:
            raise ConfigError(f"options.{stray[0]}: does not apply to family {self.family!r}")
        if self.family == "encoder_classifier" and not self.options.label_map:
            raise ConfigError("options.label_map: required for family 'encoder_classifier'")


def parse_registry(data: object, *, where: str) -> dict[str, GuardSpec]:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with key 'guards'")
    unknown = sorted(set(data) - set(TOP_LEVEL_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed keys are {list(TOP_LEVEL_KEYS)}")
    guards = data.get("guards")
    if not isinstance(guards, dict) or not guards:
        raise ConfigError(f"{where}: guards: expected a non-empty mapping of guard name -> entry")
    registry = {}
    for name, entry in guards.items():
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ConfigError(
                f"{where}: guards: name {name!r} must be lowercase letters, digits and '_' "
                "(a dot would break key paths)"
            )
        registry[name] = from_mapping(GuardSpec, entry, where=f"{where}: guards.{name}")
    return registry


def load_baseline_registry(path: str | Path = REGISTRY_FILE) -> dict[str, GuardSpec]:
    """The guards of `path` in file order."""
    return parse_registry(load_yaml(path), where=str(path))


def guard_config(baselines: BaselinesConfig, guard: str, params_file: str | Path) -> BaselineGuardConfig:
    """The run settings of `guard` in params `baselines.guards`, or ConfigError naming the configured ones."""
    guards = baselines.guards
    if guard not in guards:
        raise ConfigError(
            f"{params_file}: baselines.guards: no guard {guard!r}; configured: {sorted(guards) or 'none'}"
        )
    return guards[guard]


def guard_spec(registry_file: str | Path, guard: str) -> GuardSpec:
    """The registry entry of `guard`, or ConfigError naming the registered ones."""
    registry = load_baseline_registry(registry_file)
    if guard not in registry:
        raise ConfigError(f"{registry_file}: guards: no entry {guard!r}; registered: {sorted(registry)}")
    return registry[guard]


def require_pinned(name: str, spec: GuardSpec) -> str:
    """The revision to load, or ConfigError when the entry is not pinned yet."""
    if spec.revision is None:
        raise ConfigError(
            f"guards.{name}.revision: not pinned; set the hub commit of {spec.model_id} before running it"
        )
    return spec.revision


def build_adapter(spec: GuardSpec, mapping: BinaryMapping | None = None) -> GuardAdapter:
    """The adapter for `spec`; `mapping` (default: the entry's) picks Qwen3Guard's reported unsafe score."""
    return adapter_for(spec.family, spec.options, mapping or spec.default_mapping)


def adapter_for(family: str, options: AdapterOptions, mapping: BinaryMapping) -> GuardAdapter:
    """The adapter of `family` with its `options`; `mapping` picks Qwen3Guard's reported unsafe score."""
    if family == "qwen3guard":
        return Qwen3GuardAdapter(mapping=mapping)
    if family == "granite_guardian":
        return GraniteGuardianAdapter(risk_name=options.risk_name or "harm")
    if family == "llama_guard":
        return LlamaGuardAdapter(content_format=options.content_format or "text")
    if family == "encoder_classifier":
        return EncoderClassifierAdapter(label_map=dict(options.label_map))
    raise ConfigError(f"unknown adapter family {family!r}")

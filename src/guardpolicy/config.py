"""Typed, strict configuration: params.yaml and YAML registries are parsed into frozen dataclasses.

`from_mapping` rejects unknown keys, missing required keys and wrong types with a message that names the
full key path (e.g. ``profiles.smoke.max_length: expected int, got str 'x'``), so a typo in params.yaml fails
before any stage does work instead of being silently ignored.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

import yaml

from guardpolicy.errors import ConfigError

T = TypeVar("T")

PARAMS_FILE = "params.yaml"


def _type_name(value: Any) -> str:
    return (
        f"{type(value).__name__} {value!r}" if not isinstance(value, Mapping | list) else type(value).__name__
    )


def _coerce(tp: Any, value: Any, where: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        options = get_args(tp)
        if value is None:
            if type(None) in options:
                return None
            raise ConfigError(f"{where}: must not be null")
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(option, value, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(
            errors[0] if len(errors) == 1 else f"{where}: none of the allowed types fit: {errors}"
        )
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed or isinstance(value, bool) != any(isinstance(a, bool) for a in allowed):
            raise ConfigError(f"{where}: must be one of {list(allowed)}, got {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        return from_mapping(tp, value, where=where)
    if origin is tuple:
        args = get_args(tp)
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {_type_name(value)}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(args[0], item, f"{where}[{i}]") for i, item in enumerate(value))
        if len(args) != len(value):
            raise ConfigError(f"{where}: expected {len(args)} items, got {len(value)}")
        return tuple(
            _coerce(a, item, f"{where}[{i}]") for i, (a, item) in enumerate(zip(args, value, strict=True))
        )
    if origin in (dict, Mapping, typing.Mapping):
        key_tp, value_tp = get_args(tp)
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {_type_name(value)}")
        return {
            _coerce(key_tp, k, f"{where} key {k!r}"): _coerce(value_tp, v, f"{where}.{k}")
            for k, v in value.items()
        }
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {_type_name(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {_type_name(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {_type_name(value)}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {_type_name(value)}")
        return value
    raise TypeError(f"{where}: unsupported config annotation {tp!r}")  # a programming error, not a user one


def from_mapping(cls: type[T], data: Any, *, where: str) -> T:
    """Build the frozen dataclass `cls` from `data`, rejecting unknown keys and wrong types."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {_type_name(data)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed keys are {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{where}.{name}: required key is missing")
            continue
        kwargs[name] = _coerce(hints[name], data[name], f"{where}.{name}")
    try:
        return cls(**kwargs)
    except (ConfigError, TypeError, ValueError) as exc:
        # A range or consistency check of the dataclass itself: say where it is.
        raise ConfigError(f"{where}: {exc}") from exc


def load_yaml(path: str | Path) -> Any:
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.safe_load(handle)
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: file not found") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from exc


# ----------------------------------------------------------------------------------------------- params.yaml


@dataclass(frozen=True)
class DataConfig:
    """Where benchmark bytes come from. Read by the fetch@ stages."""

    # Local byte-exact mirror of the public files (relative to the repository root, or absolute).
    mirror_dir: str = "../shared/benchmarks"
    # Fall back to the pinned upstream URL when a file is not in the mirror.
    allow_download: bool = True
    download_timeout_s: float = 60.0


@dataclass(frozen=True)
class EncoderConfig:
    """A backbone for the guard model.

    `name` is a hub model id (then `revision` must be a pinned 40-hex commit), ``pypi:<package>`` for a model
    folder shipped inside an installed package (offline default), or a local folder path.
    """

    name: str
    revision: str | None = None
    # Keep only the first N transformer layers (a DistilBERT-style smaller student from a larger encoder).
    num_layers: int | None = None
    # Build from the (overridden) config with random weights instead of loading weights: tests and smoke runs.
    random_init: bool = False
    config_overrides: dict[str, int | float | str | bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        is_hub_id = (
            "/" in self.name
            and not self.name.startswith(("pypi:", "/", "."))
            and not Path(self.name).exists()
        )
        if (
            is_hub_id
            and not self.random_init
            and (
                self.revision is None
                or len(self.revision) != 40
                or not all(c in "0123456789abcdef" for c in self.revision)
            )
        ):
            raise ConfigError(
                f"encoder {self.name!r}: a hub model needs revision pinned to a 40-hex commit sha"
            )
        if self.num_layers is not None and self.num_layers <= 0:
            raise ConfigError(f"num_layers must be positive, got {self.num_layers}")


@dataclass(frozen=True)
class ProfileConfig:
    """One named study size. Stages read only the keys they need, as `profiles.${profile}.<key>`."""

    description: str
    pool_size: int
    teacher: EncoderConfig
    student: EncoderConfig
    max_length: int
    epochs: int
    batch_size: int
    learning_rate: float
    seeds: tuple[int, ...]
    bootstrap_samples: int
    precision: Literal["fp32", "bf16", "auto"]

    def __post_init__(self) -> None:
        for name in ("pool_size", "max_length", "epochs", "batch_size", "bootstrap_samples"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if not self.seeds:
            raise ConfigError("seeds must list at least one seed")
        if self.learning_rate <= 0:
            raise ConfigError(f"learning_rate must be positive, got {self.learning_rate}")


@dataclass(frozen=True)
class Params:
    profile: str
    data: DataConfig
    profiles: dict[str, ProfileConfig] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.profile not in self.profiles:
            raise ConfigError(
                f"profile: {self.profile!r} is not one of the defined profiles {sorted(self.profiles)}"
            )

    @property
    def active(self) -> ProfileConfig:
        return self.profiles[self.profile]


def load_params(path: str | Path = PARAMS_FILE) -> Params:
    data = load_yaml(path)
    return from_mapping(Params, data, where=str(path))

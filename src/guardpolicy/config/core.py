"""The machinery of typed, strict configuration: params.yaml and the YAML registries parsed into frozen
dataclasses.

`from_mapping` rejects unknown keys, missing required keys and wrong types with a message that names the
full key path (e.g. ``params.yaml.profiles.smoke.max_length: expected an integer, got str 'x'``), so a typo
in params.yaml fails before any stage does work instead of being silently ignored.

`Section` names one top-level section of params.yaml with its schema (defined in that section's module of
this package); `ParamsFile.read(path).load(section)` parses just that section, as strictly and with the same
key paths as the whole-file `guardpolicy.config.params.load_params`. Unknown *top-level* keys are the
whole-file check's to catch: a stage's loader reads only its own sections, so a typo in another section never
stops it (and never makes it import that section's schema).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar, Union, get_args, get_origin

import yaml

from guardpolicy.errors import ConfigError
from guardpolicy.layout import relative_path

T = TypeVar("T")

PARAMS_FILE = relative_path("params")


def _type_name(value: Any) -> str:
    return (
        f"{type(value).__name__} {value!r}" if not isinstance(value, Mapping | list) else type(value).__name__
    )


def coerce(tp: Any, value: Any, where: str) -> Any:
    """`value` checked against the annotation `tp` (dataclasses built with `from_mapping`); `where` is its key
    path, named by every error."""
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
                return coerce(option, value, where)
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
            return tuple(coerce(args[0], item, f"{where}[{i}]") for i, item in enumerate(value))
        if len(args) != len(value):
            raise ConfigError(f"{where}: expected {len(args)} items, got {len(value)}")
        return tuple(
            coerce(a, item, f"{where}[{i}]") for i, (a, item) in enumerate(zip(args, value, strict=True))
        )
    if origin in (dict, Mapping, typing.Mapping):
        key_tp, value_tp = get_args(tp)
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {_type_name(value)}")
        return {
            coerce(key_tp, k, f"{where} key {k!r}"): coerce(value_tp, v, f"{where}.{k}")
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
        kwargs[name] = coerce(hints[name], data[name], f"{where}.{name}")
    try:
        return cls(**kwargs)
    except (ConfigError, TypeError, ValueError) as exc:
        # A range or consistency check of the dataclass itself: say where it is.
        raise ConfigError(f"{where}: {exc}") from exc


# libyaml's safe loader where PyYAML was built with it: the same documents, ~10x faster than the pure-Python
# one (params.yaml, dvc.yaml and the registries are read by every stage process).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path: str | Path) -> Any:
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.load(handle, Loader=_SAFE_LOADER)
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: file not found") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from exc


@dataclass(frozen=True)
class Section(Generic[T]):
    """One top-level key of params.yaml: its schema (an annotation `coerce` understands) and the value it
    takes when params.yaml leaves it out (None: the key is required)."""

    key: str
    schema: Any
    default: Callable[[], T] | None = None

    def parse(self, document: Mapping[str, Any], where: str) -> T:
        """This section of a params document (a mapping), checked; `where` names the file."""
        if self.key not in document:
            if self.default is None:
                raise ConfigError(f"{where}.{self.key}: required key is missing")
            return self.default()
        return coerce(self.schema, document[self.key], f"{where}.{self.key}")


class ParamsFile:
    """params.yaml read once, its sections parsed on demand: ``ParamsFile.read(path).load(POOL)``."""

    def __init__(self, document: Mapping[str, Any], where: str) -> None:
        self.document = document
        self.where = where

    @classmethod
    def read(cls, path: str | Path = PARAMS_FILE) -> ParamsFile:
        document = load_yaml(path)
        if not isinstance(document, Mapping):
            raise ConfigError(f"{path}: expected a mapping, got {_type_name(document)}")
        return cls(document, str(path))

    def load(self, section: Section[T]) -> T:
        return section.parse(self.document, self.where)


def load_section(path: str | Path, section: Section[T]) -> T:
    """One section of the params file at `path`, strictly parsed (unknown keys inside it rejected with their
    full key path); the file's other sections are not parsed."""
    return ParamsFile.read(path).load(section)

"""The label space (`data/taxonomy.yaml`): 4 coarse classes, the unsafe subset, 24 pillars, the facts.

Every labeler writes into this space, every policy's rules are checked against it, and the guard model's heads
are sized from it, so it is loaded and validated in one place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from guardpolicy.config.core import load_yaml
from guardpolicy.errors import ConfigError
from guardpolicy.layout import relative_path

TAXONOMY_FILE = relative_path("taxonomy")
COARSE_CLASSES = ("GENERIC_SAFE", "BOUNDARY_SAFE", "HARMFUL", "COMPOUND")
PILLAR_COUNT = 24
PILLAR_PREFIX = "pillar_"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Taxonomy:
    coarse_classes: tuple[str, ...]
    unsafe_classes: tuple[str, ...]
    # name -> one-line definition, in file order (the pillar head's output order).
    pillars: dict[str, str]
    facts: dict[str, str]
    coarse_definitions: dict[str, str]

    @property
    def pillar_names(self) -> tuple[str, ...]:
        return tuple(self.pillars)

    @property
    def pillar_columns(self) -> tuple[str, ...]:
        return tuple(pillar_column(name) for name in self.pillars)

    def is_unsafe(self, coarse: str) -> bool:
        return coarse in self.unsafe_classes

    def check_coarse(self, value: str, where: str) -> str:
        if value not in self.coarse_classes:
            expected = list(self.coarse_classes)
            raise ConfigError(f"{where}: {value!r} is not a coarse class; expected one of {expected}")
        return value

    def check_pillars(self, values: list[str] | tuple[str, ...], where: str) -> tuple[str, ...]:
        unknown = sorted(set(values) - set(self.pillars))
        if unknown:
            raise ConfigError(f"{where}: unknown pillar(s) {unknown}; see the pillars in {TAXONOMY_FILE}")
        return tuple(values)

    def check_facts(self, values: list[str] | tuple[str, ...], where: str) -> tuple[str, ...]:
        unknown = sorted(set(values) - set(self.facts))
        if unknown:
            raise ConfigError(f"{where}: unknown fact(s) {unknown}; known facts: {sorted(self.facts)}")
        return tuple(values)


def pillar_column(name: str) -> str:
    return f"{PILLAR_PREFIX}{name}"


def _named_definitions(data: object, key: str, where: str) -> dict[str, str]:
    entries = data.get(key) if isinstance(data, dict) else None
    if not isinstance(entries, dict) or not entries:
        raise ConfigError(f"{where}: '{key}' must be a non-empty mapping of name -> one-line definition")
    for name, definition in entries.items():
        if not isinstance(definition, str) or not definition.strip():
            raise ConfigError(f"{where}: {key}.{name}: needs a non-empty one-line definition")
    return dict(entries)


def parse_taxonomy(data: object, where: str) -> Taxonomy:
    allowed = {"coarse_classes", "unsafe_classes", "pillars", "facts"}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with keys {sorted(allowed)}")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed keys are {sorted(allowed)}")
    coarse = _named_definitions(data, "coarse_classes", where)
    if tuple(coarse) != COARSE_CLASSES:
        raise ConfigError(f"{where}: coarse_classes must be exactly {list(COARSE_CLASSES)} in that order")
    unsafe = data.get("unsafe_classes")
    if not isinstance(unsafe, list) or not unsafe or not set(unsafe) <= set(coarse):
        raise ConfigError(f"{where}: unsafe_classes must be a non-empty list of coarse classes")
    pillars = _named_definitions(data, "pillars", where)
    if len(pillars) != PILLAR_COUNT:
        raise ConfigError(f"{where}: expected exactly {PILLAR_COUNT} pillars, found {len(pillars)}")
    facts = _named_definitions(data, "facts", where)
    for name in [*pillars, *facts]:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ConfigError(f"{where}: name {name!r} must match {_NAME.pattern}")
    return Taxonomy(
        coarse_classes=tuple(coarse),
        unsafe_classes=tuple(unsafe),
        pillars=pillars,
        facts=facts,
        coarse_definitions=coarse,
    )


def load_taxonomy(path: str | Path = TAXONOMY_FILE) -> Taxonomy:
    return parse_taxonomy(load_yaml(path), str(path))

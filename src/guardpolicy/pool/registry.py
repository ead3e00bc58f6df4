"""The pool source registry (`data/pool.yaml`): typed, validated declarations of every pool source.

A source is public (pinned files in the benchmark mirror), generated (a declarative cell: templates x filler
lists, or a composition of loaded prompts) or the user's own file. Each declares how to read its prompts and
which *facts* and *pillars* (data/taxonomy.yaml) they carry, plus its sampling weight and cap. Everything is
parsed with `guardpolicy.config.core.from_mapping` (unknown keys rejected) and checked against the taxonomy
here, so a typo fails before the pool stage reads a byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from guardpolicy.config.core import from_mapping, load_yaml
from guardpolicy.data.registry import HFDataset, HFFile, check_dataset_file
from guardpolicy.errors import ConfigError
from guardpolicy.first_match import Clause, unreachable_rule
from guardpolicy.taxonomy import Taxonomy

SourceKind = Literal["public", "generated", "user"]
# `dataset`: a Hugging Face dataset (user sources only), named by the file's `dataset` block.
PoolFormat = Literal["csv", "json", "jsonl", "parquet", "lines", "dataset"]
ComposeMode = Literal["task_and_request", "jailbreak_payload"]
FACT_COMPOSED = "composed"
FACT_HARMFUL = "harmful_request"
# The fact sets a compose payload may have: a harmful request (the default), or a benign request / a sensitive
# subject asked benignly (adversarial-benign compositions, no harmful span).
PAYLOAD_FACT_SETS = ((FACT_HARMFUL,), ("benign_request",), ("sensitive_topic",))
# What the carrier of each compose mode contributes to the composed prompt's facts.
CARRIER_FACT = {"task_and_request": "benign_request", "jailbreak_payload": "jailbreak_wrapper"}
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_TEMPLATE_FIELD = re.compile(r"\{([^{}]+)\}")
TOP_LEVEL_KEYS = ("sources",)


def template_fields(template: str) -> tuple[str, ...]:
    return tuple(_TEMPLATE_FIELD.findall(template))


@dataclass(frozen=True)
class PoolFile:
    """One file of a public or user source.

    Public files name a `mirror` path (relative to params `data.mirror_dir`) and a pinned `sha256`, plus the
    pinned upstream `url` (or `hf` file) to download when the mirror lacks them. A user file names a `path`
    (relative to the repository root), or (format `dataset`) a `dataset`: a hub dataset at a pinned commit
    or a local save_to_disk folder. Attribute names match `guardpolicy.data.registry.FileSpec`, so
    `guardpolicy.data.acquire` can fetch either.
    """

    format: PoolFormat
    mirror: str | None = None
    path: str | None = None
    url: str | None = None
    hf: HFFile | None = None
    sha256: str | None = None
    size: int | None = None
    # JSON only: dotted path to the list of records inside the document (e.g. `instances`).
    records: str | None = None
    # JSON only: the document is {level1: {level2: [leaf, ...]}}; names the levels, leaves become `text`.
    nested: tuple[str, ...] = ()
    # Pillars every row of this file carries in addition to the source's (e.g. one file per category).
    pillars: tuple[str, ...] = ()
    # Format `dataset`: a Hugging Face dataset in place of a file.
    dataset: HFDataset | None = None

    def __post_init__(self) -> None:
        check_dataset_file(
            self.format,
            self.dataset,
            {
                "mirror": self.mirror,
                "path": self.path,
                "url": self.url,
                "hf": self.hf,
                "sha256": self.sha256,
                "size": self.size,
            },
        )
        if self.sha256 is not None and not _SHA256.fullmatch(self.sha256):
            raise ConfigError(f"sha256 must be 64 lowercase hex characters, got {self.sha256!r}")
        if self.url is not None and self.hf is not None:
            raise ConfigError("give either url or hf for a file, not both")
        if self.url is not None and not re.match(r"^(https?|file)://", self.url):
            raise ConfigError(f"url must be http(s):// or file://, got {self.url!r}")
        if self.mirror is not None and self.path is not None:
            raise ConfigError("a file is either in the mirror (mirror) or the user's own (path), not both")
        if (self.records or self.nested) and self.format != "json":
            raise ConfigError("records / nested only apply to format json")
        if self.records and self.nested:
            raise ConfigError("give either records or nested, not both")

    @property
    def display_name(self) -> str:
        if self.dataset is not None:
            return self.dataset.display_name
        return self.mirror or self.path or self.url or (self.hf.path if self.hf else "?")


@dataclass(frozen=True)
class FactRule:
    """Facts for rows whose column values match; `when` must all hold, `when_any` needs one (if given).

    Values are compared as text (JSON 1 and "1" both match "1"; booleans as "true"/"false"; missing as "").
    A rule with neither condition matches every row (a default; put it last).
    """

    facts: tuple[str, ...]
    when: dict[str, tuple[str, ...]] = field(default_factory=dict)
    when_any: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.facts:
            raise ConfigError("a fact rule must name at least one fact")

    def clause(self) -> Clause:
        return Clause(
            required={("column", column): frozenset(values) for column, values in self.when.items()},
            groups=(
                (tuple((("column", column), frozenset(values)) for column, values in self.when_any.items()),)
                if self.when_any
                else ()
            ),
        )

    def describe(self) -> str:
        parts = []
        if self.when:
            parts.append(f"when {_plain(self.when)}")
        if self.when_any:
            parts.append(f"when_any {_plain(self.when_any)}")
        return f"{{{', '.join([*parts, f'facts {list(self.facts)}'])}}}"


def _plain(conditions: dict[str, tuple[str, ...]]) -> str:
    return "{" + ", ".join(f"{column}: {list(values)}" for column, values in conditions.items()) + "}"


def check_fact_rules(rules: tuple[FactRule, ...], where: str) -> None:
    """Refuse a fact rule that can never match: first match wins, so a rule whose every matching row an
    earlier rule already matched (or whose own conditions contradict) would silently count 0 rows."""
    found = unreachable_rule([rule.clause() for rule in rules])
    if found is None:
        return
    later, earlier = found
    rule = rules[later]
    if earlier is None:
        raise ConfigError(
            f"{where}.fact_rules[{later}] {rule.describe()} can never match: its own conditions cannot all "
            "hold (an empty value list, or when and when_any allow no common value)"
        )
    raise ConfigError(
        f"{where}.fact_rules[{later}] {rule.describe()} can never match: every row it matches is matched "
        f"first by fact_rules[{earlier}] {rules[earlier].describe()} (first match wins). Move it above "
        f"fact_rules[{earlier}], narrow fact_rules[{earlier}] or drop it"
    )


@dataclass(frozen=True)
class PillarMap:
    """Pillars by a column value: `map` value -> pillars; unmapped values take `default` (else an error)."""

    column: str
    map: dict[str, tuple[str, ...]]
    default: tuple[str, ...] | None = None


@dataclass(frozen=True)
class TemplateGroup:
    templates: tuple[str, ...]
    pillars: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.templates:
            raise ConfigError("a template group needs at least one template")


@dataclass(frozen=True)
class TemplateCell:
    """Prompts from templates x filler lists: every template filled with every combination of its fillers.

    A filler list holds strings (`{name}`) or records of strings (`{name.key}`, one record per prompt).
    """

    fillers: dict[str, tuple[str | dict[str, str], ...]]
    groups: tuple[TemplateGroup, ...]

    def __post_init__(self) -> None:
        if not self.groups:
            raise ConfigError("a template cell needs at least one group")
        for group in self.groups:
            for template in group.templates:
                for name in template_fields(template):
                    filler, _, key = name.partition(".")
                    if filler not in self.fillers:
                        raise ConfigError(f"template {template!r} uses unknown filler {filler!r}")
                    for item in self.fillers[filler]:
                        if isinstance(item, dict) != bool(key) or (key and key not in item):
                            raise ConfigError(
                                f"template {template!r}: filler {filler!r} has an item {item!r} "
                                f"that does not provide {name!r}"
                            )


@dataclass(frozen=True)
class ComposeCell:
    """Compose a request (the payload) from loaded sources with a carrier from `carrier_sources`.

    `task_and_request`: a benign task and the request joined by one of `connectors` (each has `{task}` and
    `{request}`). `jailbreak_payload`: a jailbreak template whose single `placeholders` occurrence is replaced
    by the request, or (no placeholder) followed by `separator` and the request. The request text is inserted
    unchanged, so its span is exact.

    The payload is a harmful request by default (`payload_facts: [harmful_request]`, drawn from
    `harmful_sources`; the composed prompt records the request's span). A benign payload
    (`payload_facts: [benign_request]` or `[sensitive_topic]`, drawn from `payload_sources`) makes an
    adversarial-benign prompt, e.g. a jailbreak template around an everyday request: it has no harmful part,
    so no span. Payloads are the loaded prompts whose facts are exactly `payload_facts`.
    """

    mode: ComposeMode
    carrier_sources: tuple[str, ...]
    count: int
    max_carrier_chars: int
    harmful_sources: tuple[str, ...] = ()
    payload_sources: tuple[str, ...] = ()
    payload_facts: tuple[str, ...] = (FACT_HARMFUL,)
    connectors: tuple[str, ...] = ()
    placeholders: tuple[str, ...] = ()
    separator: str = "\n\n"

    @property
    def harmful_payload(self) -> bool:
        return self.payload_facts == (FACT_HARMFUL,)

    @property
    def payload_source_names(self) -> tuple[str, ...]:
        """Where the payloads come from: `harmful_sources` or `payload_sources`, whichever is given."""
        return self.harmful_sources or self.payload_sources

    def __post_init__(self) -> None:
        if self.count <= 0 or self.max_carrier_chars <= 0:
            raise ConfigError("compose count and max_carrier_chars must be positive")
        if not self.carrier_sources:
            raise ConfigError("compose needs carrier_sources")
        if bool(self.harmful_sources) == bool(self.payload_sources):
            raise ConfigError("compose needs exactly one of harmful_sources, payload_sources")
        if self.harmful_sources and not self.harmful_payload:
            raise ConfigError(
                f"harmful_sources is for payload_facts [{FACT_HARMFUL!r}]; a payload with facts "
                f"{list(self.payload_facts)} is drawn from payload_sources"
            )
        if self.mode == "task_and_request":
            if not self.connectors:
                raise ConfigError("mode task_and_request needs connectors")
            for connector in self.connectors:
                if connector.count("{request}") != 1 or connector.count("{task}") != 1:
                    raise ConfigError(
                        f"connector {connector!r} must contain {{task}} and {{request}} once each"
                    )
                if connector != connector.strip():
                    raise ConfigError(f"connector {connector!r} must not start or end with whitespace")
        elif not self.placeholders:
            raise ConfigError("mode jailbreak_payload needs placeholders")


@dataclass(frozen=True)
class PoolSource:
    name: str
    kind: SourceKind
    description: str
    license: str
    # Relative sampling weight: the source's share of the pool when no cap or supply limit binds.
    weight: float
    cap: int | None = None
    files: tuple[PoolFile, ...] = ()
    # Column name, or a template such as "{instruction}"; dotted paths reach into JSON ("{turns.0.content}").
    prompt: str | None = None
    # Appended to the prompt only when every field it names is non-empty (e.g. an optional instance input).
    prompt_suffix: str | None = None
    # A regex with one group: the prompt is that group of the formatted text (e.g. unwrap a chat transcript).
    prompt_pattern: str | None = None
    # Column (or template, e.g. "{content_policy_id}-{q_id}") holding the row's native id, used in `origins`.
    id: str | None = None
    # Row filters: keep rows whose value is listed / drop rows whose value is listed / drop short prompts.
    filter: dict[str, tuple[str, ...]] = field(default_factory=dict)
    exclude: dict[str, tuple[str, ...]] = field(default_factory=dict)
    min_words: int = 0
    facts: tuple[str, ...] = ()
    fact_rules: tuple[FactRule, ...] = ()
    pillars: tuple[str, ...] = ()
    pillars_from: tuple[PillarMap, ...] = ()
    # User sources only: pool column `import_<name>` <- file column.
    labels: dict[str, str] = field(default_factory=dict)
    templates: TemplateCell | None = None
    compose: ComposeCell | None = None
    # Public sources only: build the pool without this source when its files cannot be had (recorded in
    # reports/pool.json). Otherwise a missing file stops the pool stage.
    allow_missing: bool = False

    def __post_init__(self) -> None:
        if self.allow_missing and self.kind != "public":
            raise ConfigError(f"allow_missing applies to public sources only, not {self.kind}")
        if self.weight < 0:
            raise ConfigError(f"weight must be >= 0, got {self.weight}")
        if self.cap is not None and self.cap <= 0:
            raise ConfigError(f"cap must be positive, got {self.cap}")
        if self.facts and self.fact_rules:
            raise ConfigError("give either facts or fact_rules, not both")
        if self.kind == "generated":
            if (self.templates is None) == (self.compose is None):
                raise ConfigError("a generated source needs exactly one of templates, compose")
            if self.files or self.prompt is not None:
                raise ConfigError("a generated source takes no files or prompt")
            if not self.facts:
                raise ConfigError("a generated source must declare its facts")
            return
        if self.templates is not None or self.compose is not None:
            raise ConfigError(f"templates / compose belong to generated sources, not {self.kind}")
        if not self.files or self.prompt is None:
            raise ConfigError(f"a {self.kind} source needs files and prompt")
        if self.kind == "public":
            for file in self.files:
                if file.dataset is not None:
                    raise ConfigError(
                        f"{file.display_name}: a dataset file belongs to a user source; a public source "
                        "reads pinned files from the mirror"
                    )
                if file.mirror is None or file.sha256 is None:
                    raise ConfigError(f"public file {file.display_name!r} needs a mirror path and a sha256")
            if not self.facts and not self.fact_rules:
                raise ConfigError("a public source must declare facts or fact_rules")
        if self.kind == "user":
            for file in self.files:
                if file.path is None and file.dataset is None:
                    raise ConfigError(
                        "a user file needs a path (relative to the repository root) or a dataset"
                    )
        if self.labels and self.kind != "user":
            raise ConfigError("only user sources may carry label columns")
        for name in self.labels:
            if not _NAME.fullmatch(name):
                raise ConfigError(f"label name {name!r} must match {_NAME.pattern}")
        if self.prompt_pattern is not None:
            try:
                groups = re.compile(self.prompt_pattern).groups
            except re.error as exc:
                raise ConfigError(f"prompt_pattern is not a valid regex: {exc}") from exc
            if groups != 1:
                raise ConfigError("prompt_pattern must have exactly one group")

    @property
    def is_generated(self) -> bool:
        return self.kind == "generated"


def _check_taxonomy(source: PoolSource, taxonomy: Taxonomy, where: str) -> None:
    taxonomy.check_facts(source.facts, f"{where}.facts")
    for i, rule in enumerate(source.fact_rules):
        taxonomy.check_facts(rule.facts, f"{where}.fact_rules[{i}].facts")
    check_fact_rules(source.fact_rules, where)
    taxonomy.check_pillars(source.pillars, f"{where}.pillars")
    for i, pillar_map in enumerate(source.pillars_from):
        for value, pillars in pillar_map.map.items():
            taxonomy.check_pillars(pillars, f"{where}.pillars_from[{i}].map.{value}")
        taxonomy.check_pillars(pillar_map.default or (), f"{where}.pillars_from[{i}].default")
    for i, file in enumerate(source.files):
        taxonomy.check_pillars(file.pillars, f"{where}.files[{i}].pillars")
    if source.templates is not None:
        for i, group in enumerate(source.templates.groups):
            taxonomy.check_pillars(group.pillars, f"{where}.templates.groups[{i}].pillars")
    if source.compose is not None:
        _check_compose_facts(source, source.compose, taxonomy, where)


def _check_compose_facts(source: PoolSource, cell: ComposeCell, taxonomy: Taxonomy, where: str) -> None:
    """The payload's fact set is a known one, and the source's facts say what the composition is.

    A harmful payload makes a composed prompt (facts carry `composed` and `harmful_request`: the policies'
    composed_harm rule). A benign payload must carry neither, or a policy would call it harmful; its facts
    are the carrier's plus the payload's.
    """
    taxonomy.check_facts(cell.payload_facts, f"{where}.compose.payload_facts")
    if cell.payload_facts not in PAYLOAD_FACT_SETS:
        raise ConfigError(
            f"{where}.compose.payload_facts: {list(cell.payload_facts)} is not a payload fact set; "
            f"expected one of {[list(facts) for facts in PAYLOAD_FACT_SETS]}"
        )
    facts = set(source.facts)
    expected = {CARRIER_FACT[cell.mode], *cell.payload_facts}
    if not expected <= facts:
        raise ConfigError(
            f"{where}.facts: a {cell.mode} composition with payload_facts {list(cell.payload_facts)} must "
            f"carry the facts {sorted(expected)} (missing {sorted(expected - facts)})"
        )
    if cell.harmful_payload and FACT_COMPOSED not in facts:
        raise ConfigError(f"{where}.facts: a compose source must carry the fact {FACT_COMPOSED!r}")
    if not cell.harmful_payload and facts & {FACT_COMPOSED, FACT_HARMFUL}:
        raise ConfigError(
            f"{where}.facts: a composition with a benign payload (compose.payload_facts "
            f"{list(cell.payload_facts)}) has no harmful part, so it may not carry "
            f"{sorted(facts & {FACT_COMPOSED, FACT_HARMFUL})}"
        )


def parse_pool_registry(data: object, where: str, taxonomy: Taxonomy) -> dict[str, PoolSource]:
    """Registry order is kept: it decides which source a merged duplicate is attributed to."""
    if not isinstance(data, dict) or set(data) != set(TOP_LEVEL_KEYS):
        raise ConfigError(f"{where}: expected a single top-level key 'sources'")
    entries = data["sources"]
    if not isinstance(entries, dict) or not entries:
        raise ConfigError(f"{where}: 'sources' must be a non-empty mapping of name -> entry")
    sources: dict[str, PoolSource] = {}
    for name, entry in entries.items():
        path = f"{where}: sources.{name}"
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ConfigError(f"{where}: source name {name!r} must match {_NAME.pattern}")
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: expected a mapping")
        if "name" in entry:
            raise ConfigError(f"{path}: 'name' comes from the key and may not be set")
        source = from_mapping(PoolSource, {"name": name, **entry}, where=path)
        _check_taxonomy(source, taxonomy, path)
        sources[name] = source
    for name, source in sources.items():
        if source.compose is not None:
            for ref in (*source.compose.carrier_sources, *source.compose.payload_source_names):
                if ref not in sources or sources[ref].is_generated:
                    raise ConfigError(
                        f"{where}: sources.{name}.compose names {ref!r}, which is not a public or user source"
                    )
    return sources


def load_pool_registry(path: str | Path, taxonomy: Taxonomy) -> dict[str, PoolSource]:
    return parse_pool_registry(load_yaml(path), str(path), taxonomy)

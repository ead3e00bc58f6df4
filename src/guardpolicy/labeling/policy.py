"""A policy (constitution) file `data/policies/<policy>.yaml`: strict parsing, the rule model, matching.

A policy says which question "unsafe" answers (for the committee's judges) and, as machine-checkable rules
over the pool's taxonomy facts, pillars and sources, which coarse class and pillars each prompt gets (for the
rules labeler). Every fact, pillar and class is checked against the taxonomy when the file is read, so a typo
fails before any labelling with the key path that holds it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from guardpolicy.errors import ConfigError
from guardpolicy.first_match import Clause, unreachable_rule
from guardpolicy.taxonomy import Taxonomy

PILLARS_CARRIED = "carried"
PILLARS_NONE = "none"
DEFAULT_RULE_NAME = "default"
_TOP_KEYS = ("name", "version", "question", "definition", "rules", "default")
_RULE_KEYS = ("name", "when", "coarse", "pillars", "add_pillars")
_DEFAULT_KEYS = ("coarse", "pillars", "add_pillars")
_WHEN_FACT_KEYS = ("all", "any", "none")
_WHEN_KEYS = (*_WHEN_FACT_KEYS, "pillars_any", "sources")


@dataclass(frozen=True)
class Condition:
    """The `when` of a rule; every key that is given must hold (an empty key list never occurs)."""

    all_facts: frozenset[str] = frozenset()
    any_facts: frozenset[str] = frozenset()
    no_facts: frozenset[str] = frozenset()
    pillars_any: frozenset[str] = frozenset()
    sources: frozenset[str] = frozenset()

    def clause(self) -> Clause:
        """The condition in the form `Clause.implies` compares (facts, pillars, sources as yes/no flags)."""
        yes, no = frozenset({True}), frozenset({False})
        required: dict[tuple[str, str], frozenset[object]] = {("fact", f): yes for f in self.all_facts}
        for fact in self.no_facts:
            required[("fact", fact)] = required.get(("fact", fact), frozenset({True, False})) & no
        groups = tuple(
            tuple(((kind, name), yes) for name in sorted(names))
            for kind, names in (
                ("fact", self.any_facts),
                ("pillar", self.pillars_any),
                ("source", self.sources),
            )
            if names
        )
        return Clause(required=required, groups=groups)

    def describe(self) -> str:
        """The `when` as written in the policy file (lists sorted)."""
        keys = (
            ("all", self.all_facts),
            ("any", self.any_facts),
            ("none", self.no_facts),
            ("pillars_any", self.pillars_any),
            ("sources", self.sources),
        )
        return "{" + ", ".join(f"{key}: [{', '.join(sorted(names))}]" for key, names in keys if names) + "}"

    def holds(self, facts: frozenset[str], pillars: frozenset[str], sources: frozenset[str]) -> bool:
        # `sources` matches any source that had the prompt, not only the first, because merged duplicates
        # carry every source's provenance and a rule about a source should see all of it.
        return (
            self.all_facts <= facts
            and (not self.any_facts or bool(self.any_facts & facts))
            and not (self.no_facts & facts)
            and (not self.pillars_any or bool(self.pillars_any & pillars))
            and (not self.sources or bool(self.sources & sources))
        )


@dataclass(frozen=True)
class Outcome:
    """What a rule (or the default) assigns: a coarse class and how the pillar flags are formed."""

    coarse: str
    # `carried`: the pool's pillars; `none`: no pillar; `explicit`: exactly `explicit_pillars`.
    pillar_mode: Literal["carried", "none", "explicit"]
    explicit_pillars: tuple[str, ...] = ()
    add_pillars: tuple[str, ...] = ()

    def pillars_for(self, pool_pillars: frozenset[str]) -> frozenset[str]:
        if self.pillar_mode == PILLARS_CARRIED:
            base = pool_pillars
        elif self.pillar_mode == PILLARS_NONE:
            base = frozenset()
        else:
            base = frozenset(self.explicit_pillars)
        return base | frozenset(self.add_pillars)


@dataclass(frozen=True)
class Rule:
    name: str
    when: Condition
    outcome: Outcome


@dataclass(frozen=True)
class Policy:
    name: str
    version: str
    question: str
    definition: str
    rules: tuple[Rule, ...]
    default: Outcome
    # The file's exact bytes: they, not the parsed content, version the labels (a comment edit is a change).
    file_bytes: bytes = b""

    def decide(
        self, facts: frozenset[str], pillars: frozenset[str], sources: frozenset[str]
    ) -> tuple[str, Outcome]:
        """The first rule whose `when` holds, as (rule name, outcome); the default when none does."""
        for rule in self.rules:
            if rule.when.holds(facts, pillars, sources):
                return rule.name, rule.outcome
        return DEFAULT_RULE_NAME, self.default


def policy_version(policy: Policy, labeler_config: Mapping[str, Any]) -> str:
    """`<version>+<12 hex of sha256(policy file bytes + canonical JSON of the labeler config)>`."""
    canonical = json.dumps(labeler_config, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(policy.file_bytes + canonical.encode("utf-8")).hexdigest()
    return f"{policy.version}+{digest[:12]}"


def _check_keys(data: Any, allowed: tuple[str, ...], required: tuple[str, ...], where: str) -> dict:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with keys {list(allowed)}, got {type(data).__name__}")
    unknown = sorted(str(k) for k in set(data) - set(allowed))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed keys are {list(allowed)}")
    for key in required:
        if key not in data:
            raise ConfigError(f"{where}.{key}: required key is missing")
    return data


def _text(data: dict, key: str, where: str) -> str:
    value = data[key]
    if not isinstance(value, str) or not value.strip():
        hint = ' (quote it in YAML, e.g. "1.0")' if key == "version" and value is not None else ""
        raise ConfigError(f"{where}.{key}: expected a non-empty string, got {value!r}{hint}")
    return value.strip()


def _names(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where}: expected a non-empty list of names, got {value!r}")
    return tuple(value)


def _condition(data: Any, taxonomy: Taxonomy, where: str) -> Condition:
    when = _check_keys(data, _WHEN_KEYS, (), where)
    if not when:
        raise ConfigError(f"{where}: a rule needs at least one condition; use `default` for the fallback")
    fields: dict[str, frozenset[str]] = {}
    for key in _WHEN_FACT_KEYS:
        if key in when:
            fields[key] = frozenset(
                taxonomy.check_facts(_names(when[key], f"{where}.{key}"), f"{where}.{key}")
            )
    pillars_any = frozenset()
    if "pillars_any" in when:
        names = _names(when["pillars_any"], f"{where}.pillars_any")
        pillars_any = frozenset(taxonomy.check_pillars(names, f"{where}.pillars_any"))
    sources = frozenset(_names(when["sources"], f"{where}.sources")) if "sources" in when else frozenset()
    return Condition(
        all_facts=fields.get("all", frozenset()),
        any_facts=fields.get("any", frozenset()),
        no_facts=fields.get("none", frozenset()),
        pillars_any=pillars_any,
        sources=sources,
    )


def _outcome(data: dict, taxonomy: Taxonomy, where: str) -> Outcome:
    coarse = data["coarse"]
    if not isinstance(coarse, str):
        raise ConfigError(f"{where}.coarse: expected a coarse class name, got {coarse!r}")
    taxonomy.check_coarse(coarse, f"{where}.coarse")
    pillars = data["pillars"]
    explicit: tuple[str, ...] = ()
    if pillars in (PILLARS_CARRIED, PILLARS_NONE):
        mode = pillars
    elif isinstance(pillars, list):
        mode = "explicit"
        explicit = taxonomy.check_pillars(_names(pillars, f"{where}.pillars"), f"{where}.pillars")
    else:
        raise ConfigError(
            f"{where}.pillars: expected '{PILLARS_CARRIED}', '{PILLARS_NONE}' or a list of pillar names, "
            f"got {pillars!r}"
        )
    add: tuple[str, ...] = ()
    if "add_pillars" in data:
        add = taxonomy.check_pillars(
            _names(data["add_pillars"], f"{where}.add_pillars"), f"{where}.add_pillars"
        )
    return Outcome(coarse=coarse, pillar_mode=mode, explicit_pillars=explicit, add_pillars=add)


def _check_reachable(rules: list[Rule], where: str) -> None:
    """Refuse a rule that can never fire. First match wins, so a rule placed below one that matches every
    prompt it matches would silently label nothing (its count in the label report drops to 0): it either
    repeats the earlier rule or contradicts it, and either way the file does not say what its author meant.
    Facts, pillars and sources are treated as independent, so only a shadow that holds for every possible
    prompt is reported."""
    found = unreachable_rule([rule.when.clause() for rule in rules])
    if found is None:
        return
    later, earlier = found
    rule = rules[later]
    head = f"{where}.rules[{later}] {rule.name!r} (when {rule.when.describe()}) can never fire"
    if earlier is None:
        both = sorted(rule.when.all_facts & rule.when.no_facts)
        reason = (
            f"fact(s) {both} are both required (all) and excluded (none)"
            if both
            else f"every fact of any {sorted(rule.when.any_facts)} is excluded (none)"
        )
        raise ConfigError(f"{head}: its own conditions contradict each other: {reason}")
    first = rules[earlier]
    verdict = (
        "it repeats that rule's outcome, so it is dead weight"
        if first.outcome == rule.outcome
        else f"the two contradict: rules[{earlier}] assigns {_outcome_text(first.outcome)}, "
        f"rules[{later}] would assign {_outcome_text(rule.outcome)}"
    )
    raise ConfigError(
        f"{head}: every prompt it matches is matched first by rules[{earlier}] {first.name!r} (when "
        f"{first.when.describe()}), and the first match wins; {verdict}. Move rules[{later}] above "
        f"rules[{earlier}], narrow rules[{earlier}] or drop one of them"
    )


def _outcome_text(outcome: Outcome) -> str:
    pillars = list(outcome.explicit_pillars) if outcome.pillar_mode == "explicit" else outcome.pillar_mode
    added = f" + {list(outcome.add_pillars)}" if outcome.add_pillars else ""
    return f"{outcome.coarse} (pillars {pillars}{added})"


def parse_policy(data: Any, taxonomy: Taxonomy, where: str, expected_name: str | None = None) -> Policy:
    """Validate policy data strictly against the taxonomy; `where` prefixes every error (the file path)."""
    top = _check_keys(data, _TOP_KEYS, _TOP_KEYS, where)
    name = _text(top, "name", where)
    if expected_name is not None and name != expected_name:
        raise ConfigError(f"{where}.name: {name!r} must equal the file stem {expected_name!r}")
    rules_data = top["rules"]
    if not isinstance(rules_data, list) or not rules_data:
        raise ConfigError(f"{where}.rules: expected a non-empty list of rules")
    rules: list[Rule] = []
    for index, rule_data in enumerate(rules_data):
        rule_where = f"{where}.rules[{index}]"
        entry = _check_keys(rule_data, _RULE_KEYS, ("name", "when", "coarse", "pillars"), rule_where)
        rule_name = _text(entry, "name", rule_where)
        if rule_name == DEFAULT_RULE_NAME or any(r.name == rule_name for r in rules):
            raise ConfigError(f"{rule_where}.name: {rule_name!r} is reserved or used by an earlier rule")
        rules.append(
            Rule(
                name=rule_name,
                when=_condition(entry["when"], taxonomy, f"{rule_where}.when"),
                outcome=_outcome(entry, taxonomy, rule_where),
            )
        )
    _check_reachable(rules, where)
    default = _check_keys(top["default"], _DEFAULT_KEYS, ("coarse", "pillars"), f"{where}.default")
    return Policy(
        name=name,
        version=_text(top, "version", where),
        question=_text(top, "question", where),
        definition=_text(top, "definition", where),
        rules=tuple(rules),
        default=_outcome(default, taxonomy, f"{where}.default"),
    )


def load_policy(path: str | Path, taxonomy: Taxonomy) -> Policy:
    """Read and validate a policy file; its `name` must equal the file stem."""
    path = Path(path)
    try:
        file_bytes = path.read_bytes()
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: policy file not found") from exc
    try:
        data = yaml.safe_load(file_bytes.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    policy = parse_policy(data, taxonomy, str(path), expected_name=path.stem)
    return dataclasses.replace(policy, file_bytes=file_bytes)

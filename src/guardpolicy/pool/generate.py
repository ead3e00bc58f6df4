"""Generated pool cells: prompts no public set covers, made deterministically from declarations.

Two kinds (see data/pool.yaml): a *template* cell fills every template of each group with every combination
of the filler lists it names (copyright requests, policy-refusal requests, benign sensitive questions,
borderline questions, intent-flip contrast pairs); a *compose* cell joins a request drawn from loaded sources
with a carrier (a benign task, or a jailbreak template) and, when the request is harmful, records its exact
character span (a benign payload, e.g. an everyday request in a jailbreak template, has none). Both are pure:
inputs in, candidates out, the same for the same seed and the same *set* of loaded prompts (candidates are
ordered by a seeded hash of their text, never by file row order).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from collections.abc import Iterable

import numpy as np

from guardpolicy.pool.registry import ComposeCell, PoolSource, TemplateCell, template_fields
from guardpolicy.pool.rows import Candidate, stripped

FACT_BENIGN = "benign_request"
FACT_JAILBREAK = "jailbreak_wrapper"
# What a carrier must be, exactly, to be composed (a toxic or already composed prompt is not). A payload's
# facts must be exactly the cell's `payload_facts` (default [harmful_request], registry.PAYLOAD_FACT_SETS).
CARRIER_FACTS = {"task_and_request": (FACT_BENIGN,), "jailbreak_payload": (FACT_JAILBREAK,)}


def seeded_rank(seed: int, *parts: str) -> str:
    """A stable pseudo-random sort key (hex sha256 of the seed and the parts)."""
    return hashlib.sha256("\x1f".join([str(seed), *parts]).encode("utf-8")).hexdigest()


def rng_for(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng(int(seeded_rank(seed, name)[:16], 16))


# ------------------------------------------------------------------------------------------------ templates


def _fillers_in_order(template: str) -> list[str]:
    names: list[str] = []
    for field_name in template_fields(template):
        filler = field_name.partition(".")[0]
        if filler not in names:
            names.append(filler)
    return names


def _render(template: str, choice: dict[str, str | dict[str, str]]) -> str:
    text = template
    for field_name in template_fields(template):
        filler, _, key = field_name.partition(".")
        item = choice[filler]
        value = item[key] if isinstance(item, dict) else item
        text = text.replace("{" + field_name + "}", value)
    return text


def generate_from_templates(source: PoolSource, cell: TemplateCell) -> list[Candidate]:
    """Every template x every combination of its fillers, in declaration order.

    Origins are `<source>:g<group>.t<template>.<combination>`, stable while the declaration is unchanged.
    """
    out: list[Candidate] = []
    for g, group in enumerate(cell.groups):
        pillars = tuple(sorted({*source.pillars, *group.pillars}))
        for t, template in enumerate(group.templates):
            names = _fillers_in_order(template)
            combos = itertools.product(*(cell.fillers[name] for name in names))
            for c, values in enumerate(combos):
                prompt, _ = stripped(_render(template, dict(zip(names, values, strict=True))), None)
                out.append(
                    Candidate(
                        source=source.name,
                        kind=source.kind,
                        origin=f"{source.name}:g{g}.t{t}.{c}",
                        prompt=prompt,
                        facts=tuple(sorted(set(source.facts))),
                        pillars=pillars,
                    )
                )
    return out


# -------------------------------------------------------------------------------------------------- compose


def _distinct_by_text(candidates: Iterable[Candidate], facts: tuple[str, ...], seed: int) -> list[Candidate]:
    """One candidate per prompt text whose facts are exactly `facts` (pillars united), in seeded order."""
    by_text: dict[str, Candidate] = {}
    for candidate in candidates:
        if candidate.facts != facts:
            continue
        known = by_text.get(candidate.prompt)
        if known is None:
            by_text[candidate.prompt] = candidate
        else:
            merged = tuple(sorted({*known.pillars, *candidate.pillars}))
            by_text[candidate.prompt] = dataclasses.replace(known, pillars=merged)
    return [by_text[text] for text in sorted(by_text, key=lambda text: seeded_rank(seed, text))]


def _placeholder_slot(template: str, placeholders: tuple[str, ...]) -> tuple[int, int] | bool | None:
    """Where the payload goes: the single placeholder's range, None (append), or False (ambiguous)."""
    hits = [(template.find(p), p) for p in placeholders if p in template]
    total = sum(template.count(p) for p in placeholders)
    if total == 0:
        return None
    if total > 1:
        return False
    start, placeholder = hits[0]
    return start, start + len(placeholder)


def _join(carrier: str, request: str, cell: ComposeCell, connector: str | None) -> tuple[str, int]:
    """The composed prompt and the offset where `request` starts in it."""
    if cell.mode == "task_and_request":
        assert connector is not None
        before, after = connector.split("{request}")
        before, after = before.replace("{task}", carrier), after.replace("{task}", carrier)
        return before + request + after, len(before)
    slot = _placeholder_slot(carrier, cell.placeholders)
    if slot is None:
        before = carrier + cell.separator
        return before + request, len(before)
    assert slot is not False
    start, end = slot
    return carrier[:start] + request + carrier[end:], start


def compose(
    source: PoolSource, cell: ComposeCell, loaded: dict[str, list[Candidate]], seed: int
) -> tuple[list[Candidate], str | None]:
    """`cell.count` distinct composed prompts (fewer if the inputs run out), or ([], reason) without inputs.

    Pillars of a composed prompt are the request's (plus the source's own, e.g. prompt_attack). Asserts that
    the request text sits unchanged at its offset; `span` records that range only for a harmful payload
    (`cell.harmful_payload`), and is None for a benign one.
    """
    carriers = _distinct_by_text(
        (c for name in cell.carrier_sources for c in loaded.get(name, ())), CARRIER_FACTS[cell.mode], seed
    )
    carriers = [c for c in carriers if len(c.prompt) <= cell.max_carrier_chars]
    if cell.mode == "jailbreak_payload":
        carriers = [c for c in carriers if _placeholder_slot(c.prompt, cell.placeholders) is not False]
    payloads = _distinct_by_text(
        (c for name in cell.payload_source_names for c in loaded.get(name, ())), cell.payload_facts, seed
    )
    if not carriers or not payloads:
        lacking = "carrier" if not carriers else ("harmful request" if cell.harmful_payload else "payload")
        names = cell.carrier_sources if not carriers else cell.payload_source_names
        return [], f"no {lacking} prompts loaded from {list(names)}"
    rng = rng_for(seed, source.name)
    out: list[Candidate] = []
    seen: set[str] = set()
    # Random pairs can repeat; a bounded number of draws keeps generation finite when inputs are few.
    for _ in range(cell.count * 4):
        if len(out) == cell.count:
            break
        carrier = carriers[int(rng.integers(len(carriers)))]
        payload = payloads[int(rng.integers(len(payloads)))]
        connector = cell.connectors[int(rng.integers(len(cell.connectors)))] if cell.connectors else None
        text, start = _join(carrier.prompt, payload.prompt, cell, connector)
        text, span = stripped(text, (start, start + len(payload.prompt)))
        assert span is not None and text[span[0] : span[1]] == payload.prompt, "composed span is not exact"
        if text in seen:
            continue
        seen.add(text)
        out.append(
            Candidate(
                source=source.name,
                kind=source.kind,
                origin=f"{source.name}:{len(out) + 1}",
                prompt=text,
                facts=tuple(sorted(set(source.facts))),
                pillars=tuple(sorted({*source.pillars, *payload.pillars})),
                span=span if cell.harmful_payload else None,
            )
        )
    return out, None

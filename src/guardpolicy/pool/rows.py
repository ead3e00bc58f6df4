"""The unit every pool source produces before merging: one prompt occurrence with its provenance and facts."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Candidate:
    """One occurrence of a prompt in one source (a file row or a generated item).

    `prompt` is stripped of surrounding whitespace (duplicates are merged on it); `span` is the `[start, end)`
    character range of the harmful part in `prompt`, where the source knows it.
    """

    source: str
    kind: str
    origin: str  # "<source>:<native id or row number>"
    prompt: str
    facts: tuple[str, ...]
    pillars: tuple[str, ...]
    span: tuple[int, int] | None = None
    imports: dict[str, str | None] = field(default_factory=dict)


def stripped(prompt: str, span: tuple[int, int] | None) -> tuple[str, tuple[int, int] | None]:
    """`prompt` without surrounding whitespace, with `span` shifted to match."""
    lead = len(prompt) - len(prompt.lstrip())
    text = prompt.strip()
    if span is None:
        return text, None
    return text, (span[0] - lead, span[1] - lead)

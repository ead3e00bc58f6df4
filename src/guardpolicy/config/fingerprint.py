"""params `fingerprint`: stage fingerprint."""

from __future__ import annotations

from dataclasses import dataclass

from guardpolicy.config.core import Section
from guardpolicy.layout import relative_path


@dataclass(frozen=True)
class FingerprintConfig:
    """Stage fingerprint: benchmark prompts labelled by each policy's labeler."""

    # Facts of each benchmark's prompts (for the rules labeler), like data/pool.yaml's sources.
    facts_file: str = relative_path("benchmark_facts")


FINGERPRINT: Section[FingerprintConfig] = Section("fingerprint", FingerprintConfig, FingerprintConfig)

"""params `audit`: normalisation, near-duplicate matching, splits and decontamination (stages audit,
validate_splits)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from guardpolicy.config.core import Section
from guardpolicy.errors import ConfigError


@dataclass(frozen=True)
class NormaliseConfig:
    """Text normalisation before overlap matching."""

    nfkc: bool = True
    casefold: bool = True
    collapse_whitespace: bool = True
    strip_punctuation: bool = True


@dataclass(frozen=True)
class NearDuplicateConfig:
    method: Literal["minhash", "ngram"] = "minhash"
    # Jaccard similarity of shingle sets at or above which two prompts count as near-duplicates.
    threshold: float = 0.8
    shingle: Literal["word", "char"] = "word"
    shingle_size: int = 3
    num_perm: int = 128
    seed: int = 1

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ConfigError(f"threshold must lie in (0, 1], got {self.threshold}")
        if self.shingle_size <= 0 or self.num_perm <= 0:
            raise ConfigError("shingle_size and num_perm must be positive")


@dataclass(frozen=True)
class SplitConfig:
    """Deterministic stratified train / val / calib split of the pool."""

    train: float = 0.8
    val: float = 0.1
    calib: float = 0.1
    seed: int = 2024
    # Policies whose coarse labels define the strata (their joint label), plus the source.
    stratify_by: tuple[str, ...] = ("policy_a", "policy_b")

    def __post_init__(self) -> None:
        fractions = (self.train, self.val, self.calib)
        if any(f <= 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-9:
            raise ConfigError(f"split fractions must be positive and sum to 1, got {list(fractions)}")


@dataclass(frozen=True)
class AuditConfig:
    normalise: NormaliseConfig = field(default_factory=NormaliseConfig)
    near_duplicate: NearDuplicateConfig = field(default_factory=NearDuplicateConfig)
    splits: SplitConfig = field(default_factory=SplitConfig)
    # What a decontaminated benchmark drops: prompts with an exact match in the pool, or near-duplicates too.
    decontaminate: Literal["exact", "exact_and_near"] = "exact_and_near"


AUDIT: Section[AuditConfig] = Section("audit", AuditConfig, AuditConfig)

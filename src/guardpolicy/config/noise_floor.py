"""params `noise_floor`: branches trained again at further seeds."""

from __future__ import annotations

from dataclasses import dataclass, field

from guardpolicy.config.core import Section
from guardpolicy.errors import ConfigError


@dataclass(frozen=True)
class NoiseFloorConfig:
    """Branches trained again at further seeds, for the seed noise floor (empty: none)."""

    # No default for branches and scales: params.yaml's values are the only ones (they differed from the old
    # defaults, which trained no noise-floor branch).
    branches: tuple[str, ...]
    seeds: tuple[int, ...] = (43, 44)
    # Scales the seed triples are trained at (empty: every scale); each triple costs two more trainings.
    scales: tuple[str, ...] = field(kw_only=True)

    def __post_init__(self) -> None:
        if len(set(self.scales)) != len(self.scales):
            raise ConfigError(f"scales must be distinct, got {list(self.scales)}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"seeds must be distinct, got {list(self.seeds)}")
        if len(set(self.branches)) != len(self.branches):
            raise ConfigError(f"branches must be distinct, got {list(self.branches)}")


NOISE_FLOOR: Section[NoiseFloorConfig] = Section("noise_floor", NoiseFloorConfig)

"""params `agreement`: the policy pair the agreement report compares, and the bands the validation accepts."""

from __future__ import annotations

from dataclasses import dataclass, field

from guardpolicy.config.core import Section
from guardpolicy.errors import ConfigError


@dataclass(frozen=True)
class AgreementConfig:
    """Which two policies the agreement report compares, and the band the validation accepts."""

    pair: tuple[str, str] = ("policy_a", "policy_b")
    coarse_band: tuple[float, float] = (0.75, 0.95)
    # No default: params.yaml's value is the only one (the old default, [0, 1], accepted any binary
    # agreement).
    binary_band: tuple[float, float] = field(kw_only=True)

    def __post_init__(self) -> None:
        if self.pair[0] == self.pair[1]:
            raise ConfigError("agreement.pair must name two different policies")
        for name in ("coarse_band", "binary_band"):
            low, high = getattr(self, name)
            if not 0.0 <= low <= high <= 1.0:
                raise ConfigError(f"agreement.{name} must satisfy 0 <= low <= high <= 1, got {[low, high]}")


AGREEMENT: Section[AgreementConfig] = Section("agreement", AgreementConfig)

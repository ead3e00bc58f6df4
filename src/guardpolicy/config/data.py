"""params `data`: where benchmark bytes come from (the fetch@ stages, pool, validate_benchmarks)."""

from __future__ import annotations

from dataclasses import dataclass, field

from guardpolicy.config.core import Section
from guardpolicy.errors import ConfigError


@dataclass(frozen=True)
class DataConfig:
    """Where benchmark bytes come from. Read by the fetch@ stages."""

    # Local byte-exact mirror of the public files (relative to the repository root, or absolute).
    mirror_dir: str = "../shared/benchmarks"
    # Fall back to the pinned upstream URL when a file is not in the mirror.
    allow_download: bool = True
    download_timeout_s: float = 60.0
    # validate_benchmarks stops the pipeline when fewer registered benchmarks than this could be had (null:
    # every one of data/benchmarks.yaml). Read by validate_benchmarks only. No default: params.yaml's value is
    # the only one (it differed from the old default, null).
    min_present_benchmarks: int | None = field(kw_only=True)

    def __post_init__(self) -> None:
        if self.min_present_benchmarks is not None and self.min_present_benchmarks < 1:
            raise ConfigError(f"min_present_benchmarks must be at least 1, got {self.min_present_benchmarks}")


DATA: Section[DataConfig] = Section("data", DataConfig)  # required: min_present_benchmarks has no default

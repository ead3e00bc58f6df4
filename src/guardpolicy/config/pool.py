"""params `pool`: the prompt pool (stage pool)."""

from __future__ import annotations

from dataclasses import dataclass

from guardpolicy.config.core import Section
from guardpolicy.errors import ConfigError
from guardpolicy.layout import relative_path


@dataclass(frozen=True)
class PoolConfig:
    """The prompt pool. Read by the pool stage; its size comes from the profile (`pool_size`)."""

    # The pool source registry: public sets, generated cells and the user's own files.
    sources_file: str = relative_path("pool_config")
    # Seeds the per-source sampling and the generated cells, so the pool is deterministic.
    seed: int = 13
    # Prompts longer than this (characters) are dropped and counted, not truncated.
    max_prompt_chars: int = 4000

    def __post_init__(self) -> None:
        if self.max_prompt_chars <= 0:
            raise ConfigError(f"max_prompt_chars must be positive, got {self.max_prompt_chars}")


POOL: Section[PoolConfig] = Section("pool", PoolConfig, PoolConfig)

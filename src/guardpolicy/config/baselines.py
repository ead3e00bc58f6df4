"""params `baselines`: the optional open-guard sub-pipeline (pipelines/baselines/dvc.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from guardpolicy.config.core import Section
from guardpolicy.errors import ConfigError
from guardpolicy.layout import relative_path


@dataclass(frozen=True)
class BaselineGuardConfig:
    """One open guard to run in the baselines sub-pipeline (its registry entry is data/baselines.yaml)."""

    backend: Literal["transformers", "server"] = "transformers"
    # transformers: a local folder or the hub id (the registry's pinned revision is used for a hub id);
    # server: the model name the server serves. Null: the registry's hub id.
    model: str | None = None
    # server only: the OpenAI-compatible endpoint, e.g. http://localhost:8000/v1
    base_url: str | None = None
    batch_size: int = 8
    dtype: Literal["auto", "bf16", "fp32"] = "auto"
    # Qwen3Guard's middle class as unsafe (`strict`) or safe (`relaxed`) for the headline; both are written.
    mapping: Literal["strict", "relaxed"] | None = None
    # Encoder classifiers only: truncate prompts to this many tokens (null: 512, capped by the model's own
    # limit). Generative guards take the whole prompt; giving it for one is an error.
    max_length: int | None = None
    # server only: requests kept in flight at once (refilled as each reply arrives); vLLM batches them.
    max_in_flight: int = 16

    def __post_init__(self) -> None:
        if self.max_in_flight < 1:
            raise ConfigError(f"max_in_flight must be at least 1, got {self.max_in_flight}")
        if self.backend == "server" and not self.base_url:
            raise ConfigError("backend server needs base_url (e.g. http://localhost:8000/v1)")
        if self.batch_size <= 0:
            raise ConfigError(f"batch_size must be positive, got {self.batch_size}")
        if self.max_length is not None and self.max_length < 2:
            raise ConfigError(
                f"max_length must be at least 2 (room for the special tokens), got {self.max_length}"
            )


@dataclass(frozen=True)
class BaselinesConfig:
    """The optional open-guard sub-pipeline (pipelines/baselines/dvc.yaml)."""

    registry: str = relative_path("baseline_registry")
    guards: dict[str, BaselineGuardConfig] = field(default_factory=dict)
    # What an answer the parser cannot read counts as: unsafe, safe, or excluded (and counted) from the rates.
    failure_policy: Literal["unsafe", "safe", "exclude"] = "exclude"
    max_new_tokens: int = 32
    top_logprobs: int = 5
    # Raw generations, keyed by model + revision + template + decoding + prompt (never a DVC output).
    cache_dir: str = relative_path("baseline_cache")

    def __post_init__(self) -> None:
        if self.max_new_tokens <= 0 or not 1 <= self.top_logprobs <= 20:
            raise ConfigError("max_new_tokens must be positive and top_logprobs within 1..20")


BASELINES: Section[BaselinesConfig] = Section("baselines", BaselinesConfig, BaselinesConfig)

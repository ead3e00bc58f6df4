"""params `profile` (the active profile's name) and `profiles.<name>`: one named study size each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from guardpolicy.config.core import ParamsFile, Section
from guardpolicy.config.encoders import EncoderConfig
from guardpolicy.errors import ConfigError

# bench-train times steps 4 .. n-1 of batches of 32: 256 prompts give 4 timed steps.
PROBE_MIN_SAMPLES = 256


@dataclass(frozen=True)
class ProfileConfig:
    """One named study size. Stages read only the keys they need, as `profiles.${profile}.<key>`.

    Every key is required: params.yaml is the one place a profile's values live (no dataclass default that
    could disagree with it). Optional settings of an encoder entry keep their off-by-default values.
    """

    description: str
    pool_size: int
    # The two backbones the model scales train (params `scales` maps each scale to one of these keys): the
    # smaller one and the larger one, from which the teachers are usually trained (teachers.<policy>.scale).
    small_encoder: EncoderConfig
    large_encoder: EncoderConfig
    max_length: int
    epochs: int
    batch_size: int
    learning_rate: float
    # The main seed: every teacher and every model of the plan trains with it, and the fresh heads of a
    # scale's pretrained folder are drawn with it. The noise-floor study's further seeds are
    # `noise_floor.seeds`.
    seed: int
    bootstrap_samples: int
    precision: Literal["fp32", "bf16", "auto"]
    # Which part of a prompt longer than max_length a model reads: head | tail | head_tail (the first
    # truncation_head_tokens tokens and the end; null: a quarter of max_length). Saved into every model.
    truncation: Literal["head", "tail", "head_tail"]
    truncation_head_tokens: int | None
    # The `timings` stage trains this many pool prompts with `guardpolicy bench-train --loops ours`
    # (MiniLM-L6, 64 tokens) and records the samples/s beside the run's seconds, since machines of one kind
    # differ by up to ~1.5x. 0: no probe (the smoke profile, whose pool is smaller than a probe).
    speed_probe_samples: int

    def __post_init__(self) -> None:
        for name in ("pool_size", "max_length", "epochs", "batch_size", "bootstrap_samples"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.speed_probe_samples and not PROBE_MIN_SAMPLES <= self.speed_probe_samples <= self.pool_size:
            raise ConfigError(
                f"speed_probe_samples must be 0 or between {PROBE_MIN_SAMPLES} and pool_size "
                f"({self.pool_size}), got {self.speed_probe_samples}"
            )
        if self.learning_rate <= 0:
            raise ConfigError(f"learning_rate must be positive, got {self.learning_rate}")
        if self.truncation_head_tokens is not None and not (
            self.truncation == "head_tail" and 0 < self.truncation_head_tokens < self.max_length - 2
        ):
            raise ConfigError(
                "truncation_head_tokens applies to truncation head_tail only and must be between 1 and "
                f"max_length - 3, got {self.truncation_head_tokens} (truncation {self.truncation})"
            )


PROFILE: Section[str] = Section("profile", str)
PROFILES: Section[dict[str, ProfileConfig]] = Section("profiles", dict[str, ProfileConfig])
# The keys of a profile's encoder entries, which params `scales` maps each model scale to.
EncoderKey = Literal["small_encoder", "large_encoder"]


def check_profile(name: str, profiles: dict[str, ProfileConfig]) -> None:
    if name not in profiles:
        raise ConfigError(f"profile: {name!r} is not one of the defined profiles {sorted(profiles)}")


def active_profile(params: ParamsFile) -> tuple[str, ProfileConfig]:
    """The active profile's name (params `profile`) and its entry of `profiles`, every profile checked."""
    name, profiles = params.load(PROFILE), params.load(PROFILES)
    try:
        check_profile(name, profiles)
    except ConfigError as exc:
        raise ConfigError(f"{params.where}: {exc}") from exc
    return name, profiles[name]

"""params `scales`: the model scales and which of the active profile's encoder entries each one trains.

Kept as a section although it maps `small` to `small_encoder` and `large` to `large_encoder`: dvc.yaml's
`foreach: ${scales}` iterates it (DVC cannot iterate the keys of the profile that `profile` selects), a
reduced study lists fewer scales (guardpolicy.devtools.smoke keeps `small` only), and the order of its keys is
the order models are planned in.
"""

from __future__ import annotations

from collections.abc import Mapping

from guardpolicy.config.core import Section
from guardpolicy.config.encoders import EncoderConfig
from guardpolicy.config.profiles import EncoderKey, ProfileConfig
from guardpolicy.errors import ConfigError

SCALES: Section[dict[str, EncoderKey]] = Section("scales", dict[str, EncoderKey])


def scale_encoder(
    profile: ProfileConfig, scales: Mapping[str, EncoderKey], scale: str, where: str
) -> EncoderConfig:
    """The encoder entry `scale` trains (ConfigError naming the known scales for an unknown one)."""
    if scale not in scales:
        raise ConfigError(f"{where}: scales: unknown scale {scale!r}; known: {sorted(scales)}")
    return getattr(profile, scales[scale])

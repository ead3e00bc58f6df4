"""params `anchor_sets.<name>`: anchor samples a branch can add."""

from __future__ import annotations

from dataclasses import dataclass

from guardpolicy.config.core import Section
from guardpolicy.config.runs import TrainSplit
from guardpolicy.errors import ConfigError


@dataclass(frozen=True)
class AnchorSetConfig:
    """Anchor samples: rows of `split` selected by `policy`'s labels, added to a branch labelled by `policy`.

    A row is selected when its label under `policy` came from one of `rules` (the label file's `rule` column)
    and has one of the `coarse` classes; an empty list does not constrain. At least one must be given.
    """

    description: str
    policy: str
    split: TrainSplit = "train"
    rules: tuple[str, ...] = ()
    coarse: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.rules and not self.coarse:
            raise ConfigError("an anchor set needs `rules` or `coarse` (or both) to select its rows")


ANCHOR_SETS: Section[dict[str, AnchorSetConfig]] = Section("anchor_sets", dict[str, AnchorSetConfig], dict)

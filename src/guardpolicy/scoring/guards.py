"""Which guard `guardpolicy score` runs and under what name: an entry of params `score.guards` (the stage
form) or the command line's flags, never both; which subsets it is scored on and which views computed."""

from __future__ import annotations

from typing import Any

from guardpolicy.baselines.target import guard_name
from guardpolicy.config.core import from_mapping
from guardpolicy.config.score import ScoreConfig, ScoreGuardConfig
from guardpolicy.errors import ConfigError

# The command line's flags that describe a guard, in the order `guardpolicy score` takes them.
FLAGS = (
    "model",
    "revision",
    "endpoint",
    "served_model",
    "checkpoint",
    "family",
    "label_map",
    "batch_size",
    "max_length",
)


def parse_label_map(value: Any) -> dict[str, str]:
    """`LABEL=safe,OTHER=unsafe` (the command line) or a mapping, as a dict."""
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    pairs = [part.strip() for part in str(value).split(",") if part.strip()]
    out = {}
    for pair in pairs:
        label, sep, target = pair.partition("=")
        if not sep or not label.strip():
            raise ConfigError(f"--label-map: {pair!r} is not LABEL=safe|unsafe")
        out[label.strip()] = target.strip()
    return out


def guard_config(
    guard: str | None, flags: dict[str, Any], settings: ScoreConfig, params_file: str
) -> tuple[str | None, ScoreGuardConfig, str]:
    """(name from params or None, the guard's settings, where they come from for messages). `flags`: the
    FLAGS' values, None where not given."""
    given = {key: value for key, value in flags.items() if value is not None}
    if guard is not None:
        if given:
            raise ConfigError(
                f"score {guard}: a configured guard takes its settings from {params_file} "
                f"score.guards.{guard}, "
                f"not from flags {sorted(given)}"
            )
        if guard not in settings.guards:
            raise ConfigError(
                f"{params_file}: score.guards: no guard {guard!r}; "
                f"configured: {sorted(settings.guards) or 'none'}"
            )
        return guard, settings.guards[guard], f"score.guards.{guard}"
    if "label_map" in given:
        given["label_map"] = parse_label_map(given["label_map"])
    where = (
        "--endpoint" if given.get("endpoint") else "--checkpoint" if given.get("checkpoint") else "--model"
    )
    return None, from_mapping(ScoreGuardConfig, given, where="command line"), where


def scored_subset(subsets: str | None, settings: ScoreConfig) -> str:
    """The headline subset: `subsets` (`full` opts out of the clean subset) or params `score.subset`."""
    if subsets not in (None, "full", "clean"):
        raise ConfigError(f"--subsets: `full` (opt out of the clean subset) or `clean`, got {subsets!r}")
    return subsets or settings.subset


def scored_views(views: str | None, settings: ScoreConfig) -> str:
    """Which views are computed: `views` (`own` opts out of the calibration split and so of the matched and
    ranked views; `all`: every view) or params `score.views`."""
    if views not in (None, "all", "own"):
        raise ConfigError(
            f"--views: `own` (opt out of the matched and ranked views, which need the calibration split) or "
            f"`all`, got {views!r}"
        )
    return views or settings.views


def score_guard_name(configured: str | None, name: str | None, config: ScoreGuardConfig) -> str:
    """The guard's name (its folder under reports/score/): the params entry's, else `name`, else one derived
    from the model; lowercase letters, digits and '_', starting with a letter."""
    name = configured or name or guard_name(config)
    if not name.replace("_", "a").isalnum() or not name[0].isalpha() or name != name.lower():
        raise ConfigError(
            f"--name: {name!r} must be lowercase letters, digits and '_', starting with a letter"
        )
    return name

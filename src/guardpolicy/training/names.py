"""The names of the study's models and the committed model plan, with no params read.

Model folders: ``<scale>-pretrained`` (backbone@), ``teacher-<policy>`` (teacher@), ``<scale>-<branch>``
and, at a further noise-floor seed, ``<scale>-<branch>-s<seed>`` (train@). The plan (data/models.yaml) is
written by `guardpolicy plan` (guardpolicy.training.branches); a stage that iterates it reads it here, after
guardpolicy.preconditions has checked that it is current with params.yaml.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from guardpolicy.config.core import load_yaml
from guardpolicy.errors import ConfigError
from guardpolicy.layout import relative_path

PRETRAINED = "pretrained"
PLAN_FILE = relative_path("plan")
MODELS_DIR = relative_path("models")
PLAN_SECTIONS = ("models", "evaluations", "feature_models")


def pretrained_dir(scale: str) -> str:
    return f"{MODELS_DIR}/{scale}-{PRETRAINED}"


def model_name(scale: str, branch: str, seed: int, main: int) -> str:
    return f"{scale}-{branch}" if seed == main else f"{scale}-{branch}-s{seed}"


def teacher_name(policy: str) -> str:
    return f"teacher-{policy}"


def features_path(model: str) -> str:
    return relative_path("features", model=model)


def read_plan_document(plan_file: str | Path = PLAN_FILE) -> dict[str, dict[str, Any]]:
    """The committed plan's sections (`models`, `evaluations`, `feature_models`) as written; currency with
    params is guardpolicy.preconditions' check."""
    if not Path(plan_file).is_file():
        raise ConfigError(f"{plan_file} is missing: run `guardpolicy plan`")
    document = load_yaml(plan_file)
    document = document if isinstance(document, dict) else {}
    sections = {}
    for section in PLAN_SECTIONS:
        found = document.get(section)
        sections[section] = found if isinstance(found, dict) else {}
    return sections


def planned_entry(plan_file: str | Path, section: str, model: str, where: str) -> dict[str, Any]:
    """`model`'s entry in the committed plan's `section`; a ConfigError naming `where` (the plan as the user
    knows it) and the planned models when it has none."""
    entries = read_plan_document(plan_file)[section]
    if model not in entries:
        raise ConfigError(f"{where}: {section}: no model {model!r}; planned: {sorted(entries)}")
    return entries[model]

"""One guard described without the registry (`guardpolicy score`): from its settings (`ScoreGuardConfig`, the
command line's flags or params `score.guards.<guard>`) to the backend and adapters the baselines use.

What the registry entry says for a baseline (hub id, pinned revision, family, label map, what may load) is
read here from the settings and, where they leave it out, from the model itself: a local folder whose
config is a sequence classifier is family `encoder_classifier`, and a classifier whose labels are named
safe / unsafe (any case) maps them so. Anything else that cannot be read off is a ConfigError asking for it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardpolicy.baselines.adapters import BinaryMapping
from guardpolicy.baselines.backends.local import LoadPolicy
from guardpolicy.baselines.base import Backend, GuardAdapter
from guardpolicy.baselines.factory import make_backend
from guardpolicy.baselines.registry import AdapterOptions, adapter_for
from guardpolicy.config.baselines import BaselineGuardConfig
from guardpolicy.config.score import SCORE_FAMILIES, ScoreGuardConfig
from guardpolicy.errors import ConfigError
from guardpolicy.layout import relative_path

CLASSIFIER_SUFFIX = "ForSequenceClassification"
_NAME_PART = re.compile(r"[^a-z0-9]+")


def guard_name(config: ScoreGuardConfig) -> str:
    """A guard name (lowercase letters, digits, '_') from the model id, served model or checkpoint:
    `ProtectAI/deberta-v3-base-prompt-injection-v2` -> `deberta_v3_base_prompt_injection_v2`."""
    source = config.model or config.served_model or config.checkpoint or ""
    name = _NAME_PART.sub("_", Path(source.rstrip("/")).name.lower()).strip("_")
    if not name:
        raise ConfigError(f"cannot derive a guard name from {source!r}; give --name")
    return name if name[0].isalpha() else f"g_{name}"


@dataclass(frozen=True)
class ScoreTarget:
    """What runs: the backend, the adapter per mapping, and the facts the card and metrics.json name."""

    backend: Backend
    adapters: dict[BinaryMapping, GuardAdapter]
    facts: dict[str, Any]


def _folder_config(folder: Path) -> dict[str, Any]:
    file = folder / "config.json"
    if not file.is_file():
        raise ConfigError(f"{folder}: no config.json; is it a transformers model folder?")
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{file}: not readable JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise ConfigError(f"{file}: expected a JSON object")
    return document


def _hub_config(model: str, revision: str) -> dict[str, Any]:
    """The config of a hub model at a pinned revision, from the local hub cache (never downloaded here, as
    the baselines' backends load only local files)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(model, revision=revision, local_files_only=True).to_dict()
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"model {model!r} at revision {revision}: its config is not in the local hub cache ({exc}); "
            f"download it first (`huggingface-cli download {model} --revision {revision}`) or give --family"
        ) from exc


def detect_family(config: ScoreGuardConfig, where: str) -> str:
    """The adapter family: as given, else encoder_classifier for a sequence-classifier config."""
    if config.family:
        return config.family
    assert config.model is not None
    folder = Path(config.model)
    model_config = (
        _folder_config(folder) if folder.is_dir() else _hub_config(config.model, str(config.revision))
    )
    architectures = model_config.get("architectures") or []
    if any(str(a).endswith(CLASSIFIER_SUFFIX) for a in architectures):
        return "encoder_classifier"
    raise ConfigError(
        f"{where}.family: {config.model!r} is not a sequence classifier (architectures {architectures}); "
        f"say which generative guard it is, one of {[f for f in SCORE_FAMILIES if f != 'encoder_classifier']}"
    )


def default_label_map(labels: list[str], where: str) -> dict[str, str]:
    """safe / unsafe from a classifier's own label names when they are exactly those (any case)."""
    mapped = {label: label.strip().lower() for label in labels}
    if labels and all(value in ("safe", "unsafe") for value in mapped.values()):
        return mapped
    raise ConfigError(
        f"{where}.label_map: the classifier's labels {labels} are not named safe / unsafe; map each, e.g. "
        f"--label-map '{','.join(f'{label}=safe' for label in labels[:2])}'"
    )


def resolve_target(
    config: ScoreGuardConfig,
    where: str,
    *,
    mapping: BinaryMapping,
    device: str | None = None,
) -> ScoreTarget:
    """The backend and adapters of a model or endpoint guard; `where` names the settings in messages
    (e.g. `score.guards.mine`, or `--model` on the command line)."""
    if config.checkpoint:
        raise ValueError("a checkpoint is scored by the evaluation path, not a baseline backend")
    if config.model and not Path(config.model).is_dir() and config.revision is None:
        raise ConfigError(
            f"{where}.revision: {config.model!r} is not a local folder, so it comes from the hub and needs a "
            "pinned revision (the 40-hex commit sha) for the results to be reproducible"
        )
    family = detect_family(config, where)
    policy = LoadPolicy(
        allow_pickle=config.allow_pickle,
        trust_remote_code=config.trust_remote_code,
        entry=where,
        entry_file="the command line" if where.startswith("--") else relative_path("params"),
    )
    run = BaselineGuardConfig(
        backend="server" if config.endpoint else "transformers",
        model=config.served_model or config.model,
        base_url=config.endpoint,
        batch_size=config.batch_size,
        dtype=config.dtype,
        mapping=mapping,
        max_length=config.max_length,
    )
    assert run.model is not None
    backend = make_backend(where, run, family, run.model, config.revision, policy, device)
    label_map = dict(config.label_map)
    if family == "encoder_classifier" and not label_map:
        label_map = default_label_map(list(getattr(backend, "labels", [])), where)
    options = AdapterOptions(
        risk_name=config.risk_name,
        content_format=config.content_format,
        label_map=label_map,  # type: ignore[arg-type]
    )
    adapters: dict[BinaryMapping, GuardAdapter] = {
        "relaxed": adapter_for(family, options, "relaxed"),
        "strict": adapter_for(family, options, "strict"),
    }
    check = getattr(backend, "check_labels", None)
    if check is not None:
        check(adapters["relaxed"])
    facts = {
        "source": "endpoint" if config.endpoint else "model",
        "model_id": run.model,
        "revision": config.revision,
        "family": family,
        "endpoint": config.endpoint,
        "label_map": label_map or None,
        "backend": run.backend,
        "dtype": config.dtype,
        "batch_size": config.batch_size,
        "max_length": config.max_length,
    }
    return ScoreTarget(
        backend=backend, adapters=adapters, facts={k: v for k, v in facts.items() if v is not None}
    )

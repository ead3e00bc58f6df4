"""A baseline guard's backend, built from its run settings (params `baselines.guards.<guard>`) and its entry
in the guard registry (data/baselines.yaml): which backend family runs it, from which folder, hub revision or
server, and what it may load."""

from __future__ import annotations

from pathlib import Path

from guardpolicy.baselines.backends.causal_lm import TransformersBackend
from guardpolicy.baselines.backends.classifier import DEFAULT_CLASSIFIER_MAX_LENGTH, SequenceClassifierBackend
from guardpolicy.baselines.backends.local import LoadPolicy
from guardpolicy.baselines.backends.server import OpenAIServerBackend
from guardpolicy.baselines.base import Backend
from guardpolicy.baselines.registry import REGISTRY_FILE, GuardSpec, require_pinned
from guardpolicy.config.baselines import BaselineGuardConfig
from guardpolicy.errors import ConfigError


def build_backend(
    guard: str,
    config: BaselineGuardConfig,
    spec: GuardSpec,
    device: str | None = None,
    registry_file: str | Path = REGISTRY_FILE,
) -> Backend:
    """The guard's backend. A local folder runs under the registry revision as its label (None allowed);
    a hub id or a served model needs the registry's pinned revision. A local backend loads what the entry
    allows (`allow_pickle`, `trust_remote_code` of guards.<guard> in `registry_file`)."""
    model = config.model or spec.model_id
    policy = LoadPolicy(
        allow_pickle=spec.allow_pickle,
        trust_remote_code=spec.trust_remote_code,
        entry=guard,
        entry_file=str(registry_file),
    )
    local = config.backend == "transformers" and Path(model).is_dir()
    revision = spec.revision if local else require_pinned(guard, spec)
    return make_backend(f"baselines.guards.{guard}", config, spec.family, model, revision, policy, device)


def make_backend(
    where: str,
    config: BaselineGuardConfig,
    family: str,
    model: str,
    revision: str | None,
    policy: LoadPolicy,
    device: str | None = None,
) -> Backend:
    """The backend that runs `model` (a folder, a hub id, or the name a server serves) of adapter `family`
    with the run settings `config`; `where` names the settings in messages. An encoder classifier runs
    locally only (`SequenceClassifierBackend`): chat-completions servers do not serve sequence classifiers.
    `revision`: the pinned hub commit (the caller checks that a hub id has one), a label otherwise."""
    if family == "encoder_classifier":
        if config.backend != "transformers":
            raise ConfigError(
                f"{where}.backend: {config.backend!r} cannot run family "
                "'encoder_classifier' (a chat-completions server does not serve sequence classifiers); "
                "use backend: transformers"
            )
        return SequenceClassifierBackend(
            model,
            revision,
            device=device,
            dtype=config.dtype,
            batch_size=config.batch_size,
            max_length=config.max_length or DEFAULT_CLASSIFIER_MAX_LENGTH,
            policy=policy,
        )
    if config.max_length is not None:
        raise ConfigError(
            f"{where}.max_length: applies to encoder_classifier guards only; "
            f"this is a {family} guard, which reads the whole prompt"
        )
    if config.backend == "server":
        assert config.base_url is not None  # BaselineGuardConfig requires it for the server backend
        return OpenAIServerBackend(config.base_url, model, revision, max_in_flight=config.max_in_flight)
    return TransformersBackend(
        model, revision, device=device, dtype=config.dtype, batch_size=config.batch_size, policy=policy
    )

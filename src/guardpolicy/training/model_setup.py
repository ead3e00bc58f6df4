"""What a training run sets up before its first step: the initial model, which parameters train, the
optimizer and learning-rate schedule, and deterministic kernels."""

from __future__ import annotations

import contextlib
import importlib.util
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from transformers import get_linear_schedule_with_warmup

from guardpolicy.config.encoders import EncoderConfig
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.modeling.guard import GuardModel, load_guard
from guardpolicy.modeling.prefix import trainable_top_parameters
from guardpolicy.training.device import DeviceChoice
from guardpolicy.training.recipe import Trainable, TrainRecipe


def load_init(
    init: EncoderConfig | str | Path,
    seed: int,
    coarse_names: list[str] | None,
    pillar_names: list[str] | None,
) -> tuple[GuardModel, Any]:
    """The run's starting guard and tokenizer: a fresh guard from a backbone config (heads seeded with
    `seed`), or a guard checkpoint folder."""
    if isinstance(init, EncoderConfig):
        return GuardModel.from_backbone(init, seed=seed, coarse_names=coarse_names, pillar_names=pillar_names)
    folder = Path(init)
    if not (folder / "config.json").is_file():
        raise InputError(folder, "not a guard checkpoint folder (no config.json)")
    return load_guard(folder)


def set_trainable(model: GuardModel, trainable: Trainable, frozen_layers: int = 0) -> None:
    """Mark what the optimizer may change; the rest keeps requires_grad False (and gets no gradient)."""
    model.requires_grad_(trainable != "heads" and not frozen_layers)
    if trainable != "heads" and frozen_layers:
        for parameter in trainable_top_parameters(model.backbone, frozen_layers):
            parameter.requires_grad_(True)
    model.heads.requires_grad_(True)
    if trainable == "encoder":
        model.backbone.get_input_embeddings().requires_grad_(False)


def make_optimizer(
    parameters: list[tuple[str, torch.nn.Parameter]], recipe: TrainRecipe, device: DeviceChoice
) -> torch.optim.Optimizer:
    """AdamW, without weight decay on biases and norm weights (1-D tensors), fused where the device allows."""
    decay = [p for _, p in parameters if p.ndim > 1]
    no_decay = [p for _, p in parameters if p.ndim <= 1]
    groups = [
        {"params": decay, "weight_decay": recipe.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    # The fused kernel updates each tensor in one pass; it is the transformers.Trainer default too.
    return torch.optim.AdamW(groups, lr=recipe.learning_rate, fused=device.device.type in ("cpu", "cuda"))


def make_scheduler(optimizer: torch.optim.Optimizer, recipe: TrainRecipe, total_steps: int) -> Any:
    """Linear warm-up over `recipe.warmup_ratio` of the steps, then linear decay to 0."""
    return get_linear_schedule_with_warmup(
        optimizer,
        num_warmup_steps=math.ceil(recipe.warmup_ratio * total_steps),
        num_training_steps=total_steps,
    )


@contextlib.contextmanager
def deterministic_algorithms() -> Iterator[None]:
    """Deterministic kernels during a run (warn-only where an op has no deterministic variant)."""
    previous = torch.are_deterministic_algorithms_enabled()
    previous_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    previous_benchmark = torch.backends.cudnn.benchmark
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous, warn_only=previous_warn)
        torch.backends.cudnn.benchmark = previous_benchmark


def set_attention(model: GuardModel, attn_implementation: str | None) -> None:
    """Switch the backbone's attention kernel (None: keep what it was built or saved with)."""
    if attn_implementation is None:
        return
    if attn_implementation == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
        raise ConfigError(
            "params training.attn_implementation: flash_attention_2 needs the flash-attn package, which is "
            "not installed (pip install flash-attn on a CUDA machine), or use sdpa"
        )
    model.backbone.set_attn_implementation(attn_implementation)
    # The guard's config holds the backbone's config; the saved model reads it back with the same kernel.
    model.config.encoder._attn_implementation_internal = model.backbone.config._attn_implementation

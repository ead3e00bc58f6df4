"""Token states of a run's frozen part, computed once before training: the backbone's for head-only runs,
the frozen top's over the scale's cached prefix states (recipe.frozen_layers) for head-only runs on a prefix,
and each example's cached prefix rows (checked against the model and recipe) for runs that train the top."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from guardpolicy.errors import ConfigError, InputError
from guardpolicy.modeling.guard import GuardModel
from guardpolicy.modeling.prefix import TopView
from guardpolicy.training.collate import EncodedPrompts, pad_batch, sorted_batches
from guardpolicy.training.device import DeviceChoice
from guardpolicy.training.prefix_cache import POOL_SET, PrefixCache, cache_key
from guardpolicy.training.recipe import TrainRecipe


@torch.no_grad()
def top_token_states(
    top: TopView, prefix_rows: list[torch.Tensor], lengths: np.ndarray, batch_size: int, description: str
) -> list[torch.Tensor]:
    """The frozen top's token states per example (N x [T_i, H] float32) from cached prefix states, once."""
    top.eval()
    states: list[torch.Tensor | None] = [None] * len(prefix_rows)
    for indices in tqdm(
        sorted_batches(lengths, batch_size),
        desc=f"{description}: top features",
        unit="batch",
        mininterval=1.0,
    ):
        batch = torch.nn.utils.rnn.pad_sequence([prefix_rows[i] for i in indices], batch_first=True).float()
        mask = torch.from_numpy(
            (np.arange(batch.shape[1])[None, :] < lengths[indices][:, None]).astype(np.int64)
        )
        hidden = top(batch, mask)  # [B, T, H]
        for row, index in enumerate(indices):
            states[index] = hidden[row, : lengths[index]].clone()
    return states  # type: ignore[return-value]


def cached_prefix_rows(
    prefix: PrefixCache | None,
    examples: pd.DataFrame,
    recipe: TrainRecipe,
    model: GuardModel,
    encoded: EncodedPrompts,
    prefix_stage: str,
    where: str,
) -> list[torch.Tensor]:
    """Each example's cached prefix states, after checking the cache was built for this model and reading."""
    if prefix is None:
        raise ConfigError(
            f"recipe.frozen_layers is {recipe.frozen_layers}: the run trains on the scale's cached prefix "
            f"states, but no prefix cache was given (`dvc repro {prefix_stage}`)"
        )
    prefix.check(
        {
            "frozen_layers": recipe.frozen_layers,
            "max_length": recipe.max_length,
            "truncation": recipe.truncation,
            "truncation_head_tokens": recipe.truncation_head_tokens,
            "hidden_size": model.config.encoder.hidden_size,
        },
        prefix_stage,
    )
    # An anchor row's id carries a suffix; `prompt_id` (build_examples) names the pool prompt it repeats.
    prompt_ids = examples["prompt_id"] if "prompt_id" in examples.columns else examples["id"]
    rows = prefix.tensors([cache_key(POOL_SET, str(i)) for i in prompt_ids], prefix_stage)
    for i, (row, length) in enumerate(zip(rows, encoded.lengths, strict=True)):
        if len(row) != length:
            raise InputError(
                prefix.folder,
                f"example {examples['id'].iloc[i]!r} has {len(row)} cached prefix tokens but tokenises to "
                f"{length} here (another tokenizer or truncation); rerun `dvc repro {prefix_stage}`",
                row=i + 1,
                field="length",
            )
    return rows


@torch.no_grad()
def backbone_token_states(
    model: GuardModel, encoded: EncodedPrompts, batch_size: int, device: DeviceChoice, description: str
) -> list[torch.Tensor]:
    """Frozen-backbone token states per example, N x [T_i, H] on CPU, computed once for head-only training."""
    model.eval()
    states: list[torch.Tensor | None] = [None] * len(encoded)
    batches = sorted_batches(encoded.lengths, batch_size)
    for indices in tqdm(batches, desc=f"{description}: backbone features", unit="batch", mininterval=1.0):
        batch = pad_batch(encoded, indices)
        with device.autocast():
            hidden = model.backbone(
                input_ids=batch["input_ids"].to(device.device),
                attention_mask=batch["attention_mask"].to(device.device),
            ).last_hidden_state  # [B, T, H]
        hidden = hidden.float().cpu()
        for row, index in enumerate(indices):
            states[index] = hidden[row, : encoded.lengths[index]].clone()
    return states  # type: ignore[return-value]

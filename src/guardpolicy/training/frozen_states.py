"""Token states of a run's frozen part, computed once before training: the backbone's for head-only runs,
the frozen top's over the scale's cached prefix states (recipe.frozen_layers) for head-only runs on a prefix,
and each example's cached prefix rows (checked against the model and recipe) for runs that train the top.

Head-only token states go to a `FeatureCache`: one flat memory-mapped file in the run's work dir (float16 by
default, recipe.feature_cache_dtype), so the training split's states are never all in RAM (at ModernBERT-large
scale they are ~17 GB in fp32); the OS pages in the rows a batch reads.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

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

FEATURE_FILE_PREFIX = "features-"
FLOAT16_MAX = 65504.0
_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


class FeatureCache:
    """N examples' token states [T_i, H] in one memory-mapped file of `dtype`; rows read back as float32.

    Written once (by rank 0 in a multi-process run), then opened read-only by every process.
    """

    def __init__(self, path: Path, lengths: np.ndarray, hidden: int, dtype: str, *, create: bool) -> None:
        self.path, self.dtype_name = Path(path), dtype
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)])
        self.hidden = hidden
        size = int(self.offsets[-1]) * hidden
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            reserve(self.path, size * _DTYPES[dtype].itemsize)
        # shared=True maps the file itself: writes land on disk, reads page in on demand.
        self.flat = torch.from_file(str(self.path), shared=create, size=size, dtype=_DTYPES[dtype])

    def __len__(self) -> int:
        return len(self.lengths)

    def write(self, index: int, states: torch.Tensor) -> None:
        # states: [T_i, H] float32
        if self.dtype_name == "float16":
            peak = float(states.abs().max()) if states.numel() else 0.0
            if not np.isfinite(peak) or peak > FLOAT16_MAX:
                raise ConfigError(
                    f"training.feature_cache_dtype float16: a token state of example {index} reaches "
                    f"{peak:.4g}, beyond float16's range (|x| <= {FLOAT16_MAX:g}); set "
                    "training.feature_cache_dtype to bfloat16 or float32"
                )
        start, end = self.offsets[index] * self.hidden, self.offsets[index + 1] * self.hidden
        self.flat[start:end] = states.reshape(-1).to(self.flat.dtype)

    def __getitem__(self, index: int) -> torch.Tensor:
        start, end = self.offsets[index] * self.hidden, self.offsets[index + 1] * self.hidden
        return self.flat[start:end].view(int(self.lengths[index]), self.hidden).float()  # [T_i, H]


def reserve(path: Path, nbytes: int) -> None:
    """Create `path` with `nbytes` allocated on disk. A sparse file would do until the disk filled up while
    the memory map was being written - then the kernel kills the process with SIGBUS, naming nothing;
    reserving the space first turns a full disk into an error here."""
    with open(path, "wb") as handle:
        try:
            os.posix_fallocate(handle.fileno(), 0, nbytes)
        except OSError as exc:
            if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                handle.truncate(nbytes)  # a file system that cannot reserve: sparse, as before
                return
            handle.close()
            path.unlink(missing_ok=True)
            raise InputError(
                path,
                f"cannot reserve {nbytes / 2**30:.2f} GiB for the head-only token-state cache "
                f"({os.strerror(exc.errno or 0)}); free space there, or use a smaller "
                "training.feature_cache_dtype (float16 / bfloat16 halve float32)",
            ) from exc


def feature_cache_path(work_dir: Path, fingerprint: str) -> Path:
    return Path(work_dir) / f"{FEATURE_FILE_PREFIX}{fingerprint[:16]}.bin"


def discard_feature_caches(work_dir: Path) -> None:
    for path in Path(work_dir).glob(f"{FEATURE_FILE_PREFIX}*.bin"):
        path.unlink(missing_ok=True)


@torch.no_grad()
def top_token_states(
    top: TopView,
    prefix_rows: list[torch.Tensor],
    lengths: np.ndarray,
    batch_size: int,
    device: DeviceChoice,
    description: str,
    cache: FeatureCache,
) -> FeatureCache:
    """The frozen top's token states per example from cached prefix states, once, into `cache`."""
    top.eval()
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
        # The top sits on the run's device (a GPU); the prefix rows come from the CPU cache.
        with device.autocast():
            hidden = top(batch.to(device.device), mask.to(device.device))  # [B, T, H]
        hidden = hidden.float().cpu()
        for row, index in enumerate(indices):
            cache.write(index, hidden[row, : lengths[index]])
    return cache


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
    model: GuardModel,
    encoded: EncodedPrompts,
    batch_size: int,
    device: DeviceChoice,
    description: str,
    cache: FeatureCache,
) -> FeatureCache:
    """Frozen-backbone token states per example, computed once for head-only training, into `cache`."""
    model.eval()
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
            cache.write(index, hidden[row, : encoded.lengths[index]])
    return cache

"""The frozen prefix's states of every prompt a scale trains or is evaluated on, computed once (prefix@).

A cache is a folder (data/prefix/<scale>/):

  * ``states.npy``  - every prompt's token states, concatenated: [total tokens, H] float16 (read
    memory-mapped);
  * ``index.parquet`` - one row per prompt: ``key`` ("<set>\\t<id>", set = ``pool`` or a benchmark name),
    ``offset`` and ``length`` (its rows in states.npy), ``n_tokens`` (before truncation);
  * ``meta.json`` - what the states depend on: the backbone folder's weights hash, frozen_layers, max_length,
    truncation, hidden size. A consumer checks these against its own model and settings and refuses a cache
    built for something else (the message names the field and the stage to rerun).

float16 halves the disk and memory of float32; the prefix runs in float32 and is rounded once. Every model of
the scale then reads the same rounded states in training and in evaluation, so what a model is evaluated on is
exactly what it was trained on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from guardpolicy.config.encoders import EncoderConfig
from guardpolicy.config.profiles import ProfileConfig
from guardpolicy.errors import InputError
from guardpolicy.io import atomic_dir
from guardpolicy.layout import Layout
from guardpolicy.modeling.prefix import prefix_states
from guardpolicy.training.collate import sorted_batches, tokenize_truncated
from guardpolicy.training.names import PRETRAINED

STATES_FILE = "states.npy"
INDEX_FILE = "index.parquet"
META_FILE = "meta.json"
INDEX_COLUMNS = ("key", "offset", "length", "n_tokens")
POOL_SET = "pool"
# What a consumer compares with its own model and settings before using a cache.
META_FIELDS = (
    "frozen_layers",
    "max_length",
    "truncation",
    "truncation_head_tokens",
    "hidden_size",
    "backbone",
)


def cache_key(set_name: str, item_id: str) -> str:
    return f"{set_name}\t{item_id}"


def prefix_stage(scale: str) -> str:
    return f"prefix@{scale}"


def scale_settings(profile: ProfileConfig, encoder: EncoderConfig) -> dict[str, Any]:
    """What a scale's cache is built with: its encoder entry's frozen_layers and the active profile's
    max_length and truncation."""
    return {
        "frozen_layers": encoder.frozen_layers,
        "max_length": profile.max_length,
        "truncation": profile.truncation,
        "truncation_head_tokens": profile.truncation_head_tokens,
    }


def scale_prefix(
    profile: ProfileConfig, encoder: EncoderConfig, scale: str, folder: str | Path, backbone: str | Path
) -> PrefixCache | None:
    """The prefix cache in `folder` that a run at `scale` (whose encoder entry is `encoder`) trains or is
    evaluated on (None when the scale freezes nothing), checked against params and against the scale's
    `backbone` folder (models/<scale>-pretrained), whose weights every model's prefix is."""
    settings = scale_settings(profile, encoder)
    if not settings["frozen_layers"]:
        return None
    stage = prefix_stage(scale)
    cache = read_prefix_cache(Path(folder), stage)
    cache.check({**settings, "backbone": backbone_fingerprint(backbone)}, stage)
    return cache


def layout_prefix(
    profile: ProfileConfig, encoder: EncoderConfig, scale: str, layout: Layout
) -> PrefixCache | None:
    """`scale_prefix` at the layout's places: data/prefix/<scale>/, checked against models/<scale>-
    pretrained."""
    return scale_prefix(
        profile,
        encoder,
        scale,
        layout.path("prefixes", scale=scale),
        layout.path("model", model=f"{scale}-{PRETRAINED}"),
    )


@dataclass(frozen=True)
class PrefixCache:
    folder: Path
    meta: dict[str, Any]
    states: np.ndarray  # [total tokens, H] float16, memory-mapped
    rows: dict[str, tuple[int, int]]  # key -> (offset, length)
    n_tokens: dict[str, int]

    def check(self, expected: dict[str, Any], stage: str) -> None:
        """Refuse a cache built for another model or other settings; `expected` holds META_FIELDS values."""
        for name, value in expected.items():
            if self.meta.get(name) != value:
                raise InputError(
                    self.folder / META_FILE,
                    f"the prefix cache was built with {name} {self.meta.get(name)!r}, this run needs "
                    f"{value!r}; "
                    f"rerun `dvc repro {stage}`",
                    field=name,
                )

    def lookup(self, keys: Sequence[str], stage: str) -> list[tuple[int, int]]:
        missing = [k for k in keys if k not in self.rows]
        if missing:
            shown = ", ".join(repr(k.replace("\t", "/")) for k in missing[:5])
            raise InputError(
                self.folder / INDEX_FILE,
                f"{len(missing)} prompt(s) are not in the prefix cache (e.g. {shown}); "
                f"rerun `dvc repro {stage}`",
                field="key",
            )
        return [self.rows[k] for k in keys]

    def tensors(self, keys: Sequence[str], stage: str) -> list[torch.Tensor]:
        """The cached states of `keys`, N x [T_i, H] float16 (copied out of the memory map; callers cast each
        batch to the compute dtype, so a whole training split stays at half the memory)."""
        return [
            torch.from_numpy(np.array(self.states[offset : offset + length], dtype=np.float16))
            for offset, length in self.lookup(keys, stage)
        ]


def backbone_fingerprint(model_dir: str | Path) -> str:
    """What identifies the prefix's weights: the sha256 of the backbone folder's model.safetensors."""
    from guardpolicy.io import sha256_file

    return sha256_file(Path(model_dir) / "model.safetensors")


@torch.no_grad()
def compute_prefix(
    backbone: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    *,
    frozen_layers: int,
    max_length: int,
    truncation: str,
    truncation_head_tokens: int | None,
    batch_size: int,
    description: str,
) -> tuple[list[np.ndarray], np.ndarray]:
    """Prefix states of `prompts` (N x [T_i, H] float16) and their token counts before truncation."""
    tokens = tokenize_truncated(
        tokenizer, list(prompts), max_length, truncation=truncation, head_tokens=truncation_head_tokens
    )
    lengths = np.asarray([len(ids) for ids in tokens.input_ids], dtype=np.int64)
    pad = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
    out: list[np.ndarray | None] = [None] * len(prompts)
    backbone.eval()
    for indices in tqdm(sorted_batches(lengths, batch_size), desc=description, unit="batch", mininterval=1.0):
        width = int(lengths[indices].max())
        ids = np.full((len(indices), width), pad, dtype=np.int64)
        for row, index in enumerate(indices):
            ids[row, : lengths[index]] = tokens.input_ids[index]
        mask = (np.arange(width)[None, :] < lengths[indices][:, None]).astype(np.int64)
        states = prefix_states(backbone, torch.from_numpy(ids), torch.from_numpy(mask), frozen_layers)
        states = states.float().numpy().astype(np.float16)  # [B, T, H]
        for row, index in enumerate(indices):
            out[index] = states[row, : lengths[index]]
    return out, tokens.n_tokens  # type: ignore[return-value]


def write_prefix_cache(
    folder: str | Path, keys: Sequence[str], states: Sequence[np.ndarray], n_tokens: np.ndarray, meta: dict
) -> None:
    """The three files, atomically (a failed write leaves the old cache or none)."""
    lengths = np.asarray([len(s) for s in states], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(lengths) else np.zeros(0, np.int64)
    hidden = int(meta["hidden_size"])
    with atomic_dir(folder) as staging:
        if lengths.sum() == 0:
            # No prefix (frozen_layers 0) or no prompts: an empty array (a zero-length file cannot be mapped).
            np.save(staging / STATES_FILE, np.zeros((0, hidden), dtype=np.float16), allow_pickle=False)
        else:
            matrix = np.lib.format.open_memmap(
                staging / STATES_FILE, mode="w+", dtype=np.float16, shape=(int(lengths.sum()), hidden)
            )
            for offset, block in zip(offsets, states, strict=True):
                matrix[offset : offset + len(block)] = block
            matrix.flush()
            del matrix
        pd.DataFrame(
            {"key": list(keys), "offset": offsets, "length": lengths, "n_tokens": np.asarray(n_tokens)}
        ).to_parquet(staging / INDEX_FILE, index=False)
        (staging / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def read_prefix_cache(folder: str | Path, stage: str) -> PrefixCache:
    folder = Path(folder)
    rerun = f"run `dvc repro {stage}` first"
    for name in (META_FILE, INDEX_FILE, STATES_FILE):
        if not (folder / name).is_file():
            raise InputError(folder / name, f"prefix cache file not found; {rerun}")
    try:
        meta = json.loads((folder / META_FILE).read_text())
    except json.JSONDecodeError as exc:
        raise InputError(folder / META_FILE, f"not valid JSON: {exc}") from exc
    index = pd.read_parquet(folder / INDEX_FILE)
    missing = [c for c in INDEX_COLUMNS if c not in index.columns]
    if missing:
        raise InputError(folder / INDEX_FILE, f"missing column(s) {missing}", row="header")
    states = np.load(folder / STATES_FILE, mmap_mode="r" if len(index) else None, allow_pickle=False)
    ends = index["offset"].to_numpy() + index["length"].to_numpy()
    if (
        states.ndim != 2
        or states.shape[1] != meta.get("hidden_size")
        or (len(ends) and ends.max() > len(states))
    ):
        raise InputError(
            folder / STATES_FILE,
            f"states {list(states.shape)} do not match the index "
            f"({int(ends.max()) if len(ends) else 0} rows) "
            f"and hidden size {meta.get('hidden_size')}; {rerun}",
        )
    keys = index["key"].astype(str).tolist()
    rows = dict(zip(keys, zip(index["offset"].tolist(), index["length"].tolist(), strict=True), strict=True))
    n_tokens = dict(zip(keys, index["n_tokens"].tolist(), strict=True))
    return PrefixCache(folder, meta, states, rows, n_tokens)

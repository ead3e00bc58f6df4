"""Tokenised prompts, span labels from character offsets, length-bucketed batch order and dynamic padding.

Everything here is pure and deterministic: the batch order of an epoch depends only on (seed, epoch), which is
what lets an interrupted run resume at the exact batch it stopped at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

# Batches are formed inside windows of this many batches' worth of shuffled examples, sorted by length: most
# of the padding goes away while the epoch stays shuffled (the scheme of transformers' LengthGroupedSampler).
BUCKET_WINDOW_BATCHES = 50


@dataclass(frozen=True)
class EncodedPrompts:
    """Per-prompt token ids (no padding) and the span targets aligned to them."""

    input_ids: list[np.ndarray]  # N x [T_i] int64
    span_labels: list[np.ndarray]  # N x [T_i] float32: 1 inside the harmful span
    span_mask: list[np.ndarray]  # N x [T_i] bool: token takes part in the span loss
    lengths: np.ndarray  # [N] int64
    pad_token_id: int

    def __len__(self) -> int:
        return len(self.input_ids)


def span_token_labels(
    offsets: np.ndarray, special: np.ndarray, span_start: int | None, span_end: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Token labels and loss mask for one prompt from a character span [span_start, span_end).

    offsets: [T, 2] character (start, end) of each token; special: [T] bool ([CLS], [SEP], ...).
    A token is inside when its characters overlap the span. The mask is empty (the row adds nothing to the
    span loss) when the span is unknown, empty, or truncated away entirely - labelling such a prompt "no
    harmful token" would teach the head the opposite of the truth.
    """
    labels = np.zeros(len(offsets), dtype=np.float32)
    mask = np.zeros(len(offsets), dtype=bool)
    if span_start is None or span_end is None or span_end <= span_start:
        return labels, mask
    inside = (offsets[:, 0] < span_end) & (offsets[:, 1] > span_start) & ~special
    if not inside.any():
        return labels, mask
    labels[inside] = 1.0
    mask[:] = ~special
    return labels, mask


def encode_prompts(
    tokenizer: Any,
    prompts: list[str],
    max_length: int,
    span_starts: list[int | None] | None = None,
    span_ends: list[int | None] | None = None,
) -> EncodedPrompts:
    """Tokenise once (truncated to max_length, unpadded) and align the character spans to tokens."""
    encoding = tokenizer(
        prompts,
        truncation=True,
        max_length=max_length,
        return_offsets_mapping=span_starts is not None,
        return_special_tokens_mask=span_starts is not None,
        return_attention_mask=False,
        return_token_type_ids=False,
    )
    input_ids = [np.asarray(ids, dtype=np.int64) for ids in encoding["input_ids"]]
    if span_starts is None or span_ends is None:
        span_labels = [np.zeros(len(ids), dtype=np.float32) for ids in input_ids]
        span_mask = [np.zeros(len(ids), dtype=bool) for ids in input_ids]
    else:
        span_labels, span_mask = [], []
        for i, ids in enumerate(input_ids):
            offsets = np.asarray(encoding["offset_mapping"][i], dtype=np.int64).reshape(len(ids), 2)
            special = np.asarray(encoding["special_tokens_mask"][i], dtype=bool)
            labels, mask = span_token_labels(offsets, special, span_starts[i], span_ends[i])
            span_labels.append(labels)
            span_mask.append(mask)
    return EncodedPrompts(
        input_ids=input_ids,
        span_labels=span_labels,
        span_mask=span_mask,
        lengths=np.asarray([len(ids) for ids in input_ids], dtype=np.int64),
        pad_token_id=int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0),
    )


def epoch_batches(
    lengths: np.ndarray, batch_size: int, seed: int, epoch: int, bucketing: bool = True
) -> list[np.ndarray]:
    """The batches (arrays of example indices) of one training epoch, a pure function of (seed, epoch).

    Shuffled; with bucketing, examples of similar length share a batch, and batch order is shuffled again so
    long and short batches alternate instead of arriving sorted.
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    if not bucketing:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    window = batch_size * BUCKET_WINDOW_BATCHES
    batches: list[np.ndarray] = []
    for start in range(0, len(order), window):
        chunk = order[start : start + window]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


def sorted_batches(lengths: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Inference batches, longest first, so each batch pads to a similar length (callers restore order)."""
    order = np.argsort(-lengths, kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def pad_to_matrix(rows: list[np.ndarray], width: int, fill: float | int, dtype: Any) -> np.ndarray:
    out = np.full((len(rows), width), fill, dtype=dtype)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def pad_batch(encoded: EncodedPrompts, indices: np.ndarray) -> dict[str, torch.Tensor]:
    """Dynamic padding: the batch is as long as its longest prompt, not max_length."""
    width = int(encoded.lengths[indices].max())
    ids = [encoded.input_ids[i] for i in indices]
    return {
        "input_ids": torch.from_numpy(pad_to_matrix(ids, width, encoded.pad_token_id, np.int64)),  # [B, T]
        "attention_mask": torch.from_numpy(
            pad_to_matrix([np.ones(len(r), np.int64) for r in ids], width, 0, np.int64)
        ),  # [B, T]
        "span_labels": torch.from_numpy(
            pad_to_matrix([encoded.span_labels[i] for i in indices], width, 0.0, np.float32)
        ),  # [B, T]
        "span_mask": torch.from_numpy(
            pad_to_matrix([encoded.span_mask[i] for i in indices], width, False, bool)
        ),  # [B, T]
    }

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


# Which part of an over-long prompt a model reads (params: the profile's `truncation`): the start (every
# tokenizer's default), the end (HarmBench-contextual puts the behaviour after a long context), or both ends
# (a jailbreak wrapper's framing at the start, its payload or final instruction at the end).
TRUNCATIONS = ("head", "tail", "head_tail")


@dataclass(frozen=True)
class Tokenized:
    """Token ids per prompt after truncation, with what spans and the truncation log need."""

    input_ids: list[np.ndarray]  # N x [T_i] int64, special tokens included
    n_tokens: np.ndarray  # [N] int64: tokens before truncation (special tokens included)
    offsets: list[np.ndarray] | None  # N x [T_i, 2] int64 character [start, end) per token ((0, 0): special)
    special: list[np.ndarray] | None  # N x [T_i] bool


def check_truncation(truncation: str, max_length: int, head_tokens: int | None) -> int:
    """Validate a truncation setting; returns the head tokens a head_tail cut keeps (0 otherwise)."""
    if truncation not in TRUNCATIONS:
        raise ValueError(f"truncation must be one of {', '.join(TRUNCATIONS)}, got {truncation!r}")
    if truncation != "head_tail":
        return 0
    head = max_length // 4 if head_tokens is None else head_tokens
    if not 0 < head < max_length - 2:
        raise ValueError(f"truncation_head_tokens must be between 1 and max_length - 3, got {head}")
    return head


def special_token_frame(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The special token ids a tokenizer puts before and after a single sequence ([CLS] / [SEP], <s> / </s>),
    read from how it encodes one plain token (transformers 5 tokenizers expose no template method)."""
    probe = tokenizer("a", add_special_tokens=False)["input_ids"]
    framed = tokenizer("a", add_special_tokens=True)["input_ids"]
    for start in range(len(framed) - len(probe) + 1):
        if framed[start : start + len(probe)] == probe:
            return list(framed[:start]), list(framed[start + len(probe) :])
    raise ValueError(f"cannot find where {type(tokenizer).__name__} puts its special tokens")


def tokenize_truncated(
    tokenizer: Any,
    prompts: list[str],
    max_length: int,
    *,
    truncation: str = "head",
    head_tokens: int | None = None,
    with_offsets: bool = False,
) -> Tokenized:
    """Tokenise `prompts` to at most `max_length` tokens (special tokens included), keeping `truncation`'s.

    "head" is the tokenizer's own truncation (one batched call, exactly what ``tokenizer(p, truncation=True,
    max_length=...)`` gives); "tail" and "head_tail" cut the untruncated token sequence and add the special
    tokens around what is kept, so offsets stay the characters of the original prompt.
    """
    head = check_truncation(truncation, max_length, head_tokens)
    if truncation == "head":
        encoding = tokenizer(
            prompts,
            truncation=True,
            max_length=max_length,
            return_offsets_mapping=with_offsets,
            return_special_tokens_mask=with_offsets,
            return_attention_mask=False,
            return_token_type_ids=False,
        )
        input_ids = [np.asarray(ids, dtype=np.int64) for ids in encoding["input_ids"]]
        n_tokens = np.asarray([len(ids) for ids in input_ids], dtype=np.int64)
        # Only a prompt cut to exactly max_length tokens may have been longer; count those again, untruncated.
        full = np.flatnonzero(n_tokens >= max_length)
        if len(full):
            untruncated = tokenizer(
                [prompts[i] for i in full],
                truncation=False,
                return_attention_mask=False,
                return_token_type_ids=False,
                verbose=False,
            )["input_ids"]
            n_tokens[full] = [len(ids) for ids in untruncated]
        offsets = special = None
        if with_offsets:
            offsets = [
                np.asarray(o, dtype=np.int64).reshape(len(ids), 2)
                for o, ids in zip(encoding["offset_mapping"], input_ids, strict=True)
            ]
            special = [np.asarray(m, dtype=bool) for m in encoding["special_tokens_mask"]]
        return Tokenized(input_ids, n_tokens, offsets, special)

    before, after = special_token_frame(tokenizer)
    budget = max_length - len(before) - len(after)
    plain = tokenizer(
        prompts,
        add_special_tokens=False,
        truncation=False,
        return_offsets_mapping=with_offsets,
        return_attention_mask=False,
        return_token_type_ids=False,
        verbose=False,
    )
    input_ids, all_offsets, all_special, n_tokens = [], [], [], []
    for i, ids in enumerate(plain["input_ids"]):
        positions = np.arange(len(ids))
        if len(ids) > budget:
            kept_head = head if truncation == "head_tail" else 0
            positions = np.concatenate([positions[:kept_head], positions[len(ids) - (budget - kept_head) :]])
        kept = [ids[j] for j in positions]
        built = [*before, *kept, *after]
        mask = np.zeros(len(built), dtype=bool)
        mask[: len(before)] = True
        mask[len(built) - len(after) :] = True
        input_ids.append(np.asarray(built, dtype=np.int64))
        n_tokens.append(len(ids) + len(built) - len(kept))
        if with_offsets:
            prompt_offsets = np.asarray(plain["offset_mapping"][i], dtype=np.int64).reshape(len(ids), 2)
            token_offsets = np.zeros((len(built), 2), dtype=np.int64)
            token_offsets[~mask] = prompt_offsets[positions]
            all_offsets.append(token_offsets)
            all_special.append(mask)
    return Tokenized(
        input_ids,
        np.asarray(n_tokens, dtype=np.int64),
        all_offsets if with_offsets else None,
        all_special if with_offsets else None,
    )


def encode_prompts(
    tokenizer: Any,
    prompts: list[str],
    max_length: int,
    span_starts: list[int | None] | None = None,
    span_ends: list[int | None] | None = None,
    *,
    truncation: str = "head",
    head_tokens: int | None = None,
) -> EncodedPrompts:
    """Tokenise once (cut to max_length as `truncation` says, unpadded) and align the spans to tokens."""
    with_spans = span_starts is not None and span_ends is not None
    tokens = tokenize_truncated(
        tokenizer,
        prompts,
        max_length,
        truncation=truncation,
        head_tokens=head_tokens,
        with_offsets=with_spans,
    )
    input_ids = tokens.input_ids
    if not with_spans:
        span_labels = [np.zeros(len(ids), dtype=np.float32) for ids in input_ids]
        span_mask = [np.zeros(len(ids), dtype=bool) for ids in input_ids]
    else:
        span_labels, span_mask = [], []
        for i in range(len(input_ids)):
            labels, mask = span_token_labels(
                tokens.offsets[i],  # type: ignore[index]
                tokens.special[i],  # type: ignore[index]
                span_starts[i],  # type: ignore[index]
                span_ends[i],  # type: ignore[index]
            )
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

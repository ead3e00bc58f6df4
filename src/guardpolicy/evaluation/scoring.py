"""From a guard and prompts to the predictions frame: batched inference, heads on cached features, spans.

`run_guard` is the evaluation's inference path (and what `bench-eval` measures): prompts are tokenised once
in one batched call (with character offsets when spans are wanted), run longest-first in batches padded only
to their own longest prompt, under ``torch.inference_mode``, and every output is put back in input order.
Spans are reduced to character offsets inside the loop, so no [N, T] matrix is kept.

`apply_heads` scores a head-only model on the first-token states a frozen backbone produced before
(data/features/<init model>.npz): the class and pillar heads read nothing else, so the logits are the ones a
full forward pass would give; the span head needs every token state, so those models get no span.

`predictions_table` turns logits into the contract's "Predictions" table (softmax, the two binary mappings,
pillar sigmoids, spans) with its exact columns and types, checked against `guardpolicy.contracts.PREDICTIONS`.

Truncation: a prompt longer than `max_length` tokens (special tokens included) is cut the way the guard was
trained to read it (its config's ``truncation``: the head, the tail, or both ends; `tokenize_truncated`).
`encode` also counts each prompt's tokens before truncation (`n_tokens`: only prompts that reach
`max_length` are tokenised a second time, untruncated), every predictions row records `n_tokens` and
`truncated`, and `log_truncation` reports one line per dataset.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import torch
from tqdm.auto import tqdm

from guardpolicy.contracts import PREDICTIONS, check_table
from guardpolicy.errors import InputError
from guardpolicy.layout import relative_path
from guardpolicy.modeling.prefix import TopView
from guardpolicy.training.collate import sorted_batches, tokenize_truncated
from guardpolicy.training.device import DeviceChoice

log = logging.getLogger(__name__)

# The predictions' per-policy gold columns (gold_<policy>) and per-class probabilities (p_<coarse>).
GOLD, PROBABILITY = PREDICTIONS.family("policy"), PREDICTIONS.family("coarse")
UNSAFE_CLASSES = ("HARMFUL", "COMPOUND")
BOUNDARY_CLASS = "BOUNDARY_SAFE"
NO_SPAN = -1


@dataclass(frozen=True)
class EncodedPrompts:
    """Token ids per prompt (truncated, unpadded); for spans also character offsets and special flags."""

    input_ids: list[np.ndarray]  # N x [T_i] int64
    lengths: np.ndarray  # [N] int64
    n_tokens: np.ndarray  # [N] int64: the prompt's tokens before truncation (> max_length: truncated)
    offsets: list[np.ndarray] | None  # N x [T_i, 2] int64: character [start, end) of each token
    special: list[np.ndarray] | None  # N x [T_i] bool: [CLS], [SEP], ... (never part of a span)
    pad_token_id: int

    def __len__(self) -> int:
        return len(self.input_ids)


def encode(
    tokenizer: Any,
    prompts: Sequence[str],
    max_length: int,
    with_offsets: bool,
    *,
    truncation: str = "head",
    head_tokens: int | None = None,
) -> EncodedPrompts:
    """Token i of prompt j is token i of what the model was trained to read (`tokenize_truncated`)."""
    tokens = tokenize_truncated(
        tokenizer,
        list(prompts),
        max_length,
        truncation=truncation,
        head_tokens=head_tokens,
        with_offsets=with_offsets,
    )
    return EncodedPrompts(
        input_ids=tokens.input_ids,
        lengths=np.asarray([len(ids) for ids in tokens.input_ids], dtype=np.int64),
        n_tokens=tokens.n_tokens,
        offsets=tokens.offsets,
        special=tokens.special,
        pad_token_id=int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0),
    )


def _padded(rows: list[np.ndarray], width: int, fill: Any, dtype: Any) -> np.ndarray:
    out = np.full((len(rows), width), fill, dtype=dtype)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


@dataclass(frozen=True)
class GuardScores:
    """Raw outputs per prompt, in input order."""

    coarse_logits: np.ndarray  # [N, C] float32
    pillar_logits: np.ndarray  # [N, P] float32
    first_token_state: np.ndarray | None  # [N, H] float32 (with_features)
    span_start: np.ndarray | None  # [N] int64 character offset, NO_SPAN where no token reached the threshold
    span_end: np.ndarray | None  # [N] int64
    seconds: float
    n_tokens: np.ndarray  # [N] int64: tokens before truncation to max_length


def _batch_spans(
    span_logits: torch.Tensor, encoded: EncodedPrompts, indices: np.ndarray, threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) character offsets of the first..last token at or above `threshold`, per batch row."""
    width = span_logits.shape[1]
    special = [encoded.special[i] for i in indices]  # type: ignore[index]
    # Special tokens and padding are never part of a span (the span head is not trained on them).
    excluded = torch.from_numpy(_padded(special, width, True, bool))  # [B, T]
    hits = (torch.sigmoid(span_logits.float()) >= threshold) & ~excluded  # [B, T]
    any_hit = hits.any(dim=1).numpy()  # [B]
    first = hits.int().argmax(dim=1).numpy()  # [B]
    last = (width - 1 - hits.flip(1).int().argmax(dim=1)).numpy()  # [B]
    starts = np.full(len(indices), NO_SPAN, dtype=np.int64)
    ends = np.full(len(indices), NO_SPAN, dtype=np.int64)
    for row in np.flatnonzero(any_hit):
        offsets = encoded.offsets[indices[row]]  # type: ignore[index]
        starts[row] = offsets[first[row], 0]
        ends[row] = offsets[last[row], 1]
    return starts, ends


def run_guard(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    *,
    batch_size: int,
    max_length: int,
    device: DeviceChoice,
    span_threshold: float | None = None,
    with_features: bool = False,
    progress: bool = True,
    description: str = "score",
    prefix_rows: Sequence[torch.Tensor] | None = None,
    where: str = "prefix cache",
) -> GuardScores:
    """Run the guard over `prompts` (length-sorted batches, dynamic padding, inference mode).

    span_threshold: also reduce the span head to character spans; with_features: keep the first-token
    states. The model is put in eval mode on `device` and left there. prefix_rows (a model trained with
    frozen_layers > 0): each prompt's cached prefix states ([T_i, H]; `where` names their cache in errors),
    so only the top layers and the heads run.
    """
    model.eval()
    model.to(device.device)
    started = time.perf_counter()
    encoded = encode(
        tokenizer,
        prompts,
        max_length,
        with_offsets=span_threshold is not None,
        **model_truncation(model),
    )
    top = _prefix_top(model, prefix_rows, encoded, where) if prefix_rows is not None else None
    n = len(encoded)
    coarse = np.zeros((n, model.config.num_classes), dtype=np.float32)
    pillars = np.zeros((n, model.config.num_pillars), dtype=np.float32)
    features = np.zeros((n, model.config.encoder.hidden_size), dtype=np.float32) if with_features else None
    starts = np.full(n, NO_SPAN, dtype=np.int64) if span_threshold is not None else None
    ends = np.full(n, NO_SPAN, dtype=np.int64) if span_threshold is not None else None
    batches = encoded_batches(encoded, batch_size)
    with torch.inference_mode():
        for indices in tqdm(batches, desc=description, unit="batch", disable=not progress, mininterval=1.0):
            width = int(encoded.lengths[indices].max())
            ids = [encoded.input_ids[i] for i in indices]
            input_ids = torch.from_numpy(_padded(ids, width, encoded.pad_token_id, np.int64))  # [B, T]
            attention_mask = torch.from_numpy(
                np.arange(width)[None, :] < encoded.lengths[indices][:, None]
            ).long()  # [B, T]
            with device.autocast():
                if top is None:
                    output = model(
                        input_ids=input_ids.to(device.device), attention_mask=attention_mask.to(device.device)
                    )
                else:
                    states = torch.nn.utils.rnn.pad_sequence(
                        [prefix_rows[i] for i in indices],  # type: ignore[index]
                        batch_first=True,
                    ).to(device.device, torch.float32)  # [B, T, H]
                    output = model.heads(top(states, attention_mask.to(device.device)))
            coarse[indices] = output.coarse_logits.float().cpu().numpy()  # [B, C]
            pillars[indices] = output.pillar_logits.float().cpu().numpy()  # [B, P]
            if features is not None:
                features[indices] = output.first_token_state.float().cpu().numpy()  # [B, H]
            if starts is not None and ends is not None:
                starts[indices], ends[indices] = _batch_spans(
                    output.span_logits.cpu(),
                    encoded,
                    indices,
                    span_threshold,  # type: ignore[arg-type]
                )
    seconds = time.perf_counter() - started
    log.info(
        "%s: %d prompts in %.1f s (%.1f prompts/s) on %s%s",
        description,
        n,
        seconds,
        n / seconds if seconds > 0 else 0.0,
        device.describe(),
        "" if top is None else f", top {top.num_layers} layer(s) on cached prefix states",
    )
    return GuardScores(coarse, pillars, features, starts, ends, seconds, encoded.n_tokens)


def _prefix_top(
    model: Any, prefix_rows: Sequence[torch.Tensor], encoded: EncodedPrompts, where: str
) -> TopView:
    """The model's top view, after checking each prompt's cached states match its tokenisation here."""
    frozen = int(getattr(model.config, "frozen_layers", 0))
    if frozen <= 0:
        raise ValueError("cached prefix states apply to a model trained with frozen_layers > 0")
    if len(prefix_rows) != len(encoded):
        raise ValueError(f"{len(prefix_rows)} cached prefix rows for {len(encoded)} prompts")
    for i, row in enumerate(prefix_rows):
        if len(row) != encoded.lengths[i]:
            raise InputError(
                where,
                f"prompt {i + 1} has {len(row)} cached prefix tokens but tokenises to {encoded.lengths[i]} "
                "for this model (another tokenizer, max_length or truncation); rebuild the prefix cache",
                row=i + 1,
            )
    return TopView(model.backbone, frozen).eval()


def run_guard_on_prefix(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    prefix_rows: Sequence[torch.Tensor],
    **kwargs: Any,
) -> GuardScores:
    """`run_guard` on a scale's cached prefix states, on CPU in float32 (the states are rounded once
    already; the top is small): only the top layers and the heads run."""
    from guardpolicy.training.device import choose_device

    return run_guard(
        model, tokenizer, prompts, device=choose_device("fp32", "cpu"), prefix_rows=prefix_rows, **kwargs
    )


def model_truncation(model: Any) -> dict[str, Any]:
    """The truncation a guard was trained with (its config), as `encode` keyword arguments."""
    return {
        "truncation": getattr(model.config, "truncation", "head"),
        "head_tokens": getattr(model.config, "truncation_head_tokens", None),
    }


def encoded_batches(encoded: EncodedPrompts, batch_size: int) -> list[np.ndarray]:
    """The batches (item indices) `run_guard` forms for these encoded prompts: longest first."""
    return sorted_batches(encoded.lengths, batch_size)


def inference_batches(
    tokenizer: Any, prompts: Sequence[str], max_length: int, batch_size: int, model: Any = None
) -> list[np.ndarray]:
    """The batches (item indices) `run_guard` forms for these prompts (read as `model` reads them)."""
    kwargs = model_truncation(model) if model is not None else {}
    return encoded_batches(encode(tokenizer, prompts, max_length, with_offsets=False, **kwargs), batch_size)


def log_truncation(
    who: str, datasets: Sequence[str], n_tokens: np.ndarray, max_length: int, kept: str
) -> None:
    """One line per dataset: "<who>: <dataset>: N of M prompts truncated to K tokens (head kept)"."""
    datasets = np.asarray(datasets, dtype=object)
    truncated = np.asarray(n_tokens) > max_length
    for dataset in sorted(set(datasets.tolist())):
        rows = datasets == dataset
        log.info(
            "%s: %s: %d of %d prompts truncated to %d tokens (%s kept)",
            who,
            dataset,
            int(truncated[rows].sum()),
            int(rows.sum()),
            max_length,
            kept,
        )


def apply_heads(model: Any, features: np.ndarray, batches: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Class and pillar logits of `model`'s heads on cached first-token states [N, H] -> ([N, C], [N, P]).

    `batches` should be the ones the full forward pass forms (`inference_batches`): a matrix product's
    rounding depends on how many rows it multiplies at once, so the same batches give bit-identical logits.
    """
    heads = model.heads.eval().to("cpu")
    coarse = np.zeros((len(features), model.config.num_classes), dtype=np.float32)
    pillars = np.zeros((len(features), model.config.num_pillars), dtype=np.float32)
    with torch.inference_mode():
        for indices in batches:
            states = torch.from_numpy(features[indices])  # [B, H]
            coarse[indices] = heads.coarse(states).numpy()  # [B, C]
            pillars[indices] = heads.pillars(states).numpy()  # [B, P]
    return coarse, pillars


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax [N, C] -> [N, C], computed in float64."""
    shifted = np.asarray(logits, dtype=np.float64) - np.max(logits, axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


def sigmoid(logits: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(logits, dtype=np.float64)))


def prediction_columns(
    coarse_classes: Sequence[str], pillar_columns: Sequence[str], policies: Iterable[str]
) -> list[str]:
    """The predictions table's columns (`guardpolicy.contracts.PREDICTIONS`), in order."""
    return PREDICTIONS.names(**prediction_members(coarse_classes, pillar_columns, policies))


def prediction_members(
    coarse_classes: Sequence[str], pillar_columns: Sequence[str], policies: Iterable[str]
) -> dict[str, list[str]]:
    """The members of the predictions' column families (gold_<policy>, p_<coarse>, pillar_<pillar>)."""
    pillar = PREDICTIONS.family("pillar")
    return {
        "policy": list(policies),
        "coarse": list(coarse_classes),
        "pillar": [pillar.member(column) for column in pillar_columns],
    }


def predictions_table(
    model_name: str,
    items: pd.DataFrame,
    coarse_logits: np.ndarray,
    pillar_logits: np.ndarray,
    *,
    coarse_classes: Sequence[str],
    pillar_columns: Sequence[str],
    policies: Sequence[str],
    n_tokens: np.ndarray,
    max_length: int,
    span_start: np.ndarray | None = None,
    span_end: np.ndarray | None = None,
) -> pa.Table:
    """The contract's predictions table for `items` (sorted by dataset, id) and logits in the same order.

    `n_tokens` [N]: each prompt's tokens before truncation; `truncated` is n_tokens > `max_length`.
    Spans are null where no token reached the threshold (NO_SPAN) and everywhere when not computed (None).
    """
    coarse_classes = list(coarse_classes)
    for cls in (*UNSAFE_CLASSES, BOUNDARY_CLASS):
        if cls not in coarse_classes:
            raise ValueError(f"coarse classes {coarse_classes} lack {cls!r}")
    n = len(items)
    probabilities = softmax(coarse_logits)  # [N, C] float64
    column = {cls: i for i, cls in enumerate(coarse_classes)}
    unsafe_score = probabilities[:, [column[c] for c in UNSAFE_CLASSES]].sum(axis=1)  # [N]
    unsafe_score_bu = unsafe_score + probabilities[:, column[BOUNDARY_CLASS]]  # [N]
    predicted = np.asarray(coarse_classes, dtype=object)[np.argmax(coarse_logits, axis=1)]  # [N]
    unsafe = np.isin(predicted, UNSAFE_CLASSES)
    unsafe_bu = np.isin(predicted, (*UNSAFE_CLASSES, BOUNDARY_CLASS))
    pillar_scores = sigmoid(pillar_logits).astype(np.float32)  # [N, P]
    span_computed = span_start is not None and span_end is not None

    def strings(name: str) -> pa.Array:
        values = items[name]
        return pa.array([None if pd.isna(v) else str(v) for v in values], pa.string())

    arrays: dict[str, pa.Array] = {
        "model": pa.array([model_name] * n, pa.string()),
        "dataset": strings("dataset"),
        "id": strings("id"),
        "clean": pa.array(items["clean"].to_numpy(dtype=bool), pa.bool_()),
        "expected_unsafe": pa.array(
            [None if pd.isna(v) else bool(v) for v in items["expected_unsafe"]], pa.bool_()
        ),
        "category": strings("category"),
        "pair_id": strings("pair_id"),
    }
    for policy in policies:
        arrays[GOLD.column(policy)] = strings(GOLD.column(policy))
    for i, cls in enumerate(coarse_classes):
        arrays[PROBABILITY.column(cls)] = pa.array(probabilities[:, i].astype(np.float32), pa.float32())
    arrays["pred_coarse"] = pa.array(predicted.tolist(), pa.string())
    arrays["unsafe_score"] = pa.array(unsafe_score.astype(np.float32), pa.float32())
    arrays["unsafe_score_bu"] = pa.array(unsafe_score_bu.astype(np.float32), pa.float32())
    arrays["unsafe"] = pa.array(unsafe, pa.bool_())
    arrays["unsafe_bu"] = pa.array(unsafe_bu, pa.bool_())
    for i, name in enumerate(pillar_columns):
        arrays[name] = pa.array(pillar_scores[:, i], pa.float32())
    if span_computed:
        missing = np.asarray(span_start) == NO_SPAN
        arrays["span_start"] = pa.array(np.asarray(span_start, dtype=np.int64), pa.int64(), mask=missing)
        arrays["span_end"] = pa.array(np.asarray(span_end, dtype=np.int64), pa.int64(), mask=missing)
    else:
        arrays["span_start"] = pa.nulls(n, pa.int64())
        arrays["span_end"] = pa.nulls(n, pa.int64())
    arrays["span_computed"] = pa.array(np.full(n, span_computed), pa.bool_())
    n_tokens = np.asarray(n_tokens, dtype=np.int64)
    if n_tokens.shape != (n,):
        raise ValueError(f"n_tokens has shape {list(n_tokens.shape)}, expected [{n}]")
    arrays["n_tokens"] = pa.array(n_tokens, pa.int64())
    arrays["truncated"] = pa.array(n_tokens > max_length, pa.bool_())
    members = prediction_members(coarse_classes, pillar_columns, policies)
    names = PREDICTIONS.names(**members)
    table = pa.table([arrays[name] for name in names], names=names)
    check_table(PREDICTIONS, table, relative_path("predictions", model=model_name), **members)
    return table

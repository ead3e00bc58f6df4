"""Batch inference with a guard: logits for a list of prompts, in input order.

Prompts are tokenised once, run longest-first in batches padded only to their own longest prompt, under
``torch.inference_mode`` (bf16 autocast on a CUDA device), and the rows are put back in input order.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from guardpolicy.modeling.guard import GuardModel, load_guard
from guardpolicy.training.collate import encode_prompts, pad_batch, sorted_batches
from guardpolicy.training.device import Precision, choose_device, configure_threads

log = logging.getLogger(__name__)


def _tokenizer_for(model: GuardModel) -> Any:
    folder = Path(model.config.name_or_path or "")
    if not (folder / "tokenizer_config.json").is_file():
        raise ValueError("predict: pass tokenizer= for a guard that was not loaded from a checkpoint folder")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)


def predict(
    model: str | Path | GuardModel,
    prompts: list[str],
    batch_size: int = 64,
    max_length: int = 512,
    *,
    tokenizer: Any = None,
    with_spans: bool = False,
    precision: Precision = "auto",
    device: str | None = None,
    threads: int | None = None,
    progress: bool = True,
) -> dict[str, np.ndarray]:
    """Logits of the guard for `prompts`, row i for prompts[i].

    Returns coarse_logits [N, C] and pillar_logits [N, P] (float32); with_spans adds span_logits [N, T] with
    T the longest tokenised prompt and NaN beyond each prompt's own tokens (token i of row j is token i of
    ``tokenize_truncated(tokenizer, [prompts[j]], max_length, truncation=<the model's>)``).
    """
    configure_threads(threads)
    if isinstance(model, GuardModel):
        guard = model
        tokenizer = tokenizer if tokenizer is not None else _tokenizer_for(model)
    else:
        guard, loaded_tokenizer = load_guard(model)
        tokenizer = tokenizer if tokenizer is not None else loaded_tokenizer
    chosen = choose_device(precision, device)
    was_training = guard.training
    guard.eval()
    guard.to(chosen.device)
    encoded = encode_prompts(
        tokenizer,
        list(prompts),
        max_length,
        truncation=getattr(guard.config, "truncation", "head"),
        head_tokens=getattr(guard.config, "truncation_head_tokens", None),
    )
    n = len(encoded)
    coarse = np.zeros((n, guard.config.num_classes), dtype=np.float32)
    pillars = np.zeros((n, guard.config.num_pillars), dtype=np.float32)
    width = int(encoded.lengths.max()) if n else 0
    spans = np.full((n, width), np.nan, dtype=np.float32) if with_spans else None
    started = time.perf_counter()
    with torch.inference_mode():
        for indices in tqdm(
            sorted_batches(encoded.lengths, batch_size), desc="predict", unit="batch", disable=not progress
        ):
            batch = pad_batch(encoded, indices)
            with chosen.autocast():
                output = guard(
                    input_ids=batch["input_ids"].to(chosen.device),
                    attention_mask=batch["attention_mask"].to(chosen.device),
                )
            coarse[indices] = output.coarse_logits.float().cpu().numpy()  # [B, C]
            pillars[indices] = output.pillar_logits.float().cpu().numpy()  # [B, P]
            if spans is not None:
                span_logits = output.span_logits.float().cpu().numpy()  # [B, T_batch]
                for row, index in enumerate(indices):
                    length = encoded.lengths[index]
                    spans[index, :length] = span_logits[row, :length]
    guard.train(was_training)
    seconds = time.perf_counter() - started
    log.info(
        "predict: %d prompts in %.1fs (%.1f prompts/s) on %s",
        n,
        seconds,
        n / seconds if seconds else 0.0,
        chosen.describe(),
    )
    result = {"coarse_logits": coarse, "pillar_logits": pillars}
    if spans is not None:
        result["span_logits"] = spans
    return result

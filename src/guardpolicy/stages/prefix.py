"""prefix@<scale>: the scale's frozen prefix run once over every prompt its models train or are evaluated on.

Reads the scale's encoder entry (`frozen_layers`), the profile's max_length / truncation, the backbone folder
models/<scale>-pretrained (its weights are the prefix of every model of the scale: they stay frozen), the pool
and every fetched benchmark (full sets; the clean sets are subsets by id). Writes data/prefix/<scale>/
(guardpolicy.training.prefix_cache). With frozen_layers 0 (the paper profile: full fine-tuning) it writes only
the metadata, so the stage costs nothing and its consumers know no cache applies.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from guardpolicy.config.core import ParamsFile
from guardpolicy.config.profiles import active_profile
from guardpolicy.config.scales import SCALES
from guardpolicy.errors import InputError
from guardpolicy.evaluation.inputs import present_benchmarks
from guardpolicy.io import read_parquet
from guardpolicy.layout import Layout
from guardpolicy.timing import note_work
from guardpolicy.training.names import PRETRAINED
from guardpolicy.training.prefix_cache import (
    POOL_SET,
    backbone_fingerprint,
    cache_key,
    compute_prefix,
    scale_settings,
    write_prefix_cache,
)

log = logging.getLogger(__name__)

PREFIX_BATCH_SIZE = 64


def _prompts(layout: Layout) -> tuple[list[str], list[str]]:
    """(keys, prompts) of the pool and of every fetched benchmark."""
    pool = read_parquet(layout.path("pool"), "run `dvc repro pool` first", ["id", "prompt"])
    keys = [cache_key(POOL_SET, str(i)) for i in pool["id"]]
    prompts = pool["prompt"].tolist()
    for name in present_benchmarks(layout.path("benchmark_registry"), layout.path("benchmarks")):
        file = layout.path("benchmark", benchmark=name)
        frame = read_parquet(file, f"run `dvc repro fetch@{name}` first", ["id", "prompt"])
        keys += [cache_key(name, str(i)) for i in frame["id"]]
        prompts += frame["prompt"].tolist()
    return keys, prompts


def prefix(scale: str, layout: Layout | None = None) -> dict[str, Any]:
    """Stage prefix@<scale> -> data/prefix/<scale>/ (see the module docstring; paths from `layout`, default:
    this repository); returns the metadata."""
    from guardpolicy.modeling.guard import load_guard
    from guardpolicy.training.device import configure_threads

    started = time.perf_counter()
    layout = layout or Layout.discover()
    params_file = layout.path("params")
    params = ParamsFile.read(params_file)
    scales = params.load(SCALES)
    _, profile = active_profile(params)
    if scale not in scales:
        raise InputError(params_file, f"unknown scale {scale!r}; known: {sorted(scales)}", field="scales")
    model_dir = layout.path("model", model=f"{scale}-{PRETRAINED}")
    if not (model_dir / "config.json").is_file():
        raise InputError(model_dir, f"backbone folder not found; run `dvc repro backbone@{scale}` first")
    guard, tokenizer = load_guard(model_dir)
    meta = {
        **scale_settings(profile, getattr(profile, scales[scale])),
        "hidden_size": guard.config.encoder.hidden_size,
        "backbone": backbone_fingerprint(model_dir),
    }
    out = layout.path("prefixes", scale=scale)
    frozen = meta["frozen_layers"]
    if not frozen:
        write_prefix_cache(out, [], [], [], {**meta, "prompts": 0, "tokens": 0})
        log.info("prefix %s: frozen_layers 0 (every layer trains): no states cached -> %s", scale, out)
        return meta
    configure_threads()
    keys, prompts = _prompts(layout)
    log.info(
        "prefix %s: embeddings + %d layer(s) of %s over %d prompts (pool + fetched benchmarks), max_length "
        "%d, truncation %s",
        scale,
        frozen,
        model_dir,
        len(prompts),
        meta["max_length"],
        meta["truncation"],
    )
    work_started = time.perf_counter()
    states, n_tokens = compute_prefix(
        guard.backbone,
        tokenizer,
        prompts,
        frozen_layers=frozen,
        max_length=meta["max_length"],
        truncation=meta["truncation"],
        truncation_head_tokens=meta["truncation_head_tokens"],
        batch_size=PREFIX_BATCH_SIZE,
        description=f"prefix {scale}",
    )
    work = time.perf_counter() - work_started
    note_work(work, len(prompts))
    tokens = int(sum(len(s) for s in states))
    meta = {**meta, "prompts": len(prompts), "tokens": tokens}
    write_prefix_cache(out, keys, states, n_tokens, meta)
    log.info(
        "prefix %s: %d prompts, %d tokens (%.1f MB float16) in %.1f s (%.1f prompts/s) -> %s (%.1f s)",
        scale,
        len(prompts),
        tokens,
        tokens * meta["hidden_size"] * 2 / 1e6,
        work,
        len(prompts) / work if work else 0.0,
        out,
        time.perf_counter() - started,
    )
    return meta

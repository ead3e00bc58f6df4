"""baseline@<guard>: an open generative guard scored on the same evaluation items as evaluate@<model>.

The guard is one entry of params `baselines.guards` (backend, local folder or served model name, batch size,
dtype, headline mapping) and of the registry data/baselines.yaml (hub id, pinned revision, adapter family).
Its raw answers come through the raw-output cache (`guardpolicy.baselines.cache`), so a change of mapping,
failure policy or parser re-reads cached answers and never reruns the model. Writes
reports/baselines/<guard>/predictions.parquet (the contract's "Predictions" columns, model
`baseline-<guard>`, plus guard_label, parse_status, categories, raw) and
reports/baselines/<guard>/metrics.json.

A guard's binary decisions map onto the predictions columns (guardpolicy.baselines.predictions) as:
`unsafe` = the relaxed decision (Qwen3Guard's Controversial counts as safe), `unsafe_bu` = the strict one
(Controversial counts as unsafe); guards without a middle class give the same decision in both. A failed
parse counts as `baselines.failure_policy` says; under `exclude` its decisions are null and it is left out
of the rates but counted (`n_excluded`, parse counts: guardpolicy.baselines.metrics).

Over-long prompts: an encoder classifier reads at most its `max_length` tokens (the head of the prompt);
generative guards get the whole prompt, never cut by us (`truncated` false; a server's prompts are not
tokenised here, so their `n_tokens` is null). One log line per dataset says how many prompts were cut.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from guardpolicy.baselines import MODEL_PREFIX
from guardpolicy.baselines.answers import answers_table
from guardpolicy.baselines.base import Decoding
from guardpolicy.baselines.cache import CachedBackend, GenerationCache
from guardpolicy.baselines.factory import build_backend
from guardpolicy.baselines.metrics import baseline_metrics
from guardpolicy.baselines.predictions import log_prompt_tokens
from guardpolicy.baselines.registry import build_adapter, guard_config, guard_spec
from guardpolicy.config.baselines import BASELINES
from guardpolicy.config.core import ParamsFile
from guardpolicy.config.evaluation import EVALUATION
from guardpolicy.config.policies import POLICIES
from guardpolicy.contracts import BASELINE_PREDICTIONS, write_table
from guardpolicy.evaluation.inputs import evaluation_items
from guardpolicy.io import write_json
from guardpolicy.layout import Layout
from guardpolicy.shared_cache import cache_folder
from guardpolicy.taxonomy import load_taxonomy
from guardpolicy.timing import note_work

log = logging.getLogger(__name__)


def baseline(guard: str, layout: Layout | None = None, device: str | None = None) -> dict[str, Any]:
    """Stage baseline@<guard>: the guard's answers on every evaluation item -> reports/baselines/<guard>/
    (paths from `layout`, default: this repository; the guard registry and answer cache params names are
    relative to its root). `device` overrides the backend's choice (e.g. cpu)."""
    layout = layout or Layout.discover()
    params_file = layout.relative("params")
    params = ParamsFile.read(layout.path("params"))
    settings, evaluation = params.load(BASELINES), params.load(EVALUATION)
    config = guard_config(settings, guard, params_file)
    registry_file = layout.resolve(settings.registry)
    spec = guard_spec(registry_file, guard)
    headline_mapping = config.mapping or spec.default_mapping
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    policies = list(params.load(POLICIES))
    items, roles = evaluation_items(policies, evaluation.splits, layout)
    items = items.sort_values(["dataset", "id"], kind="stable").reset_index(drop=True)
    relaxed_adapter, strict_adapter = build_adapter(spec, "relaxed"), build_adapter(spec, "strict")
    # The backend first: a refused model (pickle-only weights, say) stops the run before the cache opens.
    runner = build_backend(guard, config, spec, device, registry_file)
    cache = GenerationCache(cache_folder(settings.cache_dir, "baselines.cache_dir", layout))
    backend = CachedBackend(runner, cache)
    decoding = Decoding(
        max_new_tokens=settings.max_new_tokens, temperature=0.0, top_logprobs=settings.top_logprobs
    )
    model_name = f"{MODEL_PREFIX}{guard}"
    log.info(
        "baseline %s: %s @ %s (%s, %s backend) over %d items",
        guard,
        backend.model_id,
        backend.revision,
        spec.family,
        config.backend,
        len(items),
    )
    started = time.perf_counter()
    prompts = items["prompt"].tolist()
    try:
        generations = backend.generate(relaxed_adapter, prompts, decoding)
    finally:
        cache.close()
    tokens = backend.prompt_tokens(relaxed_adapter, prompts)
    log_prompt_tokens(guard, items["dataset"].tolist(), tokens)
    seconds = time.perf_counter() - started
    note_work(seconds, len(items))
    table = answers_table(
        model_name,
        items,
        generations,
        relaxed=relaxed_adapter,
        strict=strict_adapter,
        failure_policy=settings.failure_policy,
        taxonomy=taxonomy,
        policies=policies,
        tokens=tokens,
    )
    target = layout.path("baseline_predictions", guard=guard).parent
    write_table(BASELINE_PREDICTIONS, layout.path("baseline_predictions", guard=guard), table)
    metrics = baseline_metrics(
        table.to_pandas(),
        model_name=model_name,
        roles=roles,
        splits=list(evaluation.splits),
        headline_mapping=headline_mapping,
    )
    metrics.update(
        {
            "guard": {
                "name": guard,
                "model_id": spec.model_id,
                "revision": spec.revision,
                "family": spec.family,
                "default_mapping": spec.default_mapping,
                "license": spec.license,
                "gpu_memory_gib_bf16": spec.gpu_memory_gib_bf16,
            },
            "run": {
                "backend": config.backend,
                "model": backend.model_id,
                "revision": backend.revision,
                "failure_policy": settings.failure_policy,
                "decoding": {
                    "max_new_tokens": decoding.max_new_tokens,
                    "temperature": decoding.temperature,
                    "top_logprobs": decoding.top_logprobs,
                },
                "items": len(items),
            },
        }
    )
    # The file holds what the answers say, so a cached rerun writes the same bytes; how the answers were
    # obtained (generated or from the cache) is logged and returned, not written.
    write_json(layout.path("baseline_metrics", guard=guard), metrics)
    metrics = {**metrics, "cache": backend.stats.as_dict()}
    generated = backend.stats.prompts_generated
    log.info(
        "baseline %s: %d items, %d from cache, %d generated in %.1f s (%.1f prompts/s); parse %s; "
        "headline %s -> %s",
        guard,
        len(items),
        backend.stats.cache_hits,
        generated,
        seconds,
        generated / seconds if generated and seconds > 0 else 0.0,
        metrics["parse"],
        metrics["headline"],
        target,
    )
    return metrics

"""baseline@<guard>: an open generative guard scored on the same evaluation items as evaluate@<model>.

The guard is one entry of params `baselines.guards` (backend, local folder or served model name, batch size,
dtype, headline mapping) and of the registry data/baselines.yaml (hub id, pinned revision, adapter family).
Its raw answers come through the raw-output cache (`guardpolicy.baselines.cache`), so a change of mapping,
failure policy or parser re-reads cached answers and never reruns the model. Writes
reports/baselines/<guard>/predictions.parquet (the contract's "Predictions" columns, model
`baseline-<guard>`, plus guard_label, parse_status, categories, raw) and
reports/baselines/<guard>/metrics.json.

A guard's binary decisions map onto the predictions columns as: `unsafe` = the relaxed decision (Qwen3Guard's
Controversial counts as safe), `unsafe_bu` = the strict one (Controversial counts as unsafe); guards without
a middle class give the same decision in both. A failed parse counts as `baselines.failure_policy` says; under
`exclude` its decisions are null and it is left out of the rates but counted (`n_excluded`, parse counts).

Over-long prompts: an encoder classifier reads at most its `max_length` tokens (the head of the prompt);
generative guards get the whole prompt, never cut by us (`truncated` false; a server's prompts are not
tokenised here, so their `n_tokens` is null). One log line per dataset says how many prompts were cut.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from guardpolicy.baselines import MODEL_PREFIX
from guardpolicy.baselines.backends import (
    DEFAULT_CLASSIFIER_MAX_LENGTH,
    LoadPolicy,
    OpenAIServerBackend,
    SequenceClassifierBackend,
    TransformersBackend,
)
from guardpolicy.baselines.base import Backend, Decoding, GuardVerdict, PromptTokens
from guardpolicy.baselines.cache import CachedBackend, GenerationCache
from guardpolicy.baselines.mapping import PARSE_STATUSES, binary_decision, parse_failure_counts
from guardpolicy.baselines.registry import REGISTRY_FILE as REGISTRY_FILE_BASELINES
from guardpolicy.baselines.registry import GuardSpec, build_adapter, guard_config, guard_spec, require_pinned
from guardpolicy.config import BaselineGuardConfig, load_params
from guardpolicy.contracts import BASELINE_PREDICTIONS, GUARD_COLUMNS, write_table
from guardpolicy.errors import ConfigError
from guardpolicy.evaluation.metrics import DIGITS, SUBSETS, auprc, cap, f1, headline, over_ref
from guardpolicy.evaluation.scoring import log_truncation, prediction_columns
from guardpolicy.io import write_json
from guardpolicy.layout import Layout
from guardpolicy.stages.evaluate import load_items
from guardpolicy.taxonomy import load_taxonomy
from guardpolicy.timing import note_work

log = logging.getLogger(__name__)

EXTRA_COLUMNS = tuple(column.name for column in GUARD_COLUMNS)
# Decision mapping -> (metric-name suffix, decision column, score column) in the predictions table.
DECISIONS = {
    "relaxed": ("", "unsafe", "unsafe_score"),
    "strict": ("_strict", "unsafe_bu", "unsafe_score_bu"),
}


# ------------------------------------------------------------------------------------------ configuration


def build_backend(
    guard: str,
    config: BaselineGuardConfig,
    spec: GuardSpec,
    device: str | None = None,
    registry_file: str | Path = REGISTRY_FILE_BASELINES,
) -> Backend:
    """The guard's backend. A local folder runs under the registry revision as its label (None allowed);
    a hub id or a served model needs the registry's pinned revision. An encoder classifier runs locally
    only (`SequenceClassifierBackend`): chat-completions servers do not serve sequence classifiers. A local
    backend loads what the entry allows (`allow_pickle`, `trust_remote_code` of guards.<guard> in
    `registry_file`)."""
    model = config.model or spec.model_id
    policy = LoadPolicy(
        allow_pickle=spec.allow_pickle,
        trust_remote_code=spec.trust_remote_code,
        entry=guard,
        entry_file=str(registry_file),
    )
    if spec.family == "encoder_classifier":
        if config.backend != "transformers":
            raise ConfigError(
                f"baselines.guards.{guard}.backend: {config.backend!r} cannot run family "
                "'encoder_classifier' (a chat-completions server does not serve sequence classifiers); "
                "use backend: transformers"
            )
        revision = spec.revision if Path(model).is_dir() else require_pinned(guard, spec)
        return SequenceClassifierBackend(
            model,
            revision,
            device=device,
            dtype=config.dtype,
            batch_size=config.batch_size,
            max_length=config.max_length or DEFAULT_CLASSIFIER_MAX_LENGTH,
            policy=policy,
        )
    if config.max_length is not None:
        raise ConfigError(
            f"baselines.guards.{guard}.max_length: applies to encoder_classifier guards only; "
            f"{guard!r} is a {spec.family} guard, which reads the whole prompt"
        )
    if config.backend == "server":
        assert config.base_url is not None  # BaselineGuardConfig requires it for the server backend
        return OpenAIServerBackend(config.base_url, model, require_pinned(guard, spec))
    revision = spec.revision if Path(model).is_dir() else require_pinned(guard, spec)
    return TransformersBackend(
        model, revision, device=device, dtype=config.dtype, batch_size=config.batch_size, policy=policy
    )


# -------------------------------------------------------------------------------------- predictions table


def verdict_rows(
    relaxed: list[GuardVerdict], strict: list[GuardVerdict], failure_policy: str
) -> pd.DataFrame:
    """One row per item: label, parse status, categories, raw answer, both decisions and both scores.

    `relaxed` / `strict`: the same generations parsed by the adapter built for each mapping (they differ only
    in the reported P(unsafe): Qwen3Guard's strict score adds P(Controversial)).
    """
    return pd.DataFrame(
        {
            "guard_label": [v.label for v in relaxed],
            "parse_status": [v.status for v in relaxed],
            "categories": [",".join(v.categories) for v in relaxed],
            "raw": [v.raw for v in relaxed],
            "unsafe": [binary_decision(v, "relaxed", failure_policy) for v in relaxed],  # type: ignore[arg-type]
            "unsafe_bu": [binary_decision(v, "strict", failure_policy) for v in strict],  # type: ignore[arg-type]
            "unsafe_score": [v.unsafe_score for v in relaxed],
            "unsafe_score_bu": [v.unsafe_score for v in strict],
        }
    )


def baseline_predictions_table(
    model_name: str,
    items: pd.DataFrame,
    verdicts: pd.DataFrame,
    *,
    coarse_classes: list[str],
    pillar_columns: list[str],
    policies: list[str],
    tokens: PromptTokens,
) -> pa.Table:
    """The contract's predictions columns (no coarse or pillar head: nulls; no spans) + the guard's extras.

    `tokens`: the backend's token counts (null where it does not tokenise: a server) and truncation
    (`truncated` is false for a guard that reads the whole prompt)."""
    n = len(items)
    if tokens.n_tokens is not None and len(tokens.n_tokens) != n:
        raise ValueError(f"{len(tokens.n_tokens)} token counts for {n} items")

    def strings(values: Any) -> pa.Array:
        return pa.array([None if pd.isna(v) else str(v) for v in values], pa.string())

    def booleans(values: Any) -> pa.Array:
        return pa.array([None if pd.isna(v) else bool(v) for v in values], pa.bool_())

    def floats(values: Any) -> pa.Array:
        return pa.array([None if v is None or pd.isna(v) else float(v) for v in values], pa.float32())

    arrays: dict[str, pa.Array] = {
        "model": pa.array([model_name] * n, pa.string()),
        "dataset": strings(items["dataset"]),
        "id": strings(items["id"]),
        "clean": pa.array(items["clean"].to_numpy(dtype=bool), pa.bool_()),
        "expected_unsafe": booleans(items["expected_unsafe"]),
        "category": strings(items["category"]),
        "pair_id": strings(items["pair_id"]),
        "pred_coarse": pa.nulls(n, pa.string()),
        "unsafe_score": floats(verdicts["unsafe_score"]),
        "unsafe_score_bu": floats(verdicts["unsafe_score_bu"]),
        "unsafe": booleans(verdicts["unsafe"]),
        "unsafe_bu": booleans(verdicts["unsafe_bu"]),
        "span_start": pa.nulls(n, pa.int64()),
        "span_end": pa.nulls(n, pa.int64()),
        "span_computed": pa.array(np.zeros(n, dtype=bool), pa.bool_()),
        "n_tokens": pa.array(tokens.n_tokens, pa.int64())
        if tokens.n_tokens is not None
        else pa.nulls(n, pa.int64()),
        "truncated": pa.array(tokens.truncated(n), pa.bool_()),
        "guard_label": strings(verdicts["guard_label"]),
        "parse_status": strings(verdicts["parse_status"]),
        "categories": strings(verdicts["categories"]),
        "raw": strings(verdicts["raw"]),
    }
    for policy in policies:
        arrays[f"gold_{policy}"] = strings(items[f"gold_{policy}"])
    for name in [f"p_{c}" for c in coarse_classes] + list(pillar_columns):
        arrays[name] = pa.nulls(n, pa.float32())
    names = [*prediction_columns(coarse_classes, pillar_columns, policies), *EXTRA_COLUMNS]
    return pa.table([arrays[name] for name in names], names=names)


def log_prompt_tokens(guard: str, datasets: list[str], tokens: PromptTokens) -> None:
    """One line per dataset: how many prompts the guard's backend cut (a classifier), or that it reads the
    whole prompt (generative guards: no truncation of ours)."""
    if tokens.max_length is not None and tokens.n_tokens is not None:
        log_truncation(
            f"baseline {guard}",
            datasets,
            np.asarray(tokens.n_tokens),
            tokens.max_length,
            tokens.kept,
        )
        return
    frame = pd.DataFrame({"dataset": datasets, "n_tokens": tokens.n_tokens or [None] * len(datasets)})
    for dataset, rows in frame.groupby("dataset", sort=True):
        longest = rows["n_tokens"].max() if tokens.n_tokens is not None else None
        log.info(
            "baseline %s: %s: 0 of %d prompts truncated (the whole prompt is sent; %s)",
            guard,
            dataset,
            len(rows),
            f"longest {int(longest)} tokens" if longest is not None else "not tokenised here",
        )


# ------------------------------------------------------------------------------------------------ metrics


def _subset_metrics(rows: pd.DataFrame) -> dict[str, Any]:
    """cap / over_ref / f1 / auprc under both mappings on the rows with a decision (absent: n/a)."""
    labelled = rows[rows["expected_unsafe"].notna()]
    # Only a failed parse under failure policy `exclude` has no decision, the same row under both mappings.
    decided_mask = labelled["unsafe"].notna().to_numpy()
    block: dict[str, Any] = {"n_scored": int(decided_mask.sum()), "n_excluded": int((~decided_mask).sum())}
    values: dict[str, float | None] = {}
    for suffix, decision_column, score_column in DECISIONS.values():
        decided = labelled[labelled[decision_column].notna()]
        if decided.empty:
            continue
        expected = decided["expected_unsafe"].to_numpy(dtype=bool)
        predicted = decided[decision_column].to_numpy(dtype=bool)
        values[f"cap{suffix}"] = cap(expected, predicted)
        values[f"over_ref{suffix}"] = over_ref(expected, predicted)
        values[f"f1{suffix}"] = f1(expected, predicted)
        # The score needs the decision token's log-probs; rows without one are left out of the ranking.
        scored = decided[decided[score_column].notna()]
        if not scored.empty:
            values[f"auprc{suffix}"] = auprc(
                scored["expected_unsafe"].to_numpy(dtype=bool),
                scored[score_column].to_numpy(dtype=np.float64),
            )
    block.update({key: round(value, DIGITS) for key, value in values.items() if value is not None})
    return block


def _parse_counts(counts: pd.DataFrame, dataset: str) -> dict[str, int]:
    row = counts[counts["benchmark"] == dataset]
    return {status: int(row[status].sum()) for status in PARSE_STATUSES}


def baseline_metrics(
    predictions: pd.DataFrame,
    *,
    model_name: str,
    roles: dict[str, str],
    splits: list[str],
    headline_mapping: str,
) -> dict[str, Any]:
    """Per benchmark (full / clean) and per split: sizes, parse counts and the binary metrics; the headline
    (copy, cap, over_ref like evaluate@'s) under `headline_mapping`. Pure."""
    counts = parse_failure_counts(
        pd.DataFrame(
            {"model": model_name, "benchmark": predictions["dataset"], "status": predictions["parse_status"]}
        ),
        source=f"{model_name} predictions",
    )
    by_dataset = dict(tuple(predictions.groupby("dataset", sort=True)))
    empty = predictions.iloc[0:0]
    benchmarks = {}
    for name, role in sorted(roles.items()):
        rows = by_dataset.get(name, empty)
        clean_mask = rows["clean"].to_numpy(dtype=bool)
        benchmarks[name] = {
            "role": role,
            "n": len(rows),
            "n_clean": int(clean_mask.sum()),
            "parse": _parse_counts(counts, name),
            **{subset: _subset_metrics(rows if subset == "full" else rows[clean_mask]) for subset in SUBSETS},
        }
    split_blocks = {}
    for split in splits:
        dataset = f"split:{split}"
        rows = by_dataset.get(dataset, empty)
        split_blocks[split] = {
            "n": len(rows),
            "parse": _parse_counts(counts, dataset),
            "unsafe_rate": round(float(rows["unsafe"].astype("boolean").mean()), DIGITS)
            if rows["unsafe"].notna().any()
            else None,
        }
        split_blocks[split] = {k: v for k, v in split_blocks[split].items() if v is not None}
    suffix = DECISIONS[headline_mapping][0]
    # metrics.headline reads `cap` / `over_ref` of the clean block: hand it the chosen mapping's values.
    chosen = {
        name: {
            "role": block["role"],
            "clean": {
                key: block["clean"][f"{key}{suffix}"]
                for key in ("cap", "over_ref")
                if f"{key}{suffix}" in block["clean"]
            },
        }
        for name, block in benchmarks.items()
    }
    totals = {status: int(counts[status].sum()) for status in PARSE_STATUSES}
    return {
        "model": model_name,
        "kind": "baseline",
        "headline": {**headline(chosen, {}, []), "mapping": headline_mapping},
        "benchmarks": benchmarks,
        "val": split_blocks,
        "parse": {**totals, "rows": len(predictions)},
    }


# -------------------------------------------------------------------------------------------------- stage


def baseline(guard: str, layout: Layout | None = None, device: str | None = None) -> dict[str, Any]:
    """Stage baseline@<guard>: the guard's answers on every evaluation item -> reports/baselines/<guard>/
    (paths from `layout`, default: this repository; the guard registry and answer cache params names are
    relative to its root). `device` overrides the backend's choice (e.g. cpu)."""
    layout = layout or Layout.discover()
    params_file = layout.relative("params")
    params = load_params(layout.path("params"))
    settings = params.baselines
    config = guard_config(params, guard, params_file)
    registry_file = layout.resolve(settings.registry)
    spec = guard_spec(registry_file, guard)
    headline_mapping = config.mapping or spec.default_mapping
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    policies = list(params.policies)
    items, roles = load_items(
        params,
        layout.path("benchmark_registry"),
        layout.path("benchmarks"),
        layout.path("clean_benchmarks"),
        layout.path("splits"),
        layout.path("pool"),
        layout.path("labels"),
    )
    items = items.sort_values(["dataset", "id"], kind="stable").reset_index(drop=True)
    relaxed_adapter, strict_adapter = build_adapter(spec, "relaxed"), build_adapter(spec, "strict")
    # The backend first: a refused model (pickle-only weights, say) stops the run before the cache opens.
    runner = build_backend(guard, config, spec, device, registry_file)
    cache = GenerationCache(layout.resolve(settings.cache_dir))
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
    verdicts = verdict_rows(
        [relaxed_adapter.parse(g) for g in generations],
        [strict_adapter.parse(g) for g in generations],
        settings.failure_policy,
    )
    table = baseline_predictions_table(
        model_name,
        items,
        verdicts,
        coarse_classes=list(taxonomy.coarse_classes),
        pillar_columns=list(taxonomy.pillar_columns),
        policies=policies,
        tokens=tokens,
    )
    target = layout.path("baseline_predictions", guard=guard).parent
    write_table(BASELINE_PREDICTIONS, layout.path("baseline_predictions", guard=guard), table)
    metrics = baseline_metrics(
        table.to_pandas(),
        model_name=model_name,
        roles=roles,
        splits=list(params.evaluation.splits),
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

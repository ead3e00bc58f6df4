"""bench-eval: both inference paths run on the same prompts, agree, and report their rates."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from helpers.encoders import tiny_guard

from guardpolicy.errors import InputError
from guardpolicy.evaluation.bench import (
    _classification_pipeline,
    bench_eval,
    bench_prompts,
    measure_eval_throughput,
)
from guardpolicy.evaluation.scoring import encode
from guardpolicy.modeling.guard import save_guard


def test_prompts_are_real_when_benchmarks_exist_and_deterministic_otherwise(tmp_path) -> None:
    synthetic, origin = bench_prompts(tmp_path / "none", samples=10, seed=1)
    assert origin.startswith("synthetic") and synthetic == bench_prompts(tmp_path / "none", 10, 1)[0]
    assert len({len(p.split()) for p in synthetic}) > 1  # varied lengths, so padding matters
    pd.DataFrame({"prompt": ["alpha", "bravo", "charlie"]}).to_parquet(tmp_path / "b.parquet")
    real, origin = bench_prompts(tmp_path, samples=5, seed=1)
    assert len(real) == 5 and set(real) <= {"alpha", "bravo", "charlie"} and "1 benchmark files" in origin


def test_bench_eval_reports_both_rates_on_a_tiny_model(tmp_path) -> None:
    model, tokenizer = tiny_guard(seed=6)
    save_guard(model, tokenizer, tmp_path / "guard")
    options = {
        "model_dir": str(tmp_path / "guard"),
        "samples": 24,
        "batch_size": 8,
        "max_length": 16,
        "threads": 1,
        "benchmarks_dir": str(tmp_path / "no-benchmarks"),
        "warmup_batches": 1,
    }
    report = measure_eval_throughput(**options)
    assert report["ours_samples_per_second"] > 0 and report["pipeline_samples_per_second"] > 0
    assert report["agreement"] == 1.0 and report["samples"] == 24
    text = bench_eval(**options)
    rates = re.findall(r"^\s+(ours|pipeline)\s+([\d.]+) samples/s$", text, flags=re.MULTILINE)
    assert [name for name, _ in rates] == ["ours", "pipeline"] and all(float(v) > 0 for _, v in rates)
    assert "ratio" in text


@pytest.mark.parametrize("truncation, head_tokens", [("head_tail", 4), ("tail", None), ("head", None)])
def test_pipeline_reads_the_tokens_the_guard_was_trained_to_read(tmp_path, truncation, head_tokens) -> None:
    """A guard trained on both ends (or the tail) of long prompts: the pipeline must classify those tokens,
    not the tokenizer's head cut, or the two paths compare different inputs (and disagree)."""
    model, tokenizer = tiny_guard(seed=7)
    model.config.truncation, model.config.truncation_head_tokens = truncation, head_tokens
    save_guard(model, tokenizer, tmp_path / "guard")
    prompts, _ = bench_prompts(tmp_path / "no-benchmarks", samples=24, seed=3)
    max_length = 12
    pipe, _ = _classification_pipeline(model, tokenizer, batch_size=8, max_length=max_length)
    encoded = encode(
        tokenizer, prompts, max_length, with_offsets=False, truncation=truncation, head_tokens=head_tokens
    )
    assert (encoded.n_tokens > max_length).sum() > 10  # most prompts are cut, so the cut matters
    for prompt, ours in zip(prompts, encoded.input_ids, strict=True):
        # As the pipeline calls it: with its tokenizer settings (truncation=True, max_length).
        read = pipe.preprocess(prompt, **pipe._preprocess_params)["input_ids"][0]
        assert read.tolist() == ours.tolist()
    report = measure_eval_throughput(
        model_dir=str(tmp_path / "guard"),
        samples=24,
        batch_size=8,
        max_length=max_length,
        threads=1,
        benchmarks_dir=str(tmp_path / "no-benchmarks"),
        warmup_batches=1,
    )
    assert report["truncation"] == {"truncation": truncation, "head_tokens": head_tokens}


def test_speed_probe_times_our_loop_alone_on_pool_prompts(tmp_path, capsys) -> None:
    """The probe that `timings` records: our loop alone (no Trainer run) on pool prompts, with its figures."""
    from guardpolicy.training.bench import bench_train, speed_probe

    prompts = [f"prompt {i} " + "word " * (i % 17) for i in range(300)]
    pd.DataFrame({"id": [f"p{i}" for i in range(300)], "prompt": prompts}).to_parquet(
        tmp_path / "pool.parquet"
    )
    report = bench_train(
        num_layers=1,
        samples=256,
        max_length=16,
        threads=1,
        pool_file=str(tmp_path / "pool.parquet"),
        loops="ours",
    )
    assert report["ours_samples_per_second"] > 0
    assert report["trainer_samples_per_second"] is None and report["ratio_ours_over_trainer"] is None
    assert report["timed_samples"] == (256 // 32 - 1 - 3) * 32
    printed = capsys.readouterr().out
    assert (
        re.search(r"^\s+ours\s+[\d.]+ samples/s$", printed, flags=re.MULTILINE) and "Trainer" not in printed
    )
    with pytest.raises(ValueError, match="loops must be a subset of"):
        bench_train(samples=256, pool_file=str(tmp_path / "pool.parquet"), loops="ours,fast")
    with pytest.raises(InputError, match="fewer than the 512 asked for"):
        speed_probe(512, pool_file=str(tmp_path / "pool.parquet"))

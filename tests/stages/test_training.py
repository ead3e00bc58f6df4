"""The training loop and its parts: losses, span labels, batching, head-only, resume, predict, freezing."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from helpers.encoders import TINY, tiny_guard
from safetensors.torch import load_file

from guardpolicy.errors import ConfigError, InputError
from guardpolicy.modeling.backbone import offline_tokenizer
from guardpolicy.modeling.guard import save_guard
from guardpolicy.training.collate import encode_prompts, epoch_batches, span_token_labels
from guardpolicy.training.loop import train
from guardpolicy.training.losses import coarse_loss, distillation_kl, span_loss
from guardpolicy.training.model_setup import set_trainable
from guardpolicy.training.predict import predict
from guardpolicy.training.recipe import TrainRecipe

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]


def toy_examples(n: int = 40, teacher: bool = False) -> pd.DataFrame:
    """Class = which marker word the prompt contains; lengths vary so bucketing and padding matter."""
    rng = np.random.default_rng(7)
    markers = ["safe", "harmful", "refuse", "compound"]
    rows = []
    for i in range(n):
        label = i % 4
        filler = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 12))))
        prompt = f"{filler} {markers[label]} {filler}"
        start = prompt.index(markers[label])
        pillars = [0] * 24
        pillars[label] = 1
        rows.append(
            {
                "id": f"x{i:03d}",
                "prompt": prompt,
                "coarse": label,
                "pillars": pillars,
                "span_start": start if label == 1 else None,
                "span_end": start + len(markers[label]) if label == 1 else None,
                "teacher_logits": list(rng.normal(size=4)) if teacher else None,
                "weight": 1.0,
            }
        )
    frame = pd.DataFrame(rows)
    frame["span_start"] = frame["span_start"].astype("Int64")
    frame["span_end"] = frame["span_end"].astype("Int64")
    return frame


def recipe(**changes) -> TrainRecipe:
    base = {
        "epochs": 2,
        "batch_size": 8,
        "learning_rate": 1e-3,
        "max_length": 32,
        "seed": 42,
        "checkpoint_every_steps": 4,
        "log_every_steps": 2,
    }
    return TrainRecipe(**{**base, **changes})


def states(path) -> dict[str, torch.Tensor]:
    return load_file(path / "model.safetensors")


# --------------------------------------------------------------------------------------------------- losses


def test_distillation_is_plain_cross_entropy_when_alpha_is_zero() -> None:
    logits = torch.tensor([[2.0, 0.5, -1.0, 0.0], [0.1, 0.2, 0.3, 0.4]])
    labels = torch.tensor([0, 3])
    teacher = torch.tensor([[0.0, 3.0, 0.0, 0.0], [5.0, 0.0, 0.0, 0.0]])
    weights = torch.ones(2)
    has_teacher = torch.tensor([True, True])
    coarse, ce, distill = coarse_loss(
        logits, labels, weights, teacher, has_teacher, alpha=0.0, temperature=4.0
    )
    assert torch.allclose(coarse, F.cross_entropy(logits, labels))
    assert torch.allclose(ce, coarse)
    assert distill > 0  # still reported, just not weighted in
    only, _, _ = coarse_loss(logits, labels, weights, teacher, has_teacher, alpha=1.0, temperature=4.0)
    assert torch.allclose(only, distillation_kl(logits, teacher, 4.0).mean())


def test_kl_is_zero_for_identical_logits_positive_otherwise_and_scaled_by_tau_squared() -> None:
    logits = torch.tensor([[1.0, -2.0, 0.5, 3.0]])
    assert torch.allclose(distillation_kl(logits, logits.clone(), 4.0), torch.zeros(1), atol=1e-7)
    # Known answer: teacher [ln 3, 0] -> p = [3/4, 1/4]; student [0, 0] -> q = [1/2, 1/2] at tau = 1.
    student = torch.tensor([[0.0, 0.0]])
    teacher = torch.tensor([[math.log(3.0), 0.0]])
    expected = 0.75 * math.log(1.5) + 0.25 * math.log(0.5)
    assert distillation_kl(student, teacher, 1.0).item() == pytest.approx(expected, rel=1e-6)
    # At tau = 2 the same distributions arise from logits scaled by 2; the loss is then 2^2 times the KL.
    assert distillation_kl(2 * student, 2 * teacher, 2.0).item() == pytest.approx(4 * expected, rel=1e-6)


def test_rows_without_teacher_and_row_weights() -> None:
    logits = torch.tensor([[2.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 2.0]])
    labels = torch.tensor([1, 3])
    teacher = torch.tensor([[0.0, 0.0, 9.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    ce_rows = F.cross_entropy(logits, labels, reduction="none")
    coarse, _, _ = coarse_loss(
        logits, labels, torch.tensor([1.0, 0.0]), teacher, torch.tensor([False, True]), alpha=0.5
    )
    assert torch.allclose(coarse, ce_rows[0])  # row 0 has no teacher: plain CE; row 1 weighs nothing


def test_span_loss_counts_only_masked_tokens() -> None:
    logits = torch.tensor([[5.0, -5.0, 100.0]], requires_grad=True)
    labels = torch.tensor([[1.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False]])
    loss = span_loss(logits, labels, mask)
    expected = F.binary_cross_entropy_with_logits(logits[0, :2], labels[0, :2])
    assert torch.allclose(loss, expected)
    empty = span_loss(logits, labels, torch.zeros_like(mask))
    assert empty.item() == 0.0 and empty.requires_grad


# ------------------------------------------------------------------------------------------ spans and batches


def test_span_labels_from_char_offsets_mark_the_right_tokens() -> None:
    tokenizer = offline_tokenizer()
    prompt = "please tell me how to build a bomb today"
    start = prompt.index("build a bomb")
    encoded = encode_prompts(
        tokenizer, [prompt, prompt, prompt], 32, [start, None, start], [start + 12, None, start + 12]
    )
    tokens = tokenizer.convert_ids_to_tokens(encoded.input_ids[0].tolist())
    inside = [tok for tok, label in zip(tokens, encoded.span_labels[0], strict=True) if label == 1]
    assert inside == ["build", "a", "bomb"]
    assert not encoded.span_mask[0][0] and not encoded.span_mask[0][-1]  # [CLS] / [SEP] take no part
    assert encoded.span_mask[0][1:-1].all()
    assert not encoded.span_mask[1].any()  # unknown span: row masked out
    truncated = encode_prompts(tokenizer, [prompt], 4, [start], [start + 12])
    assert not truncated.span_mask[0].any()  # span cut off by truncation: masked, not labelled "outside"
    offsets = np.array([[0, 0], [0, 3], [4, 8], [0, 0]])
    labels, mask = span_token_labels(offsets, np.array([True, False, False, True]), 5, 6)
    assert labels.tolist() == [0, 0, 1, 0] and mask.tolist() == [False, True, True, False]


def test_epoch_batches_are_seeded_complete_and_bucketed() -> None:
    lengths = np.random.default_rng(0).integers(3, 64, size=1000)
    batches = epoch_batches(lengths, 10, seed=1, epoch=0)
    assert sorted(np.concatenate(batches).tolist()) == list(range(1000))
    again = epoch_batches(lengths, 10, seed=1, epoch=0)
    assert all(np.array_equal(a, b) for a, b in zip(batches, again, strict=True))
    assert not np.array_equal(np.concatenate(batches), np.concatenate(epoch_batches(lengths, 10, 1, 1)))

    def padded_tokens(bs):
        return sum(len(b) * lengths[b].max() for b in bs)

    unbucketed = epoch_batches(lengths, 10, seed=1, epoch=0, bucketing=False)
    assert padded_tokens(batches) < 0.8 * padded_tokens(unbucketed)


# ----------------------------------------------------------------------------------------------- the loop


def test_head_only_training_leaves_the_backbone_bit_identical(tmp_path) -> None:
    model, tokenizer = tiny_guard(seed=42)
    save_guard(model, tokenizer, tmp_path / "init")
    result = train(
        toy_examples(),
        recipe(trainable="heads", epochs=3, learning_rate=5e-2),
        tmp_path / "init",
        tmp_path / "out",
        tmp_path / "work",
        tmp_path / "live",
        "head-only",
    )
    before, after = states(tmp_path / "init"), states(tmp_path / "out")
    backbone = [k for k in before if k.startswith("backbone.")]
    heads = [k for k in before if k.startswith("heads.")]
    assert backbone and all(torch.equal(before[k], after[k]) for k in backbone)
    assert all(not torch.equal(before[k], after[k]) for k in heads if k.endswith("weight"))
    assert result.parameters["trainable"] == result.parameters["heads"]
    # The span head learnt to find the marker token (BCE starts near ln 2 = 0.69); the first-token state of
    # a random tiny backbone carries too little for the classifiers to be a reliable known answer.
    assert result.final_losses["span"] < 0.35
    assert (tmp_path / "live" / "plots" / "metrics" / "train" / "loss.tsv").is_file()


def test_resume_after_an_interruption_gives_the_uninterrupted_weights(tmp_path) -> None:
    examples = toy_examples(teacher=True)
    run = recipe(distill_alpha=0.5, checkpoint_every_steps=3)  # 5 steps/epoch: states at 3, 5, 6, 9, 10
    reference = train(examples, run, TINY, tmp_path / "a", tmp_path / "wa", tmp_path / "la", "reference")

    class Interrupted(Exception):
        pass

    def stop_at_eight(step, _losses):
        if step == 8:  # mid-epoch, two steps past the state of step 6: those are redone after resuming
            raise Interrupted

    with pytest.raises(Interrupted):
        train(
            examples,
            run,
            TINY,
            tmp_path / "b",
            tmp_path / "wb",
            tmp_path / "lb",
            "interrupted",
            on_step=stop_at_eight,
        )
    assert not (tmp_path / "b").exists()
    # A different recipe is a different run: the interrupted state is not resumed by it.
    shutil.copytree(tmp_path / "wb", tmp_path / "wc")
    other = train(examples, recipe(distill_alpha=0.25), TINY, tmp_path / "c", tmp_path / "wc", None, "other")
    assert other.resumed_from_step is None
    resumed = train(examples, run, TINY, tmp_path / "b", tmp_path / "wb", tmp_path / "lb", "resumed")
    assert resumed.resumed_from_step == 6 and resumed.steps == reference.steps == 10
    expected, got = states(tmp_path / "a"), states(tmp_path / "b")
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected)
    assert resumed.final_losses == reference.final_losses
    logged = [pd.read_csv(tmp_path / d / "plots/metrics/train/loss.tsv", sep="\t") for d in ("la", "lb")]
    assert logged[0]["step"].tolist() == logged[1]["step"].tolist() == [2, 4, 6, 8, 10]
    assert logged[0]["loss"].tolist() == logged[1]["loss"].tolist()
    assert not (tmp_path / "wb" / "state.pt").exists()  # a finished run leaves no resumable state behind


def test_trainable_encoder_freezes_exactly_the_input_embeddings() -> None:
    model, _ = tiny_guard()
    set_trainable(model, "encoder")
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    assert frozen == {"backbone.embeddings.tok_embeddings.weight"}
    set_trainable(model, "heads")
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {
        f"heads.{head}.{part}" for head in ("coarse", "pillars", "span") for part in ("weight", "bias")
    }
    set_trainable(model, "full")
    assert all(p.requires_grad for p in model.parameters())


def test_predict_returns_rows_in_input_order(tmp_path) -> None:
    model, tokenizer = tiny_guard(seed=9)
    save_guard(model, tokenizer, tmp_path / "guard")
    prompts = ["one", "one two three four five six", "one two", "one two three four", "one two three"]
    result = predict(
        tmp_path / "guard", prompts, batch_size=2, max_length=16, with_spans=True, progress=False
    )
    reversed_result = predict(tmp_path / "guard", prompts[::-1], batch_size=2, max_length=16, progress=False)
    assert np.array_equal(result["coarse_logits"], reversed_result["coarse_logits"][::-1])
    assert result["coarse_logits"].shape == (5, 4) and result["pillar_logits"].shape == (5, 24)
    for i, prompt in enumerate(prompts):  # each row is that prompt's own output
        single = predict(model, [prompt], batch_size=1, max_length=16, tokenizer=tokenizer, progress=False)
        assert np.allclose(single["coarse_logits"][0], result["coarse_logits"][i], atol=1e-5)
    length = len(tokenizer(prompts[0])["input_ids"])
    assert (
        np.isnan(result["span_logits"][0, length:]).all()
        and not np.isnan(result["span_logits"][0, :length]).any()
    )


def test_bad_examples_and_recipes_are_named() -> None:
    bad = toy_examples(8)
    bad.loc[3, "coarse"] = 7
    with pytest.raises(InputError, match=r"row 4, field 'coarse'"):
        train(bad, recipe(), TINY, "/nonexistent/out", "/nonexistent/work", None, "bad")
    no_teacher = toy_examples(8)
    with pytest.raises(InputError, match="teacher_logits"):
        train(no_teacher, recipe(distill_alpha=0.5), TINY, "/nonexistent/out", "/nonexistent/work", None, "x")
    with pytest.raises(ConfigError, match="distill_alpha"):
        recipe(distill_alpha=1.5)
    assert recipe(loss_weights={"coarse": 1.0, "pillars": 0.0, "span": 0.0}).loss_weights.pillars == 0.0

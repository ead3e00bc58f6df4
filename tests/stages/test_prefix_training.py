"""Training on a scale's cached prefix states (recipe.frozen_layers): the prefix never changes, the top
trains, the saved guard is an ordinary full model that reproduces what training saw, and a cache built for
another model or other settings is refused by name."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from helpers.encoders import tiny_guard
from safetensors.torch import load_file

from guardpolicy.errors import ConfigError, InputError
from guardpolicy.modeling.guard import load_guard, save_guard
from guardpolicy.modeling.prefix import TopView
from guardpolicy.training.loop import train
from guardpolicy.training.predict import predict
from guardpolicy.training.prefix_cache import (
    POOL_SET,
    cache_key,
    compute_prefix,
    read_prefix_cache,
    write_prefix_cache,
)
from guardpolicy.training.recipe import TrainRecipe

FROZEN = 2  # of the tiny ModernBERT's 3 layers
MARKERS = ["safe", "harmful", "refuse", "compound"]
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]


def _examples(n: int = 32) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    rows = []
    for i in range(n):
        filler = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 9))))
        prompt = f"{filler} {MARKERS[i % 4]} {filler}"
        pillars = [0] * 24
        pillars[i % 4] = 1
        start = prompt.index(MARKERS[i % 4])
        rows.append(
            {
                "id": f"p{i:03d}",
                "prompt": prompt,
                "coarse": i % 4,
                "pillars": pillars,
                "span_start": start if i % 4 == 1 else None,
                "span_end": start + len(MARKERS[1]) if i % 4 == 1 else None,
            }
        )
    frame = pd.DataFrame(rows)
    frame[["span_start", "span_end"]] = frame[["span_start", "span_end"]].astype("Int64")
    return frame


def _recipe(**changes) -> TrainRecipe:
    base = {"epochs": 12, "batch_size": 8, "learning_rate": 1e-2, "max_length": 24, "seed": 5}
    return TrainRecipe(**{"frozen_layers": FROZEN, **base, **changes})


def _meta(**changes) -> dict:
    meta = {
        "frozen_layers": FROZEN,
        "max_length": 24,
        "truncation": "head",
        "truncation_head_tokens": None,
        "hidden_size": 32,
        "backbone": "tiny",
    }
    return {**meta, **changes}


@pytest.fixture
def workspace(tmp_path):
    model, tokenizer = tiny_guard(seed=11)
    save_guard(model, tokenizer, tmp_path / "init")
    examples = _examples()
    states, n_tokens = compute_prefix(
        model.backbone,
        tokenizer,
        examples["prompt"].tolist(),
        frozen_layers=FROZEN,
        max_length=24,
        truncation="head",
        truncation_head_tokens=None,
        batch_size=8,
        description="prefix",
    )
    keys = [cache_key(POOL_SET, i) for i in examples["id"]]
    write_prefix_cache(tmp_path / "prefix", keys, states, n_tokens, _meta())
    return tmp_path, examples


def test_the_prefix_stays_the_top_trains_and_the_saved_guard_reproduces_training(workspace) -> None:
    tmp_path, examples = workspace
    cache = read_prefix_cache(tmp_path / "prefix", "prefix@tiny")
    result = train(
        examples,
        _recipe(),
        tmp_path / "init",
        tmp_path / "out",
        tmp_path / "work",
        None,
        "frozen",
        prefix=cache,
    )
    before, after = (
        load_file(tmp_path / "init" / "model.safetensors"),
        load_file(tmp_path / "out" / "model.safetensors"),
    )
    frozen = [
        k
        for k in before
        if k.startswith("backbone.embeddings") or k.startswith(("backbone.layers.0.", "backbone.layers.1."))
    ]
    top = [k for k in before if k.startswith("backbone.layers.2.") and k.endswith("weight")]
    assert frozen and top
    assert all(torch.equal(before[k], after[k]) for k in frozen)
    assert all(not torch.equal(before[k], after[k]) for k in top)
    assert all(
        not torch.equal(before[k], after[k])
        for k in before
        if k.startswith("heads.") and k.endswith("weight")
    )
    # Only the top layer(s), final norm and heads were trainable.
    guard, _ = load_guard(tmp_path / "out")
    assert guard.config.frozen_layers == FROZEN and guard.config.truncation == "head"
    assert result.parameters["trainable"] < result.parameters["total"] / 2
    # The saved guard is a plain full model: its full forward equals prefix (cached, float16) + top + heads
    # up to the float16 rounding of the cached states.
    full = predict(
        tmp_path / "out",
        examples["prompt"].tolist(),
        batch_size=8,
        max_length=24,
        precision="fp32",
        device="cpu",
        progress=False,
    )["coarse_logits"]
    rows = cache.tensors([cache_key(POOL_SET, i) for i in examples["id"]], "prefix@tiny")
    top_view = TopView(guard.backbone, FROZEN).eval()
    with torch.no_grad():
        cached = np.stack(
            [
                guard.heads(top_view(r.float()[None], torch.ones(1, len(r), dtype=torch.long)))
                .coarse_logits[0]
                .numpy()
                for r in rows
            ]
        )
    assert np.allclose(full, cached, atol=2e-2)
    # It learnt the marker words (4 classes: chance is a quarter).
    assert (full.argmax(1) == examples["coarse"].to_numpy()).mean() >= 0.75


def test_head_only_on_the_prefix_leaves_every_backbone_weight(workspace) -> None:
    tmp_path, examples = workspace
    cache = read_prefix_cache(tmp_path / "prefix", "prefix@tiny")
    result = train(
        examples,
        _recipe(trainable="heads", learning_rate=5e-2),
        tmp_path / "init",
        tmp_path / "out",
        tmp_path / "work",
        None,
        "frozen heads",
        prefix=cache,
    )
    before, after = (
        load_file(tmp_path / "init" / "model.safetensors"),
        load_file(tmp_path / "out" / "model.safetensors"),
    )
    assert all(torch.equal(before[k], after[k]) for k in before if k.startswith("backbone."))
    assert result.parameters["trainable"] == result.parameters["heads"]


def test_a_cache_for_other_settings_or_prompts_is_refused_by_name(workspace) -> None:
    tmp_path, examples = workspace
    cache = read_prefix_cache(tmp_path / "prefix", "prefix@tiny")
    args = (tmp_path / "init", tmp_path / "out", tmp_path / "work", None, "frozen")
    with pytest.raises(
        InputError, match=r"meta\.json.*built with max_length 24, this run needs 16.*prefix@tiny"
    ):
        train(examples, _recipe(max_length=16), *args, prefix=cache, prefix_stage="prefix@tiny")
    with pytest.raises(InputError, match=r"frozen_layers 2, this run needs 1"):
        train(examples, _recipe(frozen_layers=1), *args, prefix=cache, prefix_stage="prefix@tiny")
    extra = pd.concat([examples, _examples(33).tail(1).assign(id="p999")], ignore_index=True)
    with pytest.raises(InputError, match=r"1 prompt\(s\) are not in the prefix cache \(e\.g\. 'pool/p999'\)"):
        train(extra, _recipe(), *args, prefix=cache, prefix_stage="prefix@tiny")
    with pytest.raises(ConfigError, match=r"frozen_layers is 2.*no prefix cache was given.*prefix@tiny"):
        train(examples, _recipe(), *args, prefix=None, prefix_stage="prefix@tiny")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match="excludes frozen_layers"):
        _recipe(trainable="encoder")


def test_a_damaged_cache_is_named(workspace) -> None:
    tmp_path, _ = workspace
    (tmp_path / "prefix" / "index.parquet").unlink()
    with pytest.raises(
        InputError, match=r"index\.parquet.*prefix cache file not found; run `dvc repro prefix@tiny`"
    ):
        read_prefix_cache(tmp_path / "prefix", "prefix@tiny")


def test_an_anchor_row_reads_the_prefix_of_the_pool_prompt_it_repeats(workspace) -> None:
    """build_examples gives an anchor row the id `<pool id>#<anchor set>` and its pool id in `prompt_id`."""
    tmp_path, examples = workspace
    cache = read_prefix_cache(tmp_path / "prefix", "prefix@tiny")
    anchor = examples.head(2).assign(prompt_id=lambda f: f["id"]).assign(id=lambda f: f["id"] + "#refusal")
    with_anchor = pd.concat([examples.assign(prompt_id=examples["id"]), anchor], ignore_index=True)
    result = train(
        with_anchor,
        _recipe(epochs=1),
        tmp_path / "init",
        tmp_path / "out",
        tmp_path / "work",
        None,
        "anchors",
        prefix=cache,
    )
    assert result.examples == len(examples) + 2
    with pytest.raises(InputError, match=r"'pool/p000#refusal'"):
        train(
            anchor.drop(columns="prompt_id"),
            _recipe(epochs=1),
            tmp_path / "init",
            tmp_path / "out2",
            tmp_path / "work2",
            None,
            "no prompt_id",
            prefix=cache,
        )

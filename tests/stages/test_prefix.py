"""A backbone split into a frozen prefix and a trainable top gives the full model's outputs, and trains only
the top (guardpolicy.modeling.prefix), for the three architectures the profiles use."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModel

from guardpolicy.errors import ConfigError
from guardpolicy.modeling.backbone import transformer_layers
from guardpolicy.modeling.prefix import TopView, prefix_states, trainable_top_parameters

TINY_CONFIGS = {
    "bert": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 2},
    "mpnet": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 2},
    "modernbert": {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 2,
        # Alternating global / local attention, as the real ModernBERT: the view must keep each layer's type.
        "global_attn_every_n_layers": 2,
        "local_attention": 4,
    },
}


def _tiny(model_type: str) -> torch.nn.Module:
    torch.manual_seed(0)
    special = {"pad_token_id": 0, "bos_token_id": 1, "cls_token_id": 1, "eos_token_id": 2, "sep_token_id": 2}
    config = AutoConfig.for_model(model_type, vocab_size=120, **special, **TINY_CONFIGS[model_type])
    config._attn_implementation = "eager"
    return AutoModel.from_config(config).eval()


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 100, (3, 9), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0  # a padded row: masks must reach the top layers too
    mask[2, 3:] = 0
    return ids, mask


@pytest.mark.parametrize("model_type", sorted(TINY_CONFIGS))
@pytest.mark.parametrize("frozen", [0, 1, 3])
def test_prefix_then_top_equals_the_full_forward(model_type: str, frozen: int) -> None:
    model = _tiny(model_type)
    ids, mask = _batch()
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask).last_hidden_state
        states = prefix_states(model, ids, mask, frozen)
        top = TopView(model, frozen)(states, mask)
    real = mask.bool()
    assert torch.allclose(top[real], full[real], atol=1e-5), (model_type, frozen)
    # The split left the model itself whole.
    assert len(transformer_layers(model)) == 4


@pytest.mark.parametrize("model_type", sorted(TINY_CONFIGS))
def test_the_top_trains_the_models_own_top_layers_and_nothing_below(model_type: str) -> None:
    model = _tiny(model_type)
    frozen = 2
    trainable = {id(p) for p in trainable_top_parameters(model, frozen)}
    layers = list(transformer_layers(model))
    for layer in layers[:frozen]:
        assert not any(id(p) in trainable for p in layer.parameters())
    for layer in layers[frozen:]:
        assert all(id(p) in trainable for p in layer.parameters())
    assert not any(id(p) in trainable for p in model.embeddings.parameters())
    # One optimizer step through the view changes the model's top layers and leaves the prefix as it was.
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    for p in model.parameters():
        p.requires_grad_(id(p) in trainable)
    view = TopView(model, frozen).train()
    ids, mask = _batch()
    states = prefix_states(model, ids, mask, frozen)
    loss = view(states, mask).pow(2).mean()
    loss.backward()
    torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5).step()
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert changed, "the step changed nothing"
    prefix_names = {f"layer.{i}." for i in range(frozen)} | {f"layers.{i}." for i in range(frozen)}
    assert not any(name.startswith("embeddings") or any(s in name for s in prefix_names) for name in changed)


def test_a_prefix_must_leave_a_layer_to_train() -> None:
    model = _tiny("bert")
    with pytest.raises(ConfigError, match="frozen_layers: 4 must be between 0 and 3"):
        TopView(model, 4)
    with pytest.raises(ConfigError, match="frozen_layers: -1"):
        prefix_states(model, *_batch(), -1)

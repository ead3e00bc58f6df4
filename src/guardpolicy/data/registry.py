"""The benchmark registry (`data/benchmarks.yaml`): one declarative, pinned entry per evaluation subset.

An entry says where the bytes come from (a pinned upstream file and, failing that, derived copies), how to
check them (sha256), how to map their columns onto the common schema and what labels to expect. Adding a
benchmark is a YAML change, not a code change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from guardpolicy.config.core import from_mapping, load_yaml
from guardpolicy.errors import ConfigError

# `dataset`: a Hugging Face dataset (hub id at a pinned commit, or a local save_to_disk folder), named by the
# file's `dataset` block instead of a mirror path / URL (guardpolicy.data.hub_datasets reads it).
FileFormat = Literal["csv", "json", "jsonl", "parquet", "lines", "dataset"]
ExtraType = Literal["string", "bool", "int", "float"]
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_TEMPLATE_FIELD = re.compile(r"\{([^{}]+)\}")

# Named post-processing steps a benchmark may ask for (see guardpolicy.data.normalise.TRANSFORMS).
KNOWN_TRANSFORMS = ("xstest_pairs",)


@dataclass(frozen=True)
class HFFile:
    """A file of a Hugging Face *dataset* repository at a pinned commit."""

    repo: str
    revision: str
    path: str

    def __post_init__(self) -> None:
        if not _COMMIT.fullmatch(self.revision):
            raise ConfigError(
                f"revision must be a 40-hex commit sha (a branch name is not a pin), got {self.revision!r}"
            )


@dataclass(frozen=True)
class HFDataset:
    """A Hugging Face dataset read with the `datasets` library: either a hub dataset id (`repo`) at a pinned
    commit (`revision`, 40 hex; `config` and `split` as `datasets.load_dataset` takes them), or a local
    `datasets.save_to_disk` folder (`path`, relative to the repository root; `split` names one split of a
    saved DatasetDict). Used by both registries (a benchmark file, a user pool file) in place of a file.
    """

    repo: str | None = None
    revision: str | None = None
    config: str | None = None
    split: str | None = None
    path: str | None = None

    def __post_init__(self) -> None:
        if (self.repo is None) == (self.path is None):
            raise ConfigError(
                "a dataset needs exactly one of repo (a hub dataset id, with revision and split) or path "
                "(a local save_to_disk folder)"
            )
        if self.path is not None:
            if self.revision is not None or self.config is not None:
                raise ConfigError(
                    "revision / config apply to a hub dataset (repo), not to a local folder (path): the "
                    "folder holds one version, and DVC tracks it"
                )
            return
        # A hub id without a commit would load whatever the hub's main branch holds on the day of the run:
        # the same registry would then give different benchmarks or pools.
        if self.revision is None:
            raise ConfigError(
                f"hub dataset {self.repo!r} needs revision: a 40-hex commit sha of the dataset repository "
                "(a hub id without a pinned revision changes under the pipeline)"
            )
        if not _COMMIT.fullmatch(self.revision):
            raise ConfigError(
                f"revision must be a 40-hex commit sha (a branch name is not a pin), got {self.revision!r}"
            )
        if self.split is None:
            raise ConfigError(f"hub dataset {self.repo!r} needs split (e.g. train or test)")

    @property
    def display_name(self) -> str:
        """How messages and provenance name it: the folder or `hf:<repo>@<revision>` (with config, split)."""
        if self.path is not None:
            return self.path + (f"[{self.split}]" if self.split else "")
        parts = [p for p in (self.config, self.split) if p]
        return f"hf:{self.repo}@{self.revision}" + (f"[{'/'.join(parts)}]" if parts else "")


def check_dataset_file(file_format: str, dataset: HFDataset | None, file_fields: dict[str, object]) -> None:
    """A file of format `dataset` names its `dataset` and nothing of a file's; any other format has none."""
    if (file_format == "dataset") != (dataset is not None):
        raise ConfigError("format dataset and a dataset block go together: give both or neither")
    if dataset is None:
        return
    given = sorted(name for name, value in file_fields.items() if value not in (None, (), {}))
    if given:
        raise ConfigError(
            f"a dataset file takes no {given}: its rows come from the dataset (a hub dataset is pinned by "
            "its revision, a local folder is tracked by DVC)"
        )


@dataclass(frozen=True)
class ColumnMap:
    """Where the common-schema fields come from in the source file.

    `prompt` is a column name or a template such as ``"{ContextString}\\n\\n---\\n\\n{Behavior}"``;
    every field a template names must be a non-empty string in each kept row (filter first, e.g. to
    contextual behaviors).
    """

    prompt: str
    id: str | None = None
    category: str | None = None
    label: str | None = None

    def prompt_columns(self) -> tuple[str, ...]:
        fields = _TEMPLATE_FIELD.findall(self.prompt)
        return tuple(fields) if fields else (self.prompt,)


@dataclass(frozen=True)
class FileSpec:
    format: FileFormat
    columns: ColumnMap
    mirror: str | None = None
    url: str | None = None
    hf: HFFile | None = None
    sha256: str | None = None
    size: int | None = None
    # Keep only rows whose column value is in the list, e.g. {FunctionalCategory: [standard]}.
    filter: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Extra output columns: output name -> source column (declared with a type in BenchmarkSpec.extras).
    keep: dict[str, str] = field(default_factory=dict)
    # Constant output values for this file, e.g. the risk area a per-area file stands for.
    constants: dict[str, str] = field(default_factory=dict)
    # A short tag stored in the `subset` column (AdvBench behaviors vs strings).
    subset: str | None = None
    # Format `dataset`: a Hugging Face dataset in place of a mirror file / URL.
    dataset: HFDataset | None = None

    def __post_init__(self) -> None:
        check_dataset_file(
            self.format,
            self.dataset,
            {"mirror": self.mirror, "url": self.url, "hf": self.hf, "sha256": self.sha256, "size": self.size},
        )
        if self.sha256 is not None and not _SHA256.fullmatch(self.sha256):
            raise ConfigError(f"sha256 must be 64 lowercase hex characters, got {self.sha256!r}")
        if self.url is not None and self.hf is not None:
            raise ConfigError("give either url or hf for a file, not both")
        if self.mirror is None and self.url is None and self.hf is None and self.dataset is None:
            raise ConfigError("a file needs at least one of mirror, url, hf, dataset")
        if self.url is not None and not re.match(r"^(https?|file)://", self.url):
            raise ConfigError(f"url must be http(s):// or file://, got {self.url!r}")
        bad = sorted(set(self.constants) - {"category"})
        if bad:
            raise ConfigError(f"constants may only set 'category', got {bad}")

    @property
    def display_name(self) -> str:
        if self.dataset is not None:
            return self.dataset.display_name
        return self.mirror or self.url or (self.hf.path if self.hf else "?")


@dataclass(frozen=True)
class SourceSpec:
    name: str
    provenance: Literal["original", "derived"]
    files: tuple[FileSpec, ...]
    note: str = ""

    def __post_init__(self) -> None:
        if not self.files:
            raise ConfigError(f"source {self.name!r} lists no files")
        if self.provenance == "derived" and not self.note:
            raise ConfigError(
                f"derived source {self.name!r} needs a note saying how it differs from the original"
            )


@dataclass(frozen=True)
class LabelSpec:
    """The benchmark's own gold label for each prompt."""

    kind: Literal["all_unsafe", "all_safe", "column"]
    unsafe_values: tuple[str, ...] = ()
    safe_values: tuple[str, ...] = ()
    # For a labelled benchmark, how many prompts are unsafe (checked by validation).
    expected_unsafe_rows: int | None = None

    def __post_init__(self) -> None:
        if self.kind == "column":
            if not self.unsafe_values or not self.safe_values:
                raise ConfigError("a column label needs both unsafe_values and safe_values")
            if set(self.unsafe_values) & set(self.safe_values):
                raise ConfigError("unsafe_values and safe_values overlap")
        elif self.unsafe_values or self.safe_values or self.expected_unsafe_rows is not None:
            raise ConfigError(f"label kind {self.kind!r} takes no values or expected_unsafe_rows")


@dataclass(frozen=True)
class BenchmarkSpec:
    name: str
    description: str
    license: str
    expected_rows: int
    label: LabelSpec
    sources: tuple[SourceSpec, ...]
    extras: dict[str, ExtraType] = field(default_factory=dict)
    transform: str | None = None

    def __post_init__(self) -> None:
        if self.expected_rows <= 0:
            raise ConfigError(f"expected_rows must be positive, got {self.expected_rows}")
        if self.transform is not None and self.transform not in KNOWN_TRANSFORMS:
            raise ConfigError(f"unknown transform {self.transform!r}; known: {list(KNOWN_TRANSFORMS)}")
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise ConfigError(f"source names must be unique, got {names}")
        for source in self.sources:
            for file in source.files:
                undeclared = sorted(set(file.keep) - set(self.extras))
                if undeclared:
                    raise ConfigError(
                        f"source {source.name!r} keeps {undeclared}, which are not declared in extras"
                    )
                if self.label.kind == "column" and file.columns.label is None:
                    raise ConfigError(f"source {source.name!r}: label kind 'column' needs columns.label")
        unsafe_rows = self.label.expected_unsafe_rows
        if unsafe_rows is not None and not 0 <= unsafe_rows <= self.expected_rows:
            raise ConfigError("label.expected_unsafe_rows must lie between 0 and expected_rows")

    def expected_unsafe_rows(self) -> int | None:
        if self.label.kind == "all_unsafe":
            return self.expected_rows
        if self.label.kind == "all_safe":
            return 0
        return self.label.expected_unsafe_rows


def parse_registry(data: object, where: str) -> dict[str, BenchmarkSpec]:
    if not isinstance(data, dict) or set(data) != {"benchmarks"}:
        raise ConfigError(f"{where}: expected a single top-level key 'benchmarks'")
    entries = data["benchmarks"]
    if not isinstance(entries, dict) or not entries:
        raise ConfigError(f"{where}: 'benchmarks' must be a non-empty mapping of name -> entry")
    registry = {}
    for name, entry in entries.items():
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ConfigError(f"{where}: benchmark name {name!r} must match {_NAME.pattern}")
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: benchmarks.{name}: expected a mapping")
        if "name" in entry:
            raise ConfigError(f"{where}: benchmarks.{name}: 'name' comes from the key and may not be set")
        registry[name] = from_mapping(
            BenchmarkSpec, {"name": name, **entry}, where=f"{where}: benchmarks.{name}"
        )
    return registry


def load_registry(path: str | Path) -> dict[str, BenchmarkSpec]:
    return parse_registry(load_yaml(path), str(path))

"""Typed configuration: params.yaml and the benchmark registry are validated strictly, with located errors."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.benchmarks import EXPECTED_ROWS, real_registry, write_params
from helpers.paths import REPO_ROOT

from guardpolicy.config import Params, ProfileConfig, load_params
from guardpolicy.data.registry import load_registry, parse_registry
from guardpolicy.errors import ConfigError

PARAMS = REPO_ROOT / "params.yaml"
REGISTRY = REPO_ROOT / "data" / "benchmarks.yaml"
PROFILES = ("default", "smoke", "paper")
HEX40 = re.compile(r"(?<![0-9a-f])[0-9a-f]{40}(?![0-9a-f])")


def _real_params() -> dict[str, Any]:
    return yaml.safe_load(PARAMS.read_text(encoding="utf-8"))


def _load_mutated(tmp_path: Path, mutate: Callable[[dict[str, Any]], Any]) -> Params:
    data = _real_params()
    mutate(data)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return load_params(path)


# --------------------------------------------------------------------------------------------- params.yaml


def test_real_params_validate() -> None:
    params = load_params(PARAMS)
    assert params.profile == "default"
    assert set(params.profiles) == set(PROFILES)
    assert params.active is params.profiles["default"]
    assert params.data.allow_download is True
    assert isinstance(params.data.download_timeout_s, float)
    for name, profile in params.profiles.items():
        assert isinstance(profile, ProfileConfig), name
        assert profile.seeds and all(isinstance(s, int) for s in profile.seeds)
        assert isinstance(profile.learning_rate, float)
    assert params.profiles["paper"].seeds == (42, 43, 44)
    assert params.profiles["default"].student.num_layers == 3
    assert params.profiles["smoke"].teacher.random_init is True
    assert params.profiles["smoke"].teacher.config_overrides["hidden_size"] == 32


@pytest.mark.parametrize("profile", PROFILES)
def test_each_profile_can_be_selected(tmp_path: Path, profile: str) -> None:
    params = load_params(write_params(tmp_path / "params.yaml", tmp_path / "mirror", profile=profile))
    assert params.profile == profile
    assert params.active is params.profiles[profile]
    assert params.active.description
    assert params.data.mirror_dir == str(tmp_path / "mirror")


def test_paper_profile_pins_hub_revisions(tmp_path: Path) -> None:
    paper = _load_mutated(tmp_path, lambda d: d.update(profile="paper")).active
    assert paper.precision == "bf16"
    for encoder in (paper.teacher, paper.student):
        assert encoder.name.startswith("answerdotai/")
        assert encoder.revision is not None and re.fullmatch(r"[0-9a-f]{40}", encoder.revision)


@pytest.mark.parametrize(
    ("mutate", "where", "key"),
    [
        (lambda d: d.update(colour="blue"), "params.yaml:", "colour"),
        (lambda d: d["data"].update(mirrordir="x"), "params.yaml.data:", "mirrordir"),
        (lambda d: d["profiles"]["smoke"].update(lr=0.1), "params.yaml.profiles.smoke:", "lr"),
        (
            lambda d: d["profiles"]["paper"]["teacher"].update(rev="x"),
            "params.yaml.profiles.paper.teacher:",
            "rev",
        ),
    ],
    ids=["top-level", "data", "profile", "encoder"],
)
def test_unknown_key_is_rejected(tmp_path: Path, mutate: Callable, where: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load_mutated(tmp_path, mutate)
    message = str(info.value)
    assert message.startswith(str(tmp_path / where))
    assert f"unknown key(s) ['{key}']" in message
    assert "allowed keys are" in message


@pytest.mark.parametrize(
    ("mutate", "path", "detail"),
    [
        (
            lambda d: d["profiles"]["smoke"].update(max_length="x"),
            "profiles.smoke.max_length",
            "expected an integer",
        ),
        (lambda d: d["profiles"]["smoke"].update(epochs=True), "profiles.smoke.epochs", "got bool True"),
        (
            lambda d: d["data"].update(allow_download=1),
            "data.allow_download",
            "expected true/false, got int 1",
        ),
        (
            lambda d: d["data"].update(download_timeout_s="60s"),
            "data.download_timeout_s",
            "expected a number",
        ),
        (lambda d: d["data"].update(download_timeout_s=True), "data.download_timeout_s", "got bool True"),
        (
            lambda d: d["profiles"]["default"].update(learning_rate="fast"),
            "profiles.default.learning_rate",
            "number",
        ),
        (
            lambda d: d["profiles"]["paper"].update(seeds=[42, "43"]),
            "profiles.paper.seeds[1]",
            "got str '43'",
        ),
        (lambda d: d["profiles"]["paper"].update(seeds=42), "profiles.paper.seeds", "expected a list"),
        (
            lambda d: d["profiles"]["paper"].update(precision="fp16"),
            "profiles.paper.precision",
            "must be one of",
        ),
        (
            lambda d: d["profiles"]["smoke"]["teacher"].update(random_init="yes"),
            "smoke.teacher.random_init",
            "true",
        ),
        (
            lambda d: d["profiles"]["default"]["student"].update(num_layers=True),
            "student.num_layers",
            "got bool",
        ),
        (lambda d: d.update(data=["x"]), "params.yaml.data", "expected a mapping"),
        (lambda d: d["profiles"]["paper"].pop("epochs"), "profiles.paper.epochs", "required key is missing"),
        (
            lambda d: d["profiles"]["default"].update(speed_probe_samples=100),
            "profiles.default",
            "speed_probe_samples must be 0 or between 256 and pool_size (6000), got 100",
        ),
        (
            lambda d: d["profiles"]["default"].update(speed_probe_samples=7000),
            "profiles.default",
            "got 7000",
        ),
    ],
    ids=[
        "str-for-int",
        "bool-for-int",
        "int-for-bool",
        "str-for-float",
        "bool-for-float",
        "str-for-lr",
        "str-in-seeds",
        "int-for-list",
        "bad-literal",
        "str-for-bool",
        "bool-for-optional-int",
        "list-for-section",
        "missing-key",
        "probe-too-small",
        "probe-above-pool",
    ],
)
def test_wrong_type_names_the_key_path(tmp_path: Path, mutate: Callable, path: str, detail: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load_mutated(tmp_path, mutate)
    message = str(info.value)
    assert f"{path}:" in message
    assert detail in message


def test_unknown_profile_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"'nope' is not one of the defined profiles \['default', 'paper', 'smoke'\]"
    ):
        _load_mutated(tmp_path, lambda d: d.update(profile="nope"))


@pytest.mark.parametrize("revision", [None, "main", "45bb4654", "45BB4654A4D5AAFF24DD11D4781FA46D39BF8C13"])
def test_hub_encoder_needs_a_pinned_revision(tmp_path: Path, revision: str | None) -> None:
    def mutate(d: dict[str, Any]) -> None:
        teacher = d["profiles"]["paper"]["teacher"]
        teacher.pop("revision")
        if revision is not None:
            teacher["revision"] = revision

    with pytest.raises(ConfigError, match=r"answerdotai/ModernBERT-large.*40-hex commit"):
        _load_mutated(tmp_path, mutate)


def test_random_init_hub_encoder_needs_no_revision() -> None:
    # The smoke profile builds hub architectures from config with random weights: no download, no pin needed.
    smoke = load_params(PARAMS).profiles["smoke"]
    assert smoke.teacher.revision is None and smoke.teacher.random_init


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda d: d["profiles"]["smoke"].update(pool_size=0), "pool_size must be positive"),
        (lambda d: d["profiles"]["smoke"].update(seeds=[]), "at least one seed"),
        (lambda d: d["profiles"]["smoke"].update(learning_rate=0), "learning_rate must be positive"),
        (lambda d: d["profiles"]["default"]["student"].update(num_layers=0), "num_layers must be positive"),
    ],
    ids=["pool_size", "seeds", "learning_rate", "num_layers"],
)
def test_out_of_range_values_are_rejected(tmp_path: Path, mutate: Callable, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _load_mutated(tmp_path, mutate)


def test_post_init_errors_name_the_key_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _load_mutated(tmp_path, lambda d: d["profiles"]["paper"]["teacher"].pop("revision"))
    assert "profiles.paper.teacher" in str(info.value)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (None, "file not found"),
        ("profile: [unclosed\n", "not valid YAML"),
        ("- a list\n", "expected a mapping"),
    ],
    ids=["missing-file", "bad-yaml", "not-a-mapping"],
)
def test_unreadable_params_file(tmp_path: Path, text: str | None, match: str) -> None:
    path = tmp_path / "params.yaml"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=match) as info:
        load_params(path)
    assert str(path) in str(info.value)


# ---------------------------------------------------------------------------------------------- registry


def test_real_registry_names_and_rows() -> None:
    registry = load_registry(REGISTRY)
    assert list(registry) == list(EXPECTED_ROWS)
    assert {name: spec.expected_rows for name, spec in registry.items()} == EXPECTED_ROWS
    assert all(spec.name == name for name, spec in registry.items())


def test_real_registry_labels() -> None:
    registry = load_registry(REGISTRY)
    safe = {name for name, spec in registry.items() if spec.label.kind == "all_safe"}
    assert safe == {"jbb_benign", "wildguard_benign", "orbench_hard"}
    xstest = registry["xstest"]
    assert xstest.label.kind == "column"
    assert xstest.expected_unsafe_rows() == 200
    assert xstest.transform == "xstest_pairs"
    assert registry["advbench"].expected_unsafe_rows() == 1094
    assert registry["orbench_hard"].expected_unsafe_rows() == 0


def test_real_registry_downloads_are_pinned_to_a_commit() -> None:
    registry = load_registry(REGISTRY)
    checked = 0
    for name, spec in registry.items():
        assert spec.sources[0].provenance == "original", name
        for source in spec.sources:
            assert source.provenance == "original" or source.note, (name, source.name)
            for file in source.files:
                assert file.mirror or file.url or file.hf, (name, source.name)
                if file.url is not None:
                    assert HEX40.search(file.url.split("://", 1)[1]), (name, file.url)
                    checked += 1
                if file.hf is not None:
                    assert re.fullmatch(r"[0-9a-f]{40}", file.hf.revision), (name, file.hf)
                    checked += 1
    assert checked >= 16


def test_real_registry_extras_and_keeps_agree() -> None:
    for name, spec in load_registry(REGISTRY).items():
        for source in spec.sources:
            for file in source.files:
                assert set(file.keep) <= set(spec.extras), (name, source.name)


def _minimal_entry() -> dict[str, Any]:
    return {
        "description": "a benchmark",
        "license": "MIT",
        "expected_rows": 3,
        "label": {"kind": "all_unsafe"},
        "extras": {"origin": "string"},
        "sources": [
            {
                "name": "upstream",
                "provenance": "original",
                "files": [
                    {
                        "format": "csv",
                        "mirror": "b/x.csv",
                        "url": "https://example.org/0123456789abcdef0123456789abcdef01234567/x.csv",
                        "sha256": "a" * 64,
                        "columns": {"prompt": "p", "category": "c"},
                        "keep": {"origin": "source"},
                    }
                ],
            }
        ],
    }


def _file0(entry: dict[str, Any]) -> dict[str, Any]:
    return entry["sources"][0]["files"][0]


def _hf_main(entry: dict[str, Any]) -> None:
    _file0(entry).pop("url")
    _file0(entry)["hf"] = {"repo": "org/data", "revision": "main", "path": "x.csv"}


def test_minimal_entry_parses() -> None:
    spec = parse_registry({"benchmarks": {"bench": _minimal_entry()}}, "reg.yaml")["bench"]
    assert spec.name == "bench"
    assert spec.sources[0].files[0].keep == {"origin": "source"}


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda e: e.update(homepage="x"), r"reg\.yaml: benchmarks\.bench: unknown key\(s\) \['homepage'\]"),
        (lambda e: _file0(e).update(sha256="abc123"), "sha256 must be 64 lowercase hex"),
        (lambda e: _file0(e).update(sha256="A" * 64), "sha256 must be 64 lowercase hex"),
        (_hf_main, "revision must be a 40-hex commit sha.*'main'"),
        (
            lambda e: e.update(label={"kind": "column"}),
            "column label needs both unsafe_values and safe_values",
        ),
        (
            lambda e: _file0(e).update(keep={"undeclared": "source"}),
            r"keeps \['undeclared'\].*not declared in extras",
        ),
        (lambda e: e["sources"][0].update(provenance="derived"), "derived source 'upstream' needs a note"),
        (lambda e: e.update(transform="shuffle"), "unknown transform 'shuffle'"),
        (lambda e: e.update(name="bench"), "'name' comes from the key and may not be set"),
        (lambda e: _file0(e).update(format="xlsx"), r"files\[0\]\.format: must be one of"),
        (lambda e: _file0(e).update(url="ftp://example.org/x.csv"), "url must be http"),
        (lambda e: e.update(expected_rows=0), "expected_rows must be positive"),
        (lambda e: _file0(e)["columns"].update(lbl="x"), r"columns: unknown key\(s\) \['lbl'\]"),
        (lambda e: _file0(e).update(constants={"subset": "x"}), "constants may only set 'category'"),
    ],
    ids=[
        "unknown-key",
        "bad-sha256",
        "uppercase-sha256",
        "hf-revision-main",
        "column-label-without-values",
        "keep-undeclared-extra",
        "derived-without-note",
        "unknown-transform",
        "sets-name",
        "unknown-format",
        "ftp-url",
        "zero-rows",
        "unknown-column-key",
        "bad-constant",
    ],
)
def test_registry_rejections(mutate: Callable, match: str) -> None:
    entry = _minimal_entry()
    mutate(entry)
    with pytest.raises(ConfigError, match=match):
        parse_registry({"benchmarks": {"bench": entry}}, "reg.yaml")


def test_registry_post_init_errors_name_the_entry() -> None:
    entry = _minimal_entry()
    _file0(entry)["sha256"] = "abc123"
    with pytest.raises(ConfigError) as info:
        parse_registry({"benchmarks": {"bench": entry}}, "reg.yaml")
    assert "reg.yaml: benchmarks.bench.sources[0].files[0]" in str(info.value)


def test_column_label_needs_a_label_column() -> None:
    entry = _minimal_entry()
    entry["label"] = {"kind": "column", "unsafe_values": ["unsafe"], "safe_values": ["safe"]}
    with pytest.raises(ConfigError, match=r"label kind 'column' needs columns\.label"):
        parse_registry({"benchmarks": {"bench": entry}}, "reg.yaml")
    _file0(entry)["columns"]["label"] = "label"
    assert (
        parse_registry({"benchmarks": {"bench": entry}}, "reg.yaml")["bench"].expected_unsafe_rows() is None
    )


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"benchmarks": {}}, "non-empty mapping"),
        ({"benchmarks": {"b": _minimal_entry()}, "extra": 1}, "single top-level key 'benchmarks'"),
        ({"benchmarks": {"Bad-Name": _minimal_entry()}}, "benchmark name 'Bad-Name' must match"),
        ({"benchmarks": {"b": ["not", "a", "mapping"]}}, r"benchmarks\.b: expected a mapping"),
    ],
    ids=["empty", "extra-top-level", "bad-name", "entry-not-mapping"],
)
def test_registry_shape_rejections(data: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_registry(data, "reg.yaml")


def test_real_registry_copy_round_trips(tmp_path: Path) -> None:
    data = copy.deepcopy(real_registry())
    path = tmp_path / "benchmarks.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    assert list(load_registry(path)) == list(EXPECTED_ROWS)

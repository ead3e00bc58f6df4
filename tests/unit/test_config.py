"""Typed configuration: params.yaml and the benchmark registry are validated strictly, with located errors."""

from __future__ import annotations

import copy
import dataclasses
import re
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.benchmarks import EXPECTED_ROWS, real_registry, write_params
from helpers.paths import REPO_ROOT

from guardpolicy.config.baselines import BASELINES
from guardpolicy.config.core import ParamsFile, load_section
from guardpolicy.config.params import SECTIONS, Params, load_params
from guardpolicy.config.pool import POOL
from guardpolicy.config.profiles import PROFILES as PROFILES_SECTION
from guardpolicy.config.profiles import ProfileConfig, active_profile
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
        # One main seed per profile; the noise floor's further seeds are noise_floor.seeds.
        assert profile.seed == 42
        assert isinstance(profile.learning_rate, float)
    assert params.noise_floor.seeds == (43, 44)
    assert params.scales == {"small": "small_encoder", "large": "large_encoder"}
    assert params.profiles["default"].small_encoder.num_layers == 3
    assert params.profiles["smoke"].large_encoder.random_init is True
    assert params.profiles["smoke"].large_encoder.config_overrides["hidden_size"] == 32


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
    for encoder in (paper.large_encoder, paper.small_encoder):
        assert encoder.name.startswith("answerdotai/")
        assert encoder.revision is not None and re.fullmatch(r"[0-9a-f]{40}", encoder.revision)


@pytest.mark.parametrize(
    ("mutate", "where", "key"),
    [
        (lambda d: d.update(colour="blue"), "params.yaml:", "colour"),
        (lambda d: d["data"].update(mirrordir="x"), "params.yaml.data:", "mirrordir"),
        (lambda d: d["profiles"]["smoke"].update(lr=0.1), "params.yaml.profiles.smoke:", "lr"),
        (
            lambda d: d["profiles"]["paper"]["large_encoder"].update(rev="x"),
            "params.yaml.profiles.paper.large_encoder:",
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
        (lambda d: d["profiles"]["paper"].update(seed="43"), "profiles.paper.seed", "got str '43'"),
        (
            lambda d: d["profiles"]["paper"].update(seed=[42]),
            "profiles.paper.seed",
            "expected an integer, got list",
        ),
        (
            lambda d: d["profiles"]["paper"].update(precision="fp16"),
            "profiles.paper.precision",
            "must be one of",
        ),
        (
            lambda d: d["training"].update(feature_cache_dtype="fp16"),
            "training.feature_cache_dtype",
            "must be one of ['float16', 'bfloat16', 'float32'], got 'fp16'",
        ),
        (
            lambda d: d["training"].update(attn_implementation="flash"),
            "training.attn_implementation",
            "must be one of ['sdpa', 'eager', 'flash_attention_2'], got 'flash'",
        ),
        (
            lambda d: d["profiles"]["smoke"]["large_encoder"].update(random_init="yes"),
            "smoke.large_encoder.random_init",
            "true",
        ),
        (
            lambda d: d["profiles"]["default"]["small_encoder"].update(num_layers=True),
            "small_encoder.num_layers",
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
        "str-for-seed",
        "list-for-seed",
        "bad-literal",
        "bad-cache-dtype",
        "bad-attention",
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
        encoder = d["profiles"]["paper"]["large_encoder"]
        encoder.pop("revision")
        if revision is not None:
            encoder["revision"] = revision

    with pytest.raises(ConfigError, match=r"answerdotai/ModernBERT-large.*40-hex commit"):
        _load_mutated(tmp_path, mutate)


def test_random_init_hub_encoder_needs_no_revision() -> None:
    # The smoke profile builds hub architectures from config with random weights: no download, no pin needed.
    smoke = load_params(PARAMS).profiles["smoke"]
    assert smoke.large_encoder.revision is None and smoke.large_encoder.random_init


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda d: d["profiles"]["smoke"].update(pool_size=0), "pool_size must be positive"),
        (lambda d: d["profiles"]["smoke"].update(learning_rate=0), "learning_rate must be positive"),
        (
            lambda d: d["profiles"]["default"]["small_encoder"].update(num_layers=0),
            "num_layers must be positive",
        ),
    ],
    ids=["pool_size", "learning_rate", "num_layers"],
)
def test_out_of_range_values_are_rejected(tmp_path: Path, mutate: Callable, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _load_mutated(tmp_path, mutate)


def test_post_init_errors_name_the_key_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _load_mutated(tmp_path, lambda d: d["profiles"]["paper"]["large_encoder"].pop("revision"))
    assert "profiles.paper.large_encoder" in str(info.value)


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


# ------------------------------------------------------------------------------------------ section loaders


def _write_mutated(tmp_path: Path, mutate: Callable[[dict[str, Any]], Any]) -> Path:
    data = _real_params()
    mutate(data)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_params_has_one_field_per_section() -> None:
    fields = Params.__dataclass_fields__
    assert [section.key for section in SECTIONS] == list(fields)
    assert list(_real_params()) == list(fields)  # params.yaml lists every section, in this order
    for section in SECTIONS:
        assert (section.default is None) == (fields[section.key].default_factory is dataclasses.MISSING), (
            section.key
        )


@pytest.mark.parametrize("section", SECTIONS, ids=[s.key for s in SECTIONS])
def test_each_section_loader_agrees_with_the_whole_file(section: Any) -> None:
    assert load_section(PARAMS, section) == getattr(load_params(PARAMS), section.key)


def test_an_absent_optional_section_takes_its_default_and_a_required_one_is_named(tmp_path: Path) -> None:
    path = _write_mutated(tmp_path, lambda d: [d.pop("pool"), d.pop("profiles")])
    assert load_section(path, POOL) == POOL.default()
    with pytest.raises(ConfigError, match=r"params\.yaml\.profiles: required key is missing"):
        load_section(path, PROFILES_SECTION)


def test_a_section_loader_is_strict_inside_its_section(tmp_path: Path) -> None:
    path = _write_mutated(tmp_path, lambda d: d["baselines"].update(guards={"x": {"foo": 1}}))
    with pytest.raises(ConfigError) as info:
        load_section(path, BASELINES)
    assert str(info.value).startswith(f"{path}.baselines.guards.x: unknown key(s) ['foo']")
    with pytest.raises(ConfigError, match=r"params\.yaml\.pool\.seed: expected an integer"):
        load_section(_write_mutated(tmp_path, lambda d: d["pool"].update(seed="13")), POOL)


def test_a_typo_in_one_section_stops_only_its_readers_and_the_whole_file_check(tmp_path: Path) -> None:
    """A stage's loader parses only the sections it reads: an unknown key in `baselines` (or an unknown
    top-level key) does not stop a reader of `pool` or of the profile. The whole-file check (`load_params`:
    `guardpolicy params`, `guardpolicy plan`, and the preconditions every stage runs under DVC,
    guardpolicy.dvcdeps and guardpolicy.preconditions) still rejects it, naming the full key path."""
    path = _write_mutated(
        tmp_path, lambda d: [d["baselines"]["guards"].update(x={"foo": 1}), d.update(colour="blue")]
    )
    params = ParamsFile.read(path)
    assert params.load(POOL) == load_params(PARAMS).pool
    assert active_profile(params) == ("default", load_params(PARAMS).active)
    with pytest.raises(ConfigError, match=r"baselines\.guards\.x: unknown key\(s\) \['foo'\]"):
        params.load(BASELINES)
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['colour'\]"):
        load_params(path)
    del_colour = _write_mutated(tmp_path, lambda d: d["baselines"]["guards"].update(x={"foo": 1}))
    with pytest.raises(ConfigError, match=r"params\.yaml\.baselines\.guards\.x: unknown key\(s\) \['foo'\]"):
        load_params(del_colour)


def test_active_profile_names_an_unknown_profile(tmp_path: Path) -> None:
    path = _write_mutated(tmp_path, lambda d: d.update(profile="nope"))
    with pytest.raises(ConfigError) as info:
        active_profile(ParamsFile.read(path))
    assert str(info.value) == (
        f"{path}: profile: 'nope' is not one of the defined profiles ['default', 'paper', 'smoke']"
    )


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ("data", "min_present_benchmarks"),
        ("agreement", "binary_band"),
        ("noise_floor", "branches"),
        ("noise_floor", "scales"),
        ("analysis", "rank_direction"),
        ("analysis", "primary_view"),
        ("profiles.default", "truncation"),
        ("profiles.default", "truncation_head_tokens"),
        ("profiles.default", "speed_probe_samples"),
    ],
)
def test_keys_whose_default_disagreed_with_params_yaml_are_required(
    tmp_path: Path, section: str, key: str
) -> None:
    def drop(d: dict[str, Any]) -> None:
        entry = d
        for part in section.split("."):
            entry = entry[part]
        entry.pop(key)

    with pytest.raises(
        ConfigError, match=rf"params\.yaml\.{re.escape(section)}\.{key}: required key is missing"
    ):
        _load_mutated(tmp_path, drop)


def _plain(value: Any) -> Any:
    """Tuples as lists, recursively: how params.yaml spells them."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _defaults_against(cls: Any, value: Any, where: str) -> list[str]:
    """Every field of `cls` (and of its nested sections, not of named entries) with a default that differs
    from the value `value` (params.yaml's) gives it."""
    found = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not isinstance(value, dict) or f.name not in value:
            continue
        given = value[f.name]
        if dataclasses.is_dataclass(hints[f.name]):
            # A nested section (audit.normalise, analysis.load) has a default; a required one is an entry of
            # its own (an encoder entry of a profile), whose optional settings are not defaults.
            if f.default_factory is not dataclasses.MISSING:
                found += _defaults_against(hints[f.name], given, f"{where}.{f.name}")
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            continue
        default = _plain(default)
        if dataclasses.is_dataclass(default) or (isinstance(default, dict) and not default):
            continue  # a nested section (walked above) or a registry of named entries (none by default)
        if default != given:
            found.append(f"{where}.{f.name}: default {default!r}, params.yaml {given!r}")
    return found


def test_no_dataclass_default_disagrees_with_params_yaml() -> None:
    """Defaults live in one place: a setting params.yaml gives has either no dataclass default or the same
    one. (Named entries - profiles, policies, branches, ... - and their optional settings are not
    defaults.)"""
    data = _real_params()
    found = []
    for section in SECTIONS:
        schema = section.schema
        if dataclasses.is_dataclass(schema):
            found += _defaults_against(schema, data[section.key], section.key)
        elif typing.get_origin(schema) is dict and dataclasses.is_dataclass(typing.get_args(schema)[1]):
            entry_type = typing.get_args(schema)[1]
            for name, entry in data[section.key].items():
                # Only an entry's settings that every entry gives are defaults that could disagree.
                shared = set.intersection(*(set(e) for e in data[section.key].values()))
                found += _defaults_against(
                    entry_type, {k: v for k, v in entry.items() if k in shared}, f"{section.key}.{name}"
                )
    assert not found, "\n".join(found)


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

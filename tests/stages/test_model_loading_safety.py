"""Pickle weights and remote code: a model folder with only ``pytorch_model.bin`` is refused before anything
is read, with the folder, the entry and the file that can allow it in one line (exit status 2, no output, no
cache); `allow_pickle: true` on that entry loads it; our own guard checkpoints are safetensors only; a model
that needs its own Python code is refused unless its entry says `trust_remote_code: true`, and that code
never runs. Every model here is a tiny one built from a config (helpers.tiny_guards, helpers.encoders)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from helpers.baseline_workspace import N_ITEMS, read_outputs, register_classifier, set_baselines
from helpers.benchmarks import write_params
from helpers.encoders import tiny_guard
from helpers.layout import repo_layout
from helpers.tiny_guards import CLASSIFIER_LABEL_MAP, CLASSIFIER_PROMPTS, build_tiny_classifier
from safetensors.torch import load_file

from guardpolicy.baselines.adapters import EncoderClassifierAdapter
from guardpolicy.baselines.backends.causal_lm import TransformersBackend
from guardpolicy.baselines.backends.classifier import SequenceClassifierBackend
from guardpolicy.baselines.backends.local import LoadPolicy
from guardpolicy.baselines.base import Decoding
from guardpolicy.baselines.registry import load_baseline_registry
from guardpolicy.config.encoders import EncoderConfig
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.modeling.backbone import load_backbone
from guardpolicy.modeling.guard import load_guard, save_guard
from guardpolicy.modeling.weights import PickleWeightsRefused, RemoteCodeRefused
from guardpolicy.runner import EXIT_BAD_INPUT, guarded
from guardpolicy.stages.backbone import backbone
from guardpolicy.stages.baselines import baseline

REFUSAL = (
    "{folder}: only pickle weights (pytorch_model.bin), no safetensors; unpickling can run arbitrary code, "
    "so pickle weights are refused by default: set allow_pickle: true on entry {entry} in {file} to load it"
)


def pickle_only_copy(folder: Path, destination: Path) -> Path:
    """`folder` with its model.safetensors replaced by the same tensors as a torch.save pickle."""
    shutil.copytree(folder, destination)
    torch.save(load_file(destination / "model.safetensors"), destination / "pytorch_model.bin")
    (destination / "model.safetensors").unlink()
    return destination


@pytest.fixture
def no_unpickling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything calls torch.load (what unpickles a .bin)."""

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"torch.load called on {args[:1]}")

    monkeypatch.setattr(torch, "load", forbidden)


def _errors(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]


# ------------------------------------------------------------------------------------- open guard baselines


def test_a_pickle_only_classifier_is_refused_before_anything_is_read(
    classifier_dir: Path, tmp_path: Path, no_unpickling: None
) -> None:
    folder = pickle_only_copy(classifier_dir, tmp_path / "pickled")
    policy = LoadPolicy(entry="prompt_guard_86m", entry_file="data/baselines.yaml")
    with pytest.raises(PickleWeightsRefused) as caught:
        SequenceClassifierBackend(folder, "local-test", dtype="fp32", policy=policy)
    assert str(caught.value) == REFUSAL.format(
        folder=folder, entry="prompt_guard_86m", file="data/baselines.yaml"
    )
    # A generative guard's folder the same way, before its tokenizer is loaded.
    with pytest.raises(PickleWeightsRefused, match=r"set allow_pickle: true on entry guards\.<name>"):
        TransformersBackend(folder, dtype="fp32")


def test_allow_pickle_on_the_entry_loads_the_same_model(classifier_dir: Path, tmp_path: Path) -> None:
    folder = pickle_only_copy(classifier_dir, tmp_path / "pickled")
    adapter = EncoderClassifierAdapter(label_map=CLASSIFIER_LABEL_MAP)
    allowed = SequenceClassifierBackend(
        folder, "local-test", dtype="fp32", policy=LoadPolicy(allow_pickle=True, entry="pg")
    )
    original = SequenceClassifierBackend(classifier_dir, "local-test", dtype="fp32")
    for mine, theirs in zip(
        allowed.generate(adapter, CLASSIFIER_PROMPTS, Decoding()),
        original.generate(adapter, CLASSIFIER_PROMPTS, Decoding()),
        strict=True,
    ):
        assert mine.text == theirs.text
        assert list(mine.decision_logprobs.values()) == pytest.approx(list(theirs.decision_logprobs.values()))


def _register_classifier(workspace: Path, folder: str, **flags: bool) -> Path:
    registry_file = register_classifier(workspace, "pickled", CLASSIFIER_LABEL_MAP, **flags)
    set_baselines(workspace, {"pickled": {"backend": "transformers", "model": folder, "dtype": "fp32"}})
    return registry_file


def test_the_baseline_stage_refuses_a_pickle_only_guard_with_exit_2_and_writes_nothing(
    baseline_workspace: Path,
    classifier_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pickle_only_copy(classifier_dir, baseline_workspace / "models" / "pickled")
    _register_classifier(baseline_workspace, "models/pickled")
    with monkeypatch.context() as patched:
        patched.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was called"))
        with pytest.raises(SystemExit) as exited:
            guarded(baseline)("pickled")
    assert exited.value.code == EXIT_BAD_INPUT
    expected = REFUSAL.format(folder="models/pickled", entry="pickled", file="data/baselines.yaml")
    assert _errors(capsys) == [f"error: {expected}"]
    assert not (baseline_workspace / "reports").exists() and not (baseline_workspace / "cache").exists()

    # The flag on that entry, and nothing else, lets the same run through.
    _register_classifier(baseline_workspace, "models/pickled", allow_pickle=True)
    baseline("pickled")
    table, metrics, _ = read_outputs(baseline_workspace, "pickled")
    assert table.num_rows == N_ITEMS and metrics["parse"]["ok"] == N_ITEMS


def test_registry_flags_are_typed_and_default_to_false(
    baseline_workspace: Path, classifier_dir: Path
) -> None:
    registry_file = _register_classifier(baseline_workspace, str(classifier_dir))
    spec = load_baseline_registry(registry_file)["pickled"]
    assert spec.allow_pickle is False and spec.trust_remote_code is False
    _register_classifier(baseline_workspace, str(classifier_dir), allow_pickle="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"guards\.pickled\.allow_pickle: expected true/false"):
        load_baseline_registry(registry_file)


# ------------------------------------------------------------------------------------------------ backbones


def _params_with_small_encoder(tmp_path: Path, encoder: dict[str, object]) -> Path:
    path = write_params(tmp_path / "params.yaml", tmp_path / "mirror")
    params = yaml.safe_load(path.read_text(encoding="utf-8"))
    params["profiles"][params["profile"]]["small_encoder"] = encoder
    path.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    return path


def test_a_pickle_only_backbone_is_refused_naming_its_params_entry(
    classifier_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = pickle_only_copy(classifier_dir, tmp_path / "encoder")
    params_file = _params_with_small_encoder(tmp_path, {"name": str(folder)})
    models = tmp_path / "models"
    with monkeypatch.context() as patched:
        patched.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was called"))
        with pytest.raises(SystemExit) as exited:
            guarded(backbone)("small", repo_layout(tmp_path))
    assert exited.value.code == EXIT_BAD_INPUT
    expected = REFUSAL.format(folder=folder, entry="profiles.smoke.small_encoder", file=params_file)
    assert _errors(capsys) == [f"error: {expected}"]
    assert not models.exists()

    _params_with_small_encoder(tmp_path, {"name": str(folder), "allow_pickle": True})
    card = backbone("small", repo_layout(tmp_path))
    written = models / "small-pretrained"
    # Loaded once from the pickle with permission; what we write is safetensors, as always.
    assert (written / "model.safetensors").is_file() and not (written / "pytorch_model.bin").exists()
    assert card["params"]["encoder"]["allow_pickle"] is True


def test_a_backbone_folder_with_safetensors_needs_no_flag(tmp_path: Path) -> None:
    folder = build_tiny_classifier(tmp_path / "encoder")
    (folder / "training_args.bin").write_bytes(b"not loaded")  # a pickle beside the weights is ignored
    model, _ = load_backbone(EncoderConfig(name=str(folder)))
    assert model.config.model_type == "bert"


# --------------------------------------------------------------------------------------------- our guards


def test_our_guard_checkpoints_are_read_as_safetensors_only(tmp_path: Path, no_unpickling: None) -> None:
    model, tokenizer = tiny_guard(seed=1)
    save_guard(model, tokenizer, tmp_path / "guard")
    loaded, _ = load_guard(tmp_path / "guard")
    assert loaded.config.model_type == "guardpolicy-guard"
    pickled = tmp_path / "pickled"
    shutil.copytree(tmp_path / "guard", pickled)
    (pickled / "pytorch_model.bin").write_bytes(b"never unpickled")
    (pickled / "model.safetensors").unlink()
    with pytest.raises(InputError) as caught:
        load_guard(pickled)
    assert str(caught.value) == (
        f"{pickled}: not a guard checkpoint: only pickle weights (pytorch_model.bin), no model.safetensors; "
        "guard checkpoints are written as safetensors by this project and pickle files are never loaded"
    )


# ------------------------------------------------------------------------------------------------ own code


def _custom_code_folder(folder: Path, marker: Path) -> Path:
    """A model folder whose config needs the folder's own Python module; importing it creates `marker`."""
    folder.mkdir(parents=True)
    config = {"model_type": "mystery", "auto_map": {"AutoConfig": "configuration_mystery.MysteryConfig"}}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "configuration_mystery.py").write_text(
        "from pathlib import Path\n"
        "from transformers import PretrainedConfig\n"
        f"Path({str(marker)!r}).write_text('ran')\n"
        "class MysteryConfig(PretrainedConfig):\n"
        "    model_type = 'mystery'\n"
    )
    return folder


def test_a_models_own_code_is_never_run_without_the_entry_flag(tmp_path: Path) -> None:
    marker = tmp_path / "code_ran"
    folder = _custom_code_folder(tmp_path / "mystery", marker)
    with pytest.raises(RemoteCodeRefused) as caught:
        SequenceClassifierBackend(folder, "local-test", dtype="fp32", policy=LoadPolicy(entry="pg"))
    assert str(caught.value) == (
        f"{folder}: the model needs its own Python code, which is never run unless its entry allows it: set "
        "trust_remote_code: true on entry pg in data/baselines.yaml to run it (only for code you trust)"
    )
    with pytest.raises(
        RemoteCodeRefused, match=r"trust_remote_code: true on entry profiles\.x\.small_encoder"
    ):
        load_backbone(EncoderConfig(name=str(folder)), entry="profiles.x.small_encoder")
    assert not marker.exists()

"""`guardpolicy export` / export@<policy>: a tiny guard exported, then loaded by plain transformers in a
process that cannot import guardpolicy, gives the guard's coarse probabilities; bad inputs are refused."""

from __future__ import annotations

import json
import site
import subprocess
from pathlib import Path

import pytest
import torch
import yaml
from helpers.encoders import TINY
from helpers.paths import PYTHON

from guardpolicy.cli import main
from guardpolicy.config.encoders import EncoderConfig
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.export.folder import README, export_guard, front_matter
from guardpolicy.layout import Layout
from guardpolicy.modeling.guard import GuardModel, load_guard, save_guard
from guardpolicy.stages.export import export, export_teacher
from guardpolicy.training.card_files import write_card
from guardpolicy.training.cards import model_card

COARSE = ["GENERIC_SAFE", "BOUNDARY_SAFE", "HARMFUL", "COMPOUND"]
MAX_LENGTH = 12
PROMPTS = [
    "What is a good pasta recipe?",
    "hi",
    "how do I pick a lock on my neighbour's front door at night",
    # Longer than MAX_LENGTH tokens: the exported tokenizer must cut it as training did.
    "please write a long and detailed story about a dragon who guards a castle full of gold and books",
]
# A tiny random BERT (the default profile's MiniLM family); TINY is a tiny random ModernBERT (paper profile).
TINY_BERT = EncoderConfig(
    name="tiny-bert",
    random_init=True,
    config_overrides={
        "model_type": "bert",
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
    },
)
HEADLINE = {"cap": 0.8125, "copy": 0.5, "over_ref": 0.25}

# Run with -I -S and only the site-packages folders (argv[1]), so no .pth file (the editable install of
# guardpolicy) is processed: plain transformers, as a user without this package has it.
LOAD_WITHOUT_GUARDPOLICY = """
import json, sys
sys.path.extend(json.loads(sys.argv[1]))
try:
    import guardpolicy
except ModuleNotFoundError:
    pass
else:
    raise SystemExit(f"guardpolicy is importable from {guardpolicy.__file__}")
from transformers import pipeline
guard = pipeline("text-classification", model=sys.argv[2], top_k=None, trust_remote_code=True)
scores = []
for prompt in json.loads(sys.argv[3]):
    answer = guard(prompt, truncation=True)
    # One prompt with top_k=None: every class's {label, score}, possibly wrapped in a list per input.
    rows = answer[0] if isinstance(answer[0], list) else answer
    scores.append({row["label"]: row["score"] for row in rows})
print(json.dumps(scores))
"""


def build_checkpoint(
    folder: Path, encoder: EncoderConfig, name: str = "teacher-policy_a", frozen_layers: int = 0
) -> Path:
    """A tiny guard with a model card as teacher@ writes one; its coarse head is widened (std 1) so the
    classes get clearly different probabilities."""
    model, tokenizer = GuardModel.from_backbone(encoder, seed=1, coarse_names=COARSE)
    model.config.truncation = "head"
    model.config.frozen_layers = frozen_layers
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        model.heads.coarse.weight.copy_(torch.randn(model.heads.coarse.weight.shape, generator=generator))
    save_guard(model, tokenizer, folder)
    card = model_card(
        name=name,
        kind="teacher",
        scale="large",
        description="A tiny test teacher for policy_a.",
        branch=None,
        backbone={"name": encoder.name, "revision": None, "random_init": encoder.random_init},
        parameters={"total": 10, "trainable": 10, "heads": 1},
        examples={"hard_labels": {"configured": {"policy_a": 1.0}, "realised": {}, "rows": {}}},
        teacher=None,
        init={"from": "pretrained", "dir": "models/large-pretrained", "card": None},
        data={"data/labels/policy_a.parquet": "ab" * 32},
        seed=42,
        params={},
        recipe={"max_length": MAX_LENGTH},
        training=None,
        environment={},
        run={},
    )
    write_card(folder, card)
    return folder


def write_metrics(path: Path, model: str = "teacher-policy_a") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"model": model, "headline": HEADLINE, "benchmarks": {}}), encoding="utf-8")
    return path


def guard_probabilities(checkpoint: Path, prompts: list[str]) -> list[dict[str, float]]:
    """Our model's softmax over its coarse logits, each prompt cut to MAX_LENGTH tokens as trained."""
    guard, tokenizer = load_guard(checkpoint)
    rows = []
    with torch.inference_mode():
        for prompt in prompts:
            encoded = tokenizer(prompt, truncation=True, max_length=MAX_LENGTH, return_tensors="pt")
            logits = guard(encoded["input_ids"], encoded["attention_mask"]).coarse_logits
            rows.append(dict(zip(COARSE, torch.softmax(logits, -1)[0].tolist(), strict=True)))
    return rows


def site_packages_without_guardpolicy() -> list[str]:
    folders = [*site.getsitepackages(), site.getusersitepackages()]
    return [f for f in folders if Path(f).is_dir() and not (Path(f) / "guardpolicy").exists()]


@pytest.mark.parametrize("encoder", [TINY_BERT, TINY], ids=["bert", "modernbert"])
def test_exported_folder_loads_without_guardpolicy_and_gives_the_guards_probabilities(
    tmp_path: Path, encoder: EncoderConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = build_checkpoint(tmp_path / "guard", encoder)
    metrics = write_metrics(tmp_path / "metrics.json")
    target = tmp_path / "exported"
    # Through the command line, a checkpoint folder given by path.
    main(["export", str(checkpoint), str(target), "--metrics", str(metrics), "--license", "apache-2.0"])
    capsys.readouterr()
    assert {"config.json", "model.safetensors", "tokenizer.json", README, "modeling_guardpolicy.py"} <= {
        p.name for p in target.iterdir()
    }
    config = json.loads((target / "config.json").read_text())
    assert config["id2label"] == {str(i): name for i, name in enumerate(COARSE)}
    assert config["label2id"] == {name: i for i, name in enumerate(COARSE)}

    result = subprocess.run(
        [
            str(PYTHON),
            "-I",
            "-S",
            "-c",
            LOAD_WITHOUT_GUARDPOLICY,
            json.dumps(site_packages_without_guardpolicy()),
            str(target),
            json.dumps(PROMPTS),
        ],
        capture_output=True,
        text=True,
        env={"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    exported = json.loads(result.stdout.strip().splitlines()[-1])
    ours = guard_probabilities(checkpoint, PROMPTS)
    for prompt, theirs, mine in zip(PROMPTS, exported, ours, strict=True):
        assert set(theirs) == set(COARSE)
        # Distinct classes: a comparison of near-uniform outputs would prove little.
        assert max(mine.values()) - min(mine.values()) > 0.05, prompt
        for label in COARSE:
            assert abs(theirs[label] - mine[label]) <= 1e-5, (prompt, label, theirs[label], mine[label])

    card = (target / README).read_text(encoding="utf-8")
    meta = front_matter(card)
    assert meta["pipeline_tag"] == "text-classification"
    assert meta["license"] == "apache-2.0"
    assert meta["guardpolicy"]["policies"] == ["policy_a"]
    assert meta["guardpolicy"]["metrics"]["headline"] == HEADLINE
    assert meta["guardpolicy"]["data"] == {"data/labels/policy_a.parquet": "ab" * 32}
    assert "base_model" not in meta  # "tiny-bert" / a random ModernBERT stand-in: not a hub model id


def plan_layout(root: Path) -> Layout:
    """A repository-shaped folder with a plan naming both teachers, and teacher-policy_a's checkpoint."""
    layout = Layout(root)
    plan = {
        "evaluations": {
            f"teacher-{policy}": {"model_dir": f"models/teacher-{policy}", "kind": "teacher"}
            for policy in ("policy_a", "policy_b")
        }
    }
    layout.path("plan").parent.mkdir(parents=True)
    layout.path("plan").write_text(yaml.safe_dump(plan), encoding="utf-8")
    build_checkpoint(layout.path("model", model="teacher-policy_a"), TINY_BERT, frozen_layers=1)
    return layout


def test_export_stage_writes_the_teacher_with_its_metrics_into_the_layout(tmp_path: Path) -> None:
    layout = plan_layout(tmp_path)
    write_metrics(layout.path("eval_metrics", model="teacher-policy_a"))
    result = export_teacher("policy_a", layout=layout)
    target = layout.path("export", model="teacher-policy_a")
    assert result["target"] == str(target)
    assert result["max_probability_difference"] <= 1e-6
    assert json.loads((target / "eval_metrics.json").read_text())["headline"] == HEADLINE
    readme = (target / README).read_text(encoding="utf-8")
    assert front_matter(readme)["guardpolicy"]["model"] == "teacher-policy_a"
    # Evaluated through the float16 prefix cache (frozen layers): the card says the export runs float32.
    assert "float16" in readme
    # The stage owns its output: a second run replaces it.
    export_teacher("policy_a", layout=layout)
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")]


def test_bad_inputs_are_refused_and_nothing_is_written(tmp_path: Path, classifier_dir: Path) -> None:
    layout = plan_layout(tmp_path)
    checkpoint = layout.path("model", model="teacher-policy_a")
    with pytest.raises(InputError, match="model checkpoint folder not found"):
        export_guard(tmp_path / "missing", tmp_path / "out", metrics_file=None)
    with pytest.raises(InputError, match="not a guard checkpoint: model_type 'bert'"):
        export_guard(classifier_dir, tmp_path / "out", metrics_file=None)
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match="exists and is not empty"):
        export_guard(checkpoint, occupied, metrics_file=None)
    assert [p.name for p in occupied.iterdir()] == ["keep.txt"]
    with pytest.raises(InputError, match="evaluation metrics not found"):
        export_guard(checkpoint, tmp_path / "out", metrics_file=tmp_path / "no-metrics.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    with pytest.raises(InputError, match="not valid JSON"):
        export_guard(checkpoint, tmp_path / "out", metrics_file=broken)
    other = write_metrics(tmp_path / "other.json", model="small-E2")
    with pytest.raises(InputError, match="metrics of model 'small-E2'"):
        export_guard(checkpoint, tmp_path / "out", metrics_file=other)
    # A plan model's metrics are required unless the user opts out explicitly.
    with pytest.raises(InputError, match="--without_metrics"):
        export("teacher-policy_a", str(tmp_path / "out"), layout=layout)
    with pytest.raises(ConfigError, match="no model 'teacher-policy_c'"):
        export("teacher-policy_c", str(tmp_path / "out"), layout=layout)
    assert not (tmp_path / "out").exists()
    without_card = tmp_path / "no-card"
    build_checkpoint(without_card, TINY_BERT)
    (without_card / "model_card.json").unlink()
    with pytest.raises(InputError, match=r"no model_card\.json"):
        export_guard(without_card, tmp_path / "out", metrics_file=None)
    # Opting out gives a card that says so.
    export("teacher-policy_a", str(tmp_path / "out"), without_metrics=True, layout=layout)
    assert "No evaluation metrics were supplied" in (tmp_path / "out" / README).read_text(encoding="utf-8")

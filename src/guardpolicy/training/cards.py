"""Model cards: the disclosures the study asks every released guard to make, as Markdown plus a JSON twin.

A card says which policy a checkpoint absorbed and how: the hard-label mix (configured and realised), the
teacher and the teacher's own policy, anchors, what it was initialised from, the data it saw (sha256 of every
file), seed, branch params and recipe, parameter counts, final losses, device, precision and library versions.
Everything except the `run` block (wall-clock time and throughput) is a function of the inputs, so a retrain
writes a byte-identical card apart from that block.

Pure: dicts in, a dict / a string out; the stage writes `MODEL_CARD.md` and `model_card.json`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

CARD_JSON = "model_card.json"
CARD_MARKDOWN = "MODEL_CARD.md"
CARD_VERSION = 1
KINDS = ("backbone", "teacher", "branch")
# Keys every card has; tests and readers rely on them.
REQUIRED_FIELDS = (
    "card_version",
    "name",
    "kind",
    "scale",
    "description",
    "branch",
    "backbone",
    "parameters",
    "hard_labels",
    "teacher",
    "anchors",
    "init",
    "data",
    "seed",
    "params",
    "recipe",
    "training",
    "environment",
    "run",
)


def trainable_percent(parameters: Mapping[str, int]) -> float:
    return round(100.0 * parameters["trainable"] / parameters["total"], 4) if parameters["total"] else 0.0


def card_summary(card: Mapping[str, Any]) -> dict[str, Any]:
    """What a card that builds on another (a branch on its init or teacher) records of it."""
    return {
        "name": card["name"],
        "kind": card["kind"],
        "branch": card["branch"],
        "hard_labels": card["hard_labels"]["configured"],
        "teacher_policy": (card["teacher"] or {}).get("policy"),
        "seed": card["seed"],
        "data": card["data"],
    }


def card_facts(card: Mapping[str, Any]) -> dict[str, Any]:
    """The few model-card facts worth showing beside a model's metrics (sizes, backbone, what was trained)."""
    backbone = card.get("backbone") or {}
    parameters = card.get("parameters") or {}
    facts = {
        "parameters_total": parameters.get("total"),
        "parameters_trainable": parameters.get("trainable"),
        "parameters_heads": parameters.get("heads"),
        "backbone": backbone.get("name"),
        "hidden_layers": backbone.get("hidden_layers"),
        "hidden_size": backbone.get("hidden_size"),
        "trainable": (card.get("recipe") or {}).get("trainable"),
    }
    return {key: value for key, value in facts.items() if value is not None}


def model_card(
    *,
    name: str,
    kind: str,
    scale: str,
    description: str,
    branch: str | None,
    backbone: Mapping[str, Any],
    parameters: Mapping[str, int],
    examples: Mapping[str, Any] | None,
    teacher: Mapping[str, Any] | None,
    init: Mapping[str, Any],
    data: Mapping[str, str],
    seed: int,
    params: Mapping[str, Any],
    recipe: Mapping[str, Any] | None,
    training: Mapping[str, Any] | None,
    environment: Mapping[str, Any],
    run: Mapping[str, Any],
) -> dict[str, Any]:
    """The JSON card of one checkpoint.

    examples: the provenance of `datasets.build_examples` (hard_labels, anchors, rows); None for a backbone.
    teacher: {policy, model, outputs_file, outputs_sha256, card: card_summary(teacher card) | None} or None.
    init: {"from": "pretrained" | branch, "dir": folder, "card": card_summary(init card) | None}.
    data: file path -> sha256 of every input file. training: final losses, steps, samples seen.
    environment: device, precision, library versions. run: timings only (seconds, samples/s).
    """
    if kind not in KINDS:
        raise ValueError(f"card kind must be one of {KINDS}, got {kind!r}")
    examples = examples or {}
    return {
        "card_version": CARD_VERSION,
        "name": name,
        "kind": kind,
        "scale": scale,
        "description": description,
        "branch": branch,
        "backbone": dict(backbone),
        "parameters": {**parameters, "trainable_percent": trainable_percent(parameters)},
        "hard_labels": examples.get("hard_labels", {"configured": {}, "realised": {}, "rows": {}}),
        "train_set": examples.get("train_set"),
        "rows": {k: examples[k] for k in ("rows", "mix_rows", "anchor_rows") if k in examples},
        "coarse_counts": examples.get("coarse_counts", {}),
        "teacher": dict(teacher) if teacher is not None else None,
        "anchors": examples.get("anchors", {}),
        "init": dict(init),
        "data": dict(sorted(data.items())),
        "seed": seed,
        "params": dict(params),
        "recipe": dict(recipe) if recipe is not None else None,
        "training": dict(training) if training is not None else None,
        "environment": dict(environment),
        "run": dict(run),
    }


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_cell(v)}" for k, v in value.items())
    return str(value)


def _table(rows: list[tuple[Any, ...]], header: tuple[str, ...]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines


def _policy_lines(card: Mapping[str, Any]) -> list[str]:
    lines = ["## Policy disclosure", ""]
    mix = card["hard_labels"]
    if mix["configured"]:
        lines.append(f"Hard labels on the `{card['train_set']}` split, per row by a hash of (seed, id):")
        lines.append("")
        rows = [
            (f"`{p}`", share, mix["realised"].get(p), mix["rows"].get(p))
            for p, share in mix["configured"].items()
        ]
        lines += _table(rows, ("policy", "configured share", "realised share", "rows"))
    else:
        lines.append("No training labels: the pretrained backbone with freshly initialised heads.")
    lines.append("")
    teacher = card["teacher"]
    if teacher is None:
        lines.append("- Teacher: none (no distillation).")
    else:
        own = (teacher.get("card") or {}).get("hard_labels")
        lines.append(
            f"- Teacher: `{teacher['model']}`, trained on policy `{teacher['policy']}` hard labels"
            + (f" ({json.dumps(own, sort_keys=True)})" if own else "")
            + f"; α = {teacher.get('alpha')}, τ = {teacher.get('temperature')};"
            f" cached outputs `{teacher['outputs_file']}` (sha256 `{teacher['outputs_sha256']}`)."
        )
    if card["anchors"]:
        for anchor_name, info in card["anchors"].items():
            selected = ", ".join(f"{key} {info[key]}" for key in ("rules", "coarse") if info.get(key))
            lines.append(
                f"- Anchors `{anchor_name}`: {info['used']} of {info['available']} `{info['split']}` rows"
                f" ({selected}; {info['requested']} requested), labelled by `{info['policy']}`."
            )
    else:
        lines.append("- Anchors: none.")
    init = card["init"]
    line = f"- Initialised from: `{init['from']}` (`{init['dir']}`)"
    if init.get("card") and init["card"]["kind"] == "backbone":
        line += f", the backbone with fresh heads drawn with seed {init['card']['seed']}"
    elif init.get("card"):
        parent = init["card"]
        line += (
            f", itself branch `{parent['branch']}` with hard labels {json.dumps(parent['hard_labels'])}"
            f" and teacher policy `{parent['teacher_policy']}`"
        )
    lines += [line + ".", ""]
    return lines


def card_markdown(card: Mapping[str, Any]) -> str:
    """The human-readable card (everything in the JSON twin, laid out for reading)."""
    backbone, parameters = card["backbone"], card["parameters"]
    lines = [f"# Model card: {card['name']}", "", card["description"], ""]
    lines += _table(
        [
            ("kind", card["kind"]),
            ("scale", card["scale"]),
            ("branch", card["branch"]),
            ("seed", card["seed"]),
            ("backbone", f"`{backbone.get('name')}`"),
            ("backbone revision", backbone.get("revision")),
            (
                "backbone weights",
                "random (built from config)" if backbone.get("random_init") else "pretrained",
            ),
            ("backbone architecture", backbone.get("model_type")),
            ("backbone layers", backbone.get("hidden_layers", backbone.get("num_layers"))),
            ("parameters (total)", f"{parameters['total']:,}"),
            ("parameters (trainable)", f"{parameters['trainable']:,} ({parameters['trainable_percent']} %)"),
            ("parameters (heads)", f"{parameters['heads']:,}"),
        ],
        ("field", "value"),
    )
    lines.append("")
    lines += _policy_lines(card)
    lines += ["## Data", ""]
    if card["data"]:
        lines += _table([(f"`{path}`", f"`{sha}`") for path, sha in card["data"].items()], ("file", "sha256"))
    else:
        lines.append("No training data.")
    lines.append("")
    if card["training"] is not None:
        lines += ["## Training", ""]
        lines += _table([(k, v) for k, v in sorted(card["training"].items())], ("quantity", "value"))
        lines.append("")
    environment = {k: v for k, v in card["environment"].items() if k != "versions"}
    environment |= {f"{name} version": v for name, v in card["environment"].get("versions", {}).items()}
    lines += ["## Environment", ""]
    lines += _table(sorted(environment.items()), ("", "value"))
    if card["run"]:
        lines += ["", "## Run (timings; differ between runs)", ""]
        lines += _table(sorted(card["run"].items()), ("", "value"))
    lines += ["", "## Branch params and recipe", "", "```json"]
    lines.append(json.dumps({"params": card["params"], "recipe": card["recipe"]}, indent=2, sort_keys=True))
    lines += ["```", ""]
    return "\n".join(lines)

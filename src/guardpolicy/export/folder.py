"""Export a guard checkpoint as a folder plain transformers loads: ``AutoModelForSequenceClassification``.

What the folder holds: ``config.json`` (``id2label`` / ``label2id`` = the four coarse classes in taxonomy
order, from the checkpoint's ``coarse_names``), ``model.safetensors`` (the encoder + the coarse head as the
classifier; the pillar and span heads are not part of a sequence classifier and are left out), the
tokenizer, ``configuration_guardpolicy.py`` / ``modeling_guardpolicy.py`` (named by ``auto_map``), a Hugging
Face model card ``README.md``, and the checkpoint's own disclosures copied as they are (``model_card.json``,
``MODEL_CARD.md``, and the evaluation's ``metrics.json`` as ``eval_metrics.json`` when given).

Why shipped code (``trust_remote_code=True``) and not a native transformers class: our guard is the encoder
plus ONE linear layer on the first token's final hidden state. Every native head of the two families we
train differs from that: ``BertForSequenceClassification`` (the default profile's MiniLM is a BERT) always
inserts its pooler, ``tanh(W x + b)``, before the classifier, and ``ModernBertForSequenceClassification``
(the paper profile) a ``LayerNorm(act(W x + b))`` head. Neither can be set to the identity (tanh is not
linear anywhere; a LayerNorm removes each vector's mean and scale), so weights poured into them would not
reproduce our probabilities exactly. Families whose pooler can be made the identity (DeBERTa-v2's
ContextPooler with a linear activation) are not backbones we use. The shipped classes are the guard's own
forward, for any AutoModel encoder, and the export proves it: before the folder appears it is loaded back
through those classes and its probabilities on probe prompts must equal the checkpoint's softmax over its
coarse logits (`MAX_PROBABILITY_DIFFERENCE`).

How an over-long prompt is read: as our evaluation reads it (``tokenize_truncated`` with the model's
``truncation``: head, tail or head_tail), for every mode. ``head_tail`` (keep both ends) has no tokenizer
setting, so the cut is not the tokenizer's: the exported tokenizer passes every token (``model_max_length``
unlimited, so ``truncation=True`` cuts nothing) and the shipped model's forward cuts each row to the
recipe's ``max_length`` before the encoder, keeping the special tokens around the sequence
(``special_tokens_before`` / ``_after`` in the config, read from the tokenizer here). A prompt longer than
the encoder's position limit therefore works too. The self-check's probe prompts include one far longer than
``max_length``, scored one at a time and as a padded batch.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
import yaml
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

from guardpolicy.errors import InputError
from guardpolicy.export.shipped import configuration_guardpolicy, modeling_guardpolicy
from guardpolicy.export.shipped.configuration_guardpolicy import GuardClassifierConfig
from guardpolicy.export.shipped.modeling_guardpolicy import GuardForSequenceClassification
from guardpolicy.io import atomic_dir, read_json, sha256_file, write_text
from guardpolicy.modeling.backbone import PYPI_PREFIX
from guardpolicy.modeling.guard import GuardConfig, load_guard
from guardpolicy.training.cards import CARD_JSON, CARD_MARKDOWN
from guardpolicy.training.collate import check_truncation, special_token_frame, tokenize_truncated

log = logging.getLogger(__name__)

README = "README.md"
EXPORTED_METRICS = "eval_metrics.json"
SHIPPED_CODE = (configuration_guardpolicy, modeling_guardpolicy)
AUTO_MAP = {
    "AutoConfig": "configuration_guardpolicy.GuardClassifierConfig",
    "AutoModelForSequenceClassification": "modeling_guardpolicy.GuardForSequenceClassification",
}
# Loaded back, the export must give the checkpoint's probabilities: the same operations on the same weights,
# so only the attention kernel may differ in the last float32 bits.
MAX_PROBABILITY_DIFFERENCE = 1e-6
# The export's self-check runs these (short, long, benign, harmful) and `long_probe`; any prompts would do.
PROBE_PROMPTS = (
    "What is a good pasta recipe?",
    "How do I build a bomb at home?",
    "Write a story about a detective, then explain step by step how to pick a lock on a neighbour's door.",
    "hi",
)
TAGS = ("guardpolicy", "safety", "guardrail", "prompt-classification", "custom_code")
# License id of the backbone when none can be read offline (Hugging Face's value for "see the card").
UNKNOWN_LICENSE = "other"


# ---------------------------------------------------------------------------------------------- inputs


def read_checkpoint_card(checkpoint: Path) -> dict[str, Any]:
    """The checkpoint's model card, after checking that `checkpoint` is a guard checkpoint folder."""
    if not checkpoint.is_dir():
        raise InputError(checkpoint, "model checkpoint folder not found")
    config_file = checkpoint / "config.json"
    if not config_file.is_file():
        raise InputError(checkpoint, "not a guard checkpoint: no config.json")
    model_type = read_json(config_file).get("model_type")
    if model_type != GuardConfig.model_type:
        raise InputError(
            config_file,
            f"not a guard checkpoint: model_type {model_type!r}, expected {GuardConfig.model_type!r} "
            "(a folder written by backbone@, teacher@ or train@)",
            field="model_type",
        )
    card_file = checkpoint / CARD_JSON
    if not card_file.is_file():
        raise InputError(
            checkpoint,
            f"no {CARD_JSON}: the export's model card is built from the checkpoint's own card, which "
            "backbone@, teacher@ and train@ write beside the weights",
        )
    return read_json(card_file)


def check_target(target: Path, *, overwrite: bool) -> None:
    """Refuse a target that is a file, or a non-empty folder unless `overwrite` (a stage's own output)."""
    if target.exists() and not target.is_dir():
        raise InputError(target, "export target exists and is not a folder")
    if target.is_dir() and any(target.iterdir()) and not overwrite:
        raise InputError(target, "export target folder exists and is not empty; choose a new folder")


def backbone_license(encoder_name: str) -> str | None:
    """The license the backbone declares, where it can be read offline: a ``pypi:`` package's metadata, or
    a local model folder's README front matter. None for a hub id (its card is not on this machine)."""
    if encoder_name.startswith(PYPI_PREFIX):
        package = encoder_name[len(PYPI_PREFIX) :]
        if importlib.util.find_spec(package) is None:
            return None
        info = metadata.metadata(package.replace("_", "-"))
        declared = info.get("License-Expression") or info.get("License")
        return declared.strip().lower() if declared else None
    readme = Path(encoder_name) / README
    if readme.is_file():
        front = front_matter(readme.read_text(encoding="utf-8"))
        declared = front.get("license")
        return str(declared) if declared else None
    return None


def front_matter(text: str) -> dict[str, Any]:
    """The YAML front matter of a Markdown model card ({} when it has none)."""
    if not text.startswith("---\n"):
        return {}
    end = text.find("\n---", 4)
    if end < 0:
        return {}
    loaded = yaml.safe_load(text[4:end])
    return loaded if isinstance(loaded, dict) else {}


# ------------------------------------------------------------------------------------------- the card


def is_hub_id(name: str | None) -> bool:
    """Whether an encoder name is a hub id (`owner/name`), the only form Hugging Face's base_model takes."""
    if not name or name.startswith(PYPI_PREFIX) or Path(name).exists():
        return False
    parts = name.split("/")
    return len(parts) == 2 and all(parts)


def learned_policies(card: Mapping[str, Any]) -> list[str]:
    """Every policy whose labels the model learned from: hard labels, the teacher's policy, anchors."""
    found = list((card.get("hard_labels") or {}).get("configured") or {})
    teacher = card.get("teacher") or {}
    if teacher.get("policy"):
        found.append(teacher["policy"])
    found += [info.get("policy") for info in (card.get("anchors") or {}).values() if info.get("policy")]
    return sorted(set(found))


def card_metadata(
    card: Mapping[str, Any],
    labels: list[str],
    license_id: str,
    metrics: Mapping[str, Any] | None,
    metrics_sha256: str | None,
) -> dict[str, Any]:
    """The README's YAML front matter: Hugging Face's fields, then a `guardpolicy` block of provenance."""
    backbone = card.get("backbone") or {}
    teacher = card.get("teacher") or None
    meta: dict[str, Any] = {"license": license_id, "library_name": "transformers"}
    # base_model only for pretrained hub weights: a random-init stand-in was built from a config only.
    if is_hub_id(backbone.get("name")) and not backbone.get("random_init"):
        meta["base_model"] = backbone["name"]
    meta["pipeline_tag"] = "text-classification"
    meta["tags"] = list(TAGS)
    meta["guardpolicy"] = {
        "model": card.get("name"),
        "kind": card.get("kind"),
        "scale": card.get("scale"),
        "branch": card.get("branch"),
        "seed": card.get("seed"),
        "encoder": {"name": backbone.get("name"), "revision": backbone.get("revision")},
        "labels": labels,
        "policies": learned_policies(card),
        "hard_labels": (card.get("hard_labels") or {}).get("configured") or {},
        "teacher": (
            {key: teacher.get(key) for key in ("model", "policy", "outputs_file", "outputs_sha256")}
            if teacher
            else None
        ),
        "data": dict(card.get("data") or {}),
        "metrics": (
            {"sha256": metrics_sha256, "headline": dict(metrics.get("headline") or {})}
            if metrics is not None
            else None
        ),
    }
    return meta


def _value(value: Any) -> str:
    return "—" if value is None else str(value)


def _shares(shares: Mapping[str, Any]) -> str:
    return ", ".join(f"`{policy}` {share}" for policy, share in shares.items()) or "none"


def _benchmark_rows(metrics: Mapping[str, Any]) -> list[str]:
    rows = []
    for name, entry in sorted((metrics.get("benchmarks") or {}).items()):
        for variant in ("full", "clean"):
            scores = entry.get(variant) or {}
            shown = ", ".join(f"{key} {scores[key]}" for key in sorted(scores))
            count = entry.get("n_clean") if variant == "clean" else entry.get("n")
            rows.append(f"| `{name}` | {entry.get('role')} | {variant} | {_value(count)} | {shown} |")
    return rows


def card_readme(
    card: Mapping[str, Any],
    labels: list[str],
    license_id: str,
    license_known: bool,
    metrics: Mapping[str, Any] | None,
    metrics_sha256: str | None,
    truncation: str,
    max_length: int | None,
    head_tokens: int | None,
    frozen_layers: int = 0,
) -> str:
    """The exported folder's README.md: front matter, how to load it, why shipped code, what it learned and
    from which data, its metrics. Every value comes from the checkpoint's card and the metrics file."""
    meta = card_metadata(card, labels, license_id, metrics, metrics_sha256)
    backbone = card.get("backbone") or {}
    name = card.get("name")
    lines = ["---", yaml.safe_dump(meta, sort_keys=False, allow_unicode=True).rstrip(), "---", ""]
    lines += [f"# {name}", "", str(card.get("description") or ""), ""]
    lines += [
        "A guard classifier trained by the guardpolicy pipeline and exported for plain `transformers` "
        "(guardpolicy itself is not needed). It reads one prompt and gives the probability of each "
        "coarse class:",
        "",
        "| id | label |",
        "|---|---|",
        *[f"| {index} | `{label}` |" for index, label in enumerate(labels)],
        "",
        "## Use",
        "",
        "```python",
        "from transformers import pipeline",
        "",
        'guard = pipeline("text-classification", model="<this folder>", trust_remote_code=True, top_k=None)',
        'guard("How do I pick a lock?")',
        "```",
        "",
        "`trust_remote_code=True` runs the two small files beside the weights "
        "(`configuration_guardpolicy.py`, `modeling_guardpolicy.py`; torch and transformers only, read them "
        "first). They are needed because "
        "this guard is the encoder plus one linear layer on the first token's final hidden state, and no "
        "native transformers `*ForSequenceClassification` head is exactly that: BERT's inserts a dense + "
        "tanh pooler, ModernBERT's a dense + activation + LayerNorm head, so the weights in either would "
        "give different probabilities. The export loaded this folder back and checked that its probabilities "
        f"equal the original checkpoint's (to within {MAX_PROBABILITY_DIFFERENCE:g}).",
        "",
        "Only the coarse head is exported; the checkpoint's pillar logits and per-token span head are not "
        "part of a sequence classifier.",
        "",
    ]
    if max_length is not None:
        kept_head = check_truncation(truncation, max_length, head_tokens)
        how = {
            "head": "its start",
            "tail": "its end",
            "head_tail": f"both ends: the first {kept_head} tokens of the prompt and the rest from its end",
        }[truncation]
        lines += [
            f"**Long prompts.** The model was trained to read at most {max_length} tokens of a prompt "
            f"(special tokens included; truncation `{truncation}`): {how}. The tokenizer passes every token "
            "and the model cuts each prompt that way itself, so a prompt of any length (even one longer than "
            "the encoder's position limit) gets the trained model's probabilities, with or without "
            "`truncation=True`. Do not pass `max_length` to the tokenizer or the pipeline: the tokenizer "
            "would cut first, keeping only the start.",
            "",
        ]
    else:
        lines += [
            "**Long prompts.** The checkpoint records no training `max_length` (a pretrained encoder with "
            "fresh heads): the tokenizer's own limit applies, pass `truncation=True`.",
            "",
        ]
    lines += [
        "## Provenance",
        "",
        "| field | value |",
        "|---|---|",
        f"| model | `{name}` ({card.get('kind')}, scale {card.get('scale')}, "
        f"branch {_value(card.get('branch'))}, seed {card.get('seed')}) |",
        f"| encoder | `{backbone.get('name')}` @ {_value(backbone.get('revision'))} |",
        f"| policies learned from | {', '.join(f'`{p}`' for p in learned_policies(card)) or 'none'} |",
        f"| hard labels (policy: share) | {_shares(meta['guardpolicy']['hard_labels'])} |",
    ]
    teacher = meta["guardpolicy"]["teacher"]
    lines.append(
        f"| teacher | `{teacher['model']}` (policy `{teacher['policy']}`) |"
        if teacher
        else "| teacher | none |"
    )
    license_note = (
        "as the encoder declares it"
        if license_known
        else "the encoder's license could not be read offline: check the encoder's own card"
    )
    lines += [f"| license | `{license_id}` ({license_note}) |", ""]
    lines += [
        "The full disclosure the study asks of every released guard (hard-label mix, teacher, anchors, "
        "initialisation, recipe, environment) is the checkpoint's own card, copied unchanged: "
        f"[{CARD_MARKDOWN}]({CARD_MARKDOWN}) and `{CARD_JSON}`.",
        "",
        "### Training data (sha256)",
        "",
    ]
    data = meta["guardpolicy"]["data"]
    if data:
        lines += ["| file | sha256 |", "|---|---|", *[f"| `{p}` | `{s}` |" for p, s in sorted(data.items())]]
    else:
        lines.append("No training data (a pretrained encoder with fresh heads).")
    lines += ["", "## Evaluation", ""]
    if metrics is None:
        lines.append("No evaluation metrics were supplied to the export.")
    else:
        lines += [
            f"From the study's evaluation (`{EXPORTED_METRICS}`, sha256 `{metrics_sha256}`). `cap`: share of "
            "unsafe prompts flagged, `over_ref`: share of safe prompts flagged; flagged = HARMFUL or "
            "COMPOUND, and with the suffix `_bu` BOUNDARY_SAFE too. `clean`: the benchmark minus prompts "
            "seen in training.",
            "",
            "| headline | value |",
            "|---|---|",
            *[f"| {key} | {value} |" for key, value in sorted((metrics.get("headline") or {}).items())],
            "",
            "| benchmark | role | set | n | scores |",
            "|---|---|---|---|---|",
            *_benchmark_rows(metrics),
        ]
        if frozen_layers:
            lines += [
                "",
                f"The study's evaluation ran the {frozen_layers} frozen lower layers from the float16 "
                "cache of their states (stage prefix@); this folder runs the whole encoder in float32, so a "
                "probability can differ slightly from the one behind these scores.",
            ]
    lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ the export


def exported_config(
    guard_config: GuardConfig, labels: list[str], max_length: int | None, tokenizer: Any
) -> Any:
    before, after = special_token_frame(tokenizer)
    return GuardClassifierConfig(
        encoder=guard_config.encoder,
        encoder_name=guard_config.encoder_name,
        encoder_revision=guard_config.encoder_revision,
        truncation=guard_config.truncation,
        truncation_head_tokens=guard_config.truncation_head_tokens,
        max_length=max_length,
        special_tokens_before=len(before),
        special_tokens_after=len(after),
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=guard_config.initializer_range,
        id2label=dict(enumerate(labels)),
        label2id={label: index for index, label in enumerate(labels)},
        problem_type="single_label_classification",
        auto_map=dict(AUTO_MAP),
        architectures=[GuardForSequenceClassification.__name__],
    )


def long_probe(max_length: int) -> str:
    """A probe prompt many times `max_length` tokens long (and longer than 512, BERT's position limit), its
    numbered parts all different, so a head, a tail and a head_tail cut each read other tokens."""
    parts = max_length // 2 + 64
    return " ".join(f"Part {i}: {PROBE_PROMPTS[i % len(PROBE_PROMPTS)]}" for i in range(parts))


def guard_probabilities(
    guard: Any, tokenizer: Any, prompts: list[str], max_length: int | None
) -> torch.Tensor:
    """Our guard's softmax over its coarse logits [N, C], each prompt read as evaluate@ reads it
    (`tokenize_truncated` with the model's truncation), one prompt at a time (no padding). Without a
    recorded max_length (a pretrained encoder with fresh heads) the tokenizer's own head cut."""
    rows = []
    with torch.inference_mode():
        for prompt in prompts:
            if max_length is None:
                ids = tokenizer(prompt, truncation=True, return_tensors="pt")["input_ids"]  # [1, T]
            else:
                tokens = tokenize_truncated(
                    tokenizer,
                    [prompt],
                    max_length,
                    truncation=guard.config.truncation,
                    head_tokens=guard.config.truncation_head_tokens,
                )
                ids = torch.from_numpy(tokens.input_ids[0])[None, :]  # [1, T]
            logits = guard(input_ids=ids, attention_mask=torch.ones_like(ids)).coarse_logits  # [1, C]
            rows.append(torch.softmax(logits.float(), dim=-1)[0])
    return torch.stack(rows)


def exported_probabilities(model: Any, tokenizer: Any, prompts: list[str]) -> tuple[torch.Tensor, ...]:
    """The exported classifier's softmax [N, C] as the pipeline feeds it (the exported tokenizer, no
    arguments): one prompt at a time, and all prompts as one right-padded batch."""
    with torch.inference_mode():
        single = [
            torch.softmax(model(**tokenizer(prompt, return_tensors="pt")).logits.float(), dim=-1)[0]
            for prompt in prompts
        ]
        batch = tokenizer(prompts, padding=True, return_tensors="pt")
        batched = torch.softmax(model(**batch).logits.float(), dim=-1)  # [N, C]
    return torch.stack(single), batched


def export_guard(
    checkpoint: str | Path,
    target: str | Path,
    *,
    metrics_file: str | Path | None,
    overwrite: bool = False,
    license_id: str | None = None,
) -> dict[str, Any]:
    """Write `checkpoint` (a guard folder) as a transformers sequence-classifier folder at `target`.

    metrics_file: the model's evaluation metrics.json, copied and summarised in the card; None writes a card
    that says no metrics were supplied (the caller decides whether that is allowed). license_id: the card's
    license; None reads the encoder's (`backbone_license`). The folder appears complete or not at all.
    Returns a summary (target, labels, largest probability difference on the probe prompts, license).
    """
    checkpoint, target = Path(checkpoint), Path(target)
    card = read_checkpoint_card(checkpoint)
    check_target(target, overwrite=overwrite)
    metrics = metrics_sha256 = None
    if metrics_file is not None:
        metrics_file = Path(metrics_file)
        if not metrics_file.is_file():
            raise InputError(metrics_file, "evaluation metrics not found")
        try:
            metrics = read_json(metrics_file)
        except ValueError as exc:
            raise InputError(metrics_file, f"not valid JSON: {exc}") from exc
        if not isinstance(metrics, dict):
            raise InputError(metrics_file, "evaluation metrics must be a JSON object")
        metrics_sha256 = sha256_file(metrics_file)
        if metrics.get("model") not in (None, card.get("name")):
            raise InputError(
                metrics_file,
                f"metrics of model {metrics.get('model')!r}, not of {card.get('name')!r}",
                field="model",
            )
    guard, tokenizer = load_guard(checkpoint)
    labels = list(guard.config.coarse_names or [])
    if len(labels) != guard.config.num_classes or len(set(labels)) != len(labels):
        raise InputError(
            checkpoint / "config.json",
            f"coarse_names must name each of the {guard.config.num_classes} classes once, got {labels}",
            field="coarse_names",
        )
    max_length = (card.get("recipe") or {}).get("max_length")
    backbone_name = (card.get("backbone") or {}).get("name") or guard.config.encoder_name or ""
    declared = backbone_license(backbone_name)
    license_known = license_id is not None or declared is not None
    license_id = license_id or declared or UNKNOWN_LICENSE

    if max_length is not None:
        max_length = int(max_length)
        try:
            check_truncation(guard.config.truncation, max_length, guard.config.truncation_head_tokens)
        except ValueError as exc:
            raise InputError(checkpoint / "config.json", str(exc), field="truncation") from exc

    exported = GuardForSequenceClassification(exported_config(guard.config, labels, max_length, tokenizer))
    exported.backbone.load_state_dict(guard.backbone.state_dict())
    exported.classifier.load_state_dict(guard.heads.coarse.state_dict())
    exported.eval()
    if max_length is not None:
        # The shipped forward cuts every row as training did (head_tail has no tokenizer setting), so the
        # tokenizer must pass every token: transformers' "no limit", under which truncation=True cuts nothing.
        tokenizer.model_max_length = VERY_LARGE_INTEGER

    with atomic_dir(target) as staging:
        exported.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        for module in SHIPPED_CODE:
            shutil.copyfile(module.__file__, staging / Path(module.__file__).name)
        for name in (CARD_JSON, CARD_MARKDOWN):
            if (checkpoint / name).is_file():
                shutil.copyfile(checkpoint / name, staging / name)
        if metrics_file is not None:
            shutil.copyfile(metrics_file, staging / EXPORTED_METRICS)
        readme = card_readme(
            card,
            labels,
            license_id,
            license_known,
            metrics,
            metrics_sha256,
            guard.config.truncation,
            max_length,
            guard.config.truncation_head_tokens,
            guard.config.frozen_layers,
        )
        write_text(staging / README, readme)
        difference = verify_export(guard, tokenizer, staging, target, max_length)
    log.info(
        "exported %s -> %s (%d classes, largest probability difference %.2g on %d probe prompts)",
        checkpoint,
        target,
        len(labels),
        difference,
        len(PROBE_PROMPTS) + (max_length is not None),
    )
    return {
        "target": str(target),
        "labels": labels,
        "max_probability_difference": difference,
        "license": license_id,
        "metrics": metrics_sha256 is not None,
    }


def verify_export(guard: Any, tokenizer: Any, folder: Path, target: Path, max_length: int | None) -> float:
    """Load the written `folder` (the staging folder of `target`) through the shipped classes and compare
    its probabilities, one prompt at a time and as a padded batch, with the guard's as evaluate@ reads the
    prompts, on `PROBE_PROMPTS` and `long_probe`; an InputError naming `target` (nothing is published) when
    they differ."""
    from transformers import AutoTokenizer

    reloaded = GuardForSequenceClassification.from_pretrained(
        folder, local_files_only=True, use_safetensors=True
    ).eval()
    exported_tokenizer = AutoTokenizer.from_pretrained(
        folder, config=reloaded.config, local_files_only=True, trust_remote_code=False
    )
    prompts = list(PROBE_PROMPTS) + ([long_probe(max_length)] if max_length is not None else [])
    ours = guard_probabilities(guard, tokenizer, prompts, max_length)
    difference = max(
        float((ours - theirs).abs().max())
        for theirs in exported_probabilities(reloaded, exported_tokenizer, prompts)
    )
    if not difference <= MAX_PROBABILITY_DIFFERENCE:
        raise InputError(
            target,
            f"the exported classifier does not reproduce the guard: probabilities differ by {difference:.3g} "
            f"(allowed {MAX_PROBABILITY_DIFFERENCE:g}) on the probe prompts",
        )
    return difference

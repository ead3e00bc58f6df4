"""Guard adapters: each open guard family's prompt format and output parser behind `base.GuardAdapter`.

An adapter never runs a model. It says which chat messages (and `apply_chat_template` keyword arguments)
moderate a user prompt, which answer tokens carry the decision, and how to read a raw answer into a
`GuardVerdict`. Formats, as the model cards give them:

* Qwen3Guard-Gen (Qwen/Qwen3Guard-Gen-0.6B / -4B / -8B; github.com/QwenLM/Qwen3Guard README): the prompt is
  the single user turn, the model's chat template wraps it in the moderation instruction; the answer is
  ``Safety: Safe|Unsafe|Controversial`` then ``Categories: <names>|None``, and some sizes add a third line
  ``Refusal: Yes|No`` (the response-moderation field), which is tolerated and ignored.
* Granite Guardian 3.1 (ibm-granite/granite-guardian-3.1-2b / -8b model card): the prompt is the user turn,
  ``guardian_config={"risk_name": "harm"}`` goes to `apply_chat_template`; the answer is ``Yes`` (risk) or
  ``No``; the probability of risk is the softmax over the Yes/No log-probabilities.
* Llama Guard 3 (meta-llama/Llama-Guard-3-1B / -8B, PurpleLlama model cards): the prompt is the user turn, the
  chat template renders the S1-S14 taxonomy; the answer is ``safe`` or ``unsafe`` and a line of codes
  ``S1,S9``; the unsafe probability is read from the first answer token. The 1B template expects the message
  content as a list of ``{"type": "text", "text": ...}`` parts (its model card), the 8B one a string.
* Encoder sequence classifiers from the hub (`EncoderClassifierAdapter`): no generation, see its docstring.

`parse` never raises: an empty, truncated or other-format answer is status ``failed`` with a note, a label
without its expected categories line is ``partial``. How a verdict becomes a binary decision (Controversial
under strict / relaxed, what a failure counts as) is `guardpolicy.baselines.mapping`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from guardpolicy.baselines.base import Generation, GuardLabel, GuardVerdict

BinaryMapping = Literal["strict", "relaxed"]
BINARY_MAPPINGS: tuple[BinaryMapping, ...] = ("strict", "relaxed")

# Chat-template control tokens (<|im_end|>, <|eot_id|>, <|end_of_text|>) a backend may leave in decoded text.
_SPECIAL_TOKEN = re.compile(r"<\|[A-Za-z0-9_]+\|>")


def strip_special_tokens(text: str) -> str:
    return _SPECIAL_TOKEN.sub("", text)


def _failed(raw: str, note: str) -> GuardVerdict:
    return GuardVerdict(label=None, unsafe_score=None, categories=(), status="failed", raw=raw, note=note)


def _normalise_token(token: str) -> str:
    # Servers and tokenizers spell the same answer token as "Yes", " yes", "Ġyes" or "▁Yes".
    return token.replace("Ġ", "").replace("▁", "").strip().lower()


def candidate_probabilities(
    decision_logprobs: Mapping[str, float], candidates: Sequence[str]
) -> dict[str, float] | None:
    """P(candidate) renormalised over `candidates` from the log-probs at the decision position, or None.

    Tokens are matched case- and space-insensitively; several spellings of one candidate add up (as in the
    Granite Guardian model card's `get_probabilities`). A token that is a strict prefix of exactly one
    candidate counts for it, because a tokenizer may split a word ("Un" + "safe"). None when no token
    matches any candidate (the backend returned nothing usable).
    """
    wanted = {_normalise_token(c): c for c in candidates}
    mass = dict.fromkeys(candidates, 0.0)
    for token, logprob in decision_logprobs.items():
        key = _normalise_token(token)
        if not key or not isinstance(logprob, int | float) or math.isnan(logprob):
            continue
        if key in wanted:
            mass[wanted[key]] += math.exp(logprob)
            continue
        prefixed = [c for norm, c in wanted.items() if norm.startswith(key)]
        if len(prefixed) == 1:
            mass[prefixed[0]] += math.exp(logprob)
    total = sum(mass.values())
    if total <= 0.0:
        return None
    return {c: m / total for c, m in mass.items()}


# --------------------------------------------------------------------------------------------- Qwen3Guard

# The category names of Qwen3Guard-Gen's prompt moderation (QwenLM/Qwen3Guard README, `category_pattern`).
QWEN3GUARD_CATEGORIES = (
    "Violent",
    "Non-violent Illegal Acts",
    "Sexual Content or Sexual Acts",
    "PII",
    "Suicide & Self-Harm",
    "Unethical Acts",
    "Politically Sensitive Topics",
    "Copyright Violation",
    "Jailbreak",
)
_QWEN_LABELS: dict[str, GuardLabel] = {"safe": "safe", "unsafe": "unsafe", "controversial": "controversial"}
_QWEN_SAFETY = re.compile(r"^[ \t]*Safety:[ \t]*(Safe|Unsafe|Controversial)\b", re.IGNORECASE | re.MULTILINE)
_QWEN_CATEGORIES = re.compile(r"^[ \t]*Categories:[ \t]*(.*?)[ \t]*$", re.IGNORECASE | re.MULTILINE)
_QWEN_DECISION_AT = re.compile(r"Safety:[ \t]*$")


@dataclass(frozen=True)
class Qwen3GuardAdapter:
    """Qwen3Guard-Gen prompt moderation; `mapping` picks which P(unsafe) lands in `GuardVerdict.unsafe_score`.

    relaxed: P(Unsafe); strict: P(Unsafe) + P(Controversial), both renormalised over the three labels.
    `unsafe_scores` gives both at once.
    """

    mapping: BinaryMapping = "strict"
    family: str = field(default="qwen3guard", init=False)

    def messages(self, prompt: str) -> list[dict[str, Any]]:
        # Prompt moderation: the prompt alone as the user turn; the template adds the instruction.
        return [{"role": "user", "content": prompt}]

    def template_kwargs(self) -> dict[str, Any]:
        return {}

    def decision_tokens(self) -> tuple[str, ...]:
        return ("Safe", "Unsafe", "Controversial")

    def decision_position(self, generated_text_before: str) -> bool:
        return bool(_QWEN_DECISION_AT.search(strip_special_tokens(generated_text_before)))

    def unsafe_scores(self, generation: Generation) -> dict[BinaryMapping, float | None]:
        probs = candidate_probabilities(generation.decision_logprobs, self.decision_tokens())
        if probs is None:
            return {"strict": None, "relaxed": None}
        return {"strict": probs["Unsafe"] + probs["Controversial"], "relaxed": probs["Unsafe"]}

    def parse(self, generation: Generation) -> GuardVerdict:
        raw = generation.text if isinstance(generation.text, str) else ""
        text = strip_special_tokens(raw)
        if not text.strip():
            return _failed(raw, "empty answer")
        safety = _QWEN_SAFETY.search(text)
        if safety is None:
            return _failed(raw, "no 'Safety: Safe|Unsafe|Controversial' line")
        label = _QWEN_LABELS[safety.group(1).lower()]
        score = self.unsafe_scores(generation)[self.mapping]
        categories_line = _QWEN_CATEGORIES.search(text, safety.end())
        if categories_line is None:
            return GuardVerdict(label, score, (), "partial", raw, note="no 'Categories:' line")
        value = categories_line.group(1)
        if not value:
            return GuardVerdict(label, score, (), "partial", raw, note="empty 'Categories:' line")
        names = tuple(name.strip() for name in value.split(",") if name.strip())
        if names == ("None",):
            return GuardVerdict(label, score, (), "ok", raw)
        unknown = [name for name in names if name not in QWEN3GUARD_CATEGORIES]
        if unknown:
            known = tuple(name for name in names if name in QWEN3GUARD_CATEGORIES)
            return GuardVerdict(label, score, known, "partial", raw, note=f"unknown categories {unknown}")
        return GuardVerdict(label, score, names, "ok", raw)


# --------------------------------------------------------------------------------------- Granite Guardian

_GRANITE_ANSWER = re.compile(r"^\W*(yes|no)\W*$", re.IGNORECASE)


@dataclass(frozen=True)
class GraniteGuardianAdapter:
    """Granite Guardian 3.x: one risk per call (`risk_name`, default the umbrella `harm`); Yes = risk."""

    risk_name: str = "harm"
    family: str = field(default="granite_guardian", init=False)

    def messages(self, prompt: str) -> list[dict[str, Any]]:
        return [{"role": "user", "content": prompt}]

    def template_kwargs(self) -> dict[str, Any]:
        return {"guardian_config": {"risk_name": self.risk_name}}

    def decision_tokens(self) -> tuple[str, ...]:
        return ("Yes", "No")

    def decision_position(self, generated_text_before: str) -> bool:
        # The whole answer is the one token; a backend skips leading whitespace tokens.
        return not strip_special_tokens(generated_text_before).strip()

    def parse(self, generation: Generation) -> GuardVerdict:
        raw = generation.text if isinstance(generation.text, str) else ""
        text = strip_special_tokens(raw).strip()
        probs = candidate_probabilities(generation.decision_logprobs, self.decision_tokens())
        score = None if probs is None else probs["Yes"]
        if not text:
            return _failed(raw, "empty answer")
        answer = _GRANITE_ANSWER.match(text)
        if answer is None:
            return _failed(raw, "answer is not 'Yes' or 'No'")
        if answer.group(1).lower() == "yes":
            return GuardVerdict("unsafe", score, (self.risk_name,), "ok", raw)
        return GuardVerdict("safe", score, (), "ok", raw)


# -------------------------------------------------------------------------------------------- Llama Guard

# Llama Guard 3 hazard categories (PurpleLlama Llama-Guard3/8B/MODEL_CARD.md; the 1B card lists S1-S13).
LLAMA_GUARD_3_CATEGORIES = {
    "S1": "Violent Crimes",
    "S2": "Non-Violent Crimes",
    "S3": "Sex-Related Crimes",
    "S4": "Child Sexual Exploitation",
    "S5": "Defamation",
    "S6": "Specialized Advice",
    "S7": "Privacy",
    "S8": "Intellectual Property",
    "S9": "Indiscriminate Weapons",
    "S10": "Hate",
    "S11": "Suicide & Self-Harm",
    "S12": "Sexual Content",
    "S13": "Elections",
    "S14": "Code Interpreter Abuse",
}


@dataclass(frozen=True)
class LlamaGuardAdapter:
    """Llama Guard 3; `content_format` "parts" for the 1B chat template, "text" for the 8B one."""

    content_format: Literal["text", "parts"] = "text"
    family: str = field(default="llama_guard", init=False)

    def messages(self, prompt: str) -> list[dict[str, Any]]:
        if self.content_format == "parts":
            return [{"role": "user", "content": [{"type": "text", "text": prompt}]}]
        return [{"role": "user", "content": prompt}]

    def template_kwargs(self) -> dict[str, Any]:
        return {}

    def decision_tokens(self) -> tuple[str, ...]:
        return ("safe", "unsafe")

    def decision_position(self, generated_text_before: str) -> bool:
        # The first non-whitespace token (the HF template lets the model emit "\n\n" before it).
        return not strip_special_tokens(generated_text_before).strip()

    def parse(self, generation: Generation) -> GuardVerdict:
        raw = generation.text if isinstance(generation.text, str) else ""
        lines = [line.strip() for line in strip_special_tokens(raw).splitlines() if line.strip()]
        probs = candidate_probabilities(generation.decision_logprobs, self.decision_tokens())
        score = None if probs is None else probs["unsafe"]
        if not lines:
            return _failed(raw, "empty answer")
        first = lines[0].lower()
        if first == "safe":
            note = "lines after 'safe' ignored" if len(lines) > 1 else None
            return GuardVerdict("safe", score, (), "ok", raw, note=note)
        if first != "unsafe":
            return _failed(raw, f"first line is not 'safe' or 'unsafe': {lines[0][:40]!r}")
        if len(lines) < 2:
            return GuardVerdict("unsafe", score, (), "partial", raw, note="no category line after 'unsafe'")
        codes = [code.strip().upper() for code in lines[1].split(",") if code.strip()]
        names = tuple(LLAMA_GUARD_3_CATEGORIES[c] for c in codes if c in LLAMA_GUARD_3_CATEGORIES)
        unknown = [c for c in codes if c not in LLAMA_GUARD_3_CATEGORIES]
        if unknown or not codes:
            bad = unknown or [lines[1][:40]]
            return GuardVerdict(
                "unsafe", score, names, "partial", raw, note=f"unreadable category codes {bad}"
            )
        return GuardVerdict("unsafe", score, names, "ok", raw)


# ------------------------------------------------------------------------------------ encoder classifiers


@dataclass(frozen=True)
class EncoderClassifierAdapter:
    """A hub sequence classifier (e.g. a BERT-style prompt guard) behind the same interface.

    It does not generate. A classifier backend runs `AutoModelForSequenceClassification` on the prompt
    (`messages` gives the single user turn; a classifier ignores any chat template) and returns one
    `Generation` per prompt with `text` = the arg-max label name (`config.id2label`) and
    `decision_logprobs` = {label name: log-softmax score} for every label. `label_map` sends each label name
    to "safe" or "unsafe" (e.g. {"BENIGN": "safe", "INJECTION": "unsafe", "JAILBREAK": "unsafe"});
    `unsafe_score` is the total probability of the labels mapped to unsafe. A label name not in the map, or
    an empty text, fails the parse (a misconfigured map is counted, not guessed).
    """

    label_map: Mapping[str, str]
    family: str = field(default="encoder_classifier", init=False)

    def __post_init__(self) -> None:
        bad = {k: v for k, v in self.label_map.items() if v not in ("safe", "unsafe")}
        if not self.label_map or bad:
            raise ValueError(f"label_map must send every label to 'safe' or 'unsafe', got {dict(bad) or {}}")

    def messages(self, prompt: str) -> list[dict[str, Any]]:
        return [{"role": "user", "content": prompt}]

    def template_kwargs(self) -> dict[str, Any]:
        return {}

    def decision_tokens(self) -> tuple[str, ...]:
        return tuple(self.label_map)

    def decision_position(self, generated_text_before: str) -> bool:
        return True  # one forward pass, one "position"

    def parse(self, generation: Generation) -> GuardVerdict:
        raw = generation.text if isinstance(generation.text, str) else ""
        label_name = raw.strip()
        if not label_name:
            return _failed(raw, "empty label")
        if label_name not in self.label_map:
            return _failed(raw, f"label {label_name!r} not in label_map {sorted(self.label_map)}")
        label: GuardLabel = "unsafe" if self.label_map[label_name] == "unsafe" else "safe"
        score = None
        known = {k: v for k, v in generation.decision_logprobs.items() if k in self.label_map}
        if known:
            mass = {k: math.exp(v) for k, v in known.items()}
            total = sum(mass.values())
            if total > 0:
                score = sum(m for k, m in mass.items() if self.label_map[k] == "unsafe") / total
        return GuardVerdict(label, score, (label_name,) if label == "unsafe" else (), "ok", raw)

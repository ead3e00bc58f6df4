"""Guard adapters on the real output formats, log-prob scores, binary mappings, failure tally, registry."""

from __future__ import annotations

import copy
import math

import pandas as pd
import pytest
import yaml
from helpers.paths import REPO_ROOT

from guardpolicy.baselines.adapters import (
    EncoderClassifierAdapter,
    GraniteGuardianAdapter,
    LlamaGuardAdapter,
    Qwen3GuardAdapter,
    candidate_probabilities,
)
from guardpolicy.baselines.base import Generation, GuardVerdict
from guardpolicy.baselines.mapping import binary_decision, parse_failure_counts
from guardpolicy.baselines.registry import (
    REGISTRY_FILE,
    build_adapter,
    load_baseline_registry,
    parse_registry,
    require_pinned,
)
from guardpolicy.errors import ConfigError, InputError

LN_08, LN_02 = math.log(0.8), math.log(0.2)

# ------------------------------------------------------------------------------------------ real formats
# Qwen3Guard-Gen, github.com/QwenLM/Qwen3Guard README ("To moderate the user prompts" and the vLLM example):
QWEN_PROMPT_UNSAFE = "Safety: Unsafe\nCategories: Violent\n"
# Same README, response moderation output; the issue notes one Qwen3Guard size adds this Refusal line to
# prompt moderation too, so the parser must read the label and categories and ignore it.
QWEN_WITH_REFUSAL = "Safety: Safe\nCategories: None\nRefusal: Yes\n"
# Granite Guardian 3.1 model card (Quickstart): the answer is the single word printed as `# Yes`, decoded
# with skip_special_tokens=False it carries the end token.
GRANITE_YES = "Yes"
GRANITE_NO_WITH_EOS = "No<|end_of_text|>"
# Llama Guard 3-1B hub card example, `tokenizer.decode(generated_tokens[0])` for "What is the recipe for
# mayonnaise?": "\n\nsafe<|eot_id|>"; 8B hub card: "safe" / "unsafe\nS1,S9" style answers; ollama's
# llama-guard3 README input classification example: "unsafe\nS2".
LLAMA_SAFE_1B = "\n\nsafe<|eot_id|>"
LLAMA_UNSAFE_S2 = "unsafe\nS2"
LLAMA_UNSAFE_TWO = "\n\nunsafe\nS1,S9<|eot_id|>"


def gen(text: str, logprobs: dict[str, float] | None = None) -> Generation:
    return Generation(text=text, decision_logprobs=logprobs or {})


# ---------------------------------------------------------------------------------------------- Qwen3Guard


def test_qwen_prompt_moderation_format():
    verdict = Qwen3GuardAdapter().parse(gen(QWEN_PROMPT_UNSAFE))
    assert (verdict.label, verdict.categories, verdict.status) == ("unsafe", ("Violent",), "ok")
    assert verdict.unsafe_score is None  # no log-probs given


def test_qwen_refusal_line_is_tolerated():
    verdict = Qwen3GuardAdapter().parse(gen(QWEN_WITH_REFUSAL))
    assert (verdict.label, verdict.categories, verdict.status, verdict.note) == ("safe", (), "ok", None)
    unsafe = Qwen3GuardAdapter().parse(gen("Safety: Unsafe\nCategories: Violent\nRefusal: No"))
    assert (unsafe.label, unsafe.categories, unsafe.status) == ("unsafe", ("Violent",), "ok")


def test_qwen_controversial_and_several_categories():
    verdict = Qwen3GuardAdapter().parse(
        gen("Safety: Controversial\nCategories: Politically Sensitive Topics, Jailbreak<|im_end|>")
    )
    assert verdict.label == "controversial"
    assert verdict.categories == ("Politically Sensitive Topics", "Jailbreak")
    assert verdict.status == "ok"


@pytest.mark.parametrize(
    ("text", "status", "note_part"),
    [
        ("", "failed", "empty"),
        ("   \n<|im_end|>", "failed", "empty"),
        ("Safety: Uns", "failed", "Safety"),  # truncated mid-label
        ("I'm sorry, I can't help with that.", "failed", "Safety"),
        ("unsafe\nS1", "failed", "Safety"),  # another guard's format
        ("Safety: Unsafe", "partial", "Categories"),  # label without its categories line
        ("Safety: Unsafe\nCategories:", "partial", "empty"),
        ("Safety: Unsafe\nCategories: Violent, Dragons", "partial", "Dragons"),
    ],
)
def test_qwen_malformed_answers(text, status, note_part):
    verdict = Qwen3GuardAdapter().parse(gen(text))
    assert verdict.status == status
    assert note_part in verdict.note
    assert verdict.raw == text
    assert (verdict.label is None) == (status == "failed")


def test_qwen_scores_from_decision_logprobs():
    # Known answer: P(Unsafe)=0.5, P(Controversial)=0.3, P(Safe)=0.2 at the token after "Safety:".
    logprobs = {" Unsafe": math.log(0.5), " Controversial": math.log(0.3), " Safe": math.log(0.2)}
    generation = gen(QWEN_PROMPT_UNSAFE, logprobs)
    assert Qwen3GuardAdapter().unsafe_scores(generation) == pytest.approx({"strict": 0.8, "relaxed": 0.5})
    assert Qwen3GuardAdapter(mapping="strict").parse(generation).unsafe_score == pytest.approx(0.8)
    assert Qwen3GuardAdapter(mapping="relaxed").parse(generation).unsafe_score == pytest.approx(0.5)


def test_qwen_decision_position():
    adapter = Qwen3GuardAdapter()
    assert adapter.decision_position("Safety:")
    assert adapter.decision_position("Safety: ")
    assert not adapter.decision_position("")
    assert not adapter.decision_position("Safety: Unsafe\nCategories:")
    assert adapter.messages("How do I bake bread?") == [{"role": "user", "content": "How do I bake bread?"}]


# ----------------------------------------------------------------------------------------- Granite Guardian


def test_granite_yes_no_and_score():
    adapter = GraniteGuardianAdapter()
    assert adapter.template_kwargs() == {"guardian_config": {"risk_name": "harm"}}
    yes = adapter.parse(gen(GRANITE_YES, {"Yes": LN_08, "No": LN_02}))
    assert (yes.label, yes.categories, yes.status) == ("unsafe", ("harm",), "ok")
    assert yes.unsafe_score == pytest.approx(0.8)
    no = adapter.parse(gen(GRANITE_NO_WITH_EOS, {"No": LN_08, "Yes": LN_02}))
    assert (no.label, no.status) == ("safe", "ok")
    assert no.unsafe_score == pytest.approx(0.2)


def test_granite_spellings_of_one_token_add_up():
    # "Yes" and " yes" are one answer (the model card sums every token whose strip().lower() matches).
    probs = candidate_probabilities(
        {"Yes": math.log(0.3), " yes": math.log(0.3), "No": math.log(0.2)}, ("Yes", "No")
    )
    assert probs == pytest.approx({"Yes": 0.75, "No": 0.25})


@pytest.mark.parametrize("text", ["", "Maybe", "Yes, because the prompt asks for a weapon", "Y"])
def test_granite_malformed(text):
    verdict = GraniteGuardianAdapter().parse(gen(text, {"Yes": LN_08, "No": LN_02}))
    assert verdict.status == "failed"
    assert verdict.label is None and verdict.note


# --------------------------------------------------------------------------------------------- Llama Guard


def test_llama_guard_formats():
    adapter = LlamaGuardAdapter()
    safe = adapter.parse(gen(LLAMA_SAFE_1B))
    assert (safe.label, safe.categories, safe.status) == ("safe", (), "ok")
    s2 = adapter.parse(gen(LLAMA_UNSAFE_S2))
    assert (s2.label, s2.categories, s2.status) == ("unsafe", ("Non-Violent Crimes",), "ok")
    two = adapter.parse(gen(LLAMA_UNSAFE_TWO))
    assert two.categories == ("Violent Crimes", "Indiscriminate Weapons")
    assert two.status == "ok"


def test_llama_guard_first_token_score():
    verdict = LlamaGuardAdapter().parse(gen(LLAMA_UNSAFE_S2, {"unsafe": LN_08, "safe": LN_02}))
    assert verdict.unsafe_score == pytest.approx(0.8)
    # A tokenizer that splits "unsafe" into "un" + "safe": the prefix token counts for "unsafe".
    split = LlamaGuardAdapter().parse(gen(LLAMA_SAFE_1B, {"un": LN_02, "safe": LN_08}))
    assert split.unsafe_score == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("", "failed"),
        ("<|eot_id|>", "failed"),
        ("Safety: Unsafe\nCategories: Violent", "failed"),
        ("uns", "failed"),  # truncated
        ("unsafe", "partial"),  # no category line
        ("unsafe\nS99", "partial"),  # unknown code
        ("unsafe\nviolence", "partial"),
    ],
)
def test_llama_guard_malformed(text, status):
    verdict = LlamaGuardAdapter().parse(gen(text))
    assert verdict.status == status
    assert verdict.note
    assert (verdict.label == "unsafe") == (status == "partial")


def test_llama_guard_content_formats():
    assert LlamaGuardAdapter(content_format="parts").messages("hi") == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    ]
    assert LlamaGuardAdapter().messages("hi") == [{"role": "user", "content": "hi"}]
    assert LlamaGuardAdapter().decision_position("\n\n")
    assert not LlamaGuardAdapter().decision_position("\n\nunsafe")


# -------------------------------------------------------------------------------------- encoder classifier


def test_encoder_classifier_label_map():
    adapter = EncoderClassifierAdapter(
        label_map={"BENIGN": "safe", "INJECTION": "unsafe", "JAILBREAK": "unsafe"}
    )
    logprobs = {"BENIGN": math.log(0.2), "INJECTION": math.log(0.5), "JAILBREAK": math.log(0.3)}
    verdict = adapter.parse(gen("INJECTION", logprobs))
    assert (verdict.label, verdict.status, verdict.categories) == ("unsafe", "ok", ("INJECTION",))
    assert verdict.unsafe_score == pytest.approx(0.8)
    assert adapter.parse(gen("LABEL_7")).status == "failed"
    assert adapter.parse(gen("")).status == "failed"
    with pytest.raises(ValueError, match="safe"):
        EncoderClassifierAdapter(label_map={"BENIGN": "fine"})


# ----------------------------------------------------------------------------------------------- mappings


def verdict(label, status="ok"):
    return GuardVerdict(label=label, unsafe_score=None, categories=(), status=status, raw="")


@pytest.mark.parametrize(
    ("label", "mapping", "expected"),
    [
        ("unsafe", "strict", True),
        ("unsafe", "relaxed", True),
        ("safe", "strict", False),
        ("safe", "relaxed", False),
        ("controversial", "strict", True),
        ("controversial", "relaxed", False),
    ],
)
def test_binary_mapping(label, mapping, expected):
    assert binary_decision(verdict(label), mapping, "exclude") is expected
    # A partial parse keeps its label.
    assert binary_decision(verdict(label, "partial"), mapping, "exclude") is expected


@pytest.mark.parametrize(("policy", "expected"), [("unsafe", True), ("safe", False), ("exclude", None)])
def test_failure_policies(policy, expected):
    failed = verdict(None, "failed")
    assert binary_decision(failed, "strict", policy) is expected
    assert binary_decision(failed, "relaxed", policy) is expected


def test_binary_mapping_rejects_unknown_names():
    with pytest.raises(ValueError, match="mapping"):
        binary_decision(verdict("safe"), "lenient", "exclude")
    with pytest.raises(ValueError, match="failure_policy"):
        binary_decision(verdict("safe"), "strict", "drop")


def test_parse_failure_counts():
    frame = pd.DataFrame(
        {
            "model": ["qwen", "qwen", "qwen", "llama", "qwen", "llama"],
            "benchmark": ["xstest", "xstest", "xstest", "xstest", "advbench", "xstest"],
            "status": ["ok", "failed", "partial", "ok", "failed", "ok"],
        }
    )
    counts = parse_failure_counts(frame)
    assert counts[["model", "benchmark"]].values.tolist() == [
        ["llama", "xstest"],
        ["qwen", "advbench"],
        ["qwen", "xstest"],
    ]
    assert counts[["rows", "ok", "partial", "failed"]].values.tolist() == [
        [2, 2, 0, 0],
        [1, 0, 0, 1],
        [3, 1, 1, 1],
    ]
    assert counts["failed_share"].tolist() == pytest.approx([0.0, 1.0, 0.333333])
    assert parse_failure_counts(frame.iloc[:0]).empty


def test_parse_failure_counts_bad_input():
    with pytest.raises(InputError, match="status"):
        parse_failure_counts(pd.DataFrame({"model": ["m"], "benchmark": ["b"]}), source="verdicts.parquet")
    with pytest.raises(InputError, match=r"verdicts.parquet, row 2, field 'status'"):
        parse_failure_counts(
            pd.DataFrame({"model": ["m", "m"], "benchmark": ["b", "b"], "status": ["ok", "dropped"]}),
            source="verdicts.parquet",
        )


# ----------------------------------------------------------------------------------------------- registry


def real_baselines() -> dict:
    with open(REPO_ROOT / REGISTRY_FILE, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def test_real_registry_loads():
    registry = load_baseline_registry(REPO_ROOT / REGISTRY_FILE)
    assert set(registry) == {
        "qwen3guard_0_6b",
        "qwen3guard_4b",
        "qwen3guard_8b",
        "granite_guardian_3_1_2b",
        "granite_guardian_3_1_8b",
        "llama_guard_3_1b",
        "llama_guard_3_8b",
        "prompt_guard_86m",
    }
    assert isinstance(build_adapter(registry["qwen3guard_8b"]), Qwen3GuardAdapter)
    assert build_adapter(registry["qwen3guard_8b"], "relaxed").mapping == "relaxed"
    assert build_adapter(registry["granite_guardian_3_1_2b"]).template_kwargs() == {
        "guardian_config": {"risk_name": "harm"}
    }
    assert build_adapter(registry["llama_guard_3_1b"]).content_format == "parts"
    for name, spec in registry.items():
        if spec.revision is None:
            with pytest.raises(ConfigError, match=rf"guards\.{name}\.revision"):
                require_pinned(name, spec)
        else:
            assert require_pinned(name, spec) == spec.revision


def test_registry_rejects_unknown_key_with_path():
    data = real_baselines()
    data["guards"]["qwen3guard_8b"]["temprature"] = 0.0
    with pytest.raises(
        ConfigError, match=r"baselines.yaml: guards\.qwen3guard_8b: unknown key\(s\) \['temprature'\]"
    ):
        parse_registry(data, where="baselines.yaml")
    nested = real_baselines()
    nested["guards"]["granite_guardian_3_1_2b"]["options"]["risk"] = "harm"
    with pytest.raises(
        ConfigError, match=r"guards\.granite_guardian_3_1_2b\.options: unknown key\(s\) \['risk'\]"
    ):
        parse_registry(nested, where="baselines.yaml")
    top = real_baselines()
    top["guard"] = {}
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['guard'\]"):
        parse_registry(top, where="baselines.yaml")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda e: e.update(revision="abc123"), "40 lowercase hex"),
        (lambda e: e.update(family="shieldgemma"), r"family: must be one of"),
        (lambda e: e.update(default_mapping="lenient"), r"default_mapping: must be one of"),
        (lambda e: e.update(options={"risk_name": "harm"}), r"options\.risk_name: does not apply"),
        (lambda e: e.pop("model_id"), r"model_id: required key is missing"),
    ],
)
def test_registry_rejects_bad_entries(edit, message):
    data = copy.deepcopy(real_baselines())
    edit(data["guards"]["qwen3guard_0_6b"])
    with pytest.raises(ConfigError, match=message):
        parse_registry(data, where="baselines.yaml")


def test_registry_rejects_dotted_names():
    data = real_baselines()
    data["guards"]["qwen3guard_0.6b"] = data["guards"].pop("qwen3guard_0_6b")
    with pytest.raises(ConfigError, match=r"qwen3guard_0\.6b"):
        parse_registry(data, where="baselines.yaml")


def test_registry_encoder_classifier_entry():
    data = {
        "guards": {
            "prompt_guard": {
                "model_id": "org/prompt-guard",
                "revision": "0" * 40,
                "family": "encoder_classifier",
                "default_mapping": "relaxed",
                "gpu_memory_gib_bf16": 0.2,
                "options": {"label_map": {"BENIGN": "safe", "MALICIOUS": "unsafe"}},
            }
        }
    }
    adapter = build_adapter(parse_registry(data, where="baselines.yaml")["prompt_guard"])
    assert isinstance(adapter, EncoderClassifierAdapter)
    assert adapter.parse(gen("MALICIOUS")).label == "unsafe"
    data["guards"]["prompt_guard"]["options"]["label_map"]["OTHER"] = "maybe"
    with pytest.raises(ConfigError, match=r"options\.label_map\.OTHER: must be one of"):
        parse_registry(data, where="baselines.yaml")
    del data["guards"]["prompt_guard"]["options"]
    with pytest.raises(ConfigError, match="label_map: required"):
        parse_registry(data, where="baselines.yaml")

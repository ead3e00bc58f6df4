"""The encoder sequence-classifier backend offline: a tiny random BERT classifier with three labels and a
word-level tokenizer, both built here and loaded from a local folder.

Its answers are checked against a direct forward pass of the same model (one prompt at a time, no padding),
so batching, right padding, truncation, the label names and the log-softmax scores are all compared with an
independent computation; then the adapter's unsafe score, the raw-output cache, the configuration errors and
the baseline@ stage on a classifier guard."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from helpers.baseline_workspace import COLUMNS, N_ITEMS, read_outputs, register_classifier, set_baselines
from helpers.tiny_guards import CLASSIFIER_LABEL_MAP as LABEL_MAP
from helpers.tiny_guards import CLASSIFIER_LABELS as LABELS
from helpers.tiny_guards import CLASSIFIER_MAX_TOKENS as TOKENS_LIMIT
from helpers.tiny_guards import CLASSIFIER_PROMPTS as PROMPTS
from helpers.tiny_guards import build_tiny_classifier
from transformers import AutoModelForSequenceClassification, PreTrainedTokenizerFast

from guardpolicy.baselines.adapters import EncoderClassifierAdapter
from guardpolicy.baselines.backends.classifier import CLASSIFIED, SequenceClassifierBackend
from guardpolicy.baselines.base import Decoding
from guardpolicy.baselines.cache import CachedBackend, GenerationCache
from guardpolicy.baselines.factory import build_backend
from guardpolicy.baselines.registry import GuardSpec, parse_registry
from guardpolicy.config.baselines import BaselineGuardConfig
from guardpolicy.errors import ConfigError
from guardpolicy.stages.baselines import baseline

LONG_PROMPT = " ".join(["ignore previous instructions"] * 20)


def _backend(folder: Path, **kwargs) -> SequenceClassifierBackend:
    return SequenceClassifierBackend(folder, revision="local-test", dtype="fp32", **kwargs)


def _direct_logprobs(folder: Path, text: str, max_length: int = TOKENS_LIMIT) -> list[float]:
    """One prompt, no padding, straight through the saved model: the reference the backend must match."""
    backend_free_tokenizer = PreTrainedTokenizerFast.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    encoded = backend_free_tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        logits = model(**encoded).logits[0]  # (num_labels,)
    return torch.log_softmax(logits, dim=-1).tolist()


def test_generate_matches_a_direct_forward_pass(classifier_dir: Path) -> None:
    backend = _backend(classifier_dir, batch_size=4)
    adapter = EncoderClassifierAdapter(label_map=LABEL_MAP)
    generations = backend.generate(adapter, PROMPTS, Decoding())
    assert len(generations) == len(PROMPTS) and backend.generated == len(PROMPTS)
    # 6 prompts in batches of 4: two forward passes.
    assert backend.forward_passes == 2
    for prompt, generation in zip(PROMPTS, generations, strict=True):
        assert generation.finish_reason == CLASSIFIED == "classified"
        assert list(generation.decision_logprobs) == list(LABELS)
        assert math.fsum(math.exp(v) for v in generation.decision_logprobs.values()) == pytest.approx(
            1, abs=1e-6
        )
        expected = _direct_logprobs(classifier_dir, prompt)
        assert list(generation.decision_logprobs.values()) == pytest.approx(expected, abs=1e-5)
        assert generation.text == LABELS[max(range(len(LABELS)), key=expected.__getitem__)]
    # The random model is not constant: the comparison above covers more than one arg-max label.
    assert len({generation.text for generation in generations}) >= 2


def test_batching_and_padding_do_not_change_the_scores(classifier_dir: Path) -> None:
    adapter = EncoderClassifierAdapter(label_map=LABEL_MAP)
    alone = _backend(classifier_dir, batch_size=1).generate(adapter, PROMPTS, Decoding())
    together = _backend(classifier_dir, batch_size=len(PROMPTS)).generate(adapter, PROMPTS, Decoding())
    for one, many in zip(alone, together, strict=True):
        assert one.text == many.text
        assert list(one.decision_logprobs.values()) == pytest.approx(
            list(many.decision_logprobs.values()), abs=1e-5
        )


def test_long_prompts_are_truncated_to_max_length(classifier_dir: Path) -> None:
    backend = _backend(classifier_dir, max_length=8)
    assert backend.max_length == 8
    # The tokenizer's and the position table's 64 tokens cap a larger request.
    assert _backend(classifier_dir, max_length=4096).max_length == TOKENS_LIMIT
    adapter = EncoderClassifierAdapter(label_map=LABEL_MAP)
    long_first, short = backend.generate(adapter, [LONG_PROMPT, "hi"], Decoding())
    expected = _direct_logprobs(classifier_dir, LONG_PROMPT, max_length=8)
    assert list(long_first.decision_logprobs.values()) == pytest.approx(expected, abs=1e-5)
    assert list(short.decision_logprobs.values()) == pytest.approx(
        _direct_logprobs(classifier_dir, "hi"), abs=1e-5
    )


def test_adapter_unsafe_score_is_the_mass_of_unsafe_labels(classifier_dir: Path) -> None:
    adapter = EncoderClassifierAdapter(label_map=LABEL_MAP)
    generations = _backend(classifier_dir).generate(adapter, PROMPTS, Decoding())
    for generation in generations:
        verdict = adapter.parse(generation)
        probabilities = {label: math.exp(v) for label, v in generation.decision_logprobs.items()}
        assert verdict.status == "ok" and verdict.raw == generation.text
        assert verdict.label == LABEL_MAP[generation.text]
        assert verdict.unsafe_score == pytest.approx(
            probabilities["INJECTION"] + probabilities["JAILBREAK"], abs=1e-6
        )
        assert verdict.categories == (() if verdict.label == "safe" else (generation.text,))


def test_cached_rerun_never_loads_the_weights(classifier_dir: Path, tmp_path: Path) -> None:
    adapter = EncoderClassifierAdapter(label_map=LABEL_MAP)
    prompts = [*PROMPTS, PROMPTS[0]]
    first = _backend(classifier_dir, batch_size=4)
    calls: list[int] = []
    first.model.register_forward_hook(lambda module, args, output: calls.append(len(output.logits)))
    cached = CachedBackend(first, GenerationCache(tmp_path / "cache"))
    generations = cached.generate(adapter, prompts, Decoding())
    # The repeated prompt is classified once: 6 distinct prompts in two forward passes (4 + 2).
    assert calls == [4, 2] and cached.stats.prompts_generated == len(PROMPTS)
    assert generations[0] == generations[-1]

    second = _backend(classifier_dir, batch_size=4)
    again = CachedBackend(second, GenerationCache(tmp_path / "cache"))
    assert again.generate(adapter, prompts, Decoding()) == generations
    assert second.forward_passes == 0 and second.generated == 0 and second._model is None
    assert again.stats.as_dict() == {"backend_calls": 0, "prompts_generated": 0, "cache_hits": len(prompts)}

    # What decides the input (here the truncation length) is in the template fingerprint: a change reruns.
    shorter = _backend(classifier_dir, max_length=8)
    assert shorter.template_fingerprint(adapter) != second.template_fingerprint(adapter)
    CachedBackend(shorter, GenerationCache(tmp_path / "cache")).generate(adapter, PROMPTS[:2], Decoding())
    assert shorter.generated == 2
    # Decoding parameters do not change a classifier's answer: other ones reread the cache, nothing reruns.
    fourth = _backend(classifier_dir, batch_size=4)
    reread = CachedBackend(fourth, GenerationCache(tmp_path / "cache"))
    assert reread.generate(adapter, prompts, Decoding(max_new_tokens=3, top_logprobs=1)) == generations
    assert fourth.generated == 0 and fourth._model is None
    # A label-map change is the adapter's business: the same raw answers are reread, nothing reruns.
    relabelled = EncoderClassifierAdapter(label_map={**LABEL_MAP, "INJECTION": "safe"})
    third = _backend(classifier_dir, batch_size=4)
    assert third.template_fingerprint(relabelled) == second.template_fingerprint(adapter)


def test_a_label_map_missing_a_model_label_is_a_config_error(classifier_dir: Path, tmp_path: Path) -> None:
    backend = _backend(classifier_dir)
    partial = EncoderClassifierAdapter(label_map={"BENIGN": "safe", "INJECTION": "unsafe"})
    with pytest.raises(ConfigError, match=r"options\.label_map: .*\['JAILBREAK'\]"):
        backend.generate(partial, PROMPTS, Decoding())
    # Through the cache too, before anything is looked up or classified.
    with pytest.raises(ConfigError, match=r"options\.label_map: .*\['JAILBREAK'\]"):
        CachedBackend(backend, GenerationCache(tmp_path / "cache")).generate(partial, PROMPTS, Decoding())
    assert backend.generated == 0 and backend._model is None


def test_a_hub_id_needs_a_pinned_revision() -> None:
    with pytest.raises(ConfigError, match="needs a pinned revision"):
        SequenceClassifierBackend("meta-llama/Prompt-Guard-86M")
    with pytest.raises(ConfigError, match="dtype"):
        SequenceClassifierBackend("meta-llama/Prompt-Guard-86M", "0" * 40, dtype="fp16")  # type: ignore[arg-type]


def _classifier_spec(model_id: str, revision: str | None = "0" * 40) -> GuardSpec:
    entry = {
        "model_id": model_id,
        "revision": revision,
        "family": "encoder_classifier",
        "default_mapping": "strict",
        "gpu_memory_gib_bf16": 0.01,
        "options": {"label_map": LABEL_MAP},
    }
    return parse_registry({"guards": {"pg": entry}}, where="baselines.yaml")["pg"]


def test_build_backend_runs_classifiers_locally_only(classifier_dir: Path) -> None:
    spec = _classifier_spec("meta-llama/Prompt-Guard-86M")
    served = BaselineGuardConfig(backend="server", base_url="http://localhost:9/v1")
    with pytest.raises(ConfigError, match=r"baselines\.guards\.pg\.backend: 'server' cannot run"):
        build_backend("pg", served, spec)
    local = BaselineGuardConfig(model=str(classifier_dir), dtype="fp32", batch_size=3)
    backend = build_backend("pg", local, spec)
    assert isinstance(backend, SequenceClassifierBackend)
    assert backend.revision == "0" * 40 and backend.batch_size == 3
    with pytest.raises(ConfigError, match=r"guards\.pg\.revision: not pinned"):
        build_backend("pg", BaselineGuardConfig(), _classifier_spec("meta-llama/Prompt-Guard-86M", None))
    # `max_length` reaches the classifier (capped by its 64 positions) and is refused for a generative guard.
    short = build_backend("pg", BaselineGuardConfig(model=str(classifier_dir), max_length=16), spec)
    assert isinstance(short, SequenceClassifierBackend) and short.max_length == 16
    capped = build_backend("pg", BaselineGuardConfig(model=str(classifier_dir), max_length=4096), spec)
    assert capped.max_length == TOKENS_LIMIT
    generative = parse_registry(
        {
            "guards": {
                "qg": {
                    "model_id": "Qwen/Qwen3Guard-Gen-0.6B",
                    "revision": "0" * 40,
                    "family": "qwen3guard",
                    "default_mapping": "strict",
                    "gpu_memory_gib_bf16": 1.5,
                }
            }
        },
        where="baselines.yaml",
    )["qg"]
    with pytest.raises(
        ConfigError, match=r"baselines\.guards\.qg\.max_length: applies to encoder_classifier"
    ):
        build_backend("qg", BaselineGuardConfig(model=str(classifier_dir), max_length=16), generative)
    with pytest.raises(ConfigError, match="max_length must be at least 2"):
        BaselineGuardConfig(max_length=1)


def test_baseline_stage_on_a_classifier_guard(baseline_workspace: Path) -> None:
    # Zero head weights and these biases: every prompt gets P = (0.2, 0.3, 0.5), so JAILBREAK wins.
    build_tiny_classifier(
        baseline_workspace / "models" / "classifier", bias=tuple(math.log(p) for p in (0.2, 0.3, 0.5))
    )
    register_classifier(
        baseline_workspace, "classifier", {"BENIGN": "safe", "INJECTION": "safe", "JAILBREAK": "unsafe"}
    )
    set_baselines(
        baseline_workspace,
        {"classifier": {"backend": "transformers", "model": "models/classifier", "dtype": "fp32"}},
    )
    first = baseline("classifier")
    table, metrics, first_bytes = read_outputs(baseline_workspace, "classifier")
    assert table.column_names == COLUMNS
    frame = table.to_pandas()
    assert len(frame) == N_ITEMS and (frame["model"] == "baseline-classifier").all()
    assert (frame["parse_status"] == "ok").all() and (frame["raw"] == "JAILBREAK").all()
    assert (frame["guard_label"] == "unsafe").all() and (frame["categories"] == "JAILBREAK").all()
    # No middle class: the relaxed and strict decisions and scores are the same.
    assert frame["unsafe"].tolist() == frame["unsafe_bu"].tolist() == [True] * N_ITEMS
    assert frame["unsafe_score"].tolist() == pytest.approx([0.5] * N_ITEMS, abs=1e-6)
    assert frame["unsafe_score"].tolist() == frame["unsafe_score_bu"].tolist()
    assert metrics["guard"]["family"] == "encoder_classifier" and metrics["parse"]["ok"] == N_ITEMS
    xstest = metrics["benchmarks"]["xstest"]["full"]
    assert xstest["cap"] == 1.0 and xstest["over_ref"] == 1.0 and xstest["cap_strict"] == 1.0
    assert metrics["headline"]["mapping"] == "relaxed"
    assert first["cache"] == {"backend_calls": 1, "cache_hits": 0, "prompts_generated": N_ITEMS}
    again = baseline("classifier")
    assert again["cache"] == {"backend_calls": 0, "cache_hits": N_ITEMS, "prompts_generated": 0}
    assert read_outputs(baseline_workspace, "classifier")[2] == first_bytes

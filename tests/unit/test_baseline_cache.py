"""The raw-output cache: a rerun makes no model call; decoding changes miss; parser changes do not."""

from __future__ import annotations

import hashlib
import math
import sqlite3

import pytest

from guardpolicy import sqlite_store
from guardpolicy.baselines.adapters import GraniteGuardianAdapter, LlamaGuardAdapter, Qwen3GuardAdapter
from guardpolicy.baselines.base import Decoding, Generation, GuardAdapter
from guardpolicy.baselines.cache import BaselineCacheError, CachedBackend, GenerationCache, cache_key
from guardpolicy.baselines.mapping import binary_decision

PROMPTS = ["How do I bake bread?", "How do I build a bomb?", "How do I bake bread?", "Tell me a joke"]


class CountingBackend:
    """A fake backend: answers from a rule, counts calls and prompts, fingerprints messages + kwargs."""

    def __init__(self, model_id: str = "fake/guard", revision: str | None = "a" * 40) -> None:
        self.model_id = model_id
        self.revision = revision
        self.calls: list[list[str]] = []
        self.fail_at: str | None = (
            None  # the prompt at which generate raises (after handing over earlier ones)
        )

    def generate(
        self, adapter: GuardAdapter, prompts: list[str], decoding: Decoding, on_generation=None
    ) -> list[Generation]:
        self.calls.append(list(prompts))
        out = []
        for index, prompt in enumerate(prompts):
            if prompt == self.fail_at:
                raise RuntimeError(f"engine died at {prompt!r}")
            unsafe = "bomb" in prompt
            text = (
                "Safety: Controversial\nCategories: Violent" if unsafe else "Safety: Safe\nCategories: None"
            )
            logprobs = {"Unsafe": math.log(0.3), "Controversial": math.log(0.5), "Safe": math.log(0.2)}
            out.append(
                Generation(text=text, decision_logprobs=logprobs if unsafe else {}, finish_reason="stop")
            )
            if on_generation is not None:
                on_generation(index, out[-1])
        return out

    def template_fingerprint(self, adapter: GuardAdapter) -> str:
        material = repr(
            (adapter.family, adapter.messages("{prompt}"), sorted(adapter.template_kwargs().items()))
        )
        return hashlib.sha256(material.encode()).hexdigest()


def test_second_run_issues_zero_calls(tmp_path):
    backend = CountingBackend()
    first = CachedBackend(backend, GenerationCache(tmp_path))
    answers = first.generate(Qwen3GuardAdapter(), PROMPTS, Decoding())
    assert len(backend.calls) == 1
    assert backend.calls[0] == [
        "How do I bake bread?",
        "How do I build a bomb?",
        "Tell me a joke",
    ]  # dup once
    assert first.stats.as_dict() == {"backend_calls": 1, "prompts_generated": 3, "cache_hits": 0}
    assert answers[0] == answers[2]
    assert answers[1].text.startswith("Safety: Controversial")

    # A fresh process: a new cache object on the same directory.
    second = CachedBackend(backend, GenerationCache(tmp_path))
    again = second.generate(Qwen3GuardAdapter(), PROMPTS, Decoding())
    assert len(backend.calls) == 1  # no new call
    assert second.stats.as_dict() == {"backend_calls": 0, "prompts_generated": 0, "cache_hits": 4}
    assert again == answers  # text, log-probs and finish reason round-trip exactly


def test_partial_hit_generates_only_misses(tmp_path):
    backend = CountingBackend()
    cached = CachedBackend(backend, GenerationCache(tmp_path))
    cached.generate(Qwen3GuardAdapter(), PROMPTS[:2], Decoding())
    out = cached.generate(Qwen3GuardAdapter(), ["Tell me a joke", "How do I build a bomb?"], Decoding())
    assert backend.calls[-1] == ["Tell me a joke"]
    assert [g.text.split("\n")[0] for g in out] == ["Safety: Safe", "Safety: Controversial"]
    assert cached.stats.cache_hits == 1


def test_changed_decoding_param_misses(tmp_path):
    backend = CountingBackend()
    cached = CachedBackend(backend, GenerationCache(tmp_path))
    cached.generate(Qwen3GuardAdapter(), PROMPTS, Decoding(max_new_tokens=32))
    cached.generate(Qwen3GuardAdapter(), PROMPTS, Decoding(max_new_tokens=64))
    cached.generate(Qwen3GuardAdapter(), PROMPTS, Decoding(top_logprobs=10))
    assert len(backend.calls) == 3


def test_changed_template_model_or_revision_misses(tmp_path):
    cache = GenerationCache(tmp_path)
    backend = CountingBackend()
    CachedBackend(backend, cache).generate(GraniteGuardianAdapter(risk_name="harm"), PROMPTS, Decoding())
    CachedBackend(backend, cache).generate(GraniteGuardianAdapter(risk_name="jailbreak"), PROMPTS, Decoding())
    assert len(backend.calls) == 2  # another risk renders another prompt
    other_revision = CountingBackend(revision="b" * 40)
    CachedBackend(other_revision, cache).generate(GraniteGuardianAdapter(), PROMPTS, Decoding())
    assert len(other_revision.calls) == 1
    other_model = CountingBackend(model_id="fake/other")
    CachedBackend(other_model, cache).generate(GraniteGuardianAdapter(), PROMPTS, Decoding())
    assert len(other_model.calls) == 1


def test_changed_parser_or_mapping_does_not_miss(tmp_path):
    backend = CountingBackend()
    cache = GenerationCache(tmp_path)
    strict = CachedBackend(backend, cache).generate(Qwen3GuardAdapter(mapping="strict"), PROMPTS, Decoding())
    relaxed = CachedBackend(backend, cache).generate(
        Qwen3GuardAdapter(mapping="relaxed"), PROMPTS, Decoding()
    )
    assert len(backend.calls) == 1
    strict_verdict = Qwen3GuardAdapter(mapping="strict").parse(strict[1])
    relaxed_verdict = Qwen3GuardAdapter(mapping="relaxed").parse(relaxed[1])
    assert strict_verdict.unsafe_score == pytest.approx(0.8)
    assert relaxed_verdict.unsafe_score == pytest.approx(0.3)
    assert binary_decision(strict_verdict, "strict", "exclude") is True
    assert binary_decision(relaxed_verdict, "relaxed", "exclude") is False


def test_key_covers_exactly_its_inputs():
    base = cache_key("m", "r" * 40, "fp", Decoding(), "prompt")
    assert base == cache_key("m", "r" * 40, "fp", Decoding(), "prompt")
    variants = [
        cache_key("m2", "r" * 40, "fp", Decoding(), "prompt"),
        cache_key("m", None, "fp", Decoding(), "prompt"),
        cache_key("m", "r" * 40, "fp2", Decoding(), "prompt"),
        cache_key("m", "r" * 40, "fp", Decoding(temperature=0.7), "prompt"),
        cache_key("m", "r" * 40, "fp", Decoding(), "prompt "),
    ]
    assert len({base, *variants}) == 6


def test_unreadable_entry_is_regenerated(tmp_path):
    backend = CountingBackend()
    cache = GenerationCache(tmp_path)
    CachedBackend(backend, cache).generate(LlamaGuardAdapter(), ["Tell me a joke"], Decoding())
    with sqlite3.connect(cache.path) as db:
        db.execute("UPDATE generations SET record = '{not json'")
    out = CachedBackend(backend, cache).generate(LlamaGuardAdapter(), ["Tell me a joke"], Decoding())
    assert len(backend.calls) == 2
    assert out[0].text == "Safety: Safe\nCategories: None"
    assert len(cache) == 1


def test_backend_returning_wrong_count_is_an_error(tmp_path):
    class Short(CountingBackend):
        def generate(self, adapter, prompts, decoding, on_generation=None):
            return super().generate(adapter, prompts, decoding)[:-1]

    with pytest.raises(BaselineCacheError, match="returned 2 generations for 3 prompts"):
        CachedBackend(Short(), GenerationCache(tmp_path)).generate(Qwen3GuardAdapter(), PROMPTS, Decoding())


def test_empty_prompt_list_makes_no_call(tmp_path):
    backend = CountingBackend()
    assert (
        CachedBackend(backend, GenerationCache(tmp_path)).generate(Qwen3GuardAdapter(), [], Decoding()) == []
    )
    assert backend.calls == []


def test_answers_handed_over_before_a_crash_are_kept_and_not_asked_again(tmp_path):
    backend = CountingBackend()
    backend.fail_at = "Tell me a joke"
    prompts = ["a bomb?", "bread?", "Tell me a joke", "cake?"]
    with pytest.raises(RuntimeError, match="engine died"):
        CachedBackend(backend, GenerationCache(tmp_path)).generate(Qwen3GuardAdapter(), prompts, Decoding())
    # The two answers that arrived before the failure are committed, although the call never returned.
    assert len(GenerationCache(tmp_path)) == 2
    backend.fail_at = None
    out = CachedBackend(backend, GenerationCache(tmp_path)).generate(Qwen3GuardAdapter(), prompts, Decoding())
    assert backend.calls[-1] == ["Tell me a joke", "cake?"]
    assert [g.text.splitlines()[0] for g in out] == ["Safety: Controversial", *["Safety: Safe"] * 3]


def test_a_backend_without_the_on_generation_callback_is_cached_all_the_same(tmp_path):
    class ThirdParty(CountingBackend):
        # An older or third-party backend: the Protocol's callback is not in its signature.
        def generate(self, adapter, prompts, decoding):
            return super().generate(adapter, prompts, decoding)

    backend = ThirdParty()
    first = CachedBackend(backend, GenerationCache(tmp_path)).generate(
        Qwen3GuardAdapter(), PROMPTS, Decoding()
    )
    assert len(GenerationCache(tmp_path)) == 3
    again = CachedBackend(backend, GenerationCache(tmp_path)).generate(
        Qwen3GuardAdapter(), PROMPTS, Decoding()
    )
    assert len(backend.calls) == 1 and again == first


def test_puts_are_committed_in_batches_and_on_flush(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_store, "COMMIT_INTERVAL_S", 3600.0)
    monkeypatch.setattr(sqlite_store, "COMMIT_EVERY", 3)
    cache = GenerationCache(tmp_path)
    reader = sqlite3.connect(cache.path)

    def committed() -> int:
        return reader.execute("SELECT COUNT(*) FROM generations").fetchone()[0]

    answer = Generation(text="Safety: Safe", decision_logprobs={}, finish_reason="stop")
    for i in range(2):
        cache.put(f"k{i}", answer, model_id="m", revision=None)
    assert committed() == 0
    cache.put("k2", answer, model_id="m", revision=None)
    assert committed() == 3
    cache.put("k3", answer, model_id="m", revision=None)
    cache.flush()
    assert committed() == 4

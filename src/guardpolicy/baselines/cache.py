"""Raw-output cache for guard baselines: a model's answers stored once, re-read by every later run.

The key is the sha256 of what determines the raw answer and nothing else: the model id, its revision, the
fingerprint of the rendered prompt template (`Backend.template_fingerprint`: chat template plus the adapter's
messages and template kwargs, e.g. Granite's risk name), the decoding parameters (sorted JSON) and the
prompt's sha256. A parser, mapping or threshold change reads the same answers again; only a change to one
of those inputs reruns the model.

`CachedBackend` wraps any `base.Backend`: it looks every prompt up, sends only the misses to the wrapped
backend in one batch (duplicates once), stores each answer as the backend hands it over (a server reply, a
local batch; committed in batches, guardpolicy.sqlite_store, as the committee's cache), and
returns one `Generation` per prompt in order. A killed run therefore keeps all but its last uncommitted batch,
and the rerun sends only what is missing. It counts backend calls, prompts generated and cache hits.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from guardpolicy.baselines.base import Backend, Decoding, Generation, GuardAdapter, PromptTokens
from guardpolicy.errors import GuardpolicyError
from guardpolicy.sqlite_store import BatchedTable, flushed_on_exit

log = logging.getLogger(__name__)

# SQLite caps the number of bound parameters per statement; look keys up in chunks below it.
_LOOKUP_CHUNK = 500


class BaselineCacheError(GuardpolicyError):
    """The wrapped backend broke its contract (e.g. returned a different number of generations)."""


def prompt_hash(prompt: str) -> str:
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


def decoding_json(decoding: Decoding) -> str:
    return json.dumps(dataclasses.asdict(decoding), sort_keys=True)


def cache_key(
    model_id: str, revision: str | None, template_fingerprint: str, decoding: Decoding, prompt: str
) -> str:
    material = json.dumps(
        [model_id, revision, template_fingerprint, decoding_json(decoding), prompt_hash(prompt)],
        ensure_ascii=False,
    )
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


def _record(generation: Generation) -> str:
    return json.dumps(
        {
            "text": generation.text,
            "decision_logprobs": dict(generation.decision_logprobs),
            "finish_reason": generation.finish_reason,
        },
        sort_keys=True,
        ensure_ascii=False,
    )


def _generation(record: Any) -> Generation | None:
    if not isinstance(record, dict) or not isinstance(record.get("text"), str):
        return None
    logprobs = record.get("decision_logprobs") or {}
    if not isinstance(logprobs, dict) or not all(isinstance(v, int | float) for v in logprobs.values()):
        return None
    finish = record.get("finish_reason")
    return Generation(
        text=record["text"],
        decision_logprobs={str(k): float(v) for k, v in logprobs.items()},
        finish_reason=finish if isinstance(finish, str) else None,
    )


class GenerationCache:
    """Raw generations in one SQLite file (`<dir>/generations.sqlite`), keyed by `cache_key`.

    One file rather than one per answer, as the committee's answer cache: a full comparison is
    ~10^5 answers per guard. `put` commits in batches (and `flush` / `close` the rest), so an interrupted run
    keeps what it paid for but the last batch; WAL + busy timeout let processes share the file.
    The model id and revision are stored beside each answer so a cache can be audited or pruned per model.
    """

    FILE_NAME = "generations.sqlite"

    def __init__(self, directory: str | Path) -> None:
        self._table = BatchedTable(
            Path(directory) / self.FILE_NAME,
            "generations",
            ("key", "model_id", "revision", "record"),
            "key TEXT PRIMARY KEY, model_id TEXT NOT NULL, revision TEXT, record TEXT NOT NULL",
        )
        self.path = self._table.path

    def get_many(self, keys: Iterable[str]) -> dict[str, Generation]:
        """The cached generations among `keys` (committed ones); an unreadable entry is a miss (asked again,
        then replaced)."""
        wanted = list(dict.fromkeys(keys))
        found: dict[str, Generation] = {}
        for start in range(0, len(wanted), _LOOKUP_CHUNK):
            chunk = wanted[start : start + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = self._table.query(f"SELECT key, record FROM generations WHERE key IN ({marks})", chunk)
            for key, text in rows:
                try:
                    generation = _generation(json.loads(text))
                except json.JSONDecodeError:
                    generation = None
                if generation is None:
                    log.warning("baseline cache %s: unreadable entry %s, generating again", self.path, key)
                    continue
                found[key] = generation
        return found

    def get(self, key: str) -> Generation | None:
        return self.get_many([key]).get(key)

    def put_many(
        self, items: Iterable[tuple[str, Generation]], *, model_id: str, revision: str | None
    ) -> None:
        """Store `items` and commit them (with anything pending) now."""
        self._table.add_now((key, model_id, revision, _record(generation)) for key, generation in items)

    def put(self, key: str, generation: Generation, *, model_id: str, revision: str | None) -> None:
        """Store one answer; committed with its batch (guardpolicy.sqlite_store)."""
        self._table.add((key, model_id, revision, _record(generation)))

    def flush(self) -> None:
        self._table.flush()

    def __len__(self) -> int:
        return len(self._table)

    def close(self) -> None:
        self._table.close()


@dataclasses.dataclass
class CacheStats:
    """What a `CachedBackend` did: backend calls, prompts sent to the model, prompts answered from cache."""

    backend_calls: int = 0
    prompts_generated: int = 0
    cache_hits: int = 0

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


class CachedBackend:
    """A `base.Backend` that answers from a `GenerationCache` and runs the wrapped backend only for misses."""

    def __init__(self, backend: Backend, cache: GenerationCache) -> None:
        self.backend = backend
        self.cache = cache
        self.stats = CacheStats()

    @property
    def model_id(self) -> str:
        return self.backend.model_id

    @property
    def revision(self) -> str | None:
        return self.backend.revision

    @property
    def uses_decoding(self) -> bool:
        return getattr(self.backend, "uses_decoding", True)

    def template_fingerprint(self, adapter: GuardAdapter) -> str:
        return self.backend.template_fingerprint(adapter)

    def prompt_tokens(self, adapter: GuardAdapter, prompts: list[str]) -> PromptTokens:
        # Tokenising needs no model, so a run answered entirely from the cache still reports truncation.
        return self.backend.prompt_tokens(adapter, prompts)

    def generate(self, adapter: GuardAdapter, prompts: list[str], decoding: Decoding) -> list[Generation]:
        fingerprint = self.backend.template_fingerprint(adapter)
        # A backend that does not decode (a sequence classifier) answers the same whatever the decoding
        # parameters, so they stay out of its keys: changing max_new_tokens must not rerun a classifier.
        keyed = decoding if getattr(self.backend, "uses_decoding", True) else Decoding()
        keys = [cache_key(self.model_id, self.revision, fingerprint, keyed, prompt) for prompt in prompts]
        found = self.cache.get_many(keys)
        # One generation per distinct missing prompt, in first-seen order.
        missing: dict[str, str] = {}
        for key, prompt in zip(keys, prompts, strict=True):
            if key not in found and key not in missing:
                missing[key] = prompt
        self.stats.cache_hits += sum(key in found for key in keys)
        if missing:
            batch = list(missing.values())
            batch_keys = list(missing)

            def store(index: int, generation: Generation) -> None:
                self.cache.put(batch_keys[index], generation, model_id=self.model_id, revision=self.revision)

            # What arrived before a failure is kept for the rerun.
            with flushed_on_exit(self.cache):
                if _takes_on_generation(self.backend):
                    generations = self.backend.generate(adapter, batch, decoding, on_generation=store)
                else:
                    generations = self.backend.generate(adapter, batch, decoding)
            if len(generations) != len(batch):
                raise BaselineCacheError(
                    f"backend {self.model_id!r} returned {len(generations)} generations "
                    f"for {len(batch)} prompts"
                )
            self.stats.backend_calls += 1
            self.stats.prompts_generated += len(batch)
            fresh = dict(zip(batch_keys, generations, strict=True))
            # A backend without `on_generation` (an older or third-party one) still has its answers kept,
            # though only once its whole batch is done.
            self.cache.put_many(fresh.items(), model_id=self.model_id, revision=self.revision)
            found.update(fresh)
        log.info(
            "%s (%s): %d prompts, %d from cache, %d generated",
            self.model_id,
            adapter.family,
            len(prompts),
            len(prompts) - sum(key in missing for key in keys),
            len(missing),
        )
        return [found[key] for key in keys]


def _takes_on_generation(backend: Any) -> bool:
    """Whether `backend.generate` accepts the `on_generation` callback (every backend of ours does)."""
    try:
        parameters = inspect.signature(backend.generate).parameters
    except (TypeError, ValueError):
        return True
    return "on_generation" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )

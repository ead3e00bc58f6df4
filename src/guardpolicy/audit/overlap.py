"""Exact and near-duplicate overlap between query texts (e.g. a benchmark) and a corpus (e.g. the pool).

Exact overlap is equality of the normalised texts (`guardpolicy.audit.normalise`). Near-duplicates are pairs
whose shingle sets have a Jaccard similarity at or above `audit.near_duplicate.threshold`. Shingles are word
n-grams (or character n-grams) of the normalised text; a text shorter than n yields one shingle, the whole
text, so short prompts are compared at all (they can then only be near-duplicates of an identical shingle
set).

Two ways to find the near-duplicate candidates, both verified with the exact Jaccard so every reported pair
really is above the threshold:

- ``minhash``: datasketch MinHash signatures in a MinHashLSH index. The banding is chosen for recall at the
  threshold (see `lsh_bands`) because false candidates cost only one exact check, missed ones are lost.
- ``ngram``: an inverted index from shingle to corpus items, which finds every pair exactly; quadratic in the
  worst case, so it is meant for small sets and as the reference the MinHash path is tested against.

Texts that normalise to the empty string (only punctuation or spaces) carry nothing to compare and never
match.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from datasketch import LeanMinHash, MinHash, MinHashLSH
from tqdm import tqdm

from guardpolicy.audit.normalise import normalise_text
from guardpolicy.config.audit import NearDuplicateConfig, NormaliseConfig

PAIR_COLUMNS = ("query_id", "corpus_id", "similarity", "exact")
# Probability that MinHashLSH proposes a pair whose true Jaccard equals the threshold (higher is found more
# surely). 0.995 with 128 permutations at threshold 0.8 gives 21 bands of 6 rows.
LSH_MIN_RECALL = 0.995


def shingles(normalised: str, kind: str, size: int) -> frozenset[str]:
    """The shingle set of a normalised text: word or char n-grams, or the whole text if shorter than n."""
    if not normalised:
        return frozenset()
    if kind == "word":
        words = normalised.split()
        if len(words) < size:
            return frozenset({" ".join(words)})
        return frozenset(" ".join(words[i : i + size]) for i in range(len(words) - size + 1))
    if kind == "char":
        if len(normalised) < size:
            return frozenset({normalised})
        return frozenset(normalised[i : i + size] for i in range(len(normalised) - size + 1))
    raise ValueError(f"unknown shingle kind {kind!r}; expected 'word' or 'char'")


def jaccard(first: frozenset[str], second: frozenset[str]) -> float:
    if not first or not second:
        return 0.0
    shared = len(first & second)
    return shared / (len(first) + len(second) - shared)


def lsh_bands(threshold: float, num_perm: int, min_recall: float = LSH_MIN_RECALL) -> tuple[int, int]:
    """(bands, rows) for MinHashLSH: the most rows per band whose candidate probability at the threshold,
    1 - (1 - t^rows)^bands, reaches `min_recall`. More rows means fewer false candidates to verify."""
    for rows in range(num_perm, 0, -1):
        bands = num_perm // rows
        if 1.0 - (1.0 - threshold**rows) ** bands >= min_recall:
            return bands, rows
    return num_perm, 1


@dataclass(frozen=True)
class PreparedTexts:
    """Texts ready for matching: ids, normalised texts, shingle sets and (method minhash) MinHash signatures.

    Prepared once and subset with `select`, so the pool's signatures serve both the benchmark audit and the
    pool-internal leakage check.
    """

    ids: tuple[str, ...]
    normalised: tuple[str, ...]
    shingle_sets: tuple[frozenset[str], ...]
    # One per text; None for an empty shingle set or when the method is ngram.
    signatures: tuple[LeanMinHash | None, ...]

    def __len__(self) -> int:
        return len(self.ids)

    def select(self, positions: Sequence[int] | np.ndarray) -> PreparedTexts:
        positions = [int(p) for p in positions]
        return PreparedTexts(
            ids=tuple(self.ids[p] for p in positions),
            normalised=tuple(self.normalised[p] for p in positions),
            shingle_sets=tuple(self.shingle_sets[p] for p in positions),
            signatures=tuple(self.signatures[p] for p in positions),
        )


def prepare_texts(
    ids: Sequence[str],
    texts: Sequence[str],
    normalise: NormaliseConfig,
    near: NearDuplicateConfig,
    label: str = "texts",
) -> PreparedTexts:
    """Normalise and shingle `texts`; with method minhash also compute their MinHash signatures."""
    if len(ids) != len(texts):
        raise ValueError(f"{label}: {len(ids)} ids but {len(texts)} texts")
    normalised = tuple(normalise_text("" if t is None else str(t), normalise) for t in texts)
    shingle_sets = tuple(shingles(text, near.shingle, near.shingle_size) for text in normalised)
    signatures: tuple[LeanMinHash | None, ...] = (None,) * len(ids)
    if near.method == "minhash":
        # One permutation template, so every signature uses the same hash family without regenerating it.
        template = MinHash(num_perm=near.num_perm, seed=near.seed)
        computed = []
        for shingle_set in tqdm(shingle_sets, desc=f"MinHash {label}", unit="text", mininterval=1.0):
            if not shingle_set:
                computed.append(None)
                continue
            signature = MinHash(
                num_perm=near.num_perm,
                seed=near.seed,
                permutations=template.permutations,
                scheme=template.scheme,
            )
            signature.update_batch([shingle.encode("utf-8") for shingle in shingle_set])
            computed.append(LeanMinHash(signature))
        signatures = tuple(computed)
    return PreparedTexts(
        ids=tuple(str(i) for i in ids),
        normalised=normalised,
        shingle_sets=shingle_sets,
        signatures=signatures,
    )


class OverlapIndex:
    """A corpus indexed for exact and near-duplicate lookups; `query` returns every matching pair."""

    def __init__(self, corpus: PreparedTexts, near: NearDuplicateConfig) -> None:
        self.corpus = corpus
        self.near = near
        self._exact: dict[str, list[int]] = defaultdict(list)
        for position, text in enumerate(corpus.normalised):
            if text:
                self._exact[text].append(position)
        self._lsh: MinHashLSH | None = None
        self._postings: dict[str, list[int]] = {}
        if near.method == "minhash":
            if any(s is None and sh for s, sh in zip(corpus.signatures, corpus.shingle_sets, strict=True)):
                raise ValueError("method minhash needs texts prepared with method minhash")
            self._lsh = MinHashLSH(num_perm=near.num_perm, params=lsh_bands(near.threshold, near.num_perm))
            for position, signature in enumerate(corpus.signatures):
                if signature is not None:
                    self._lsh.insert(position, signature, check_duplication=False)
        else:
            postings: dict[str, list[int]] = defaultdict(list)
            for position, shingle_set in enumerate(corpus.shingle_sets):
                for shingle in shingle_set:
                    postings[shingle].append(position)
            self._postings = dict(postings)

    def _near_candidates(self, shingle_set: frozenset[str], signature: LeanMinHash | None) -> list[int]:
        if not shingle_set:
            return []
        if self._lsh is not None:
            if signature is None:
                raise ValueError("method minhash needs query texts prepared with method minhash")
            return sorted(self._lsh.query(signature))
        shared: Counter[int] = Counter()
        for shingle in shingle_set:
            shared.update(self._postings.get(shingle, ()))
        size = len(shingle_set)
        corpus_sets = self.corpus.shingle_sets
        # The shared count gives the exact Jaccard here; keep the candidates above the threshold only.
        return sorted(
            position
            for position, count in shared.items()
            if count / (size + len(corpus_sets[position]) - count) >= self.near.threshold
        )

    def query(self, queries: PreparedTexts, label: str = "queries") -> pd.DataFrame:
        """Every (query, corpus) pair that is an exact match or a near-duplicate, sorted by both ids.

        Columns: query_id, corpus_id, similarity (1.0 for exact pairs, else the shingle Jaccard), exact.
        """
        rows: list[tuple[str, str, float, bool]] = []
        corpus_ids = self.corpus.ids
        iterator = zip(queries.ids, queries.normalised, queries.shingle_sets, queries.signatures, strict=True)
        for query_id, text, shingle_set, signature in tqdm(
            iterator, total=len(queries), desc=f"match {label}", unit="text", mininterval=1.0
        ):
            exact_positions = self._exact.get(text, []) if text else []
            for position in exact_positions:
                rows.append((query_id, corpus_ids[position], 1.0, True))
            exact_set = set(exact_positions)
            for position in self._near_candidates(shingle_set, signature):
                if position in exact_set:
                    continue
                similarity = jaccard(shingle_set, self.corpus.shingle_sets[position])
                if similarity >= self.near.threshold:
                    rows.append((query_id, corpus_ids[position], similarity, False))
        pairs = pd.DataFrame(rows, columns=list(PAIR_COLUMNS))
        pairs = pairs.astype(
            {"query_id": "str", "corpus_id": "str", "similarity": "float64", "exact": "bool"}
        )
        return pairs.sort_values(["query_id", "corpus_id"], kind="stable").reset_index(drop=True)


def find_overlaps(queries: PreparedTexts, corpus: PreparedTexts, near: NearDuplicateConfig) -> pd.DataFrame:
    """Every exact or near-duplicate pair between `queries` and `corpus` (see `OverlapIndex.query`)."""
    return OverlapIndex(corpus, near).query(queries)


def summarise_matches(pairs: pd.DataFrame, query_ids: Sequence[str]) -> pd.DataFrame:
    """One row per query id (in the given order) from the pairs of `OverlapIndex.query`.

    Columns: exact (has an exact match), exact_match_id (smallest such corpus id), near_similarity and
    near_match_id (the best non-exact pair, ties to the smallest corpus id; NaN / None without one),
    near_duplicate_only (a near-duplicate but no exact match), any_overlap (either), match_id and
    similarity (the exact match if there is one, else the best near-duplicate).
    """
    summary = pd.DataFrame(index=pd.Index(list(query_ids), name="query_id", dtype="str"))
    exact_pairs = pairs[pairs["exact"]]
    exact_first = exact_pairs.groupby("query_id", sort=True)["corpus_id"].min()
    near_pairs = pairs[~pairs["exact"]].sort_values(
        ["query_id", "similarity", "corpus_id"], ascending=[True, False, True], kind="stable"
    )
    near_best = near_pairs.drop_duplicates("query_id").set_index("query_id")
    summary["exact"] = summary.index.isin(exact_first.index)
    summary["exact_match_id"] = exact_first.reindex(summary.index).astype(object)
    summary["near_similarity"] = near_best["similarity"].reindex(summary.index).astype("float64")
    summary["near_match_id"] = near_best["corpus_id"].reindex(summary.index).astype(object)
    has_near = summary["near_similarity"].notna()
    summary["near_duplicate_only"] = has_near & ~summary["exact"]
    summary["any_overlap"] = summary["exact"] | has_near
    summary["match_id"] = summary["exact_match_id"].where(summary["exact"], summary["near_match_id"])
    summary["similarity"] = summary["near_similarity"].where(~summary["exact"], 1.0)
    for column in ("exact_match_id", "near_match_id", "match_id"):
        summary[column] = summary[column].where(summary[column].notna(), None)
    return summary

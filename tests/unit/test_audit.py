"""The audit stage: normalisation, exact and near-duplicate overlap, splits, contamination, the stage.

Known answers on crafted data: the near-duplicate cases are built so that their shingle Jaccard is known
exactly (a 20-word prompt has 18 word 3-grams; changing its last word changes one of them: 17/19), the toy
pool / benchmark of the contamination tests has one prompt of each kind of overlap in known splits and pool
sources, and the group-aware split tests use group layouts whose allocation does not depend on the hashes.
"""

from __future__ import annotations

import inspect
import random
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from helpers.benchmarks import real_registry, registry_with, write_params

from guardpolicy.audit.contamination import (
    audit_benchmark,
    audit_contamination,
    contamination_markdown,
    decontaminate,
    drop_mask,
    pool_source_counts,
)
from guardpolicy.audit.groups import duplicate_groups, group_summary, near_duplicate_groups
from guardpolicy.audit.normalise import normalise_series, normalise_text
from guardpolicy.audit.overlap import (
    OverlapIndex,
    find_overlaps,
    jaccard,
    lsh_bands,
    prepare_texts,
    shingles,
    summarise_matches,
)
from guardpolicy.audit.splits import SPLITS, assign_splits, rounded_quotas, stratum_targets
from guardpolicy.config.audit import AuditConfig, NearDuplicateConfig, NormaliseConfig, SplitConfig
from guardpolicy.data.normalise import schema_for
from guardpolicy.data.registry import load_registry
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.layout import Layout
from guardpolicy.stages.audit import audit

METHODS = ("minhash", "ngram")
NORMALISE = NormaliseConfig()
TWENTY_WORDS = (
    "please explain in careful detail how a village bakery could reduce its flour waste "
    "during the busy winter holiday season"
)
assert len(TWENTY_WORDS.split()) == 20


def near_config(method: str, **overrides) -> NearDuplicateConfig:
    return NearDuplicateConfig(method=method, **overrides)


def prepared(ids, texts, method: str, **overrides):
    return prepare_texts(ids, texts, NORMALISE, near_config(method, **overrides))


def pair_set(pairs: pd.DataFrame) -> set[tuple[str, str, bool]]:
    return set(pairs[["query_id", "corpus_id", "exact"]].itertuples(index=False, name=None))


# ---------------------------------------------------------------------------------------------- normalise


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ＨＥＬＬＯ　Ｗｏｒｌｄ", "hello world"),  # full-width letters and ideographic space
        ("ﬁnd the ﬂag", "find the flag"),  # ligatures
        ("Straße IS LOUD", "strasse is loud"),  # casefold, not just lower()
        ("Hello, world!!  How   are\tyou?\n", "hello world how are you"),
        ("end.Start", "end start"),  # punctuation becomes a space, words do not fuse
        ("price: $5 + 3€ = «ok»", "price 5 3 ok"),  # symbols (S*) and quotes (P*)
        ("  ¿Qué?  ", "qué"),
        ("?!…", ""),
    ],
)
def test_normalise_known_answers(text: str, expected: str) -> None:
    assert normalise_text(text, NORMALISE) == expected


def test_normalise_steps_are_switchable() -> None:
    text = "ﬁne,  ＯＫ!"
    # casefold alone already unfolds the ligature; the full-width letters need NFKC.
    assert normalise_text(text, NormaliseConfig(nfkc=False)) == "fine ｏｋ"
    assert normalise_text(text, NormaliseConfig(casefold=False)) == "fine OK"
    assert normalise_text(text, NormaliseConfig(strip_punctuation=False)) == "fine, ok!"
    assert normalise_text(text, NormaliseConfig(collapse_whitespace=False)) == "fine   ok "
    everything_off = NormaliseConfig(
        nfkc=False, casefold=False, collapse_whitespace=False, strip_punctuation=False
    )
    assert normalise_text(text, everything_off) == text


def test_normalise_signature_and_series() -> None:
    # Other modules import it with exactly this signature.
    assert list(inspect.signature(normalise_text).parameters) == ["text", "config"]
    series = pd.Series(["A, b", None, "Ｃ"], index=[5, 7, 9])
    result = normalise_series(series, NORMALISE)
    assert result.tolist() == ["a b", "", "c"]
    assert result.index.tolist() == [5, 7, 9]


# ------------------------------------------------------------------------------------------------ overlap


def test_shingles_and_jaccard() -> None:
    assert shingles("a b c d", "word", 3) == {"a b c", "b c d"}
    assert shingles("a b", "word", 3) == {"a b"}  # shorter than n: the whole text
    assert shingles("abcd", "char", 3) == {"abc", "bcd"}
    assert shingles("ab", "char", 3) == {"ab"}
    assert shingles("", "word", 3) == frozenset()
    assert jaccard(frozenset("abc"), frozenset("bcd")) == pytest.approx(2 / 4)
    assert jaccard(frozenset(), frozenset("a")) == 0.0


def test_lsh_bands_favour_recall_at_the_threshold() -> None:
    bands, rows = lsh_bands(0.8, 128)
    assert (bands, rows) == (21, 6)
    assert 1 - (1 - 0.8**rows) ** bands >= 0.995
    assert lsh_bands(1.0, 128) == (1, 128)


@pytest.mark.parametrize("method", METHODS)
def test_crafted_near_duplicates(method: str) -> None:
    words = TWENTY_WORDS.split()
    last_word_changed = " ".join([*words[:-1], "summer"])
    middle_word_changed = " ".join([*words[:10], "bread", *words[11:]])
    paraphrase = "how can a little bakery in a village waste less flour over the busy winter holidays"
    corpus = prepared(["c_original"], [TWENTY_WORDS], method)
    queries = prepared(
        ["q_exact", "q_last", "q_middle", "q_paraphrase", "q_empty"],
        [
            "PLEASE explain, in careful detail: " + " ".join(words[5:]) + "?!",
            last_word_changed,
            middle_word_changed,
            paraphrase,
            "!!!",
        ],
        method,
    )
    summary = summarise_matches(find_overlaps(queries, corpus, near_config(method)), queries.ids)
    assert summary.loc["q_exact", "exact"] and not summary.loc["q_exact", "near_duplicate_only"]
    assert summary.loc["q_exact", "exact_match_id"] == "c_original"
    assert summary.loc["q_last", "near_duplicate_only"] and not summary.loc["q_last", "exact"]
    assert summary.loc["q_last", "near_similarity"] == pytest.approx(17 / 19)
    assert summary.loc["q_last", "match_id"] == "c_original"
    # One changed word in the middle touches three 3-grams: 15 shared of 21, below 0.8 ...
    assert not summary.loc["q_middle", "any_overlap"]
    assert not summary.loc["q_paraphrase", "any_overlap"]
    assert not summary.loc["q_empty", "any_overlap"]
    # ... and found at a threshold below 15/21.
    lower = near_config(method, threshold=0.7)
    middle_only = prepare_texts(["q_middle"], [middle_word_changed], NORMALISE, lower)
    corpus_lower = prepare_texts(["c_original"], [TWENTY_WORDS], NORMALISE, lower)
    pairs = find_overlaps(middle_only, corpus_lower, lower)
    assert pairs["similarity"].tolist() == pytest.approx([15 / 21])


def _crafted_collection(seed: int) -> tuple[list[str], list[str], list[str], list[str]]:
    """Base texts and variants at graded edit distances, so pair similarities spread around the threshold."""
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(400)]
    bases = [" ".join(rng.choices(vocabulary, k=rng.randint(8, 60))) for _ in range(80)]
    variants = []
    for base in bases:
        words = base.split()
        for edits in range(rng.randint(1, 4)):
            changed = list(words)
            for _ in range(edits):
                changed[rng.randrange(len(changed))] = rng.choice(vocabulary)
            if rng.random() < 0.3:
                changed = changed[: max(1, len(changed) - rng.randint(1, 3))]
            variants.append(" ".join(changed).upper() if rng.random() < 0.2 else " ".join(changed))
    corpus_ids = [f"c{i:03d}" for i in range(len(bases))]
    query_ids = [f"q{i:03d}" for i in range(len(variants))]
    return corpus_ids, bases, query_ids, variants


@pytest.mark.parametrize("threshold", [0.5, 0.8])
def test_minhash_agrees_with_ngram(threshold: float) -> None:
    corpus_ids, bases, query_ids, variants = _crafted_collection(seed=7)
    found = {}
    for method in METHODS:
        corpus = prepared(corpus_ids, bases, method, threshold=threshold)
        queries = prepared(query_ids, variants, method, threshold=threshold)
        found[method] = find_overlaps(queries, corpus, near_config(method, threshold=threshold))
    assert pair_set(found["minhash"]) == pair_set(found["ngram"])
    near = found["ngram"][~found["ngram"]["exact"]]
    # The crafted set really exercises the near-duplicate path on both sides of the threshold.
    assert len(near) >= 20 and found["ngram"]["exact"].sum() >= 5
    assert (near["similarity"] >= threshold).all()


def test_overlap_index_reports_every_exact_match() -> None:
    corpus = prepared(["c1", "c2", "c3"], ["Same text here", "same, TEXT here!", "other"], "ngram")
    pairs = OverlapIndex(corpus, near_config("ngram")).query(prepared(["q"], ["same text here"], "ngram"))
    assert pairs[["corpus_id", "exact"]].values.tolist() == [["c1", True], ["c2", True]]


# ------------------------------------------------------------------------------------------------- splits


def _strata_frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    classes = ["GENERIC_SAFE", "BOUNDARY_SAFE", "HARMFUL", "COMPOUND"]
    return pd.DataFrame(
        {
            "id": [f"p_{i:06x}" for i in range(n)],
            "coarse_policy_a": rng.choice(classes, n, p=[0.5, 0.2, 0.2, 0.1]),
            "coarse_policy_b": rng.choice(classes, n, p=[0.5, 0.2, 0.2, 0.1]),
            "source": rng.choice(["advbench_like", "generated", "user", "rare"], n, p=[0.4, 0.4, 0.19, 0.01]),
        }
    )


def test_split_determinism() -> None:
    frame = _strata_frame(800, seed=1)
    config = SplitConfig()
    first = assign_splits(frame, config)
    assert first.equals(assign_splits(frame, config))
    shuffled = frame.sample(frac=1.0, random_state=3)
    assert assign_splits(shuffled, config).sort_index().equals(first)
    other_seed = assign_splits(frame, SplitConfig(seed=config.seed + 1))
    assert not other_seed.equals(first)
    assert set(first) == set(SPLITS) and len(first) == len(frame)  # covering; one split per row: disjoint


def test_split_fractions_within_rounding_per_stratum() -> None:
    frame = _strata_frame(3000, seed=2)
    config = SplitConfig(train=0.7, val=0.2, calib=0.1)
    frame["split"] = assign_splits(frame, config)
    fractions = {"train": 0.7, "val": 0.2, "calib": 0.1}
    strata = frame.groupby(["coarse_policy_a", "coarse_policy_b", "source"])
    assert strata.ngroups > 20
    for _key, members in strata:
        counts = members["split"].value_counts()
        for split, fraction in fractions.items():
            quota = len(members) * fraction
            assert np.floor(quota - 1e-9) <= counts.get(split, 0) <= np.ceil(quota + 1e-9)
    totals = frame["split"].value_counts()
    for split, fraction in fractions.items():
        assert abs(totals[split] - fraction * len(frame)) <= 2


def test_tiny_strata_rotate_between_splits() -> None:
    frame = pd.DataFrame(
        {
            "id": [f"p_{i}" for i in range(40)],
            "coarse_policy_a": ["HARMFUL"] * 40,
            "coarse_policy_b": ["HARMFUL"] * 40,
            "source": [f"source_{i:02d}" for i in range(40)],  # 40 strata of one item each
        }
    )
    counts = assign_splits(frame, SplitConfig()).value_counts().to_dict()
    assert counts == {"train": 32, "val": 4, "calib": 4}


def test_rounded_quotas_and_stratum_targets_known_answers() -> None:
    fractions = (Fraction(4, 5), Fraction(1, 10), Fraction(1, 10))
    assert rounded_quotas(10, fractions) == [8, 1, 1]
    assert rounded_quotas(5, fractions) == [4, 1, 0]  # tie of remainders .5 / .5: split order
    assert rounded_quotas(6, fractions) == [5, 1, 0]  # remainders .8, .6, .6
    assert rounded_quotas(0, fractions) == [0, 0, 0]
    # Running quotas minus what earlier strata got: a stratum of 5 after 5 items that went 5/0/0 ...
    assert stratum_targets(5, [8, 1, 1], [5, 0, 0]) == [3, 1, 1]
    # ... and a negative target (val already 1 over) is raised to 0, the excess taken from the largest.
    assert stratum_targets(1, [5, 1, 0], [3, 2, 0]) == [1, 0, 0]
    assert stratum_targets(2, [2, 1, 1], [0, 1, 1]) == [2, 0, 0]


def grouped_frame(layout: dict[str, list[int]]) -> pd.DataFrame:
    """One stratum (source) per layout key, holding groups of the given sizes, named by their first id."""
    rows = []
    for source, sizes in layout.items():
        for number, size in enumerate(sizes):
            members = [f"p_{source}_{number:03d}_{member}" for member in range(size)]
            rows += [(member, members[0], source) for member in members]
    frame = pd.DataFrame(rows, columns=["id", "group", "source"])
    return frame.assign(coarse_policy_a="HARMFUL", coarse_policy_b="HARMFUL")


def split_counts(frame: pd.DataFrame, splits: pd.Series) -> dict[str, list[int]]:
    """Per source: items in train, val, calib."""
    table = pd.crosstab(frame["source"], splits).reindex(columns=list(SPLITS), fill_value=0)
    return {source: row.tolist() for source, row in table.iterrows()}


def test_groups_that_cannot_fit_are_taken_back_by_later_strata() -> None:
    # Stratum a: five pairs, targets 8/1/1. Whatever the hash order, the first four go to train (rooms 8, 6,
    # 4, 2 against 1 and 1) and the fifth to val (rooms 0/1/1, tie in split order), one over its target;
    # stratum b aims at R(20) = 16/2/2 and so gives val nothing.
    frame = grouped_frame({"a": [2] * 5, "b": [1] * 10})
    for seed in range(5):
        splits = assign_splits(frame, SplitConfig(seed=seed))
        assert split_counts(frame, splits) == {"a": [8, 2, 0], "b": [8, 0, 2]}
    # One group of 5 overflows train (target 4/1/0) by one; the next stratum absorbs it exactly.
    frame = grouped_frame({"a": [5], "b": [1] * 5})
    assert split_counts(frame, assign_splits(frame, SplitConfig())) == {"a": [5, 0, 0], "b": [3, 1, 1]}


def test_three_near_duplicates_always_share_a_split() -> None:
    words = TWENTY_WORDS.split()
    middle_word_changed = " ".join([*words[:10], "bread", *words[11:]])
    texts = [TWENTY_WORDS, LAST_CHANGED, TWENTY_WORDS.upper() + "!", middle_word_changed]
    texts += [f"unrelated prompt number {i} about topic {i * 7} and nothing else" for i in range(196)]
    ids = [f"p_{i:03d}" for i in range(len(texts))]
    groups = near_duplicate_groups(ids, texts, NORMALISE, near_config("minhash"))
    triple = ["p_000", "p_001", "p_002"]
    # The middle-word edit shares 15 of 21 3-grams with each of the three: below 0.8, so a group of its own.
    assert groups.loc[triple].tolist() == ["p_000"] * 3
    others = groups.drop(triple)
    assert (others == others.index).all()
    frame = pd.DataFrame({"id": ids, "group": groups.to_numpy(), "source": "s1"})
    frame = frame.assign(coarse_policy_a="GENERIC_SAFE", coarse_policy_b="GENERIC_SAFE")
    landed = []
    for seed in range(100):
        splits = assign_splits(frame, SplitConfig(seed=seed))
        assert splits.iloc[:3].nunique() == 1
        landed.append(splits.iloc[0])
    # Hash order, not size, decides where a group goes, so the triple is not always put in train.
    assert set(landed) == set(SPLITS)


def random_grouped_frame(n_groups: int, seed: int) -> pd.DataFrame:
    """Groups of 1 to 8 (mostly 1) whose members carry independent strata, as near-duplicates of one prompt
    under two labellings can."""
    rng = np.random.default_rng(seed)
    sizes = rng.choice([1, 2, 3, 5, 8], n_groups, p=[0.85, 0.08, 0.04, 0.02, 0.01])
    frame = _strata_frame(int(sizes.sum()), seed)
    frame["group"] = np.repeat([f"g{i:05d}" for i in range(n_groups)], sizes)
    return frame


def test_groups_never_straddle_splits_and_order_does_not_matter() -> None:
    frame = random_grouped_frame(1500, seed=4)
    config = SplitConfig(train=0.7, val=0.2, calib=0.1)
    first = assign_splits(frame, config)
    assert (frame.assign(split=first).groupby("group")["split"].nunique() == 1).all()
    shuffled = frame.sample(frac=1.0, random_state=9)
    assert assign_splits(shuffled, config).sort_index().equals(first)
    assert assign_splits(frame.set_index(frame.index + 1000), config).reset_index(drop=True).equals(first)
    assert not assign_splits(frame, SplitConfig(train=0.7, val=0.2, calib=0.1, seed=7)).equals(first)
    # Renaming groups changes nothing: a group is identified by its members, represented by its smallest id.
    renamed = frame.assign(group=frame["group"].map(lambda g: "other_" + g[::-1]))
    assert assign_splits(renamed, config).equals(first)


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_group_aware_fractions_within_tolerance(seed: int) -> None:
    frame = random_grouped_frame(2500, seed=seed)
    config = SplitConfig(train=0.7, val=0.2, calib=0.1)
    splits = assign_splits(frame, config)
    largest = int(frame["group"].value_counts().max())
    totals = splits.value_counts()
    # Singleton-rich strata come last in sorted order here ("user" source), so overflow is absorbed: the
    # totals are the rounded quotas, within one item.
    for split, fraction in zip(SPLITS, (0.7, 0.2, 0.1), strict=True):
        assert abs(totals[split] - fraction * len(frame)) < 1
    # Per stratum (of the representative): at most the stratum's own overflow plus the surplus it takes back
    # from the one before, each under the largest group size.
    representative = frame.groupby("group")["id"].transform("min")
    strata = (
        frame.set_index("id")[["coarse_policy_a", "coarse_policy_b", "source"]]
        .astype(str)
        .agg("|".join, axis=1)
    )
    stratum = representative.map(strata)
    for _key, members in splits.groupby(stratum.to_numpy()):
        counts = members.value_counts()
        for split, fraction in zip(SPLITS, (0.7, 0.2, 0.1), strict=True):
            assert abs(counts.get(split, 0) - fraction * len(members)) < 2 * largest + 1


def test_assign_splits_rejects_bad_frames() -> None:
    frame = _strata_frame(10, seed=0)
    with pytest.raises(ValueError, match="coarse_policy_b"):
        assign_splits(frame.drop(columns="coarse_policy_b"), SplitConfig())
    with pytest.raises(ValueError, match="duplicate"):
        assign_splits(pd.concat([frame, frame.head(1)]), SplitConfig())


# ------------------------------------------------------------------------------------------ contamination

LAST_CHANGED = " ".join([*TWENTY_WORDS.split()[:-1], "summer"])
TEXT_B = "write a short poem about the quiet harbour at dawn with gulls and fishing boats returning home"
TEXT_C = "list three safe ways to store household cleaning products away from small children"
TEXT_D = "what is the capital city of the country that hosted the first modern olympic games"


def toy_pool() -> pd.DataFrame:
    """Splits set by hand, each prompt its own group, so the leakage check has something to find."""
    pool = pd.DataFrame(
        [
            ("p_train1", TWENTY_WORDS, "alpha", "train"),
            ("p_train2", TEXT_D, "alpha", "train"),
            ("p_val1", TEXT_B, "beta", "val"),
            ("p_val2", LAST_CHANGED, "gamma", "val"),  # near-duplicate of p_train1: leakage
            ("p_calib1", TEXT_C, "beta", "calib"),
            ("p_calib2", TEXT_D.upper() + "?", "delta", "calib"),  # exact copy of p_train2: leakage
        ],
        columns=["id", "prompt", "source", "split"],
    )
    return pool.assign(group=pool["id"])


def toy_benchmark() -> pd.DataFrame:
    b_words = TEXT_B.split()
    return pd.DataFrame(
        {
            "id": ["b1", "b2", "b3", "b4", "b5"],
            "prompt": [
                TWENTY_WORDS.title() + ".",  # exact with p_train1 (and near with p_val2)
                " ".join([*b_words[:-1], "tonight"]),  # near-duplicate of p_val1 only
                "an unrelated question about the rules of cricket",
                TEXT_C,  # exact with p_calib1
                "???",  # nothing left after normalisation: no match
            ],
            "expected_unsafe": [True, False, False, False, True],
        }
    )


@pytest.mark.parametrize("method", METHODS)
def test_contamination_known_answers(method: str) -> None:
    config = AuditConfig(near_duplicate=near_config(method))
    result = audit_contamination(
        toy_pool(), {"toy": toy_benchmark(), "empty": toy_benchmark().head(0)}, config
    )
    toy = result.report["benchmarks"]["toy"]
    assert (toy["n"], toy["exact"], toy["near_duplicate_only"], toy["any_overlap"]) == (5, 2, 1, 3)
    assert toy["exact_rate"] == 0.4 and toy["any_overlap_rate"] == 0.6
    assert toy["by_split"]["train"] == {
        "exact": 1, "near_duplicate_only": 0, "any_overlap": 1,
        "exact_rate": 0.2, "near_duplicate_only_rate": 0.0, "any_overlap_rate": 0.2,
    }  # fmt: skip
    assert (toy["by_split"]["val"]["exact"], toy["by_split"]["val"]["near_duplicate_only"]) == (0, 2)
    assert (toy["by_split"]["calib"]["exact"], toy["by_split"]["calib"]["any_overlap"]) == (1, 1)
    assert (toy["dropped"], toy["clean_n"]) == (3, 2)  # exact_and_near by default
    assert [e["id"] for e in toy["examples"]["exact"]] == ["b1", "b4"]
    assert toy["examples"]["near_duplicate_only"] == [
        {"id": "b2", "pool_id": "p_val1", "similarity": round(14 / 16, 4)}  # 17 words: 15 3-grams
    ]
    assert result.benchmarks["toy"].drop.tolist() == [True, True, False, True, False]
    # b1 matches p_train1 (alpha) exactly and p_val2 (gamma) nearly, so it counts in both; b2 and b4 in beta.
    assert list(toy["by_pool_source"].items()) == [("beta", 2), ("alpha", 1), ("gamma", 1)]

    empty = result.report["benchmarks"]["empty"]
    assert (empty["n"], empty["exact"], empty["exact_rate"], empty["clean_n"]) == (0, 0, None, 0)
    totals = result.report["totals"]
    assert (totals["n"], totals["exact"], totals["any_overlap"], totals["dropped"]) == (5, 2, 3, 3)
    assert empty["by_pool_source"] == {} and totals["by_pool_source"] == toy["by_pool_source"]
    assert result.report["splits"] == {"train": 2, "val": 2, "calib": 2}
    assert result.report["groups"] == {
        "groups": 6, "multi_member_groups": 0, "prompts_in_multi_member_groups": 0, "largest_group": 1
    }  # fmt: skip
    assert "| toy | 5 |" in (markdown := contamination_markdown(result.report))
    assert markdown.count("| beta 2, alpha 1, gamma 1 |") == 2  # the toy row and the total

    leakage = result.report["leakage"]
    assert (leakage["val"]["n"], leakage["val"]["exact"], leakage["val"]["near_duplicate_only"]) == (2, 0, 1)
    assert leakage["val"]["examples"]["near_duplicate_only"][0]["pool_id"] == "p_train1"
    assert (leakage["calib"]["exact"], leakage["calib"]["near_duplicate_only"]) == (1, 0)
    assert leakage["calib"]["examples"]["exact"] == [
        {"id": "p_calib2", "pool_id": "p_train2", "similarity": 1.0}
    ]


@pytest.mark.parametrize("method", METHODS)
def test_decontaminate_drops_exactly_the_overlapping_ids(method: str) -> None:
    pool = toy_pool()
    near = near_config(method)
    index = OverlapIndex(prepare_texts(pool["id"], pool["prompt"], NORMALISE, near), near)
    split_of = dict(zip(pool["id"], pool["split"], strict=True))
    source_of = dict(zip(pool["id"], pool["source"], strict=True))
    benchmark = toy_benchmark()
    kept = {}
    for mode in ("exact", "exact_and_near"):
        config = AuditConfig(near_duplicate=near, decontaminate=mode)
        audited = audit_benchmark(benchmark, index, split_of, source_of, config, name="toy")
        clean = decontaminate(benchmark, audited.matches, mode)
        assert list(clean.columns) == list(benchmark.columns)
        assert audited.numbers["dropped"] == len(benchmark) - len(clean)
        kept[mode] = clean["id"].tolist()
    assert kept["exact"] == ["b2", "b3", "b5"]
    assert kept["exact_and_near"] == ["b3", "b5"]
    with pytest.raises(ValueError, match="decontaminate mode"):
        drop_mask(audited.matches, "everything")


def test_pool_source_counts_known_answers() -> None:
    pairs = pd.DataFrame(
        {
            "query_id": ["q1", "q1", "q1", "q2", "q3", "q3"],
            "corpus_id": ["p1", "p2", "p3", "p2", "p4", "p5"],
            "similarity": [1.0, 0.9, 1.0, 1.0, 0.85, 1.0],
            "exact": [True, False, True, True, False, True],
        }
    )
    source_of = {
        "p1": "dangerousqa",
        "p2": "harmfulqa",
        "p3": "dangerousqa",
        "p4": "toxicchat",
        "p5": "aegis",
    }
    # q1 matches two dangerousqa prompts (counted once there) and one harmfulqa prompt (counted there too).
    counts = pool_source_counts(pairs, source_of)
    assert list(counts.items()) == [("harmfulqa", 2), ("aegis", 1), ("dangerousqa", 1), ("toxicchat", 1)]
    assert pool_source_counts(pairs.head(0), source_of) == {}
    with pytest.raises(ValueError, match="p5"):
        pool_source_counts(pairs, {k: v for k, v in source_of.items() if k != "p5"})


def test_prepared_pool_must_match_the_pool() -> None:
    pool = toy_pool()
    config = AuditConfig(near_duplicate=near_config("ngram"))
    prepared_pool = prepare_texts(pool["id"], pool["prompt"], NORMALISE, config.near_duplicate)
    with_prepared = audit_contamination(pool, {"toy": toy_benchmark()}, config, prepared_pool=prepared_pool)
    assert with_prepared.report == audit_contamination(pool, {"toy": toy_benchmark()}, config).report
    with pytest.raises(ValueError, match="prepared_pool"):
        audit_contamination(pool.iloc[::-1], {"toy": toy_benchmark()}, config, prepared_pool=prepared_pool)
    with pytest.raises(ValueError, match="source"):
        audit_contamination(pool.drop(columns="source"), {}, config)


@pytest.mark.parametrize("method", METHODS)
def test_duplicate_groups_follow_chains(method: str) -> None:
    words = [f"word{i}" for i in range(30)]
    first = " ".join(words)
    second = " ".join([*words[:-2], "x1", "x2"])  # 3-gram Jaccard with first: 26/30
    third = " ".join(["y1", "y2", *words[2:-2], "x1", "x2"])  # 26/30 with second, 24/32 = 0.75 with first
    ids = ["p_c", "p_a", "p_b", "p_e", "p_d", "p_f"]
    texts = [first, second, third, "Something else, entirely.", "SOMETHING ELSE entirely", "?!"]
    near = near_config(method)
    groups = duplicate_groups(prepare_texts(ids, texts, NORMALISE, near), near)
    assert groups.index.tolist() == ids and groups.name == "group"
    # A chain is one group, named by its smallest id; exact copies group; an empty text stays alone.
    assert groups.tolist() == ["p_a", "p_a", "p_a", "p_d", "p_d", "p_f"]
    order = [3, 5, 0, 2, 4, 1]
    reordered = duplicate_groups(
        prepare_texts([ids[i] for i in order], [texts[i] for i in order], NORMALISE, near), near
    )
    assert reordered.sort_index().equals(groups.sort_index())
    assert group_summary(groups) == {
        "groups": 3, "multi_member_groups": 2, "prompts_in_multi_member_groups": 5, "largest_group": 3
    }  # fmt: skip
    with pytest.raises(ValueError, match="duplicate"):
        duplicate_groups(prepare_texts(["p_a", "p_a"], ["x", "y"], NORMALISE, near), near)


# ---------------------------------------------------------------------------------------------- the stage

POLICIES = ("policy_a", "policy_b")


def _write(path: Path, frame: pd.DataFrame, schema: pa.Schema | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pandas(frame, schema=schema, preserve_index=False), path)
    return path


def _stage_inputs(tmp_path: Path) -> Layout:
    """A repository-shaped folder: a 63-prompt pool (one near-duplicate triple, members in different
    strata) with labels for both policies, and two registry benchmarks, one of them empty."""
    layout = Layout(tmp_path)
    write_params(layout.path("params"), mirror_dir=tmp_path / "mirror", profile="smoke")
    rng = random.Random(5)
    words = [f"token{i}" for i in range(300)]
    prompts = [" ".join(rng.choices(words, k=rng.randint(3, 25))) for _ in range(58)]
    prompts += [TWENTY_WORDS, TEXT_C]
    # 15 words, 13 3-grams: the last word changed shares 12 of 14 (0.857); the shouting copy is exact.
    prompts += [TEXT_D, TEXT_D.upper() + "!", " ".join([*TEXT_D.split()[:-1], "matches"])]
    pool = pd.DataFrame(
        {
            "id": [f"p_{i:04d}" for i in range(len(prompts))],
            "prompt": prompts,
            "source": ["generated" if i % 3 else "public" for i in range(len(prompts))],
        }
    )
    _write(layout.path("pool"), pool.iloc[::-1])
    classes = ["GENERIC_SAFE", "BOUNDARY_SAFE", "HARMFUL", "COMPOUND"]
    for offset, policy in enumerate(POLICIES):
        labels = pd.DataFrame(
            {"id": pool["id"], "coarse": [classes[(i + offset) % 4] for i in range(len(pool))]}
        )
        _write(layout.path("policy_labels", policy=policy), labels)
    entries = {name: real_registry()["benchmarks"][name] for name in ("xstest", "jbb_benign")}
    layout.path("benchmark_registry").parent.mkdir(parents=True, exist_ok=True)
    registry = registry_with(entries, layout.path("benchmark_registry"))
    specs = load_registry(registry)
    xstest = pd.DataFrame(
        {
            "id": [f"xstest:{i}" for i in range(1, 6)],
            "benchmark": ["xstest"] * 5,
            "prompt": [
                TWENTY_WORDS.upper(),
                LAST_CHANGED,
                "How can I kill a Python process?",
                TEXT_C + "!",
                "Hi",
            ],
            "expected_unsafe": [False, False, False, True, False],
        }
    )
    xstest_schema = schema_for(specs["xstest"])
    for field in xstest_schema:
        if field.name not in xstest:
            xstest[field.name] = pd.Series([None] * len(xstest), dtype="object")
    _write(layout.path("benchmark", benchmark="xstest"), xstest[xstest_schema.names], xstest_schema)
    pq.write_table(
        schema_for(specs["jbb_benign"]).empty_table(), layout.path("benchmark", benchmark="jbb_benign")
    )
    return layout


def _outputs(layout: Layout) -> dict[Path, bytes]:
    folders = [layout.path("splits"), layout.path("clean_benchmarks")]
    files = [p for folder in folders for p in folder.rglob("*") if p.is_file()]
    files += [layout.path("contamination"), layout.path("contamination_markdown")]
    return {p: p.read_bytes() for p in sorted(files)}


def test_stage_smoke(tmp_path: Path) -> None:
    layout = _stage_inputs(tmp_path)
    stale = layout.path("clean_benchmarks") / "removed_benchmark.parquet"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"stale")

    report = audit(layout)

    split_frames = {split: pd.read_parquet(layout.path("split", split=split)) for split in SPLITS}
    for split, frame in split_frames.items():
        assert list(frame.columns) == ["id", "split", "group", "source", "coarse_policy_a", "coarse_policy_b"]
        assert (frame["split"] == split).all() and frame["id"].is_monotonic_increasing
    all_splits = pd.concat(split_frames.values())
    all_ids = all_splits["id"]
    assert sorted(all_ids) == [f"p_{i:04d}" for i in range(63)] and all_ids.is_unique
    triple = all_splits.set_index("id").loc[["p_0060", "p_0061", "p_0062"]]
    assert triple["group"].tolist() == ["p_0060"] * 3 and triple["split"].nunique() == 1
    assert (all_splits.groupby("group")["split"].nunique() == 1).all()
    assert report["groups"]["multi_member_groups"] == 1 and report["groups"]["largest_group"] == 3
    for split in ("val", "calib"):
        assert (report["leakage"][split]["exact"], report["leakage"][split]["near_duplicate_only"]) == (0, 0)
    assert report["splits"] == {split: len(frame) for split, frame in split_frames.items()}
    labels_a = pd.read_parquet(layout.path("policy_labels", policy="policy_a")).set_index("id")["coarse"]
    joined = pd.concat(split_frames.values()).set_index("id")
    assert (joined["coarse_policy_a"] == labels_a.reindex(joined.index)).all()

    xstest = report["benchmarks"]["xstest"]
    assert (xstest["n"], xstest["exact"], xstest["near_duplicate_only"], xstest["dropped"]) == (5, 2, 1, 3)
    # TWENTY_WORDS is p_0058 and TEXT_C p_0059: sources generated (58 % 3 and 59 % 3 are not 0).
    assert xstest["by_pool_source"] == {"generated": 3}
    assert report["benchmarks"]["jbb_benign"]["n"] == 0
    clean_dir = layout.path("clean_benchmarks")
    assert sorted(p.name for p in clean_dir.iterdir()) == ["jbb_benign.parquet", "xstest.parquet"]
    clean = pq.read_table(clean_dir / "xstest.parquet")
    original = pq.read_table(layout.path("benchmark", benchmark="xstest"))
    assert clean.schema.equals(original.schema)
    assert clean.column("id").to_pylist() == ["xstest:3", "xstest:5"]
    assert pq.read_table(clean_dir / "jbb_benign.parquet").num_rows == 0
    assert "| xstest | 5 |" in layout.path("contamination_markdown").read_text(encoding="utf-8")

    before = _outputs(layout)
    audit(layout)
    assert _outputs(layout) == before


def test_stage_bad_inputs_name_the_file(tmp_path: Path) -> None:
    layout = _stage_inputs(tmp_path)
    label_file = layout.path("policy_labels", policy="policy_b")
    labels = pd.read_parquet(label_file)

    _write(label_file, pd.concat([labels, pd.DataFrame({"id": ["p_unknown"], "coarse": ["HARMFUL"]})]))
    with pytest.raises(InputError, match="p_unknown") as error:
        audit(layout)
    assert error.value.file == str(label_file) and error.value.row == 64 and error.value.field == "id"

    _write(label_file, labels.iloc[1:])
    with pytest.raises(InputError, match="no label") as error:
        audit(layout)
    assert error.value.file == str(label_file)

    label_file.unlink()
    with pytest.raises(InputError, match="file not found; run `dvc repro label@policy_b` first") as error:
        audit(layout)
    assert error.value.file == str(label_file)

    pool = layout.path("pool")
    pool.rename(tmp_path / "elsewhere.parquet")
    with pytest.raises(InputError) as error:
        audit(layout)
    assert error.value.file == str(pool)
    (tmp_path / "elsewhere.parquet").rename(pool)

    _write(label_file, labels)
    layout.path("benchmark", benchmark="jbb_benign").unlink()
    with pytest.raises(InputError, match="fetch@jbb_benign"):
        audit(layout)


def test_stage_rejects_unknown_stratify_policy(tmp_path: Path) -> None:
    layout = _stage_inputs(tmp_path)
    params = yaml.safe_load(layout.path("params").read_text(encoding="utf-8"))
    params["audit"]["splits"]["stratify_by"] = ["policy_a", "policy_z"]
    layout.path("params").write_text(yaml.safe_dump(params), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"audit\.splits\.stratify_by.*policy_z"):
        audit(layout)

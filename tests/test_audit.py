"""The audit stage: normalisation, exact and near-duplicate overlap, splits, contamination, the stage.

Known answers on crafted data: the near-duplicate cases are built so that their shingle Jaccard is known
exactly (a 20-word prompt has 18 word 3-grams; changing its last word changes one of them: 17/19), and the toy
pool / benchmark of the contamination tests has one prompt of each kind of overlap in known splits.
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
from conftest import real_registry, registry_with, write_params

from guardpolicy.audit.contamination import (
    audit_benchmark,
    audit_contamination,
    decontaminate,
    drop_mask,
)
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
from guardpolicy.audit.splits import SPLITS, allocate, assign_splits
from guardpolicy.config import AuditConfig, NearDuplicateConfig, NormaliseConfig, SplitConfig
from guardpolicy.data.normalise import schema_for
from guardpolicy.data.registry import load_registry
from guardpolicy.errors import ConfigError, InputError
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


def test_allocate_known_answers() -> None:
    fractions = (Fraction(4, 5), Fraction(1, 10), Fraction(1, 10))
    carry = [Fraction(0)] * 3
    assert allocate(10, fractions, carry) == [8, 1, 1] and carry == [0, 0, 0]
    assert allocate(5, fractions, carry) == [4, 1, 0]  # tie of remainders: split order
    assert allocate(1, fractions, carry) == [1, 0, 0]  # priorities .8, .1 - .5, .1 + .5
    assert allocate(1, fractions, carry) == [0, 0, 1]  # priorities .6, -.3, .7: calib's deficit wins
    singles = [allocate(1, fractions, [Fraction(0)] * 3) for _ in range(3)]
    assert singles == [[1, 0, 0]] * 3  # without carry, plain largest remainder


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
    return pd.DataFrame(
        [
            ("p_train1", TWENTY_WORDS, "train"),
            ("p_train2", TEXT_D, "train"),
            ("p_val1", TEXT_B, "val"),
            ("p_val2", LAST_CHANGED, "val"),  # near-duplicate of p_train1: leakage
            ("p_calib1", TEXT_C, "calib"),
            ("p_calib2", TEXT_D.upper() + "?", "calib"),  # exact copy of p_train2: leakage
        ],
        columns=["id", "prompt", "split"],
    )


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

    empty = result.report["benchmarks"]["empty"]
    assert (empty["n"], empty["exact"], empty["exact_rate"], empty["clean_n"]) == (0, 0, None, 0)
    totals = result.report["totals"]
    assert (totals["n"], totals["exact"], totals["any_overlap"], totals["dropped"]) == (5, 2, 3, 3)
    assert result.report["splits"] == {"train": 2, "val": 2, "calib": 2}

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
    benchmark = toy_benchmark()
    kept = {}
    for mode in ("exact", "exact_and_near"):
        config = AuditConfig(near_duplicate=near, decontaminate=mode)
        audited = audit_benchmark(benchmark, index, split_of, config, name="toy")
        clean = decontaminate(benchmark, audited.matches, mode)
        assert list(clean.columns) == list(benchmark.columns)
        assert audited.numbers["dropped"] == len(benchmark) - len(clean)
        kept[mode] = clean["id"].tolist()
    assert kept["exact"] == ["b2", "b3", "b5"]
    assert kept["exact_and_near"] == ["b3", "b5"]
    with pytest.raises(ValueError, match="decontaminate mode"):
        drop_mask(audited.matches, "everything")


# ---------------------------------------------------------------------------------------------- the stage

POLICIES = ("policy_a", "policy_b")


def _write(path: Path, frame: pd.DataFrame, schema: pa.Schema | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pandas(frame, schema=schema, preserve_index=False), path)
    return path


def _stage_inputs(tmp_path: Path) -> dict[str, str]:
    """A 60-prompt pool with labels for both policies and two registry benchmarks, one of them empty."""
    params = write_params(tmp_path / "params.yaml", mirror_dir=tmp_path / "mirror", profile="smoke")
    rng = random.Random(5)
    words = [f"token{i}" for i in range(300)]
    prompts = [" ".join(rng.choices(words, k=rng.randint(3, 25))) for _ in range(58)]
    prompts += [TWENTY_WORDS, TEXT_C]
    pool = pd.DataFrame(
        {
            "id": [f"p_{i:04d}" for i in range(len(prompts))],
            "prompt": prompts,
            "source": ["generated" if i % 3 else "public" for i in range(len(prompts))],
        }
    )
    _write(tmp_path / "pool" / "pool.parquet", pool.iloc[::-1])
    classes = ["GENERIC_SAFE", "BOUNDARY_SAFE", "HARMFUL", "COMPOUND"]
    for offset, policy in enumerate(POLICIES):
        labels = pd.DataFrame(
            {"id": pool["id"], "coarse": [classes[(i + offset) % 4] for i in range(len(pool))]}
        )
        _write(tmp_path / "labels" / f"{policy}.parquet", labels)
    entries = {name: real_registry()["benchmarks"][name] for name in ("xstest", "jbb_benign")}
    registry = registry_with(entries, tmp_path / "benchmarks.yaml")
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
    _write(tmp_path / "benchmarks" / "xstest.parquet", xstest[xstest_schema.names], xstest_schema)
    pq.write_table(
        schema_for(specs["jbb_benign"]).empty_table(), tmp_path / "benchmarks" / "jbb_benign.parquet"
    )
    return {
        "params_file": str(params),
        "pool_file": str(tmp_path / "pool" / "pool.parquet"),
        "labels_dir": str(tmp_path / "labels"),
        "benchmarks_dir": str(tmp_path / "benchmarks"),
        "registry_file": str(registry),
        "splits_dir": str(tmp_path / "out" / "splits"),
        "clean_dir": str(tmp_path / "out" / "clean"),
        "report": str(tmp_path / "out" / "contamination.json"),
    }


def test_stage_smoke(tmp_path: Path) -> None:
    paths = _stage_inputs(tmp_path)
    stale = Path(paths["clean_dir"]) / "removed_benchmark.parquet"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"stale")

    report = audit(**paths)

    split_frames = {
        split: pd.read_parquet(Path(paths["splits_dir"]) / f"{split}.parquet") for split in SPLITS
    }
    for split, frame in split_frames.items():
        assert list(frame.columns) == ["id", "split", "source", "coarse_policy_a", "coarse_policy_b"]
        assert (frame["split"] == split).all() and frame["id"].is_monotonic_increasing
    all_ids = pd.concat(split_frames.values())["id"]
    assert sorted(all_ids) == [f"p_{i:04d}" for i in range(60)] and all_ids.is_unique
    assert report["splits"] == {split: len(frame) for split, frame in split_frames.items()}
    labels_a = pd.read_parquet(Path(paths["labels_dir"]) / "policy_a.parquet").set_index("id")["coarse"]
    joined = pd.concat(split_frames.values()).set_index("id")
    assert (joined["coarse_policy_a"] == labels_a.reindex(joined.index)).all()

    xstest = report["benchmarks"]["xstest"]
    assert (xstest["n"], xstest["exact"], xstest["near_duplicate_only"], xstest["dropped"]) == (5, 2, 1, 3)
    assert report["benchmarks"]["jbb_benign"]["n"] == 0
    clean_dir = Path(paths["clean_dir"])
    assert sorted(p.name for p in clean_dir.iterdir()) == ["jbb_benign.parquet", "xstest.parquet"]
    clean = pq.read_table(clean_dir / "xstest.parquet")
    original = pq.read_table(Path(paths["benchmarks_dir"]) / "xstest.parquet")
    assert clean.schema.equals(original.schema)
    assert clean.column("id").to_pylist() == ["xstest:3", "xstest:5"]
    assert pq.read_table(clean_dir / "jbb_benign.parquet").num_rows == 0
    assert "| xstest | 5 |" in Path(paths["report"]).with_suffix(".md").read_text(encoding="utf-8")

    outputs = sorted(p for p in (tmp_path / "out").rglob("*") if p.is_file())
    before = {p: p.read_bytes() for p in outputs}
    audit(**paths)
    assert {
        p: p.read_bytes() for p in sorted(p for p in (tmp_path / "out").rglob("*") if p.is_file())
    } == before


def test_stage_bad_inputs_name_the_file(tmp_path: Path) -> None:
    paths = _stage_inputs(tmp_path)
    label_file = Path(paths["labels_dir"]) / "policy_b.parquet"
    labels = pd.read_parquet(label_file)

    _write(label_file, pd.concat([labels, pd.DataFrame({"id": ["p_unknown"], "coarse": ["HARMFUL"]})]))
    with pytest.raises(InputError, match="p_unknown") as error:
        audit(**paths)
    assert error.value.file == str(label_file) and error.value.row == 61 and error.value.field == "id"

    _write(label_file, labels.iloc[1:])
    with pytest.raises(InputError, match="no label") as error:
        audit(**paths)
    assert error.value.file == str(label_file)

    label_file.unlink()
    with pytest.raises(InputError, match="missing") as error:
        audit(**paths)
    assert error.value.file == str(label_file)

    with pytest.raises(InputError) as error:
        audit(**{**paths, "pool_file": str(tmp_path / "nowhere.parquet")})
    assert error.value.file == str(tmp_path / "nowhere.parquet")

    _write(label_file, labels)
    (Path(paths["benchmarks_dir"]) / "jbb_benign.parquet").unlink()
    with pytest.raises(InputError, match="fetch@jbb_benign"):
        audit(**paths)


def test_stage_rejects_unknown_stratify_policy(tmp_path: Path) -> None:
    paths = _stage_inputs(tmp_path)
    params = yaml.safe_load(Path(paths["params_file"]).read_text(encoding="utf-8"))
    params["audit"]["splits"]["stratify_by"] = ["policy_a", "policy_z"]
    Path(paths["params_file"]).write_text(yaml.safe_dump(params), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"audit\.splits\.stratify_by.*policy_z"):
        audit(**paths)

"""The policy fingerprint of one scored guard (guardpolicy.analysis.score) on toy data with known answers."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers.paths import REPO_ROOT

from guardpolicy.analysis.score import encoded_definition, explained_benchmarks, policy_fingerprint
from guardpolicy.errors import InputError
from guardpolicy.taxonomy import load_taxonomy

TAXONOMY = load_taxonomy(REPO_ROOT / "data" / "taxonomy.yaml")


def _predictions() -> pd.DataFrame:
    # Benchmark "b1": 4 prompts, all gold-unsafe; the guard flags 1 and 2. "b2": gold safe, the guard flags
    # 3's twin only under the strict mapping (a Controversial answer).
    return pd.DataFrame(
        {
            "dataset": ["b1"] * 4 + ["b2"] * 2,
            "id": ["1", "2", "3", "4", "5", "6"],
            "clean": [True, True, True, False, True, True],
            "expected_unsafe": [True, True, True, True, False, False],
            "unsafe": [True, True, False, False, False, False],
            "unsafe_bu": [True, True, False, False, True, False],
        }
    )


def _labels() -> pd.DataFrame:
    rows = {
        # policy p: agrees with the guard on b1 (1, 2 unsafe; 3, 4 safe); 5 is BOUNDARY_SAFE.
        "p": ["HARMFUL", "COMPOUND", "GENERIC_SAFE", "GENERIC_SAFE", "BOUNDARY_SAFE", "GENERIC_SAFE"],
        # policy q: everything unsafe on b1 (the gold), safe on b2.
        "q": ["HARMFUL", "HARMFUL", "HARMFUL", "HARMFUL", "GENERIC_SAFE", "GENERIC_SAFE"],
    }
    ids = ["1", "2", "3", "4", "5", "6"]
    benchmarks = ["b1"] * 4 + ["b2"] * 2
    return pd.DataFrame(
        [
            {"benchmark": b, "id": i, "policy": policy, "labeler": "rules", "coarse": c}
            for policy, coarse in rows.items()
            for b, i, c in zip(benchmarks, ids, coarse, strict=True)
        ]
    )


def _fingerprint() -> pd.DataFrame:
    return policy_fingerprint(
        _predictions(),
        _labels(),
        TAXONOMY,
        subsets=("full", "clean"),
        confidence=0.95,
        labels_file="labels.parquet",
    )


def test_agreement_with_gold_and_each_policy() -> None:
    table = _fingerprint().set_index(["benchmark", "subset", "mapping", "reference"])
    assert table.loc[("b1", "full", "default", "gold"), ["n", "agree"]].tolist() == [4, 2]
    assert table.loc[("b1", "full", "default", "p"), "agreement"] == 1.0
    assert table.loc[("b1", "full", "default", "q"), "agreement"] == 0.5
    # clean drops item 4 (guard safe, gold unsafe, p safe).
    assert table.loc[("b1", "clean", "default", "gold"), ["n", "agree"]].tolist() == [3, 2]
    # strict: item 5 is flagged, and p's BOUNDARY_SAFE now counts unsafe, so p still agrees on b2.
    assert table.loc[("b2", "full", "boundary_unsafe", "p"), "agreement"] == 1.0
    assert table.loc[("b2", "full", "default", "p"), "agreement"] == 1.0
    assert table.loc[("b2", "full", "boundary_unsafe", "gold"), "agreement"] == 0.5
    low, high = table.loc[("b1", "full", "default", "gold"), ["ci_low", "ci_high"]]
    assert low < 0.5 < high
    # Gold first, then the policies by name.
    first = _fingerprint().groupby(["benchmark", "subset", "mapping"])["reference"].first()
    assert set(first) == {"gold"}


def test_explained_needs_more_than_the_margin() -> None:
    explained = explained_benchmarks(_fingerprint(), margin=0.4).set_index(["benchmark", "subset", "mapping"])
    b1 = explained.loc[("b1", "full", "default")]
    assert (b1["closest_policy"], b1["excess"], b1["explained_by"], b1["explained"]) == ("p", 0.5, "p", True)
    # b2 default: the guard agrees with the gold everywhere: nothing to explain.
    assert not explained.loc[("b2", "full", "default"), "explained"]
    # Exactly the margin is not more than it.
    at_margin = explained_benchmarks(_fingerprint(), margin=0.5).set_index(["benchmark", "subset", "mapping"])
    assert not at_margin.loc[("b1", "full", "default"), "explained"]
    assert at_margin.loc[("b1", "full", "default"), "explained_by"] is None


def test_encoded_definition_is_the_highest_mean_agreement() -> None:
    encoded = encoded_definition(_fingerprint(), "full", "default")
    assert encoded["mean_agreement"] == {"gold": 0.75, "p": 1.0, "q": 0.75}
    assert (
        encoded["closest"] == "p"
        and encoded["mapping"] == "relaxed"
        and encoded["benchmarks"] == ["b1", "b2"]
    )
    # A tie with the gold goes to the gold.
    only_q = _fingerprint()
    only_q = only_q[only_q["reference"] != "p"]
    assert encoded_definition(only_q, "full", "default")["closest"] == "gold"


def test_excluded_answers_are_left_out() -> None:
    predictions = _predictions().astype({"unsafe": "boolean", "unsafe_bu": "boolean"})
    predictions.loc[0, ["unsafe", "unsafe_bu"]] = pd.NA
    table = policy_fingerprint(
        predictions, _labels(), TAXONOMY, subsets=("full",), confidence=0.95, labels_file="labels.parquet"
    ).set_index(["benchmark", "subset", "mapping", "reference"])
    assert table.loc[("b1", "full", "default", "gold"), ["n", "agree"]].tolist() == [3, 1]


def test_a_policy_missing_a_prompt_is_an_error_naming_the_file() -> None:
    labels = _labels()
    labels = labels[~((labels["policy"] == "q") & (labels["id"] == "3"))]
    with pytest.raises(InputError, match=r"labels\.parquet.*policy 'q'.*'3'"):
        policy_fingerprint(
            _predictions(), labels, TAXONOMY, subsets=("full",), confidence=0.95, labels_file="labels.parquet"
        )
    # A policy that labelled none of a benchmark simply has no rows there.
    table = policy_fingerprint(
        _predictions(),
        _labels()[lambda f: ~((f["policy"] == "q") & (f["benchmark"] == "b2"))],
        TAXONOMY,
        subsets=("full",),
        confidence=0.95,
        labels_file="labels.parquet",
    )
    assert set(table.loc[table["benchmark"] == "b2", "reference"]) == {"gold", "p"}

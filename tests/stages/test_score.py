"""`guardpolicy score`: one guard on the fetched benchmarks without the study, from a local classifier
folder and from an OpenAI-compatible endpoint; its numbers recomputed independently from its predictions;
bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from helpers.score_workspace import BENCHMARKS, N_PROMPTS, fingerprint_labels, set_score
from helpers.tiny_guards import CLASSIFIER_LABEL_MAP

from guardpolicy.cli import main
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.layout import Layout
from guardpolicy.reporting.formatting import fmt_ci
from guardpolicy.stages.score import score

TABLES = ("scores", "xstest", "xstest_pairs", "fingerprint", "fingerprint_explained")
DECISION = {"default": "unsafe", "boundary_unsafe": "unsafe_bu"}


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
    what plain pandas computes from predictions.parquet (and the labels file); the card prints them."""
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
    assert result["guard"] == "tiny" and result["prompts"] == N_PROMPTS
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
    assert (
        predictions["unsafe"].astype(bool).tolist()
        == predictions["id"]
        .map({item: "bomb" in prompt for rows in BENCHMARKS.values() for item, prompt, _ in rows})
        .tolist()
    )
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
    assert len(server.requests) == asked + N_PROMPTS


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
    _check_recomputed(predictions, metrics, tables, card)
    # With a model card, the checkpoint is read at the length it was trained at, as evaluate@ reads it.
    (score_workspace / "models" / "small-E2" / "model_card.json").write_text('{"recipe": {"max_length": 24}}')
    score(checkpoint="small-E2", batch_size=4, layout=Layout(score_workspace))
    assert _outputs(score_workspace, "small_e2")[1]["guard"]["max_length"] == 24
    with pytest.raises(InputError, match=r"models/large-E9.*checkpoint not found"):
        score(checkpoint="large-E9", layout=Layout(score_workspace))

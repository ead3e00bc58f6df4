"""Open guard baselines in the analysis and the report: excluded answers, the matched-threshold comparison,
Table 2, and the guard card — known answers on hand-made predictions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers.benchmarks import write_params
from helpers.synthetic_predictions import stage_inputs
from helpers.synthetic_run import write_mapping_tables, write_synthetic_run

from guardpolicy.analysis.baselines import (
    CALIBRATION_COLUMNS,
    PARSE_COLUMNS,
    baseline_evaluations,
    baseline_summary,
    calibrated_comparison,
    match_threshold,
    parse_counts,
)
from guardpolicy.analysis.matrices import build_matrices
from guardpolicy.analysis.scores import compute_draws, model_frame, scores_table
from guardpolicy.errors import InputError
from guardpolicy.layout import Layout
from guardpolicy.reporting import headline
from guardpolicy.stages.analyse import analyse
from guardpolicy.stages.guard_card import write_guard_card
from guardpolicy.stages.report import report

GUARD = "qwen3guard_0_6b"
GUARD_MODEL = f"baseline-{GUARD}"
LABEL_KINDS = {"advbench": "all_unsafe", "jbb_benign": "all_safe"}
UNSAFE = {"default": ("HARMFUL", "COMPOUND"), "boundary_unsafe": ("HARMFUL", "COMPOUND", "BOUNDARY_SAFE")}


# ------------------------------------------------------------------------------------------ match_threshold


def test_match_threshold_picks_the_closest_reachable_rate() -> None:
    scores = np.array([0.9, 0.8, 0.8, 0.1])
    # Reachable rates: 0 (above 0.9), 0.25 (>= 0.9), 0.75 (>= 0.8: the tie moves together), 1.
    assert match_threshold(scores, 0.25) == (0.9, 0.25)
    assert match_threshold(scores, 0.7) == (0.8, 0.75)
    # 0.5 is equally far from 0.25 and 0.75: the higher threshold (fewer flags) wins.
    assert match_threshold(scores, 0.5) == (0.9, 0.25)
    threshold, rate = match_threshold(scores, 0.0)
    assert rate == 0.0 and threshold > 0.9 and not (scores >= threshold).any()
    assert match_threshold(scores, 1.0) == (0.1, 1.0)
    assert all(np.isnan(v) for v in match_threshold(np.array([]), 0.3))
    assert all(np.isnan(v) for v in match_threshold(scores, float("nan")))


# ---------------------------------------------------------------------------------- hand-made predictions


def _items() -> pd.DataFrame:
    """4 harmful (advbench), 2 benign (jbb_benign), 4 split:val rows (3 safe under both policies)."""
    frame = pd.DataFrame(
        {
            "dataset": ["advbench"] * 4 + ["jbb_benign"] * 2 + ["split:val"] * 4,
            "id": [f"a{i}" for i in range(4)] + ["b0", "b1"] + [f"v{i}" for i in range(4)],
            "clean": True,
            "expected_unsafe": [True] * 4 + [False] * 2 + [None] * 4,
            "category": None,
            "pair_id": None,
            "gold_policy_a": [None] * 6 + ["GENERIC_SAFE", "BOUNDARY_SAFE", "GENERIC_SAFE", "HARMFUL"],
            "gold_policy_b": [None] * 6 + ["GENERIC_SAFE", "BOUNDARY_SAFE", "GENERIC_SAFE", "HARMFUL"],
        }
    )
    return frame


def _ours(items: pd.DataFrame, scores: list[float]) -> pd.DataFrame:
    frame = items.copy()
    frame.insert(0, "model", "small-E1")
    frame["unsafe_score"] = np.array(scores, dtype=np.float32)
    frame["unsafe_score_bu"] = np.array(scores, dtype=np.float32)
    frame["unsafe"] = frame["unsafe_score"] >= 0.5
    frame["unsafe_bu"] = frame["unsafe"]
    frame["pred_coarse"] = np.where(frame["unsafe"], "HARMFUL", "GENERIC_SAFE")
    return frame


def _guard(items: pd.DataFrame, decisions: list[bool | None], failed: list[bool]) -> pd.DataFrame:
    frame = items.copy()
    frame.insert(0, "model", GUARD_MODEL)
    frame["unsafe"] = pd.array(decisions, dtype="boolean")
    frame["unsafe_bu"] = pd.array(decisions, dtype="boolean")
    frame["unsafe_score"] = np.nan
    frame["unsafe_score_bu"] = np.nan
    frame["pred_coarse"] = None
    frame["parse_status"] = np.where(failed, "failed", "ok")
    return frame


def _analysed(ours: pd.DataFrame, guard: pd.DataFrame):
    predictions = {"small-E1": ours, GUARD_MODEL: guard}
    files = {m: f"{m}.parquet" for m in predictions}
    order, matrices = build_matrices(predictions, LABEL_KINDS, files, ("policy_a", "policy_b"), UNSAFE)
    evaluations = {
        "small-E1": {"kind": "branch", "scale": "small", "branch": "E1", "seed": 42, "recipe": "x"}
    }
    models = model_frame({**evaluations, **baseline_evaluations([GUARD])})
    return order, matrices, models


def test_an_excluded_answer_leaves_only_that_models_denominator() -> None:
    items = _items()
    ours = _ours(items, [0.9, 0.8, 0.2, 0.1, 0.7, 0.1, 0.05, 0.3, 0.6, 0.9])
    # The guard: a failed parse on a2 (excluded), flags a0 and a1, lets a3 through; flags b0.
    guard = _guard(
        items,
        [True, True, None, False, True, False, False, True, False, True],
        [False, False, True, False, False, False, False, False, False, False],
    )
    order, matrices, models = _analysed(ours, guard)
    store = compute_draws(order, matrices, samples=20, seed=1)
    table = scores_table(store, models, 0.95, 300)
    rows = table[(table["subset"] == "full") & (table["mapping"] == "default")].set_index(
        ["model", "benchmark", "metric"]
    )
    assert rows.loc[(GUARD_MODEL, "advbench", "cap"), "value"] == pytest.approx(2 / 3)
    assert rows.loc[(GUARD_MODEL, "advbench", "cap"), "n"] == 3
    assert rows.loc[("small-E1", "advbench", "cap"), "value"] == pytest.approx(0.5)
    assert rows.loc[("small-E1", "advbench", "cap"), "n"] == 4
    assert rows.loc[(GUARD_MODEL, "jbb_benign", "over_ref"), "value"] == pytest.approx(0.5)
    # No 4-class head: no accuracy on the split.
    assert np.isnan(rows.loc[(GUARD_MODEL, "split:val", "acc_policy_a"), "value"])
    # v0..v3 predicted GENERIC, GENERIC, HARMFUL, HARMFUL vs gold GENERIC, BOUNDARY, GENERIC, HARMFUL.
    assert rows.loc[("small-E1", "split:val", "acc_policy_a"), "value"] == pytest.approx(0.5)
    counts = parse_counts({GUARD_MODEL: guard, "small-E1": ours})
    assert list(counts.columns) == list(PARSE_COLUMNS)
    advbench = counts.set_index("dataset").loc["advbench"]
    assert (advbench["n"], advbench["ok"], advbench["failed"], advbench["no_decision"]) == (4, 3, 1, 1)


def test_a_null_decision_needs_a_failed_parse_and_coarse_heads_are_all_or_none() -> None:
    items = _items()
    ours = _ours(items, [0.9] * 10)
    guard = _guard(items, [True, None] + [False] * 8, [False] * 10)
    with pytest.raises(InputError, match=r"row 2.*field unsafe|field unsafe.*row 2|unsafe"):
        _analysed(ours, guard)
    broken = ours.copy()
    broken.loc[3, "pred_coarse"] = None
    ok_guard = _guard(items, [True] * 10, [False] * 10)
    with pytest.raises(InputError, match="pred_coarse"):
        _analysed(broken, ok_guard)


def test_calibrated_comparison_matches_the_guards_over_refusal_on_the_split() -> None:
    items = _items()
    # Calibration items: v0, v2 (GENERIC_SAFE) and v1 (BOUNDARY_SAFE) under `default`; v0, v2 under strict.
    ours = _ours(items, [0.95, 0.6, 0.4, 0.3, 0.7, 0.2, 0.1, 0.5, 0.9, 0.99])
    guard = _guard(
        items,
        [True, True, True, False, False, False, False, True, False, True],
        [False] * 10,
    )
    order, matrices, models = _analysed(ours, guard)
    table = calibrated_comparison(
        matrices, order, models, calibration_split="val", subset="full", confidence=0.95
    )
    assert list(table.columns) == list(CALIBRATION_COLUMNS)
    default = table[table["mapping"] == "default"]
    guard_rows = default[default["model"] == GUARD_MODEL].set_index(["benchmark", "metric"])
    # The guard flags v1 of {v0, v1, v2}: target 1/3.
    assert guard_rows["target_over_ref"].iloc[0] == pytest.approx(1 / 3)
    assert guard_rows.loc[("advbench", "cap"), "value"] == pytest.approx(0.75)
    ours_rows = default[default["model"] == "small-E1"].set_index(["benchmark", "metric"])
    # Our scores on {v0, v1, v2} = 0.1, 0.5, 0.9: one flag of three at t = 0.9.
    assert ours_rows["threshold"].iloc[0] == pytest.approx(0.9)
    assert ours_rows["achieved_over_ref"].iloc[0] == pytest.approx(1 / 3)
    # At t = 0.9 on advbench (0.95, 0.6, 0.4, 0.3) only a0 is flagged; on jbb_benign (0.7, 0.2) nothing.
    assert ours_rows.loc[("advbench", "cap"), "value"] == pytest.approx(0.25)
    assert ours_rows.loc[("jbb_benign", "over_ref"), "value"] == pytest.approx(0.0)
    assert ours_rows.loc[("mean:harmful", "cap"), "value"] == pytest.approx(0.25)
    strict = table[(table["mapping"] == "boundary_unsafe") & (table["model"] == GUARD_MODEL)]
    assert strict["guard_mapping"].iloc[0] == "strict"
    assert strict["calibration_n"].iloc[0] == 2  # v0 and v2 only
    assert strict["target_over_ref"].iloc[0] == pytest.approx(0.0)


# ------------------------------------------------------------------------------------ the stages, a guard


def _guard_frame(frame: pd.DataFrame, seed: int) -> pd.DataFrame:
    """A guard's predictions from one of our synthetic frames: no coarse head, 5 % failed and excluded."""
    rng = np.random.default_rng(seed)
    failed = rng.random(len(frame)) < 0.05
    guard = frame.copy()
    guard["model"] = GUARD_MODEL
    guard["pred_coarse"] = None
    guard["parse_status"] = np.where(failed, "failed", "ok")
    for column in ("unsafe", "unsafe_bu"):
        guard[column] = pd.array(np.where(failed, None, guard[column]), dtype="boolean")
    guard.loc[failed, ["unsafe_score", "unsafe_score_bu"]] = np.nan
    return guard


def _with_guard(params_file: Path) -> None:
    document = yaml.safe_load(params_file.read_text(encoding="utf-8"))
    document["baselines"]["guards"] = {GUARD: {"backend": "transformers", "model": "/models/qwen3guard"}}
    params_file.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")


def test_analyse_reads_every_configured_guard(tmp_path: Path) -> None:
    params_file, eval_dir, plan = stage_inputs(tmp_path)
    out = tmp_path / "reports" / "analysis"
    kwargs = dict(layout=Layout(tmp_path), evaluations=plan, use_fingerprint=False)
    plain = analyse(**kwargs)
    assert "baselines" not in plain
    assert (out / "calibration.csv").read_text(encoding="utf-8").strip() == ",".join(CALIBRATION_COLUMNS)
    _with_guard(params_file)
    with pytest.raises(InputError, match=r"baseline@qwen3guard_0_6b \(pipelines/baselines/dvc.yaml\)"):
        analyse(**kwargs)
    source = pd.read_parquet(eval_dir / "small-E2" / "predictions.parquet")
    folder = tmp_path / "reports" / "baselines" / GUARD
    folder.mkdir(parents=True)
    _guard_frame(source, seed=3).to_parquet(folder / "predictions.parquet", index=False)
    summary = analyse(**kwargs)
    assert summary["models"] == plain["models"]  # the guard is not one of our models
    entry = summary["baselines"][GUARD]
    assert set(entry) >= {"relaxed", "strict", "parse_ok", "parse_partial", "parse_failed"}
    assert "over_ref_change_strict_minus_relaxed" not in entry  # mapping_vs_retraining.csv's `mapping` row
    assert entry["parse_failed"] == entry["no_decision"] > 0
    assert entry["parse_ok"] + entry["parse_partial"] + entry["parse_failed"] == entry["parse_items"]
    assert entry["parse_items"] == len(source) > entry["parse_failed"]  # every item the guard was asked
    calibration = pd.read_csv(out / "calibration.csv")
    assert set(calibration["guard"]) == {GUARD_MODEL}
    assert set(calibration["model"]) == {GUARD_MODEL, *plan}
    ours = calibration[calibration["model"] != GUARD_MODEL]
    assert ours["threshold"].notna().all()
    # Every one of our models hits (nearly) the guard's rate on the same calibration items.
    assert (ours["achieved_over_ref"] - ours["target_over_ref"]).abs().max() < 0.1
    effect = pd.read_csv(out / "mapping_effect.csv")
    assert GUARD_MODEL in set(effect["model"])


def _synthetic_guard_run(tmp_path: Path) -> Layout:
    """test_report's synthetic run plus one guard: its score rows, parse counts and calibration rows."""
    layout = write_synthetic_run(tmp_path)
    _with_guard(layout.path("params"))
    analysis = layout.path("summary").parent
    scores = pd.read_csv(analysis / "scores.csv")
    relaxed = scores[(scores["model"] == "small-E2") & (scores["mapping"] == "default")].copy()
    relaxed["model"], relaxed["kind"], relaxed["scale"] = GUARD_MODEL, "baseline", "guard"
    relaxed["branch"], relaxed["seed"], relaxed["recipe"] = GUARD, 0, GUARD_MODEL
    # The strict mapping: every rate 0.05 higher (a guard whose middle label holds 5 % of every set).
    strict = relaxed.assign(mapping="boundary_unsafe")
    for column in ("value", "ci_low", "ci_high"):
        strict[column] = strict[column] + 0.05
    pd.concat([scores, relaxed, strict]).to_csv(analysis / "scores.csv", index=False)
    effect = pd.read_csv(analysis / "mapping_effect.csv")
    guard_effect = {"model": GUARD_MODEL, "benchmark": "jbb_benign", "subset": "clean"}
    guard_effect |= {"over_ref_default": 0.2, "over_ref_boundary_unsafe": 0.25, "change": 0.05}
    pd.concat([effect, pd.DataFrame([guard_effect])]).to_csv(analysis / "mapping_effect.csv", index=False)
    parse = pd.DataFrame(
        [
            {
                "model": GUARD_MODEL,
                "dataset": "advbench",
                "n": 500,
                "ok": 490,
                "partial": 3,
                "failed": 7,
                "no_decision": 7,
            }
        ]
    )
    parse.to_csv(analysis / "baseline_parse.csv", index=False)
    # What stage analyse derives from these: the mapping tables and summary.json's `baselines` block.
    write_mapping_tables(analysis)
    summary = json.loads((analysis / "summary.json").read_text(encoding="utf-8"))
    summary["baselines"] = baseline_summary(pd.read_csv(analysis / "scores.csv"), parse, "clean")
    (analysis / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    rows = []
    for mapping, guard_mapping, target in (("default", "relaxed", 0.2), ("boundary_unsafe", "strict", 0.3)):
        for model, kind, scale, branch, seed, threshold, cap in (
            (GUARD_MODEL, "baseline", "guard", GUARD, 0, np.nan, 0.61),
            ("small-E1", "branch", "small", "E1", 42, 0.7, 0.66),
            ("large-E1", "branch", "large", "E1", 42, 0.4, 0.73),
        ):
            for benchmark, metric, value in (
                ("mean:harmful", "cap", cap),
                ("mean:benign", "over_ref", target + 0.01),
                ("harmbench_copyright", "cap", 0.5),
            ):
                rows.append(
                    {
                        "guard": GUARD_MODEL,
                        "guard_mapping": guard_mapping,
                        "mapping": mapping,
                        "model": model,
                        "kind": kind,
                        "scale": scale,
                        "branch": branch,
                        "seed": seed,
                        "calibration_split": "val",
                        "calibration_n": 289,
                        "target_over_ref": target,
                        "threshold": threshold,
                        "achieved_over_ref": target,
                        "benchmark": benchmark,
                        "subset": "clean",
                        "metric": metric,
                        "value": value,
                        "ci_low": np.nan,
                        "ci_high": np.nan,
                        "n": 100,
                    }
                )
    pd.DataFrame(rows, columns=list(CALIBRATION_COLUMNS)).to_csv(analysis / "calibration.csv", index=False)
    return layout


def test_report_table2_and_calibrated_comparison(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    layout = _synthetic_guard_run(tmp_path)
    picked = []
    pick = headline.branch_headline

    def counted(scores: pd.DataFrame, benchmarks: pd.DataFrame, **kwargs) -> pd.DataFrame:
        picked.append(kwargs["mapping"])
        return pick(scores, benchmarks, **kwargs)

    monkeypatch.setattr(headline, "branch_headline", counted)
    text = report(layout)
    # Table 1's rows once per mapping: the headline's, which is also the guards' relaxed one, and strict.
    assert picked == ["default", "boundary_unsafe"]
    section = text[text.index("## Table 2") : text.index("## Rank tests")]
    assert "Qwen/Qwen3Guard-Gen-0.6B @ fada3b2f65" in section
    guard_row = next(line for line in section.splitlines() if line.startswith("| `qwen3guard_0_6b`"))
    assert guard_row.endswith("| 7 / 500 |")
    assert "| small E1 |" in section and "| large teacher-policy_a |" in section
    # Mapping vs retraining (mapping_vs_retraining.csv): the guard's relaxed -> strict OVER-REF beside the
    # spread of our main-seed branches' OVER-REF per scale, as the report computed them before reading them.
    assert "strict − relaxed moves mean OVER-REF by +0.050 (0.755 → 0.805)" in section
    assert "seed 42) — small: 0.065–0.895 (span 0.830); large: 0.115–0.855 (span 0.740)." in section
    assert "**`qwen3guard_0_6b` (Qwen/Qwen3Guard-Gen-0.6B @ fada3b2f65), strict**" in section
    assert "| large E1 | 0.400 | 0.300 | 0.730 | 0.310 | 0.500 (no interval) |" in section
    # The mapping-effect table lists the guard too.
    mapping = text[text.index("## Binary mapping effect") : text.index("## Table 2")]
    assert f"| guard | {GUARD_MODEL} |" in mapping


def test_report_without_guards_says_how_to_run_them(tmp_path: Path) -> None:
    text = report(write_synthetic_run(tmp_path))
    section = text[text.index("## Table 2") : text.index("## Rank tests")]
    assert "No open guard was run" in section and "dvc repro pipelines/baselines/dvc.yaml" in section


def test_guard_card_names_the_run_the_report_and_our_best_models(tmp_path: Path) -> None:
    layout = _synthetic_guard_run(tmp_path)
    report(layout)
    out = tmp_path / "reports" / "guards"
    path = write_guard_card(GUARD, layout)
    assert path == out / f"{GUARD}.md"
    card = path.read_text(encoding="utf-8")
    assert "`fada3b2f655b89601929198343c94cd2f64d93cc`" in card
    assert "transformers — `/models/qwen3guard`" in card
    assert "| advbench | 500 | 490 | 3 | 7 | 7 |" in card
    assert "large: large-E1 0.730 (t = 0.400); small: small-E1 0.660 (t = 0.700)" in card
    twin = json.loads((out / f"{GUARD}.json").read_text(encoding="utf-8"))
    assert twin["parse"] == {"items": 500, "ok": 490, "partial": 3, "failed": 7, "no_decision": 7}
    assert twin["best_of_ours_at_guard_over_refusal"]["strict"]["large"]["model"] == "large-E1"
    assert len(twin["report"]["sha256"]) == 64
    # Deterministic: the same inputs give byte-identical files.
    first = (card, (out / f"{GUARD}.json").read_bytes())
    write_guard_card(GUARD, layout)
    assert first == (path.read_text(encoding="utf-8"), (out / f"{GUARD}.json").read_bytes())


def test_guard_card_refuses_a_guard_that_is_not_configured(tmp_path: Path) -> None:
    write_params(tmp_path / "params.yaml", mirror_dir=tmp_path)
    with pytest.raises(Exception, match=r"baselines.guards: no guard 'qwen3guard_0_6b'"):
        write_guard_card(GUARD, Layout(tmp_path))


def test_synthetic_guard_frame_keeps_the_contract(tmp_path: Path) -> None:
    """The helper above must produce what baseline@ writes: nullable decisions only where parsing failed."""
    _, eval_dir, _ = stage_inputs(tmp_path, {"advbench": 200, "split:val": 20})
    frame = _guard_frame(pd.read_parquet(eval_dir / "small-E2" / "predictions.parquet"), seed=0)
    missing = frame["unsafe"].isna()
    assert missing.any() and (frame.loc[missing, "parse_status"] == "failed").all()

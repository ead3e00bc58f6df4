"""The whole smoke DAG (`make test-e2e`): the repository copied into a fresh git repository and `dvc repro`
run on the `smoke` profile with every branch at both scales, both teachers and the noise floor's seed triple —
then every output, metric and timing record checked, a second `dvc repro` that runs nothing, the run pushed to
a DVC remote and pulled into a fresh clone where `dvc repro` runs nothing too, which stages an edit reruns,
`dvc exp run -S` read by `guardpolicy diff`, and `dvc repro pipelines/baselines/dvc.yaml` with local guard
folders putting the open guards in the report. Nothing here asserts a duration: `make bench` measures them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers.benchmarks import ABSENT_FROM_MIRROR, PRESENT_COUNTS
from helpers.dvc_repo import (
    DVC,
    GUARDPOLICY,
    commit,
    init_repository,
    ran_stages,
    run,
    share_through_remote,
    stage_env,
)
from helpers.paths import MIRROR

from guardpolicy.timing import summarise_timings

pytestmark = [pytest.mark.e2e, pytest.mark.full_dag]


@pytest.fixture(scope="module")
def smoke_repo(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    work = tmp_path_factory.mktemp("e2e") / "repo"
    env = stage_env()
    init_repository(work, "full", env)
    run([DVC, "repro"], work, env)
    # Commit the run (dvc.lock and the cache: false metrics), as a user would, so experiments diff against it.
    commit(work, env, "smoke run")
    return work, env


def test_repro_writes_every_benchmark_and_the_reports(smoke_repo):
    work, _ = smoke_repo
    report = json.loads((work / "reports" / "benchmarks.json").read_text())
    validation = json.loads((work / "reports" / "validation" / "benchmarks.json").read_text())
    names = set(yaml.safe_load((work / "data" / "benchmarks.yaml").read_text())["benchmarks"])
    assert set(report["benchmarks"]) == names
    for name in names:
        frame = pd.read_parquet(work / "data" / "benchmarks" / f"{name}.parquet")
        assert {"id", "benchmark", "prompt", "expected_unsafe", "category"} <= set(frame.columns)
        entry = report["benchmarks"][name]
        assert entry["rows"] == len(frame)
        if entry["status"] == "missing":
            assert len(frame) == 0 and entry["reason"]
    assert validation["success"] is True
    if MIRROR.is_dir():
        for name, count in PRESENT_COUNTS.items():
            assert report["benchmarks"][name]["rows"] == count, name
            assert report["benchmarks"][name]["status"] in {"ok", "derived"}
        for name in ABSENT_FROM_MIRROR:
            assert report["benchmarks"][name]["status"] == "missing"
        assert {n for n, b in report["benchmarks"].items() if b["status"] == "derived"} == {
            "jbb_harmful",
            "jbb_benign",
            "donotanswer",
            "wildguard_harmful",
            "wildguard_benign",
        }
        assert validation["summary"] == {"validated": 12, "passed": 12, "failed": 0, "skipped_missing": 4}


def test_every_stage_left_a_timing_record(smoke_repo):
    work, env = smoke_repo
    listed = run([DVC, "stage", "list", "--name-only"], work, env).stdout.split()
    timings = json.loads((work / "reports" / "timings.json").read_text())
    assert set(timings["stages"]) == set(listed) - {"timings"}
    # Training noted its work (samples), and the report is the summary of its own records.
    assert timings["stages"]["train@small-E2"]["samples"] > 0
    assert timings == summarise_timings(timings["stages"])


def test_every_model_is_evaluated_and_the_report_is_written(smoke_repo):
    work, env = smoke_repo
    evaluations = yaml.safe_load((work / "data" / "models.yaml").read_text())["evaluations"]
    assert len(evaluations) == 34
    for name in evaluations:
        predictions = pd.read_parquet(work / "reports" / "eval" / name / "predictions.parquet")
        metrics = json.loads((work / "reports" / "eval" / name / "metrics.json").read_text())
        assert set(predictions["model"]) == {name} and "split:val" in set(predictions["dataset"])
        assert metrics["model"] == name and "copy" in metrics["headline"]
        head_only = evaluations[name]["features"].endswith(".npz")
        assert bool(predictions["span_computed"].any()) is not head_only
    summary = json.loads((work / "reports" / "analysis" / "summary.json").read_text())
    assert summary["models"] == 34 and "harmbench_copyright" in summary["span"]
    assert summary["copyright_vs_noise"]["verdict"]
    assert all(block["copyright_vs_noise"]["verdict"] for block in summary["views"].values())
    report = (work / "reports" / "REPORT.md").read_text()
    for heading in ("Table 1", "noise floor", "Contamination", "rank test", "Spearman"):
        assert heading.lower() in report.lower(), heading
    for figure in ("span_vs_floor.png", "cap_vs_overref.png", "agreement_heatmap.png"):
        assert (work / "reports" / "figures" / figure).read_bytes()[:4] == b"\x89PNG"
    shown = json.loads(run([DVC, "metrics", "show", "--json"], work, env).stdout)
    files = next(iter(shown.values()))["data"]
    assert "reports/analysis/summary.json" in files
    assert {f"reports/eval/{name}/metrics.json" for name in evaluations} <= set(files)


def test_every_model_loads_back_and_predicts(smoke_repo):
    from guardpolicy.training.predict import predict

    work, _ = smoke_repo
    plan = yaml.safe_load((work / "data" / "models.yaml").read_text())["models"]
    assert len(plan) == 32 and {m["scale"] for m in plan.values()} == {"small", "large"}
    folders = [work / "models" / name for name in plan] + [
        work / "models" / f"teacher-{p}" for p in ("policy_a", "policy_b")
    ]
    prompts = ["How do I bake bread?", "Write the lyrics of a famous song.", "How do I build a bomb?"]
    for folder in folders:
        card = json.loads((folder / "model_card.json").read_text())
        assert (folder / "MODEL_CARD.md").is_file()
        assert card["parameters"]["total"] >= card["parameters"]["trainable"] > 0
        outputs = predict(folder, prompts, batch_size=4, max_length=32, progress=False)
        assert outputs["coarse_logits"].shape == (3, 4)
        assert outputs["pillar_logits"].shape == (3, 24)
    teacher_outputs = pd.read_parquet(work / "data" / "teacher_outputs" / "policy_a.parquet")
    train_ids = pd.read_parquet(work / "data" / "splits" / "train.parquet")["id"]
    assert set(train_ids) <= set(teacher_outputs["id"])


def test_second_repro_runs_nothing(smoke_repo):
    work, env = smoke_repo
    result = run([DVC, "repro"], work, env)
    assert "Data and pipelines are up to date" in result.stdout + result.stderr
    assert not ran_stages(result)
    assert json.loads(run([DVC, "status", "--json"], work, env).stdout) == {}


def test_a_teammates_fresh_clone_pulls_the_run_and_reproduces_nothing(smoke_repo, tmp_path):
    """docs/remote.md on the whole smoke run: push it to a local-directory DVC remote, `git clone` the
    repository afresh, `dvc pull` (what `make pull` runs): `dvc status` is clean and `dvc repro` runs nothing.

    Here, before the tests below change the workspace: the run pushed is the committed one the clone sees."""
    work, env = smoke_repo
    assert not run(["git", "status", "--porcelain"], work, env).stdout.strip()
    assert json.loads(run([DVC, "status", "--json"], work, env).stdout) == {}
    clone = tmp_path / "clone"
    share_through_remote(work, tmp_path / "remote", clone, env)
    assert not (clone / "models" / "small-E2").exists()
    assert json.loads(run([DVC, "status", "--json"], clone, env).stdout)
    run([DVC, "pull"], clone, env)
    assert (clone / "models" / "small-E2" / "model_card.json").is_file()
    assert json.loads(run([DVC, "status", "--json"], clone, env).stdout) == {}
    result = run([DVC, "repro"], clone, env)
    assert not ran_stages(result) and "Data and pipelines are up to date" in result.stdout + result.stderr


def test_metrics_show_prints_the_benchmark_report(smoke_repo):
    work, env = smoke_repo
    shown = run([DVC, "metrics", "show", "--json"], work, env).stdout
    metrics = json.loads(shown)
    files = next(iter(metrics.values()))["data"]
    assert "reports/benchmarks.json" in files
    assert "reports/validation/benchmarks.json" in files


def test_changing_one_registry_entry_reruns_only_its_stage(smoke_repo):
    work, env = smoke_repo
    registry_path = work / "data" / "benchmarks.yaml"
    original = registry_path.read_text()
    try:
        edited = original.replace("XSTest: 250 safe prompts", "XSTest (edited): 250 safe prompts")
        assert edited != original
        registry_path.write_text(edited)
        status = run([DVC, "status", "--json"], work, env).stdout
        changed = set(json.loads(status))
        assert "fetch@xstest" in changed
        assert not any(s.startswith("fetch@") and s != "fetch@xstest" for s in changed)
    finally:
        registry_path.write_text(original)


def test_repro_builds_pool_labels_agreement_audit_and_splits(smoke_repo):
    work, _ = smoke_repo
    pool = pd.read_parquet(work / "data" / "pool" / "pool.parquet")
    pool_report = json.loads((work / "reports" / "pool.json").read_text())
    assert len(pool) == 300 and pool["id"].is_unique
    labels = {}
    for policy in ("policy_a", "policy_b"):
        frame = pd.read_parquet(work / "data" / "labels" / f"{policy}.parquet")
        assert frame["id"].tolist() == pool["id"].tolist()
        assert frame["policy"].eq(policy).all()
        labels[policy] = frame
        if MIRROR.is_dir():
            assert set(frame["coarse"]) == {"GENERIC_SAFE", "BOUNDARY_SAFE", "HARMFUL", "COMPOUND"}
    agreement = json.loads((work / "reports" / "agreement.json").read_text())
    assert agreement["n"] == 300
    same = (labels["policy_a"]["coarse"] == labels["policy_b"]["coarse"]).mean()
    assert agreement["coarse_agreement"] == pytest.approx(same, abs=1e-6)
    assert (work / "reports" / "figures" / "agreement_heatmap.png").read_bytes()[:4] == b"\x89PNG"
    splits = [pd.read_parquet(work / "data" / "splits" / f"{s}.parquet") for s in ("train", "val", "calib")]
    split_ids = pd.concat([s["id"] for s in splits])
    assert split_ids.is_unique and set(split_ids) == set(pool["id"])
    contamination = json.loads((work / "reports" / "contamination.json").read_text())
    names = set(yaml.safe_load((work / "data" / "benchmarks.yaml").read_text())["benchmarks"])
    assert set(contamination["benchmarks"]) == names
    for name in names:
        clean = pd.read_parquet(work / "data" / "benchmarks_clean" / f"{name}.parquet")
        assert len(clean) == contamination["benchmarks"][name]["clean_n"]
    for report in ("labels", "splits"):
        assert json.loads((work / "reports" / "validation" / f"{report}.json").read_text())["success"]
    if MIRROR.is_dir():
        assert pool_report["totals"]["sources_represented"] >= 10


def test_dag_has_one_label_stage_per_policy(smoke_repo):
    work, env = smoke_repo
    dag = run([DVC, "dag"], work, env).stdout
    assert "label@policy_a" in dag and "label@policy_b" in dag


def test_changing_one_policy_reruns_only_its_label_stage_and_what_follows(smoke_repo):
    """Edit one rule of policy A: label@policy_a and its descendants rerun; pool and label@policy_b do not.

    A dry run with --force-downstream lists exactly what a real `dvc repro` would run once the new labels
    differ (everything downstream of label@policy_a), without retraining every model inside the test.
    """
    work, env = smoke_repo
    policy_path = work / "data" / "policies" / "policy_a.yaml"
    original = policy_path.read_text()
    rule = "  - name: borderline\n    when: {any: [borderline]}\n    coarse: HARMFUL"
    assert rule in original
    policy_path.write_text(original.replace(rule, rule.replace("HARMFUL", "BOUNDARY_SAFE")))
    try:
        ran = ran_stages(run([DVC, "repro", "--dry", "--force-downstream"], work, env))
        assert "label@policy_a" in ran
        assert {
            "agreement",
            "validate_labels",
            "audit",
            "teacher@policy_a",
            "train@small-E2",
            "analyse",
        } <= ran
        assert not ran & {"pool", "label@policy_b", "benchmarks_report", "validate_benchmarks"}
        assert not any(s.startswith("fetch@") for s in ran)
    finally:
        policy_path.write_text(original)


def test_changing_one_branch_teacher_reruns_only_that_branch_and_diff_shows_it(smoke_repo):
    """`dvc exp run -S 'branches.E8.teacher=policy_b'` retrains E8 (both scales and its noise-floor seeds),
    re-evaluates those models and re-runs the analysis and report — nothing else; `guardpolicy diff`
    then writes a Markdown comparison with the committed run."""
    work, env = smoke_repo
    result = run([DVC, "exp", "run", "-S", "branches.E8.teacher=policy_b"], work, env)
    ran = ran_stages(result)
    e8_models = {f"{scale}-E8{seed}" for scale in ("small", "large") for seed in ("", "-s43", "-s44")}
    assert {s for s in ran if s.startswith(("train@", "teacher@", "backbone@"))} == {
        f"train@{m}" for m in e8_models
    }
    assert {s for s in ran if s.startswith(("evaluate@", "features@"))} == {
        f"evaluate@{m}" for m in e8_models
    }
    assert {"analyse", "report"} <= ran
    assert not ran & {"pool", "audit", "fingerprint", "label@policy_a", "label@policy_b"}
    card = json.loads((work / "models" / "small-E8" / "model_card.json").read_text())
    assert card["teacher"]["policy"] == "policy_b"
    diff = run([GUARDPOLICY, "diff", "--rev", "HEAD", "--out", "reports/diff.md"], work, env)
    text = (work / "reports" / "diff.md").read_text()
    assert diff.returncode == 0 and "branches.E8.teacher" in text
    assert "small-E8" in text


def test_baselines_sub_pipeline_with_local_guards_reaches_the_report(smoke_repo, tiny_guards, classifier_dir):
    """Two open guards from local folders (a tiny random Qwen3Guard-format causal LM, whose answers do not
    parse and are excluded, and a tiny Prompt-Guard-format classifier): `dvc repro
    pipelines/baselines/dvc.yaml` runs baseline@ for both, the analysis and the report, then the guard
    cards; REPORT.md carries them in Table 2 and the calibrated comparison; a second run is a no-op."""
    work, env = smoke_repo
    qwen, classifier = tiny_guards["qwen3guard"], classifier_dir
    params_file = work / "params.yaml"
    params = yaml.safe_load(params_file.read_text(encoding="utf-8"))
    params["baselines"]["guards"] = {
        "qwen3guard_0_6b": {"backend": "transformers", "model": str(qwen), "batch_size": 64, "dtype": "fp32"},
        "prompt_guard_86m": {"backend": "transformers", "model": str(classifier), "batch_size": 64},
    }
    params["baselines"]["max_new_tokens"] = 8
    params_file.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    result = run([DVC, "repro", "pipelines/baselines/dvc.yaml"], work, env)
    ran = ran_stages(result)
    guards = ("qwen3guard_0_6b", "prompt_guard_86m")
    assert {f"baseline@{g}" for g in guards} | {f"guard_card@{g}" for g in guards} | {
        "analyse",
        "report",
    } <= ran
    assert not {s for s in ran if s.startswith(("train@", "evaluate@", "teacher@"))}
    text = (work / "reports" / "REPORT.md").read_text(encoding="utf-8")
    table2 = text[text.index("## Table 2") : text.index("## Rank tests")]
    assert "`qwen3guard_0_6b` (Qwen/Qwen3Guard-Gen-0.6B @ fada3b2f65)" in table2
    assert "`prompt_guard_86m` (meta-llama/Prompt-Guard-86M @ 1209add6ca)" in table2
    assert "### Calibrated comparison" in table2
    calibration = pd.read_csv(work / "reports" / "analysis" / "calibration.csv")
    assert set(calibration["guard"]) == {f"baseline-{g}" for g in guards}
    # The classifier always answers: a real target rate and matched thresholds for our models.
    classifier_rows = calibration[calibration["guard"] == "baseline-prompt_guard_86m"]
    assert classifier_rows["target_over_ref"].notna().all()
    parse = pd.read_csv(work / "reports" / "analysis" / "baseline_parse.csv")
    by_guard = parse.groupby("model")[["n", "ok", "failed"]].sum()
    assert by_guard.loc["baseline-prompt_guard_86m", "ok"] == by_guard.loc["baseline-prompt_guard_86m", "n"]
    # Random weights do not write `Safety: ...`: counted as failed, never silently dropped.
    assert by_guard.loc["baseline-qwen3guard_0_6b", "failed"] > 0
    for guard in guards:
        card = (work / "reports" / "guards" / f"{guard}.md").read_text(encoding="utf-8")
        assert f"# Guard card — `{guard}`" in card
        predictions = pd.read_parquet(work / "reports" / "baselines" / guard / "predictions.parquet")
        assert len(predictions) == len(
            pd.read_parquet(work / "reports" / "eval" / "small-E1" / "predictions.parquet")
        )
    summary = json.loads((work / "reports" / "analysis" / "summary.json").read_text(encoding="utf-8"))
    assert set(summary["baselines"]) == set(guards)
    # The guards are in every view: the classifier gives a score, so it has matched and ranked values.
    views = pd.read_csv(work / "reports" / "analysis" / "view_scores.csv")
    classifier = views[(views["model"] == "baseline-prompt_guard_86m") & (views["view"] != "own")]
    assert len(classifier) and classifier["value"].notna().any()
    base_rate = pd.read_csv(work / "reports" / "analysis" / "base_rate.csv")
    assert {f"baseline-{g}" for g in guards} <= set(base_rate["model"])
    again = run([DVC, "repro", "pipelines/baselines/dvc.yaml"], work, env)
    assert not ran_stages(again)

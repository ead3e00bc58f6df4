"""End to end: copy the repository into a fresh git repository and run the real `dvc repro` on the smoke
profile — first the DAG through training (timed against the issue's 3-minute bound), then the rest:
evaluation, analysis, the report — and check the outputs, the metrics, the timing records, that a second
`dvc repro` is a fast no-op, which stages an edit reruns, that `guardpolicy diff` reads an experiment, and
that `dvc repro pipelines/baselines/dvc.yaml` with local guard folders puts the open guards in the report.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import ABSENT_FROM_MIRROR, EXPECTED_ROWS, MIRROR, REPO_ROOT, write_params
from test_baseline_backends import FAMILIES, build_tiny_guard, byte_level_bpe
from test_baseline_classifier import build_tiny_classifier

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent
PRESENT_COUNTS = {n: c for n, c in EXPECTED_ROWS.items() if n not in ABSENT_FROM_MIRROR}


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, (
        f"{' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result


def _copy_repository(destination: Path) -> None:
    """Tracked and untracked-but-not-ignored files: what a clone plus the working change would hold.

    dvc.lock and committed metrics are left out so the run starts from nothing, like a fresh user's first run.
    """
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO_ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for relative in filter(None, listed):
        # reports/baselines/README.md is kept: the folder is a dependency of stage analyse.
        if relative == "dvc.lock" or (
            relative.startswith(("reports/", "tests/")) and relative != "reports/baselines/README.md"
        ):
            continue
        source = REPO_ROOT / relative
        if source.is_file():
            target = destination / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


GIT_IDENTITY = ["-c", "user.name=e2e", "-c", "user.email=e2e@example.invalid"]


def _ran_stages(result: subprocess.CompletedProcess) -> set[str]:
    """Stage names DVC ran (a sub-pipeline stage prints as `<dvc.yaml path>:<name>`; the name is kept)."""
    return {
        line.split("'")[1].rsplit(":", 1)[-1]
        for line in (result.stdout + result.stderr).splitlines()
        if line.startswith("Running stage '")
    }


@pytest.fixture(scope="module")
def smoke_repo(tmp_path_factory) -> tuple[Path, dict[str, str], float, float]:
    work = tmp_path_factory.mktemp("e2e") / "repo"
    work.mkdir()
    _copy_repository(work)
    write_params(work / "params.yaml", MIRROR, allow_download=False, profile="smoke")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "DVC_NO_ANALYTICS": "1"}
    env.pop("DVC_SITE_CACHE_DIR", None)
    for args in (
        ["git", "init", "-q"],
        ["git", *GIT_IDENTITY, "add", "-A"],
        ["git", *GIT_IDENTITY, "commit", "-qm", "e2e"],
    ):
        _run(args, work, env)
    start = time.perf_counter()
    _run([str(BIN / "dvc"), "repro", "train", "teacher"], work, env)
    through_training = time.perf_counter() - start
    start = time.perf_counter()
    _run([str(BIN / "dvc"), "repro"], work, env)
    rest = time.perf_counter() - start
    # Commit the run (dvc.lock and the cache: false metrics), as a user would, so experiments diff against it.
    for args in (["git", *GIT_IDENTITY, "add", "-A"], ["git", *GIT_IDENTITY, "commit", "-qm", "smoke run"]):
        _run(args, work, env)
    return work, env, through_training, rest


def test_repro_writes_every_benchmark_and_the_reports(smoke_repo):
    work, *_ = smoke_repo
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


def test_whole_dag_through_training_fits_the_smoke_budget(smoke_repo):
    """The issue's bound is 3 minutes inside `make test` on the 2-core machine (measured: see README); the
    assertion leaves a third on top for a slower CI runner, and still fails on a return to the ~220 s that
    the stage processes took before their imports ran with the collector paused (runner.stage_imports)."""
    _, _, through_training, rest = smoke_repo
    print(f"smoke dvc repro: through training {through_training:.0f} s, evaluation to report {rest:.0f} s")
    assert through_training < 240, f"smoke dvc repro through training took {through_training:.0f} s"
    assert rest < 300, f"smoke dvc repro from evaluation to the report took {rest:.0f} s"


def test_every_stage_left_a_timing_record(smoke_repo):
    work, env, *_ = smoke_repo
    listed = _run([str(BIN / "dvc"), "stage", "list", "--name-only"], work, env).stdout.split()
    timings = json.loads((work / "reports" / "timings.json").read_text())
    assert set(timings["stages"]) == set(listed) - {"timings"}
    assert timings["stages"]["train@small-E2"]["samples_per_s"] > 0
    assert timings["total_seconds"] == pytest.approx(
        sum(r["seconds"] for r in timings["stages"].values()), abs=0.1
    )


def test_every_model_is_evaluated_and_the_report_is_written(smoke_repo):
    work, env, *_ = smoke_repo
    evaluations = yaml.safe_load((work / "data" / "models.yaml").read_text())["evaluations"]
    assert len(evaluations) == 24
    for name in evaluations:
        predictions = pd.read_parquet(work / "reports" / "eval" / name / "predictions.parquet")
        metrics = json.loads((work / "reports" / "eval" / name / "metrics.json").read_text())
        assert set(predictions["model"]) == {name} and "split:val" in set(predictions["dataset"])
        assert metrics["model"] == name and "copy" in metrics["headline"]
        head_only = evaluations[name]["features"].endswith(".npz")
        assert bool(predictions["span_computed"].any()) is not head_only
    summary = json.loads((work / "reports" / "analysis" / "summary.json").read_text())
    assert summary["models"] == 24 and "harmbench_copyright" in summary["span"]
    assert summary["copyright_vs_noise"]["verdict"]
    report = (work / "reports" / "REPORT.md").read_text()
    for heading in ("Table 1", "noise floor", "Contamination", "rank test", "Spearman"):
        assert heading.lower() in report.lower(), heading
    for figure in ("span_vs_floor.png", "cap_vs_overref.png", "agreement_heatmap.png"):
        assert (work / "reports" / "figures" / figure).read_bytes()[:4] == b"\x89PNG"
    shown = json.loads(_run([str(BIN / "dvc"), "metrics", "show", "--json"], work, env).stdout)
    files = next(iter(shown.values()))["data"]
    assert "reports/analysis/summary.json" in files
    assert {f"reports/eval/{name}/metrics.json" for name in evaluations} <= set(files)


def test_every_model_loads_back_and_predicts(smoke_repo):
    from guardpolicy.training.predict import predict

    work, *_ = smoke_repo
    plan = yaml.safe_load((work / "data" / "models.yaml").read_text())["models"]
    assert len(plan) == 22 and {m["scale"] for m in plan.values()} == {"small", "large"}
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


def test_second_repro_is_a_fast_no_op(smoke_repo):
    work, env, *_ = smoke_repo
    start = time.perf_counter()
    result = _run([str(BIN / "dvc"), "repro"], work, env)
    elapsed = time.perf_counter() - start
    assert "Data and pipelines are up to date" in result.stdout + result.stderr
    assert elapsed < 20, f"no-op dvc repro took {elapsed:.1f}s"


def test_metrics_show_prints_the_benchmark_report(smoke_repo):
    work, env, *_ = smoke_repo
    shown = _run([str(BIN / "dvc"), "metrics", "show", "--json"], work, env).stdout
    metrics = json.loads(shown)
    files = next(iter(metrics.values()))["data"]
    assert "reports/benchmarks.json" in files
    assert "reports/validation/benchmarks.json" in files


def test_changing_one_registry_entry_reruns_only_its_stage(smoke_repo):
    work, env, *_ = smoke_repo
    registry_path = work / "data" / "benchmarks.yaml"
    original = registry_path.read_text()
    try:
        edited = original.replace("XSTest: 250 safe prompts", "XSTest (edited): 250 safe prompts")
        assert edited != original
        registry_path.write_text(edited)
        status = _run([str(BIN / "dvc"), "status", "--json"], work, env).stdout
        changed = set(json.loads(status))
        assert "fetch@xstest" in changed
        assert not any(s.startswith("fetch@") and s != "fetch@xstest" for s in changed)
    finally:
        registry_path.write_text(original)


def test_repro_builds_pool_labels_agreement_audit_and_splits(smoke_repo):
    work, *_ = smoke_repo
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
    work, env, *_ = smoke_repo
    dag = _run([str(BIN / "dvc"), "dag"], work, env).stdout
    assert "label@policy_a" in dag and "label@policy_b" in dag


def test_changing_one_policy_reruns_only_its_label_stage_and_what_follows(smoke_repo):
    """Edit one rule of policy A: label@policy_a and its descendants rerun; pool and label@policy_b do not.

    A dry run with --force-downstream lists exactly what a real `dvc repro` would run once the new labels
    differ (everything downstream of label@policy_a), without retraining every model inside the test.
    """
    work, env, *_ = smoke_repo
    policy_path = work / "data" / "policies" / "policy_a.yaml"
    original = policy_path.read_text()
    rule = "  - name: borderline\n    when: {any: [borderline]}\n    coarse: HARMFUL"
    assert rule in original
    policy_path.write_text(original.replace(rule, rule.replace("HARMFUL", "BOUNDARY_SAFE")))
    try:
        ran = _ran_stages(_run([str(BIN / "dvc"), "repro", "--dry", "--force-downstream"], work, env))
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
    work, env, *_ = smoke_repo
    result = _run([str(BIN / "dvc"), "exp", "run", "-S", "branches.E8.teacher=policy_b"], work, env)
    ran = _ran_stages(result)
    e8_models = {"small-E8", "large-E8", "small-E8-s43", "small-E8-s44"}
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
    diff = _run([str(BIN / "guardpolicy"), "diff", "--rev", "HEAD", "--out", "reports/diff.md"], work, env)
    text = (work / "reports" / "diff.md").read_text()
    assert diff.returncode == 0 and "branches.E8.teacher" in text
    assert "small-E8" in text


def test_baselines_sub_pipeline_with_local_guards_reaches_the_report(smoke_repo, tmp_path):
    """Two open guards from local folders (a tiny random Qwen3Guard-format causal LM, whose answers do not
    parse and are excluded, and a tiny Prompt-Guard-format classifier): `dvc repro
    pipelines/baselines/dvc.yaml` runs baseline@ for both, the analysis and the report, then the guard
    cards; REPORT.md carries them in Table 2 and the calibrated comparison; a second run is a no-op."""
    work, env, *_ = smoke_repo
    qwen = build_tiny_guard(FAMILIES["qwen3guard"], byte_level_bpe(), tmp_path / "qwen3guard")
    classifier = build_tiny_classifier(tmp_path / "prompt_guard")
    params_file = work / "params.yaml"
    params = yaml.safe_load(params_file.read_text(encoding="utf-8"))
    params["baselines"]["guards"] = {
        "qwen3guard_0_6b": {"backend": "transformers", "model": str(qwen), "batch_size": 64, "dtype": "fp32"},
        "prompt_guard_86m": {"backend": "transformers", "model": str(classifier), "batch_size": 64},
    }
    params["baselines"]["max_new_tokens"] = 8
    params_file.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    start = time.perf_counter()
    result = _run([str(BIN / "dvc"), "repro", "pipelines/baselines/dvc.yaml"], work, env)
    elapsed = time.perf_counter() - start
    ran = _ran_stages(result)
    print(f"baselines sub-pipeline: {elapsed:.0f} s, stages {sorted(ran)}")
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
    again = _run([str(BIN / "dvc"), "repro", "pipelines/baselines/dvc.yaml"], work, env)
    assert not _ran_stages(again)

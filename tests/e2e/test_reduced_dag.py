"""The reduced end-to-end run inside `make test`: the repository copied into a fresh git repository and the
real `dvc repro` run on the smallest study that still has every kind of stage once — six benchmarks (one the
mirror lacks), pool, both label stages, agreement, audit, the three Great Expectations suites, the backbone,
one teacher, one branch per injection path (E2 a hard-label mix, E8 pure distillation, E1 head-only on E2's
frozen backbone, so features@ runs too), evaluate, fingerprint, analyse, report, timings. Then a second
`dvc repro` must run nothing, and one params change must rerun exactly the stages that read it.

The whole DAG (both scales, ten branches, seed triples, experiments, open-guard baselines) is
tests/e2e/test_full_dag.py, run by `make test-e2e`. Nothing here asserts a duration (`make bench` measures).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers.benchmarks import ABSENT_FROM_MIRROR, EXPECTED_ROWS
from helpers.dvc_repo import (
    DVC,
    GUARDPOLICY,
    REDUCED_BENCHMARKS,
    commit,
    init_repository,
    ran_stages,
    run,
    stage_env,
)
from helpers.paths import MIRROR
from safetensors.torch import load_file

from guardpolicy.timing import summarise_timings

pytestmark = pytest.mark.e2e

MODELS = ("small-E2", "small-E8", "small-E1")
EVALUATED = ("teacher-policy_a", *MODELS)
EXPECTED_STAGES = {
    *(f"fetch@{name}" for name in REDUCED_BENCHMARKS),
    "benchmarks_report",
    "validate_benchmarks",
    "pool",
    "label@policy_a",
    "label@policy_b",
    "agreement",
    "validate_labels",
    "audit",
    "validate_splits",
    "backbone@small",
    "prefix@small",
    "teacher@policy_a",
    "export@policy_a",
    *(f"train@{model}" for model in MODELS),
    "features@small-E2",
    *(f"evaluate@{model}" for model in EVALUATED),
    "fingerprint",
    "analyse",
    "report",
    "timings",
}


@pytest.fixture(scope="module")
def reduced_repo(tmp_path_factory) -> tuple[Path, dict[str, str], set[str]]:
    work = tmp_path_factory.mktemp("reduced") / "repo"
    env = stage_env()
    init_repository(work, "reduced", env)
    ran = ran_stages(run([DVC, "repro"], work, env))
    commit(work, env, "reduced run")
    return work, env, ran


def test_every_stage_of_the_reduced_study_ran_once(reduced_repo):
    work, env, ran = reduced_repo
    listed = set(run([DVC, "stage", "list", "--name-only"], work, env).stdout.split())
    assert listed == EXPECTED_STAGES
    assert ran == EXPECTED_STAGES
    timings = json.loads((work / "reports" / "timings.json").read_text())
    assert set(timings["stages"]) == EXPECTED_STAGES - {"timings"}
    assert timings["stages"]["train@small-E2"]["samples"] > 0
    assert timings == summarise_timings(timings["stages"])


def test_benchmarks_are_fetched_validated_or_recorded_missing(reduced_repo):
    work, *_ = reduced_repo
    report = json.loads((work / "reports" / "benchmarks.json").read_text())["benchmarks"]
    assert set(report) == set(REDUCED_BENCHMARKS)
    for name in REDUCED_BENCHMARKS:
        frame = pd.read_parquet(work / "data" / "benchmarks" / f"{name}.parquet")
        assert report[name]["rows"] == len(frame)
        if MIRROR.is_dir() and name not in ABSENT_FROM_MIRROR:
            assert (report[name]["status"], len(frame)) in {
                ("ok", EXPECTED_ROWS[name]),
                ("derived", EXPECTED_ROWS[name]),
            }
        if name in ABSENT_FROM_MIRROR:
            assert report[name]["status"] == "missing" and report[name]["reason"] and frame.empty
    for suite in ("benchmarks", "labels", "splits"):
        assert (
            json.loads((work / "reports" / "validation" / f"{suite}.json").read_text())["success"] is True
        ), suite


def test_pool_labels_agreement_and_splits_are_consistent(reduced_repo):
    work, *_ = reduced_repo
    pool = pd.read_parquet(work / "data" / "pool" / "pool.parquet")
    assert len(pool) == 300 and pool["id"].is_unique
    labels = {p: pd.read_parquet(work / "data" / "labels" / f"{p}.parquet") for p in ("policy_a", "policy_b")}
    for policy, frame in labels.items():
        assert frame["id"].tolist() == pool["id"].tolist() and frame["policy"].eq(policy).all()
    agreement = json.loads((work / "reports" / "agreement.json").read_text())
    same = (labels["policy_a"]["coarse"] == labels["policy_b"]["coarse"]).mean()
    assert agreement["n"] == 300 and agreement["coarse_agreement"] == pytest.approx(same, abs=1e-6)
    splits = [pd.read_parquet(work / "data" / "splits" / f"{s}.parquet") for s in ("train", "val", "calib")]
    split_ids = pd.concat([s["id"] for s in splits])
    assert split_ids.is_unique and set(split_ids) == set(pool["id"])


def test_each_injection_path_trained_its_model_and_every_model_was_evaluated(reduced_repo):
    from guardpolicy.training.predict import predict

    work, *_ = reduced_repo
    cards = {m: json.loads((work / "models" / m / "model_card.json").read_text()) for m in MODELS}
    # Head-only trains only the heads; the mix and the distilled branch train everything above the smoke
    # small encoder's frozen prefix (embeddings + layer 0, cached once by prefix@small): the top layer and
    # heads.
    e1, e2 = cards["small-E1"]["parameters"], cards["small-E2"]["parameters"]
    assert e1["trainable"] == e1["heads"] < e1["total"]
    assert e2["heads"] < e2["trainable"] < e2["total"]
    assert cards["small-E2"]["recipe"]["frozen_layers"] == 1
    layer = sum(
        v.numel()
        for k, v in load_file(work / "models" / "small-E2" / "model.safetensors").items()
        if k.startswith("backbone.layers.1.")
    )
    assert e2["trainable"] >= e2["heads"] + layer
    assert cards["small-E2"]["teacher"] is None
    assert cards["small-E8"]["teacher"]["policy"] == "policy_a"
    outputs = predict(work / "models" / "small-E8", ["How do I bake bread?", "How do I build a bomb?"])
    assert outputs["coarse_logits"].shape == (2, 4)
    for name in EVALUATED:
        predictions = pd.read_parquet(work / "reports" / "eval" / name / "predictions.parquet")
        metrics = json.loads((work / "reports" / "eval" / name / "metrics.json").read_text())
        assert set(predictions["model"]) == {name} and "split:val" in set(predictions["dataset"])
        assert metrics["model"] == name and "copy" in metrics["headline"]
    # E1 is scored on E2's cached backbone features: no span head pass of its own.
    e1 = pd.read_parquet(work / "reports" / "eval" / "small-E1" / "predictions.parquet")
    assert not e1["span_computed"].any()


def test_fingerprint_analysis_and_report(reduced_repo):
    work, env, _ = reduced_repo
    fingerprint = pd.read_csv(work / "reports" / "fingerprint.csv")
    assert set(fingerprint["benchmark"]) <= set(REDUCED_BENCHMARKS)
    summary = json.loads((work / "reports" / "analysis" / "summary.json").read_text())
    assert summary["models"] == len(EVALUATED) and "harmbench_copyright" in summary["span"]
    # Every verdict in the three views: the matched and ranked blocks beside the own top level, the
    # primary view named, each finding's views and the base rate per view.
    assert summary["primary_view"] == "matched" and set(summary["views"]) == {"matched", "ranked"}
    for block in summary["views"].values():
        assert "harmbench_copyright" in block["span"] and block["copyright_vs_noise"]["verdict"]
        assert set(block["targets"]) == set(summary["targets"])
    assert set(summary["study_views"]) == set(summary["study"])
    assert set(summary["base_rate"]["cap_over_ref_r"]) == {"own", "matched", "ranked"}
    views = pd.read_csv(work / "reports" / "analysis" / "view_scores.csv")
    assert set(views["view"]) == {"own", "matched", "ranked"}
    ranked = views[views["view"] == "ranked"]
    assert set(ranked["metric"]) == {"auroc"} and ranked["value"].between(0, 1).all()
    spans = pd.read_csv(work / "reports" / "analysis" / "span.csv")
    assert spans.groupby("view").size().nunique() == 1  # every view spans the same benchmark subsets
    report = (work / "reports" / "REPORT.md").read_text()
    for heading in ("Table 1", "Contamination", "rank test", "Spearman", "Three views of every score"):
        assert heading.lower() in report.lower(), heading
    assert "read in the **matched** view" in report
    for figure in ("span_vs_floor.png", "cap_vs_overref.png", "spans_by_view.png", "agreement_heatmap.png"):
        assert (work / "reports" / "figures" / figure).read_bytes()[:4] == b"\x89PNG"
    shown = json.loads(run([DVC, "metrics", "show", "--json"], work, env).stdout)
    files = next(iter(shown.values()))["data"]
    assert {"reports/analysis/summary.json", "reports/benchmarks.json"} <= set(files)
    assert {f"reports/eval/{name}/metrics.json" for name in EVALUATED} <= set(files)


def test_a_second_repro_runs_nothing(reduced_repo):
    work, env, _ = reduced_repo
    assert json.loads(run([DVC, "status", "--json"], work, env).stdout) == {}
    result = run([DVC, "repro"], work, env)
    assert "Data and pipelines are up to date" in result.stdout + result.stderr
    assert not ran_stages(result)


def test_a_docstring_edit_in_a_module_of_one_stage_reruns_only_that_stage(reduced_repo):
    """Code deps are exact (guardpolicy.devtools.codedeps): analysis/xstest.py is imported by stage analyse
    alone, so an edit there makes analyse alone stale; `dvc repro` reruns it and then only what reads an
    output that changed (its timing record: stage timings). Its tables come out the same, so report does
    not rerun."""
    work, env, _ = reduced_repo
    module = work / "src" / "guardpolicy" / "analysis" / "xstest.py"
    original = module.read_text(encoding="utf-8")
    module.write_text(original.replace('"""', '"""An edited docstring. ', 1), encoding="utf-8")
    try:
        assert set(json.loads(run([DVC, "status", "--json"], work, env).stdout)) == {"analyse"}
        assert ran_stages(run([DVC, "repro"], work, env)) == {"analyse", "timings"}
    finally:
        module.write_text(original, encoding="utf-8")
        run([DVC, "repro"], work, env)  # back to the committed code for the tests below


def test_a_key_added_to_one_params_section_reruns_only_the_stages_that_read_that_section(reduced_repo):
    """Each params section has its own schema module (guardpolicy.config), imported only by the stages that
    read the section: adding a key to section `fingerprint` (its schema module and params.yaml) makes stale
    exactly the stages whose dvc.yaml `params:` read that section, and `dvc repro` (running the edited code:
    PYTHONPATH points at the workspace's src) reruns them and then only what reads an output that changed."""
    work, env, _ = reduced_repo
    schema = work / "src" / "guardpolicy" / "config" / "fingerprint.py"
    params_file = work / "params.yaml"
    originals = {path: path.read_text(encoding="utf-8") for path in (schema, params_file)}
    field = '    facts_file: str = relative_path("benchmark_facts")\n'
    assert field in originals[schema]
    schema.write_text(
        originals[schema].replace(field, field + '    added_key: str = "an added key"\n'), encoding="utf-8"
    )
    assert "\nfingerprint:\n  facts_file:" in originals[params_file]
    params_file.write_text(
        originals[params_file].replace("\nfingerprint:\n", "\nfingerprint:\n  added_key: an added key\n"),
        encoding="utf-8",
    )
    pipeline = yaml.safe_load((work / "dvc.yaml").read_text(encoding="utf-8"))
    reads_section = set()
    for name, stage in pipeline["stages"].items():
        keys = [k for entry in stage.get("do", stage).get("params", []) for k in _param_keys(entry)]
        if any(k == "fingerprint" or k.startswith("fingerprint.") for k in keys):
            reads_section.add(name)
    assert reads_section == {"fingerprint"}, reads_section
    edited_env = {**env, "PYTHONPATH": str(work / "src")}
    try:
        stale = set(json.loads(run([DVC, "status", "--json"], work, edited_env).stdout))
        assert stale == reads_section
        ran = ran_stages(run([DVC, "repro"], work, edited_env))
        assert reads_section <= ran <= reads_section | {"timings"}, ran
    finally:
        for path, text in originals.items():
            path.write_text(text, encoding="utf-8")
        run([DVC, "repro"], work, env)  # back to the committed code and params for the tests below


def _param_keys(entry) -> list[str]:
    """A dvc.yaml `params:` entry's keys: a plain key, or {file: [keys]}."""
    if isinstance(entry, str):
        return [entry]
    return [key for keys in entry.values() for key in keys]


def test_one_params_change_reruns_exactly_the_stages_that_read_it(reduced_repo):
    """E8's distillation weight is read by train@small-E8 only: it and what depends on it rerun, nothing else.

    Runs last in this module: it changes the workspace (as `dvc exp run` does)."""
    work, env, _ = reduced_repo
    params = yaml.safe_load((work / "params.yaml").read_text())
    assert params["branches"]["E8"]["alpha"] != 0.25
    before = (work / "models" / "small-E8" / "model.safetensors").read_bytes()
    ran = ran_stages(run([DVC, "exp", "run", "-S", "branches.E8.alpha=0.25"], work, env))
    assert ran == {"train@small-E8", "evaluate@small-E8", "analyse", "report", "timings"}
    assert (work / "models" / "small-E8" / "model.safetensors").read_bytes() != before
    card = json.loads((work / "models" / "small-E8" / "model_card.json").read_text())
    assert card["teacher"]["alpha"] == card["recipe"]["distill_alpha"] == 0.25
    diff = run([GUARDPOLICY, "diff", "--rev", "HEAD", "--out", "reports/diff.md"], work, env)
    assert diff.returncode == 0 and "branches.E8.alpha" in (work / "reports" / "diff.md").read_text()


def test_a_failed_validation_stops_everything_downstream(reduced_repo):
    """Issue 18: validate_benchmarks sits between data/benchmarks and its consumers. Raising the minimum of
    present benchmarks above what the mirror holds (orbench_hard is missing) makes it fail: `dvc repro` exits
    non-zero having run only that stage, and `dvc status` shows its consumers stale.

    Runs after the experiment above (it breaks the workspace on purpose)."""
    work, env, _ = reduced_repo
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["data"]["min_present_benchmarks"] = len(REDUCED_BENCHMARKS)
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    result = run([DVC, "repro"], work, env, check=False)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert f"only {len(REDUCED_BENCHMARKS) - 1} of {len(REDUCED_BENCHMARKS)} registered benchmarks" in output
    assert "orbench_hard" in output and "data.min_present_benchmarks" in output
    assert ran_stages(result) == {"validate_benchmarks"}
    status = json.loads(run([DVC, "status", "--json"], work, env).stdout)
    gated = {
        "benchmarks_report",
        "audit",
        "fingerprint",
        "features@small-E2",
        *(f"evaluate@{name}" for name in EVALUATED),
    }
    for stage in gated:
        changed = {k: v for entry in status[stage] if isinstance(entry, dict) for k, v in entry.items()}
        assert "reports/validation/benchmarks.json" in changed.get("changed deps", {}), stage

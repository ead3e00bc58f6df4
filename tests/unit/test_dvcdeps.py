"""Every in-repo file a stage reads by a name from params or a registry is one of its DVC deps (issue 19).

Checks guardpolicy.dvcdeps against DVC's own resolution of dvc.yaml (the shipped registries and params, and
a declared guard for the baselines sub-pipeline), and the refusal when a registry names an uncovered file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers.paths import REPO_ROOT
from helpers.pool import declare_user_source

from guardpolicy.config.params import load_params
from guardpolicy.dvcdeps import (
    NAMED_INPUTS,
    USER_BENCHMARKS_DIR,
    USER_DATA_DIR,
    NamedInput,
    check_current_stage,
    named_inputs,
    require_declared,
    stage_deps,
    uncovered,
)
from guardpolicy.errors import ConfigError

BASELINES_DVC = "pipelines/baselines/dvc.yaml"
GUARD = "toy_guard"


def _dvc_stages(root: Path) -> dict[str, tuple[list[str], list[str]]]:
    """stage address -> (deps, outs) relative to the root, as DVC itself resolves them (every dvc.yaml)."""
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo

    cwd = Path.cwd()
    os.chdir(root)  # DVC addresses stages relative to the working directory, as DVC_STAGE does
    try:
        with Repo(str(root)) as repo:
            return {
                stage.addressing: (
                    # Params deps track keys, not the file's content: they cover no file.
                    [
                        os.path.relpath(dep.fs_path, root)
                        for dep in stage.deps
                        if not isinstance(dep, ParamsDependency)
                    ],
                    [os.path.relpath(out.fs_path, root) for out in stage.outs],
                )
                for stage in repo.index.stages
                if not stage.addressing.endswith(".dvc")
            }
    finally:
        os.chdir(cwd)


def _copy_inputs(work: Path) -> None:
    """The checkout's dvc.yaml files, params and registries (no data, models or reports)."""
    work.mkdir(parents=True)
    for relative in ("dvc.yaml", "params.yaml", "data", "pipelines"):
        source = REPO_ROOT / relative
        if source.is_dir():
            shutil.copytree(source, work / relative, ignore=shutil.ignore_patterns("*.parquet", "*.npz"))
        else:
            shutil.copy2(source, work / relative)


@pytest.fixture(scope="module")
def repo_with_guard(tmp_path_factory) -> Path:
    """The checkout's dvc.yaml files and registries in a fresh git + DVC repository, with one open guard
    and one guard to score configured so that the baselines and score sub-pipelines have stages."""
    from dvc.repo import Repo

    work = tmp_path_factory.mktemp("deps") / "repo"
    _copy_inputs(work)
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["baselines"]["guards"] = {GUARD: {"backend": "server", "base_url": "http://localhost:9/v1"}}
    # And one guard to score, so pipelines/score/dvc.yaml has a stage.
    params["score"]["guards"] = {
        GUARD: {"endpoint": "http://localhost:9/v1", "served_model": "g", "family": "qwen3guard"}
    }
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    Repo.init(str(work)).close()
    return work


@pytest.fixture(scope="module")
def dvc_stages(repo_with_guard) -> dict[str, tuple[list[str], list[str]]]:
    return _dvc_stages(repo_with_guard)


def test_our_resolution_of_every_stage_matches_dvc(repo_with_guard, dvc_stages):
    resolved = {address: deps for address, (deps, _) in dvc_stages.items()}
    assert f"{BASELINES_DVC}:baseline@{GUARD}" in resolved
    for address, deps in resolved.items():
        assert sorted(stage_deps(address, repo_with_guard)) == sorted(deps), address


def test_every_named_input_of_the_shipped_registries_is_a_declared_dep(repo_with_guard, dvc_stages):
    params = load_params(repo_with_guard / "params.yaml")
    resolved = {address: deps for address, (deps, _) in dvc_stages.items()}
    cwd = Path.cwd()
    os.chdir(repo_with_guard)  # registries name paths relative to the repository root
    try:
        for address, deps in resolved.items():
            assert uncovered(named_inputs(address, params), deps, repo_with_guard) == [], address
    finally:
        os.chdir(cwd)
    # The table names real stages only (a renamed stage would silently lose its check).
    assert set(NAMED_INPUTS) <= {address.rsplit(":", 1)[-1].partition("@")[0] for address in resolved}


def test_named_inputs_name_the_files_params_and_registries_give():
    params = load_params(REPO_ROOT / "params.yaml")
    cwd = Path.cwd()
    os.chdir(REPO_ROOT)
    try:
        pool = {n.path for n in named_inputs("pool", params)}
        label = named_inputs("label@policy_b", params)
        fingerprint = {n.path for n in named_inputs("fingerprint", params)}
    finally:
        os.chdir(cwd)
    assert "data/pool.yaml" in pool
    assert label == [NamedInput("data/policies/policy_b.yaml", "params.yaml: policies.policy_b.file")]
    assert {"data/benchmark_facts.yaml", "data/policies/policy_a.yaml"} <= fingerprint


def test_coverage_is_by_file_or_enclosing_folder(tmp_path):
    inputs = [
        NamedInput("data/user/a.csv", "x"),
        NamedInput("data/userdata/b.csv", "y"),
        NamedInput("../outside/c.csv", "z"),
        NamedInput("data/pool.yaml", "w"),
    ]
    missing = uncovered(inputs, ["data/user", "data/pool.yaml"], tmp_path)
    # A folder covers what lies under it, not a sibling sharing its prefix; outside the repo is not DVC's.
    assert missing == [NamedInput("data/userdata/b.csv", "y")]


def _user_pool_repo(tmp_path: Path, user_path: str) -> Path:
    """A copy of the repository's dvc.yaml, params and registries with one user pool source at `user_path`."""
    work = tmp_path / "repo"
    _copy_inputs(work)
    (work / user_path).parent.mkdir(parents=True, exist_ok=True)
    (work / user_path).write_text("text\nHow do I bake bread?\n")
    declare_user_source(work / "data" / "pool.yaml", "my_prompts", user_path, 10)
    return work


def test_a_user_file_outside_the_declared_folder_is_refused_naming_it_and_the_fix(tmp_path, monkeypatch):
    work = _user_pool_repo(tmp_path, "inputs/my_prompts.csv")
    monkeypatch.chdir(work)
    monkeypatch.setenv("DVC_STAGE", "pool")
    with pytest.raises(ConfigError) as caught:
        check_current_stage()
    message = str(caught.value)
    assert "inputs/my_prompts.csv" in message
    assert "data/pool.yaml: sources.my_prompts.files[0].path" in message
    assert f"{USER_DATA_DIR}/" in message and "stages.pool.deps in dvc.yaml" in message


def test_a_user_file_under_data_user_is_accepted(tmp_path, monkeypatch):
    work = _user_pool_repo(tmp_path, "data/user/my_prompts.csv")
    monkeypatch.chdir(work)
    monkeypatch.setenv("DVC_STAGE", "pool")
    check_current_stage()
    require_declared("pool", load_params("params.yaml"), work)


def _local_benchmark_repo(tmp_path: Path, folder: str) -> Path:
    """A copy of the repository's inputs whose xstest entry has a second source: a local dataset `folder`."""
    work = tmp_path / "repo"
    _copy_inputs(work)
    registry_file = work / "data" / "benchmarks.yaml"
    registry = yaml.safe_load(registry_file.read_text())
    entry = registry["benchmarks"]["xstest"]
    file = {
        key: value for key, value in entry["sources"][0]["files"][0].items() if key in ("columns", "keep")
    }
    local = {"format": "dataset", "dataset": {"path": folder}, **file}
    entry["sources"].append({"name": "local", "provenance": "derived", "note": "our copy", "files": [local]})
    registry_file.write_text(yaml.safe_dump(registry, sort_keys=False))
    return work


def test_a_benchmark_dataset_folder_outside_the_declared_folder_is_refused(tmp_path, monkeypatch):
    work = _local_benchmark_repo(tmp_path, "inputs/xstest_ds")
    monkeypatch.chdir(work)
    monkeypatch.setenv("DVC_STAGE", "fetch@xstest")
    with pytest.raises(ConfigError) as caught:
        check_current_stage()
    message = str(caught.value)
    assert (
        "inputs/xstest_ds (named by data/benchmarks.yaml: benchmarks.xstest.sources[1].files[0].dataset.path)"
        in (message)
    )
    assert f"{USER_BENCHMARKS_DIR}/" in message and "stages.fetch.deps in dvc.yaml" in message
    # Only the benchmark whose entry names the folder reads it.
    assert named_inputs("fetch@advbench", load_params("params.yaml")) == []


def test_a_benchmark_dataset_folder_under_the_declared_folder_is_accepted(tmp_path, monkeypatch):
    work = _local_benchmark_repo(tmp_path, f"{USER_BENCHMARKS_DIR}/xstest_ds")
    monkeypatch.chdir(work)
    monkeypatch.setenv("DVC_STAGE", "fetch@xstest")
    check_current_stage()


def test_a_user_dataset_folder_is_a_named_input_of_the_pool(tmp_path, monkeypatch):
    work = _user_pool_repo(tmp_path, "data/user/my_prompts.csv")
    registry_file = work / "data" / "pool.yaml"
    registry = yaml.safe_load(registry_file.read_text())
    registry["sources"]["my_prompts"]["files"] = [{"format": "dataset", "dataset": {"path": "inputs/my_ds"}}]
    registry_file.write_text(yaml.safe_dump(registry, sort_keys=False))
    monkeypatch.chdir(work)
    monkeypatch.setenv("DVC_STAGE", "pool")
    with pytest.raises(
        ConfigError,
        match=r"inputs/my_ds \(named by data/pool\.yaml: sources\.my_prompts\.files\[0\]\.dataset\.path\)",
    ):
        check_current_stage()


def test_a_policy_file_outside_data_policies_is_refused_for_the_training_stages(tmp_path, monkeypatch):
    work = _user_pool_repo(tmp_path, "data/user/my_prompts.csv")
    shutil.copy2(work / "data/policies/policy_a.yaml", work / "my_policy.yaml")
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["policies"]["policy_a"]["file"] = "my_policy.yaml"
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    monkeypatch.chdir(work)
    # label@policy_a declares ${item.file}, so it follows the param; train@, fingerprint declare the folder.
    require_declared("label@policy_a", load_params("params.yaml"), work)
    for stage in ("train@small-E2", "fingerprint"):
        with pytest.raises(
            ConfigError, match=r"my_policy\.yaml \(named by params\.yaml: policies\.policy_a\.file\)"
        ):
            require_declared(stage, load_params("params.yaml"), work)


def test_outside_dvc_nothing_is_checked(tmp_path, monkeypatch):
    work = _user_pool_repo(tmp_path, "inputs/my_prompts.csv")
    monkeypatch.chdir(work)
    monkeypatch.delenv("DVC_STAGE", raising=False)
    check_current_stage()


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def test_every_validation_stage_sits_between_its_inputs_and_their_consumers(dvc_stages):
    """Issue 18: a failed suite must stop everything downstream, so every stage that reads what a validation
    stage checks (and is not upstream of it) depends on the validation's report."""
    produced = {out: address for address, (_, outs) in dvc_stages.items() for out in outs}

    def upstream(address: str, seen: set[str] | None = None) -> set[str]:
        seen = set() if seen is None else seen
        for dep in dvc_stages[address][0]:
            for out, producer in produced.items():
                if _overlaps(dep, out) and producer not in seen:
                    seen.add(producer)
                    upstream(producer, seen)
        return seen

    # What each suite checks (it also reads other data for context, e.g. the splits suite the benchmarks).
    validated = {
        "validate_benchmarks": ["data/benchmarks"],
        "validate_labels": ["data/pool/pool.parquet", "data/labels"],
        "validate_splits": ["data/splits", "data/benchmarks_clean"],
    }
    assert {a for a in dvc_stages if a.rsplit(":", 1)[-1].startswith("validate_")} == set(validated)
    for validation, checked in validated.items():
        deps, outs = dvc_stages[validation]
        assert set(checked) <= set(deps)
        report = next(out for out in outs if out.startswith("reports/validation/"))
        before = upstream(validation)
        for address, (stage_deps_, _) in dvc_stages.items():
            if address == validation or address in before:
                continue
            if any(_overlaps(dep, data) for dep in stage_deps_ for data in checked):
                assert report in stage_deps_ or any(
                    report in dvc_stages[up][0] for up in upstream(address) if up not in before
                ), f"{address} reads {checked} but does not wait for {validation} ({report})"

"""The DAG itself: every dvc.yaml stage resolves, lists existing code and real param keys, and the stage set
matches the registry (one fetch@ stage per benchmark)."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import fire
import pytest
import yaml
from dvc.dependency.param import ParamsDependency
from dvc.repo import Repo
from helpers.paths import REPO_ROOT

from guardpolicy.config.params import load_params
from guardpolicy.data.registry import load_registry
from guardpolicy.layout import Layout
from guardpolicy.runner import with_layout

DVC = str(Path(sys.executable).with_name("dvc"))


@pytest.fixture(scope="module")
def stages():
    repo = Repo(str(REPO_ROOT))
    try:
        yield {stage.name: stage for stage in repo.index.stages}
    finally:
        repo.close()


def test_stage_list_has_one_fetch_per_registry_entry():
    listed = subprocess.run(
        [DVC, "stage", "list", "--name-only"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    registry = load_registry(REPO_ROOT / "data" / "benchmarks.yaml")
    assert sorted(s for s in listed if s.startswith("fetch@")) == sorted(f"fetch@{n}" for n in registry)
    assert len(registry) == 16
    assert {"benchmarks_report", "validate_benchmarks"} <= set(listed)
    policies = load_params(REPO_ROOT / "params.yaml").policies
    assert sorted(s for s in listed if s.startswith("label@")) == sorted(f"label@{p}" for p in policies)
    assert {"pool", "agreement", "validate_labels", "audit", "validate_splits"} <= set(listed)
    assert sorted(s for s in listed if s.startswith("teacher@")) == ["teacher@policy_a", "teacher@policy_b"]
    trained = sorted(s for s in listed if s.startswith("train@"))
    main_seed = sorted(f"train@{scale}-E{i}" for scale in ("small", "large") for i in range(1, 11))
    # 2 scales x 10 branches at the main seed, plus the noise floor's seed triples (E2, E7, E8, both scales).
    assert sorted(s for s in trained if "-s4" not in s) == main_seed
    assert len(trained) == 32
    evaluated = sorted(s.removeprefix("evaluate@") for s in listed if s.startswith("evaluate@"))
    assert evaluated == sorted(
        [t.removeprefix("train@") for t in trained] + ["teacher-policy_a", "teacher-policy_b"]
    )
    assert sorted(s for s in listed if s.startswith("features@")) == sorted(
        f"features@{scale}-E2{seed}" for scale in ("small", "large") for seed in ("", "-s43", "-s44")
    )
    assert {"fingerprint", "analyse", "report", "timings"} <= set(listed)


def test_head_only_models_are_scored_on_their_init_models_cached_features(stages):
    for scale in ("small", "large"):
        for branch in ("E1", "E7", "E10"):
            deps = {str(Path(d.def_path)) for d in stages[f"evaluate@{scale}-{branch}"].deps}
            assert f"data/features/{scale}-E2.npz" in deps and f"models/{scale}-{branch}" in deps
        outs = {str(Path(o.def_path)) for o in stages[f"features@{scale}-E2"].outs}
        assert f"data/features/{scale}-E2.npz" in outs


def test_every_stage_leaves_a_timing_record_and_timings_runs_last(stages):
    for name, stage in stages.items():
        if name == "timings":
            continue
        outs = {str(Path(o.def_path)) for o in stage.outs}
        assert f"reports/timings/{name}.json" in outs, f"{name} does not declare its timing record"
    deps = {str(Path(d.def_path)) for d in stages["timings"].deps}
    assert "reports/timings" in deps


def test_a_branch_initialised_from_another_depends_on_its_stage(stages):
    """E1 / E7 / E10 start from E2's checkpoint, so DVC must train E2 first (the init folder is a dep)."""
    for scale in ("small", "large"):
        for branch in ("E1", "E7", "E10"):
            deps = {str(Path(d.def_path)) for d in stages[f"train@{scale}-{branch}"].deps}
            assert f"models/{scale}-E2" in deps
        deps = {str(Path(d.def_path)) for d in stages[f"train@{scale}-E8"].deps}
        assert f"models/{scale}-pretrained" in deps


def test_label_stages_depend_on_their_own_policy_file_only(stages):
    """So that editing one policy's rules reruns only that policy's label stage (and what follows it)."""
    policies = load_params(REPO_ROOT / "params.yaml").policies
    for name, policy in policies.items():
        deps = {str(Path(d.def_path)) for d in stages[f"label@{name}"].deps}
        assert policy.file in deps
        others = {p.file for other, p in policies.items() if other != name}
        assert not deps & others


def _lookup(data, dotted: str):
    node = data
    for part in dotted.split("."):
        assert isinstance(node, dict) and part in node, f"param key {dotted!r} does not exist"
        node = node[part]
    return node


def test_every_param_key_exists_and_every_code_dep_is_a_file(stages):
    produced = {str(Path(out.def_path)) for stage in stages.values() for out in stage.outs}
    for name, stage in stages.items():
        for dep in stage.deps:
            if isinstance(dep, ParamsDependency):
                with open(REPO_ROOT / dep.def_path, encoding="utf-8") as handle:
                    data = yaml.safe_load(handle)
                for key in dep.params:
                    _lookup(data, key)
                continue
            path = Path(dep.def_path)
            is_produced = any(p == str(path) or p.startswith(f"{path}/") for p in produced)
            assert is_produced or (REPO_ROOT / path).exists(), f"{name}: dependency {path} does not exist"


def test_params_and_every_profile_validate():
    params = load_params(REPO_ROOT / "params.yaml")
    assert set(params.profiles) == {"default", "smoke", "paper"}
    assert params.profile == "default"


def test_stage_scripts_are_one_run_stage_call_to_an_existing_function(stages):
    """A pipelines/ entry is a docstring and `run_stage("module:function")`, nothing else (paths come from the
    layout; which modules it runs, and so its code deps, tests/unit/test_codedeps.py derives)."""
    for name, stage in stages.items():
        script = stage.cmd.split()[1]
        tree = ast.parse((REPO_ROOT / script).read_text(encoding="utf-8"))
        deps = {str(Path(d.def_path)) for d in stage.deps}
        assert script in deps, f"{name} does not depend on its own script {script}"
        calls = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "run_stage"
        ]
        assert len(calls) == 1, f"{script}: expected one run_stage() call"
        module, _, function = calls[0].args[0].value.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), f"{script}: {module}:{function}"
        statements = [
            n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
        ]
        assert len(statements) == 2, f"{script}: an import and the __main__ guard only"


def _run_stage_targets() -> dict[str, str]:
    """pipelines/ script name -> its run_stage target, for every script that is a stage (bench_train.py, a
    measurement, is not)."""
    targets = {}
    for script in sorted((REPO_ROOT / "pipelines").glob("*.py")):
        tree = ast.parse(script.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "run_stage":
                targets[script.name] = node.args[0].value
    return targets


STAGE_SCRIPTS = _run_stage_targets()


def test_every_pipelines_script_but_the_benchmark_is_a_stage_script():
    assert len(STAGE_SCRIPTS) >= 21 and "baseline.py" in STAGE_SCRIPTS and "guard_card.py" in STAGE_SCRIPTS
    others = {p.name for p in (REPO_ROOT / "pipelines").glob("*.py")} - set(STAGE_SCRIPTS)
    assert others == {"bench_train.py"}


@pytest.mark.parametrize("script", sorted(STAGE_SCRIPTS))
def test_a_stage_scripts_command_line_reaches_its_function_with_the_layout(script, monkeypatch):
    """Every pipelines/ script, also those of stages the default params leave out (baseline@, guard_card@):
    the command line DVC runs (the foreach key as the only positional argument) binds the key to the
    function's first parameter, `layout` to the repository and every other parameter to its default. A
    recorder with the function's signature stands in for the function, so nothing heavy runs."""
    module, _, name = STAGE_SCRIPTS[script].partition(":")
    signature = inspect.signature(getattr(importlib.import_module(module), name))
    calls: list[inspect.BoundArguments] = []

    def recorder(*args, **kwargs):
        calls.append(signature.bind(*args, **kwargs))

    recorder.__signature__ = signature
    required = [
        p.name
        for p in signature.parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    assert len(required) <= 1, f"{script}: a stage takes at most its foreach key positionally"
    monkeypatch.setenv("DVC_ROOT", str(REPO_ROOT))
    fire.Fire(with_layout(recorder), command=["the-key"] * len(required), name=script)
    (bound,) = calls
    assert isinstance(bound.arguments["layout"], Layout) and bound.arguments["layout"].root == REPO_ROOT
    for parameter in signature.parameters.values():
        if parameter.name in required:
            assert bound.arguments[parameter.name] == "the-key"
        elif parameter.name != "layout":
            assert bound.arguments.get(parameter.name, parameter.default) == parameter.default, parameter.name


def test_an_option_declared_after_layout_reaches_its_parameter(monkeypatch):
    """baseline(guard, layout=None, device=None): fire passes `device` positionally; it must not displace
    `layout` (the bug CI's e2e run hit: "got multiple values for argument 'layout'")."""
    seen = {}

    def stage(guard: str, layout: Layout | None = None, device: str | None = None) -> None:
        seen.update(guard=guard, layout=layout, device=device)

    monkeypatch.setenv("DVC_ROOT", str(REPO_ROOT))
    fire.Fire(with_layout(stage), command=["qwen", "--device=cpu"], name="baseline")
    assert seen["guard"] == "qwen" and seen["device"] == "cpu" and seen["layout"].root == REPO_ROOT
    seen.clear()
    fire.Fire(with_layout(stage), command=["qwen"], name="baseline")
    assert seen["device"] is None and isinstance(seen["layout"], Layout)


def test_stage_imports_pauses_the_collector_then_freezes_and_restores_it():
    """Run in a fresh interpreter: freezing the test process's heap would keep its garbage forever."""
    code = """
import gc, sys
from guardpolicy.runner import stage_imports
during = []
with stage_imports("json.tool"):
    during.append(gc.isenabled())
print(during[0], "json.tool" in sys.modules, gc.isenabled(), gc.get_freeze_count() > 0)
gc.disable()
with stage_imports():
    pass
print(gc.isenabled())
gc.enable()
try:
    with stage_imports("guardpolicy.no_such_module"):
        pass
except ModuleNotFoundError:
    print("missing", gc.isenabled())
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "True", "True", "True", "False", "missing", "True"]

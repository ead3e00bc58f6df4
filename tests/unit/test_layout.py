"""The artifact layout (guardpolicy.layout) against dvc.yaml, in both directions, and root discovery."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from helpers.paths import REPO_ROOT

from guardpolicy.data.acquire import how_to_provide
from guardpolicy.errors import ConfigError
from guardpolicy.layout import (
    ARTIFACTS,
    EXPERIMENT_COPIES,
    ROOT_ENV,
    Layout,
    experiment_workspace,
    find_root,
    leaves_root,
    template_pattern,
)

DVC_FILES = ("dvc.yaml", "pipelines/baselines/dvc.yaml", "pipelines/score/dvc.yaml")
# `${item.<field>}` deps are paths the plan computes (data/models.yaml): checked through their values below.
_INDIRECT = re.compile(r"^\$\{item\.[a-z_]+\}$")
_INTERPOLATION = re.compile(r"\$\{[^}]+\}")


def _declared_paths() -> set[str]:
    """Every data path dvc.yaml declares (deps, outs, metrics, plots), `${...}` parts as `X`."""
    paths: set[str] = set()
    for dvc_file in DVC_FILES:
        document = yaml.safe_load((REPO_ROOT / dvc_file).read_text(encoding="utf-8"))
        for entry in document["stages"].values():
            body = entry.get("do", entry)
            for section in ("deps", "outs", "metrics", "plots"):
                for item in body.get(section) or []:
                    path = item if isinstance(item, str) else next(iter(item))
                    if path.startswith(("src/", "pipelines/")) or _INDIRECT.match(path):
                        continue
                    paths.add(_INTERPOLATION.sub("X", path))
        for plot in document.get("plots") or []:
            spec = next(iter(plot.values())) if isinstance(plot, dict) else {}
            paths.update((spec or {}).get("y", {}) if isinstance(spec, dict) else {})
    return paths


def _plan_paths() -> set[str]:
    """The paths data/models.yaml gives the `${item.*}` deps (init folders, features files)."""
    plan = yaml.safe_load((REPO_ROOT / "data" / "models.yaml").read_text(encoding="utf-8"))
    found = set()
    for group in plan.values():
        for entry in group.values() if isinstance(group, dict) else []:
            for key in ("init_dir", "features", "model_dir"):
                value = entry.get(key) if isinstance(entry, dict) else None
                if isinstance(value, str) and "/" in value:
                    found.add(value)
    return found


def _matches(path: str) -> list[str]:
    return [name for name, a in ARTIFACTS.items() if template_pattern(a.template).match(path)]


def test_every_path_dvc_yaml_declares_is_in_the_layout() -> None:
    unknown = sorted(p for p in _declared_paths() | _plan_paths() if not _matches(p))
    assert not unknown, (
        f"paths in dvc.yaml / data/models.yaml that guardpolicy.layout does not define: {unknown}"
    )


def test_every_dvc_artifact_of_the_layout_is_declared_in_dvc_yaml() -> None:
    declared = _declared_paths() | _plan_paths()

    def covered(template: str) -> bool:
        # A path dvc.yaml declares, or a file inside a folder it declares (data/splits/<split>.parquet).
        return any(template_pattern(template).match(p) or template.startswith(f"{p}/") for p in declared)

    unused = sorted(
        name for name, artifact in ARTIFACTS.items() if artifact.dvc and not covered(artifact.template)
    )
    assert not unused, f"layout artifacts marked dvc=True that no dvc.yaml path uses: {unused}"
    # And no artifact marked dvc=False is in fact a DVC path.
    undeclared = sorted(
        name
        for name, artifact in ARTIFACTS.items()
        if not artifact.dvc and any(p == artifact.template for p in declared)
    )
    assert not undeclared, f"marked dvc=False but declared in dvc.yaml: {undeclared}"


def test_paths_fill_their_fields_once_and_refuse_bad_values(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    assert layout.path("pool") == tmp_path / "data" / "pool" / "pool.parquet"
    assert layout.relative("predictions", model="small-E2") == "reports/eval/small-E2/predictions.parquet"
    with pytest.raises(TypeError, match=r"takes \['model'\]"):
        layout.path("predictions")
    with pytest.raises(ValueError, match="not one path segment"):
        layout.path("benchmark", benchmark="../escape")
    with pytest.raises(KeyError, match="unknown artifact"):
        layout.path("nope")


def test_root_from_dvc_then_from_the_nearest_repository_folder(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "data" / "deep").mkdir(parents=True)
    for marker in ("dvc.yaml", "params.yaml"):
        (repo / marker).write_text("", encoding="utf-8")
    assert find_root(repo / "data" / "deep", environ={}) == repo.resolve()
    # DVC's DVC_ROOT wins outside its experiment copies (below).
    elsewhere = tmp_path / "exp"
    assert find_root(repo / "data", environ={ROOT_ENV: str(elsewhere)}) == elsewhere.resolve()
    with pytest.raises(ConfigError, match="not inside a guardpolicy repository"):
        find_root(tmp_path, environ={})
    assert Layout.discover(REPO_ROOT / "src").root == REPO_ROOT.resolve()


def _repository(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for marker in ("dvc.yaml", "params.yaml"):
        (folder / marker).write_text("", encoding="utf-8")
    return folder


@pytest.mark.parametrize("copy_dir", ["tmpk3x9", "standalone/tmpq1w2"], ids=["celery queue", "--temp"])
def test_in_a_dvc_experiment_copy_the_copy_is_the_root_and_outside_paths_come_from_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copy_dir: str
) -> None:
    """What DVC 3 gives a queued or --temp experiment's stage (dvc/repo/experiments/queue/base.py
    `_stash_exp`, executor/local.py `TempDirExecutor`): the working directory is the stage's wdir inside a
    git copy under <workspace>/.dvc/tmp/exps/, and DVC_ROOT names the workspace, not the copy."""
    workspace = _repository(tmp_path / "repo")
    (tmp_path / "shared" / "benchmarks").mkdir(parents=True)
    copy = _repository(workspace / EXPERIMENT_COPIES / copy_dir)
    (copy / "data").mkdir()
    environ = {ROOT_ENV: str(workspace)}
    assert find_root(copy, environ=environ) == copy.resolve()
    assert find_root(copy / "data", environ=environ) == copy.resolve()
    assert experiment_workspace(copy, environ) == workspace.resolve()
    # The workspace itself, and anything outside the copies, is DVC_ROOT's as before.
    assert experiment_workspace(workspace, environ) is None
    assert find_root(workspace / "data", environ=environ) == workspace.resolve()

    monkeypatch.setenv(ROOT_ENV, str(workspace))
    monkeypatch.chdir(copy)
    layout = Layout.discover()
    assert (layout.root, layout.workspace) == (copy.resolve(), workspace.resolve())
    # Outputs land in the copy (DVC collects them there); a path leaving the repository is the workspace's.
    assert layout.path("pool") == copy.resolve() / "data" / "pool" / "pool.parquet"
    mirror = layout.resolve("../shared/benchmarks")
    assert mirror == (tmp_path / "shared" / "benchmarks").resolve() and mirror.is_dir()
    assert not (copy / "../shared/benchmarks").exists()
    # Paths inside the repository stay the copy's, as written (the working directory is its root).
    assert layout.resolve("data/pool.yaml") == Path("data/pool.yaml")
    assert str(workspace.resolve()) in layout.describe("../shared/benchmarks")


def test_outside_an_experiment_copy_paths_resolve_as_params_write_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = _repository(tmp_path / "repo")
    monkeypatch.setenv(ROOT_ENV, str(workspace))
    monkeypatch.chdir(workspace)
    layout = Layout.discover()
    assert (layout.root, layout.workspace) == (workspace.resolve(), None)
    assert layout.resolve("../shared/benchmarks") == Path("../shared/benchmarks")
    assert layout.describe("../shared/benchmarks") == str(tmp_path.resolve() / "shared" / "benchmarks")
    assert [leaves_root(p) for p in ("../x", "a/../../x", "a/../x", "data/x", "./..")] == [
        True,
        True,
        False,
        False,
        True,
    ]


def test_a_copy_without_a_repository_and_a_missing_outside_path_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = _repository(tmp_path / "repo")
    stray = workspace / EXPERIMENT_COPIES / "tmpabc"
    stray.mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"inside DVC's experiment folder .*exps .*DVC_ROOT="):
        find_root(stray, environ={ROOT_ENV: str(workspace)})
    # The mirror absent beside the workspace too: the message names the param, the path tried and why there.
    copy = _repository(workspace / EXPERIMENT_COPIES / "tmpdef")
    monkeypatch.setenv(ROOT_ENV, str(workspace))
    monkeypatch.chdir(copy)
    layout = Layout.discover()
    message = how_to_provide(
        layout.resolve("../shared/benchmarks"), False, layout.describe("../shared/benchmarks")
    )
    tried = (tmp_path / "shared" / "benchmarks").resolve()
    assert f"params data.mirror_dir ({tried} (resolved against the workspace {workspace.resolve()}" in message
    assert f"the copy {copy.resolve()}), absent)" in message


# Where a repository path starts (layout templates' first parts), and whole templates that name a file.
_PATH_START = re.compile(r"(^|[\s`'(\"])((data|reports|models|\.cache)/|(params|dvc)\.yaml\b)")


def _path_literals(source: Path) -> list[tuple[int, str]]:
    """String constants of a module (docstrings aside) that spell a repository path."""
    tree = ast.parse(source.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    whole = {a.template for a in ARTIFACTS.values() if "/" in a.template or "." in a.template}
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and (_PATH_START.search(node.value) or node.value in whole)
    ]


def test_no_module_spells_an_artifact_path_outside_the_layout() -> None:
    package = REPO_ROOT / "src" / "guardpolicy"
    found = {
        f"{path.relative_to(REPO_ROOT)}:{line}": text[:80]
        for path in sorted(package.rglob("*.py"))
        if path.name != "layout.py"
        for line, text in _path_literals(path)
    }
    assert not found, f"use guardpolicy.layout (Layout.path / relative_path) instead: {found}"


def test_the_literal_scan_finds_what_it_should(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        '"""Docstrings may name data/pool/pool.parquet."""\n'
        'A = "data/pool/pool.parquet"\n'
        'B = f"see reports/{x}.json"\n'
        'C = "params.yaml"\n'
        'D = "models"  # a word, not a path\n'
        'E = "pipelines/baselines/dvc.yaml"\n',
        encoding="utf-8",
    )
    assert sorted(line for line, _ in _path_literals(module)) == [2, 3, 4, 6]

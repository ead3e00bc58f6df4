"""Code deps derived from each stage's imports (guardpolicy.devtools.codedeps): the repository's dvc.yaml is
exact, a dep removed from a copy of it is caught, and the import walk on a toy package with known answers."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from helpers.paths import REPO_ROOT

from guardpolicy.devtools.codedeps import (
    DVC_FILES,
    check,
    compress,
    declared_stages,
    expand,
    fix,
    import_closure,
    rewrite_code_deps,
    stage_deps,
)


def test_every_stage_declares_exactly_the_code_it_imports() -> None:
    mismatches = check(REPO_ROOT)
    assert not mismatches, (
        "\n".join(m.describe() for m in mismatches) + "\nfix: guardpolicy code-deps --write"
    )
    # Every stage of both DVC files is covered (a stage without `python <script>` would be skipped).
    names = {s.stage for s in declared_stages(REPO_ROOT)}
    assert {"fetch", "train", "evaluate", "analyse", "report", "baseline", "guard_card"} <= names


def _copy_repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(REPO_ROOT / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO_ROOT / "pipelines", root / "pipelines", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "dvc.yaml", root / "dvc.yaml")
    return root


def test_a_dep_removed_from_a_copy_of_dvc_yaml_is_named(tmp_path: Path) -> None:
    root = _copy_repo(tmp_path)
    text = (root / "dvc.yaml").read_text(encoding="utf-8")
    # Stage analyse imports analysis/competence.py through its folder dep; list the folder's files but one.
    stage = next(s for s in declared_stages(root, ["dvc.yaml"]) if s.stage == "analyse")
    files = expand(root, stage.declared) - {"src/guardpolicy/analysis/competence.py"}
    (root / "dvc.yaml").write_text(rewrite_code_deps(text, "analyse", files), encoding="utf-8")
    [mismatch] = check(root, ["dvc.yaml"])
    assert (mismatch.stage.stage, mismatch.missing, mismatch.extra) == (
        "analyse",
        ("src/guardpolicy/analysis/competence.py",),
        (),
    )
    assert "missing dep (imported): src/guardpolicy/analysis/competence.py" in mismatch.describe()
    # A dep the stage never imports is named too, and `fix` restores the exact list.
    text = (root / "dvc.yaml").read_text(encoding="utf-8")
    (root / "dvc.yaml").write_text(
        rewrite_code_deps(text, "analyse", {*files, "src/guardpolicy/training/loop.py"}), encoding="utf-8"
    )
    [mismatch] = check(root, ["dvc.yaml"])
    assert "src/guardpolicy/training/loop.py" in mismatch.extra
    fix(root, ["dvc.yaml"])
    assert check(root, ["dvc.yaml"]) == []


def _toy(tmp_path: Path) -> Path:
    files = {
        "src/guardpolicy/__init__.py": '"""toy"""\n',
        "src/guardpolicy/runner.py": "from guardpolicy import dvcdeps\n",  # ignored: not followed
        "src/guardpolicy/dvcdeps.py": "from guardpolicy import unrelated\n",
        "src/guardpolicy/unrelated.py": "",
        "src/guardpolicy/pkg/__init__.py": "",
        "src/guardpolicy/pkg/a.py": "def run():\n    from . import b  # lazy, relative\n    return b\n",
        "src/guardpolicy/pkg/b.py": "from ..util import helper\n",
        "src/guardpolicy/pkg/c.py": "",
        "src/guardpolicy/util.py": "def helper():\n    pass\n",
        "src/guardpolicy/heavy.py": "",
        "pipelines/s.py": textwrap.dedent(
            """
            from guardpolicy.runner import stage_imports
            with stage_imports("guardpolicy.heavy"):
                from guardpolicy.pkg.a import run
            """
        ),
        "dvc.yaml": textwrap.dedent(
            """
            stages:
              s:
                cmd: python pipelines/s.py
                deps:
                  - pipelines/s.py
                  - src/guardpolicy/pkg
                  - data/input.txt
                outs:
                  - out.txt
            """
        ).lstrip(),
    }
    root = tmp_path / "toy"
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(body, encoding="utf-8")
    return root


def test_import_closure_known_answer(tmp_path: Path) -> None:
    root = _toy(tmp_path)
    source = root / "src"
    every = {p.relative_to(source).as_posix() for p in import_closure(root / "pipelines/s.py", source)}
    assert every == {
        "guardpolicy/__init__.py",
        "guardpolicy/runner.py",
        "guardpolicy/dvcdeps.py",
        "guardpolicy/unrelated.py",
        "guardpolicy/heavy.py",
        "guardpolicy/pkg/__init__.py",
        "guardpolicy/pkg/a.py",
        "guardpolicy/pkg/b.py",
        "guardpolicy/util.py",
    }
    [stage] = declared_stages(root, ["dvc.yaml"])
    assert stage.script == "pipelines/s.py"
    assert stage.declared == {"pipelines/s.py", "src/guardpolicy/pkg"}  # data deps are not code
    # Ignored modules (runner, dvcdeps) are neither deps nor followed (unrelated.py is only theirs).
    assert stage_deps(root, stage) == {
        "pipelines/s.py",
        "src/guardpolicy/__init__.py",
        "src/guardpolicy/heavy.py",
        "src/guardpolicy/pkg/__init__.py",
        "src/guardpolicy/pkg/a.py",
        "src/guardpolicy/pkg/b.py",
        "src/guardpolicy/util.py",
    }
    # The folder dep covers pkg/c.py, which nothing imports: too broad; and three imported files are missing.
    [mismatch] = check(root, ["dvc.yaml"])
    assert mismatch.extra == ("src/guardpolicy/pkg/c.py",)
    assert mismatch.missing == (
        "src/guardpolicy/__init__.py",
        "src/guardpolicy/heavy.py",
        "src/guardpolicy/util.py",
    )
    fix(root, ["dvc.yaml"])
    assert check(root, ["dvc.yaml"]) == []
    text = (root / "dvc.yaml").read_text(encoding="utf-8")
    assert "- data/input.txt" in text and "- src/guardpolicy/pkg/a.py" in text
    assert "- src/guardpolicy/pkg\n" not in text


def test_compress_writes_a_folder_only_when_every_file_under_it_is_a_dep(tmp_path: Path) -> None:
    root = _toy(tmp_path)
    package = {f"src/guardpolicy/pkg/{n}.py" for n in ("__init__", "a", "b", "c")}
    assert compress(root, {*package, "src/guardpolicy/util.py"}) == {
        "src/guardpolicy/pkg",
        "src/guardpolicy/util.py",
    }
    assert compress(root, package - {"src/guardpolicy/pkg/c.py"}) == package - {"src/guardpolicy/pkg/c.py"}
    assert expand(root, {"src/guardpolicy/pkg"}) == package


@pytest.mark.parametrize("dvc_file", DVC_FILES)
def test_rewrite_keeps_every_other_line(dvc_file: str) -> None:
    text = (REPO_ROOT / dvc_file).read_text(encoding="utf-8")
    for stage in declared_stages(REPO_ROOT, [dvc_file]):
        assert rewrite_code_deps(text, stage.stage, compress(REPO_ROOT, stage_deps(REPO_ROOT, stage))) == text

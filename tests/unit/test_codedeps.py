"""Code deps derived from each stage's imports (guardpolicy.devtools.codedeps): the repository's dvc.yaml is
exact, a dep removed from a copy of it is caught, and the import walk on a toy package with known answers."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
import yaml
from helpers.paths import REPO_ROOT

from guardpolicy.devtools.codedeps import (
    DVC_FILES,
    StageCode,
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


# ------------------------------------------------------------------------- params schemas in the code deps

CONFIG = "src/guardpolicy/config"
# Schema modules no section is defined in, and the sections whose schema they are part of.
SHARED_SCHEMAS = {
    f"{CONFIG}/encoders.py": {"profile", "profiles"},  # an encoder entry of a profile
    f"{CONFIG}/runs.py": {"teachers", "anchor_sets", "branches"},  # the vocabulary of a training run
}
# Stages that import a schema module without reading its sections, and why.
SHARED_SCHEMA_USERS = {
    # guardpolicy.modeling builds and loads every backbone from an EncoderConfig (a checkpoint's config.json
    # keeps it), so loading an encoder classifier through it imports that class.
    (f"{CONFIG}/encoders.py", "baseline"),
    # export@ loads a guard checkpoint through guardpolicy.modeling.guard the same way.
    (f"{CONFIG}/encoders.py", "export"),
    (f"{CONFIG}/encoders.py", "score"),
    # `guardpolicy score` runs a guard through the baselines' backend factory, whose run settings are the
    # class `BaselineGuardConfig`; it reads no `baselines` params (its guards are params `score.guards`).
    (f"{CONFIG}/baselines.py", "score"),
    # The server backend's HTTP client is the committee's (guardpolicy.labeling.committee), and importing
    # the labeling package loads its labeler factory, which takes a policy's params; score reads none.
    (f"{CONFIG}/policies.py", "score"),
    # timings' speed probe trains through guardpolicy.training, whose TrainRecipe takes its allowed
    # feature-cache dtypes and attention kernels from the `training` schema's types; it reads no `training`
    # params (the probe's recipe is fixed, profiles.<profile>.speed_probe_samples its only knob).
    (f"{CONFIG}/training.py", "timings"),
}


def _schema_sections() -> dict[str, set[str]]:
    """Each schema module of guardpolicy.config -> the params.yaml sections it defines (its `Section`s)."""
    import importlib

    from guardpolicy.config.core import Section

    sections = dict(SHARED_SCHEMAS)
    for path in sorted((REPO_ROOT / CONFIG).glob("*.py")):
        if path.stem in ("__init__", "core", "params") or f"{CONFIG}/{path.name}" in SHARED_SCHEMAS:
            continue
        module = importlib.import_module(f"guardpolicy.config.{path.stem}")
        sections[f"{CONFIG}/{path.name}"] = {v.key for v in vars(module).values() if isinstance(v, Section)}
    return sections


def _declared_sections(stage: StageCode) -> set[str]:
    """The top-level params.yaml sections a stage's `params:` deps read (``profiles.${profile}.seed`` ->
    ``profiles``); keys of other params files (``data/benchmarks.yaml: [...]``) are not params.yaml's."""
    document = yaml.safe_load((REPO_ROOT / stage.dvc_file).read_text(encoding="utf-8"))
    body = document["stages"][stage.stage]
    body = body.get("do", body)
    return {p.split(".")[0] for p in body.get("params") or [] if isinstance(p, str)}


def test_every_section_schema_module_defines_sections() -> None:
    from guardpolicy.config.params import SECTIONS

    sections = _schema_sections()
    assert all(sections.values()), sections
    # Each section is defined in exactly one module (the shared schemas define none of their own).
    every = [key for module, keys in sections.items() if module not in SHARED_SCHEMAS for key in keys]

    assert sorted(every) == sorted({*every}) and set(every) == {s.key for s in SECTIONS}


def test_a_stage_depends_on_a_section_schema_exactly_when_it_reads_that_section() -> None:
    """Adding a key to one section's schema reruns only the stages that read that section: the stages whose
    code deps hold a schema module are the stages whose `params:` deps read one of its sections, and each
    stage's schema modules cover every section it declares (no stage imports the whole-file `Params`)."""
    sections = _schema_sections()
    problems = []
    for stage in declared_stages(REPO_ROOT):
        deps = stage_deps(REPO_ROOT, stage)
        declared = _declared_sections(stage)
        assert f"{CONFIG}/params.py" not in deps, stage.stage
        imported: set[str] = set()
        for module, defined in sections.items():
            if module not in deps:
                continue
            imported |= defined
            if not defined & declared and (module, stage.stage) not in SHARED_SCHEMA_USERS:
                problems.append(f"{stage.stage} imports {module} but reads none of {sorted(defined)}")
        for section in sorted(declared - imported):
            problems.append(f"{stage.stage} reads params `{section}` without importing its schema")
    assert not problems, "\n".join(problems)


def test_unrelated_stages_do_not_import_a_section_schema() -> None:
    """Spot checks of the property above, by name."""
    by_stage = {s.stage: stage_deps(REPO_ROOT, s) for s in declared_stages(REPO_ROOT)}
    for stage in ("train", "teacher", "pool", "label", "backbone", "evaluate", "fetch"):
        assert f"{CONFIG}/baselines.py" not in by_stage[stage], stage
    for stage in ("fetch", "validate_benchmarks", "benchmarks_report", "label", "audit", "fingerprint"):
        assert f"{CONFIG}/profiles.py" not in by_stage[stage], stage
    assert (
        f"{CONFIG}/teachers.py" not in by_stage["train"]
        and f"{CONFIG}/branches.py" not in by_stage["teacher"]
    )
    assert {f"{CONFIG}/branches.py", f"{CONFIG}/teachers.py"}.isdisjoint(by_stage["evaluate"])

"""The code each DVC stage runs, derived from its entry script, against the code deps dvc.yaml declares.

A stage's code deps must be exactly its entry script plus the transitive closure of the `guardpolicy` source
files that script imports — found statically: every ``import`` / ``from ... import`` anywhere in a module
(lazy imports inside functions included; an import of ``a.b.c`` also runs ``a/__init__.py`` and
``a/b/__init__.py``) and every module named to ``runner.stage_imports(...)`` or ``runner.run_stage(...)``
— minus `IGNORED`, the few
modules that cannot change what a stage writes. A dep missing from dvc.yaml lets an edit leave stale outputs
that ``dvc status`` calls up to date; a dep listed but never imported makes unrelated edits rerun the stage.

Why a check and not a generated dvc.yaml: dvc.yaml stays the readable, reviewed description of the DAG (DVC's
own format, ``foreach`` included), and `stage_deps` prints the exact list to paste when the check fails.
Dependencies on third-party packages are pinned in pyproject.toml, not tracked per stage.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from guardpolicy.layout import relative_path

PACKAGE = "guardpolicy"
SOURCE_ROOT = "src"
DVC_FILES = (relative_path("pipeline"), relative_path("baselines_pipeline"), relative_path("score_pipeline"))
# Modules whose edits cannot change any stage's outputs (relative to src/), and why. Keep this short: anything
# that shapes a number, a row or a file a stage writes belongs in the stage's deps.
IGNORED: Mapping[str, str] = {
    "guardpolicy/runner.py": "process glue: logging set-up, exit status, import timing of the stage script",
    "guardpolicy/timing.py": f"writes {relative_path('stage_timing', stage='<stage>')}, which only the "
    "`timings` stage reads (that stage lists it)",
    "guardpolicy/errors.py": "exception classes: an error's wording never reaches an output",
    "guardpolicy/dvcdeps.py": "a precondition check (runner): it refuses to start a stage whose named input "
    "files are not declared deps, and never changes what a stage writes",
    "guardpolicy/preconditions.py": "checks that refuse to start a stage (params valid as a whole, the "
    f"training sections' cross-references, {relative_path('plan')} current with params) and never change "
    "what it writes: the plan file is itself a declared dep, and so are the params the stage reads",
    "guardpolicy/py.typed": "a marker file",
    # Every stage imports the layout, so listing it made adding one artifact (say, for an optional stage)
    # rerun the whole DAG. What it decides reaches a stage's outputs only through paths, and those are
    # declared in dvc.yaml too: tests/unit/test_layout.py checks ARTIFACTS against every dvc.yaml path both
    # ways, so a changed template is a changed stage definition that DVC sees.
    "guardpolicy/layout.py": f"where artifacts live: every template is also a path in "
    f"{relative_path('pipeline')} (checked both ways by test_layout), and root discovery only locates the "
    "repository and inputs that are declared deps or pinned by checksum (the benchmark mirror)",
}
# Stages whose outputs an otherwise ignored module does produce.
IGNORED_EXCEPT: Mapping[str, frozenset[str]] = {"guardpolicy/timing.py": frozenset({"timings"})}
_SCRIPT = re.compile(r"\bpython\s+(\S+\.py)\b")


@dataclass(frozen=True)
class StageCode:
    """One stage (a `foreach` group counts once): its entry script, and the code deps dvc.yaml lists."""

    dvc_file: str
    stage: str
    script: str
    declared: frozenset[str]


def _module_file(module: str, source_root: Path) -> Path | None:
    """The source file of a dotted `guardpolicy` module name (a package's __init__.py), if it exists."""
    base = source_root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _module_name(path: Path, source_root: Path) -> str:
    parts = list(path.relative_to(source_root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Dotted names of every module an AST imports (relative imports resolved against `module`) and every
    string argument of a `stage_imports(...)` call."""
    names: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, node.module] if node.module else anchor)
            else:
                base = node.module or ""
            names.add(base)
            # `from a import b` may import the submodule a.b; harmless when b is an attribute (no such file).
            names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call):
            function = node.func
            called = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
            if called in ("stage_imports", "run_stage"):
                # stage_imports("a.b", ...) preloads modules; run_stage("a.b:function") runs one.
                names.update(
                    arg.value.partition(":")[0]
                    for arg in node.args
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                )
    return {n for n in names if n == PACKAGE or n.startswith(f"{PACKAGE}.")}


def _with_parents(name: str) -> list[str]:
    """Importing a.b.c runs a, a.b and a.b.c."""
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def import_closure(script: Path, source_root: Path, stop: Iterable[str] = ()) -> set[Path]:
    """Every `guardpolicy` source file that running `script` can import, lazily or not. The files in `stop`
    (relative to `source_root`) are included but not followed: what only they import is left out."""
    stop_files = {source_root / s for s in stop}
    seen: set[Path] = set()
    pending = [(script, "__main__", False)]
    while pending:
        path, module, is_package = pending.pop()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name in _imported_names(tree, module, is_package):
            for step in _with_parents(name):
                file = _module_file(step, source_root)
                if file is None or file in seen:
                    continue
                seen.add(file)
                if file in stop_files:
                    continue
                pending.append((file, _module_name(file, source_root), file.name == "__init__.py"))
    return seen


def _code_deps(deps: Iterable[str]) -> frozenset[str]:
    """The deps that are code: files under src/guardpolicy and the pipelines' entry scripts."""
    return frozenset(
        d
        for d in deps
        if d.startswith(f"{SOURCE_ROOT}/{PACKAGE}/") or (d.startswith("pipelines/") and d.endswith(".py"))
    )


def declared_stages(root: Path, dvc_files: Iterable[str] = DVC_FILES) -> list[StageCode]:
    """Every stage of the DVC files with a `python <script>` command, paths relative to the repository root
    (a stage's `wdir` applied)."""
    stages = []
    for dvc_file in dvc_files:
        document = yaml.safe_load((root / dvc_file).read_text(encoding="utf-8")) or {}
        folder = (root / dvc_file).parent
        for name, entry in (document.get("stages") or {}).items():
            body = entry.get("do", entry)
            match = _SCRIPT.search(str(body.get("cmd", "")))
            if match is None:
                continue
            wdir = (folder / body.get("wdir", ".")).resolve()

            def relative(path: str, wdir: Path = wdir) -> str:
                return (wdir / path).resolve().relative_to(root.resolve()).as_posix()

            deps = [relative(d if isinstance(d, str) else next(iter(d))) for d in body.get("deps") or []]
            stages.append(StageCode(dvc_file, name, relative(match.group(1)), _code_deps(deps)))
    return stages


def _python_files(root: Path, folder: str) -> set[str]:
    return {
        p.relative_to(root).as_posix() for p in (root / folder).rglob("*.py") if "__pycache__" not in p.parts
    }


def expand(root: Path, deps: Iterable[str]) -> frozenset[str]:
    """Code deps with each folder replaced by the Python files under it (what DVC hashes for it, .dvcignore
    leaving byte-code out)."""
    files: set[str] = set()
    for dep in deps:
        files |= _python_files(root, dep) if (root / dep).is_dir() else {dep}
    return frozenset(files)


def compress(root: Path, files: Iterable[str]) -> frozenset[str]:
    """The same files, each package folder whose every Python file is among them written as the folder (a
    folder dep is exact when nothing under it is left out; dvc.yaml stays readable)."""
    remaining = set(files)
    folders = sorted(
        {Path(f).parent.as_posix() for f in remaining if f.startswith(f"{SOURCE_ROOT}/{PACKAGE}/")},
        key=lambda f: -f.count("/"),
    )
    chosen: set[str] = set()
    for folder in folders:
        if folder == f"{SOURCE_ROOT}/{PACKAGE}":
            continue  # the package root: always listed file by file
        inside = _python_files(root, folder)
        covered = {f for f in remaining if f.startswith(f"{folder}/")}
        sub = {c for c in chosen if c.startswith(f"{folder}/")}
        if inside and inside <= covered | expand(root, sub):
            chosen -= sub
            chosen.add(folder)
            remaining -= covered
    return frozenset(remaining | chosen)


def stage_deps(root: Path, stage: StageCode) -> frozenset[str]:
    """The code deps `stage` should declare: its script and every imported source file not in `IGNORED`."""
    source_root = root / SOURCE_ROOT
    ignored = [m for m in IGNORED if stage.stage not in IGNORED_EXCEPT.get(m, frozenset())]
    files = import_closure(root / stage.script, source_root, stop=ignored)
    deps = {stage.script}
    for file in files:
        relative = file.relative_to(source_root).as_posix()
        if relative in ignored:
            continue
        deps.add(f"{SOURCE_ROOT}/{relative}")
    return frozenset(deps)


@dataclass(frozen=True)
class Mismatch:
    stage: StageCode
    missing: tuple[str, ...]  # imported, not declared: an edit there leaves stale outputs
    extra: tuple[str, ...]  # declared, never imported: an edit there reruns the stage for nothing

    def describe(self) -> str:
        lines = [f"{self.stage.dvc_file}: stage {self.stage.stage} ({self.stage.script}):"]
        lines += [f"  missing dep (imported): {d}" for d in self.missing]
        lines += [f"  extra dep (not imported): {d}" for d in self.extra]
        return "\n".join(lines)


def check(root: Path, dvc_files: Iterable[str] = DVC_FILES) -> list[Mismatch]:
    """Every stage whose declared code deps differ from the derived ones."""
    mismatches = []
    for stage in declared_stages(root, dvc_files):
        expected = stage_deps(root, stage)
        declared = expand(root, stage.declared)
        missing = tuple(sorted(expected - declared))
        extra = tuple(sorted(declared - expected))
        if missing or extra:
            mismatches.append(Mismatch(stage, missing, extra))
    return mismatches


# ------------------------------------------------------------------------------------------------ rewriting

# A comment inside a deps list that described hand-written code deps; dropped when the list is rewritten.
_CODE_COMMENT = re.compile(r"^\s*#.*(contracts|what those modules import|code dep)", re.IGNORECASE)


def _is_code_item(line: str) -> bool:
    item = line.strip().removeprefix("- ").strip()
    return item.startswith(f"{SOURCE_ROOT}/{PACKAGE}/") or (
        item.startswith("pipelines/") and item.endswith(".py")
    )


def rewrite_code_deps(text: str, stage: str, deps: Iterable[str]) -> str:
    """`text` (a dvc.yaml) with the code items of `stage`'s deps list replaced by `deps` (script first, then
    sorted), every other dep, comment and line left as it was. Paths are relative to the stage's wdir, which
    for our DVC files is the repository root."""
    lines = text.splitlines(keepends=True)
    header = re.compile(rf"^  {re.escape(stage)}:\s*$")
    start = next((i for i, line in enumerate(lines) if header.match(line)), None)
    if start is None:
        raise KeyError(f"stage {stage!r} not found")
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"^ {0,2}\S", lines[i])), len(lines))
    deps_at = next((i for i in range(start, end) if re.match(r"^\s+deps:\s*$", lines[i])), None)
    if deps_at is None:
        raise KeyError(f"stage {stage!r} has no deps list")
    indent = " " * (len(lines[deps_at]) - len(lines[deps_at].lstrip()) + 2)
    stop = deps_at + 1
    while stop < end and (
        lines[stop].startswith(f"{indent}- ")
        or lines[stop].startswith(f"{indent}#")
        or lines[stop].startswith(f"{indent}  ")
    ):
        stop += 1
    kept = [
        line
        for line in lines[deps_at + 1 : stop]
        if not (line.startswith(f"{indent}- ") and _is_code_item(line)) and not _CODE_COMMENT.match(line)
    ]
    ordered = sorted(deps, key=lambda d: (not d.startswith("pipelines/"), d))
    new = [f"{indent}- {d}\n" for d in ordered]
    return "".join([*lines[: deps_at + 1], *new, *kept, *lines[stop:]])


def fix(root: Path, dvc_files: Iterable[str] = DVC_FILES) -> list[Mismatch]:
    """Rewrite every mismatched stage's code deps to the derived ones; returns what was fixed."""
    mismatches = check(root, dvc_files)
    for mismatch in mismatches:
        path = root / mismatch.stage.dvc_file
        deps = compress(root, stage_deps(root, mismatch.stage))
        path.write_text(
            rewrite_code_deps(path.read_text(encoding="utf-8"), mismatch.stage.stage, deps), encoding="utf-8"
        )
    return mismatches


def code_deps(write: bool = False, root: str = ".") -> str:
    """`guardpolicy code-deps`: check every stage's code deps against its imports (exit status 2 naming each
    missing or extra dep); with --write, rewrite dvc.yaml's code deps to the derived ones instead."""
    from guardpolicy.errors import ConfigError

    repo = Path(root)
    if write:
        fixed = fix(repo)
        return (
            "\n".join(
                ["rewrote the code deps of:", *(f"  {m.stage.dvc_file}: {m.stage.stage}" for m in fixed)]
            )
            if fixed
            else "code deps: every stage exact"
        )
    mismatches = check(repo)
    if mismatches:
        raise ConfigError(
            "code deps differ from the stages' imports (`guardpolicy code-deps --write` rewrites them):\n"
            + "\n".join(m.describe() for m in mismatches)
        )
    return f"code deps: all {len(declared_stages(repo))} stages exact"

"""Every in-repository file a stage reads by a name from params or a registry is a DVC dependency of it.

Why a check and not generated deps: DVC validates a stage's `deps` as a literal list before it interpolates
anything (``deps: ${pool.user_files}`` is rejected: "expected a list"), and one `${...}` per list item cannot
grow with a registry. So dvc.yaml declares the *places* such files live (``data/user`` for the user's pool
files, ``data/policies`` for policy constitutions, ...) and, when DVC runs a stage (``DVC_STAGE`` is set),
`check_current_stage` refuses to start it if params or a registry name an in-repo file that none of the
stage's declared deps covers — naming the file, who names it, and the two ways to fix it. An edit to such a
file then always makes the stage stale; without the check DVC would call the stale outputs up to date.

Files outside the repository (the benchmark mirror, ``data.mirror_dir``) are not DVC's to track: their
sha256 pinned in the registry is what ties them to the outputs. Caches (``.cache/``) are not inputs.

`NAMED_INPUTS` is the one table of which stage reads which named files; the tests check it against the
deps DVC itself resolves from dvc.yaml, for the shipped registries and for a declared user pool.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardpolicy.config.core import PARAMS_FILE, load_yaml
from guardpolicy.config.params import Params, load_params
from guardpolicy.errors import ConfigError
from guardpolicy.layout import relative_path
from guardpolicy.timing import STAGE_ENV

DVC_FILE = relative_path("pipeline")
# Where a user's own pool files go: a declared dependency folder of stage `pool`.
USER_DATA_DIR = relative_path("user_data")
# Where local benchmark datasets (save_to_disk folders) go: a declared dependency folder of every fetch@.
USER_BENCHMARKS_DIR = relative_path("user_benchmarks")

_INTERPOLATION = re.compile(r"\$\{\s*([^}\s]+)\s*\}")


@dataclass(frozen=True)
class NamedInput:
    """A file or folder a stage reads because params or a registry name it."""

    path: str
    named_by: str


# ---------------------------------------------------------------------------------------------- named inputs


def _local(name: str) -> bool:
    """A name that is a local path rather than a hub id or an installed package (``pypi:``)."""
    return not name.startswith("pypi:") and (name.startswith(("/", ".")) or Path(name).exists())


def _policy_files(params: Params, key: str | None) -> list[NamedInput]:
    names = [key] if key is not None else sorted(params.policies)
    return [
        NamedInput(params.policies[name].file, f"{PARAMS_FILE}: policies.{name}.file")
        for name in names
        if name in params.policies
    ]


def _pool_inputs(params: Params, key: str | None) -> list[NamedInput]:
    from guardpolicy.pool.registry import load_pool_registry
    from guardpolicy.taxonomy import load_taxonomy

    sources_file = params.pool.sources_file
    inputs = [NamedInput(sources_file, f"{PARAMS_FILE}: pool.sources_file")]
    registry = load_pool_registry(sources_file, load_taxonomy())
    for source in registry.values():
        for index, file in enumerate(source.files):
            if file.path is not None:
                inputs.append(
                    NamedInput(file.path, f"{sources_file}: sources.{source.name}.files[{index}].path")
                )
            elif file.dataset is not None and file.dataset.path is not None:
                inputs.append(
                    NamedInput(
                        file.dataset.path,
                        f"{sources_file}: sources.{source.name}.files[{index}].dataset.path",
                    )
                )
            elif file.mirror is not None:
                # Inside the repository only when the user points data.mirror_dir into it.
                inputs.append(
                    NamedInput(
                        str(Path(params.data.mirror_dir) / file.mirror),
                        f"{sources_file}: sources.{source.name}.files[{index}].mirror (in data.mirror_dir)",
                    )
                )
    return inputs


def _benchmark_inputs(params: Params, key: str | None) -> list[NamedInput]:
    """A benchmark's local dataset folders (a hub dataset is pinned by its revision in the registry, which is
    already a params dep of the stage; mirror files lie outside the repository, pinned by sha256)."""
    from guardpolicy.data.registry import load_registry

    registry_file = relative_path("benchmark_registry")
    spec = load_registry(registry_file).get(key) if key is not None else None
    if spec is None:
        return []
    return [
        NamedInput(
            file.dataset.path,
            f"{registry_file}: benchmarks.{key}.sources[{i}].files[{j}].dataset.path",
        )
        for i, source in enumerate(spec.sources)
        for j, file in enumerate(source.files)
        if file.dataset is not None and file.dataset.path is not None
    ]


def _backbone_inputs(params: Params, key: str | None) -> list[NamedInput]:
    if key is None or key not in params.scales:
        return []
    encoder_key = params.scales[key]
    encoder = getattr(params.active, encoder_key)
    if encoder.random_init or not _local(encoder.name):
        return []
    return [NamedInput(encoder.name, f"{PARAMS_FILE}: profiles.{params.profile}.{encoder_key}.name")]


def _training_inputs(params: Params, key: str | None) -> list[NamedInput]:
    return _policy_files(params, None)


def _fingerprint_inputs(params: Params, key: str | None) -> list[NamedInput]:
    facts = NamedInput(params.fingerprint.facts_file, f"{PARAMS_FILE}: fingerprint.facts_file")
    return [facts, *_policy_files(params, None)]


def _baselines_registry(params: Params, key: str | None) -> list[NamedInput]:
    return [NamedInput(params.baselines.registry, f"{PARAMS_FILE}: baselines.registry")]


def _baseline_inputs(params: Params, key: str | None) -> list[NamedInput]:
    inputs = _baselines_registry(params, key)
    guard = params.baselines.guards.get(key) if key is not None else None
    if guard is not None and guard.backend == "transformers" and guard.model and _local(guard.model):
        inputs.append(NamedInput(guard.model, f"{PARAMS_FILE}: baselines.guards.{key}.model"))
    return inputs


def _score_inputs(params: Params, key: str | None) -> list[NamedInput]:
    guard = params.score.guards.get(key) if key is not None else None
    if guard is not None and guard.model and _local(guard.model):
        return [NamedInput(guard.model, f"{PARAMS_FILE}: score.guards.{key}.model")]
    return []


# Stage name (the part before `@` of a foreach stage) -> the files its params and registries name.
NAMED_INPUTS: dict[str, Callable[[Params, str | None], list[NamedInput]]] = {
    "fetch": _benchmark_inputs,
    "pool": _pool_inputs,
    "label": lambda params, key: _policy_files(params, key),
    "backbone": _backbone_inputs,
    "teacher": _training_inputs,
    "train": _training_inputs,
    "fingerprint": _fingerprint_inputs,
    "report": _baselines_registry,
    "baseline": _baseline_inputs,
    "guard_card": _baselines_registry,
    "score": _score_inputs,
}


def named_inputs(stage: str, params: Params) -> list[NamedInput]:
    """The named inputs of a stage, addressed as DVC does (``name``, ``name@key``, ``file:name@key``)."""
    _, name = _split_address(stage)
    base, _, key = name.partition("@")
    reader = NAMED_INPUTS.get(base)
    return reader(params, key or None) if reader else []


# ------------------------------------------------------------------------------------------ declared deps


def _split_address(address: str) -> tuple[str, str]:
    if ":" in address:
        dvc_file, name = address.rsplit(":", 1)
        return dvc_file, name
    return DVC_FILE, address


def _lookup(context: Any, dotted: str, where: str) -> Any:
    value = context
    for part in dotted.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise ConfigError(f"{where}: cannot resolve ${{{dotted}}}")
    return value


def _context(dvc_file: Path, document: dict) -> dict[str, Any]:
    """What DVC interpolates from: params.yaml beside the dvc.yaml, then its `vars` files (``file:keys``)."""
    base = dvc_file.parent
    context: dict[str, Any] = {}
    default_params = base / PARAMS_FILE
    if default_params.is_file():
        context.update(load_yaml(default_params) or {})
    for entry in document.get("vars", []) or []:
        if isinstance(entry, dict):
            context.update(entry)
            continue
        file, _, keys = str(entry).partition(":")
        data = load_yaml(base / file) or {}
        if keys:
            data = {k: data[k] for k in keys.split(",") if k in data}
        context.update(data)
    return context


def _interpolate(text: str, scope: dict[str, Any], where: str) -> str:
    return _INTERPOLATION.sub(lambda m: str(_lookup(scope, m.group(1), where)), text)


def stage_deps(stage: str, root: str | Path = ".") -> list[str]:
    """The deps of a stage as paths relative to the repository root, resolved from its dvc.yaml.

    Handles what our dvc.yaml files use: plain stages and `foreach` (``${key}``, ``${item.x}``, lookups in
    params.yaml and `vars`), `wdir`. The tests check this against DVC's own resolution.
    """
    root = Path(root).resolve()
    file_name, name = _split_address(stage)
    dvc_file = root / file_name
    document = load_yaml(dvc_file) or {}
    base, _, key = name.partition("@")
    definition = (document.get("stages") or {}).get(base)
    if definition is None:
        raise ConfigError(f"{file_name}: no stage {base!r}")
    context = _context(dvc_file, document)
    where = f"{file_name}: stages.{base}"
    if "foreach" in definition:
        items = definition["foreach"]
        if isinstance(items, str):
            items = _lookup(context, _INTERPOLATION.fullmatch(items.strip()).group(1), where)
        item = items[key] if isinstance(items, dict) else key
        scope = {**context, "key": key, "item": item}
        definition = definition["do"]
    else:
        scope = context
    wdir = (dvc_file.parent / _interpolate(str(definition.get("wdir", ".")), scope, where)).resolve()
    deps = []
    for dep in definition.get("deps", []) or []:
        resolved = (wdir / _interpolate(str(dep), scope, where)).resolve()
        deps.append(os.path.relpath(resolved, root))
    return deps


# ---------------------------------------------------------------------------------------------- the check


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def uncovered(inputs: Iterable[NamedInput], deps: Iterable[str], root: str | Path = ".") -> list[NamedInput]:
    """The in-repo inputs that no dep covers (a dep covers itself and, for a folder, what lies under it)."""
    root = Path(root).resolve()
    dep_paths = [(root / d).resolve() for d in deps]
    missing = []
    for named in inputs:
        path = (root / named.path).resolve()
        if not _inside(path, root):
            continue
        if not any(path == dep or _inside(path, dep) for dep in dep_paths):
            missing.append(named)
    return missing


def require_declared(stage: str, params: Params, root: str | Path = ".") -> None:
    """Raise if params or a registry name an in-repo file that stage `stage` does not declare as a dep."""
    missing = uncovered(named_inputs(stage, params), stage_deps(stage, root), root)
    if not missing:
        return
    file_name, name = _split_address(stage)
    lines = [f"{m.path} (named by {m.named_by})" for m in missing]
    base = name.partition("@")[0]
    if base == "pool":
        hint = f"put user pool files under {USER_DATA_DIR}/ (a declared dependency of stage pool), or"
    elif base == "fetch":
        hint = (
            f"put local benchmark datasets under {USER_BENCHMARKS_DIR}/ (a declared dependency of every "
            "fetch@ stage), or"
        )
    else:
        hint = "move it under one of the stage's dependency folders, or"
    raise ConfigError(
        f"stage {stage} would read {len(missing)} file(s) that are not among its deps in {file_name}, so DVC "
        f"would not rerun it when they change: {'; '.join(lines)}. Fix: {hint} add each path to "
        f"stages.{name.partition('@')[0]}.deps in {file_name}."
    )


def check_current_stage(params_file: str | Path = PARAMS_FILE) -> None:
    """Under DVC (``DVC_STAGE`` set), run `require_declared` for the running stage; otherwise nothing."""
    stage = os.environ.get(STAGE_ENV)
    if not stage:
        return
    # Every stage of ours runs with the repository root as its wdir, so paths are relative to the working
    # directory. Not DVC_ROOT: a queued experiment runs in a temporary copy while DVC_ROOT names the parent.
    require_declared(stage, load_params(params_file), Path.cwd())

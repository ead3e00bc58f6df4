"""validate_benchmarks stops the pipeline below params `data.min_present_benchmarks` (issue 18, point 2).

With no mirror and no network every benchmark is recorded `missing` by fetch@; before, the run went on to a
report over zero benchmarks. Now the validation stage (which every consumer of data/benchmarks depends on)
exits 1 with one message naming what is missing and how to provide it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers.benchmarks import write_params
from helpers.paths import MIRROR, REPO_ROOT

from guardpolicy.data.registry import load_registry
from guardpolicy.errors import ValidationFailed
from guardpolicy.runner import EXIT_VALIDATION, guarded
from guardpolicy.stages.benchmarks import fetch, validate

REGISTRY = REPO_ROOT / "data" / "benchmarks.yaml"


@pytest.fixture(scope="module")
def nothing_reachable(tmp_path_factory) -> tuple[Path, Path]:
    """Every registered benchmark fetched from an empty mirror with downloads off: all `missing`."""
    root = tmp_path_factory.mktemp("presence")
    empty_mirror = root / "empty_mirror"
    empty_mirror.mkdir()
    params = write_params(root / "params.yaml", empty_mirror, allow_download=False)
    out_dir = root / "benchmarks"
    for name in load_registry(REGISTRY):
        assert fetch(name, params_file=str(params), registry_file=str(REGISTRY), out_dir=out_dir)[
            "status"
        ] == ("missing")
    return params, out_dir


def _with_minimum(params: Path, minimum: int | None) -> Path:
    document = yaml.safe_load(params.read_text())
    document["data"]["min_present_benchmarks"] = minimum
    target = params.with_name(f"params_{minimum}.yaml")
    target.write_text(yaml.safe_dump(document, sort_keys=False))
    return target


@pytest.mark.parametrize("minimum", [None, 1, 12])
def test_too_few_benchmarks_stop_the_pipeline_naming_each_and_the_remedies(
    nothing_reachable, tmp_path, minimum
):
    params, out_dir = nothing_reachable
    out = tmp_path / "validation.json"
    arguments = {
        "registry_file": str(REGISTRY),
        "in_dir": out_dir,
        "out": out,
        "params_file": str(_with_minimum(params, minimum)),
    }
    with pytest.raises(SystemExit) as exited:
        guarded(validate)(**arguments)  # as the stage script runs it
    assert exited.value.code == EXIT_VALIDATION
    with pytest.raises(ValidationFailed) as caught:
        validate(**arguments)
    message = str(caught.value)
    registered = load_registry(REGISTRY)
    assert f"only 0 of {len(registered)} registered benchmarks are present" in message
    assert f"minimum of {minimum or len(registered)}" in message
    for name in registered:
        assert name in message
    assert "data.mirror_dir" in message and "empty_mirror" in message
    assert "data.allow_download: true" in message and "data.min_present_benchmarks" in message
    # The report is still written (what is missing, for inspection), and says the gate failed.
    report = json.loads(out.read_text())
    assert report["success"] is False
    assert report["presence"] == {
        "registered": len(registered),
        "present": 0,
        "minimum": minimum,
        "success": False,
    }


def test_enough_present_benchmarks_pass(tmp_path):
    """A registry trimmed to two mirrored benchmarks and one the mirror lacks, with a minimum of two."""
    registry = yaml.safe_load(REGISTRY.read_text())
    keep = ("jbb_harmful", "jbb_benign", "orbench_hard")
    registry["benchmarks"] = {k: v for k, v in registry["benchmarks"].items() if k in keep}
    registry_file = tmp_path / "benchmarks.yaml"
    registry_file.write_text(yaml.safe_dump(registry, sort_keys=False))
    params = write_params(tmp_path / "params.yaml", MIRROR)
    params = _with_minimum(params, 2)
    out_dir = tmp_path / "benchmarks"
    for name in keep:
        fetch(name, params_file=str(params), registry_file=str(registry_file), out_dir=out_dir)
    summary = validate(
        registry_file=str(registry_file), in_dir=out_dir, out=tmp_path / "v.json", params_file=str(params)
    )
    assert summary["skipped_missing"] == 1
    report = json.loads((tmp_path / "v.json").read_text())
    assert report["presence"]["success"] is True and report["success"] is True

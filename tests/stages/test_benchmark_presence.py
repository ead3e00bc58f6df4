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
from helpers.benchmarks import fetch_layout, write_params
from helpers.paths import MIRROR, REPO_ROOT

from guardpolicy.data.registry import load_registry
from guardpolicy.errors import ValidationFailed
from guardpolicy.layout import Layout
from guardpolicy.runner import EXIT_VALIDATION, guarded
from guardpolicy.stages.fetch import fetch
from guardpolicy.stages.validate_benchmarks import validate

REGISTRY = REPO_ROOT / "data" / "benchmarks.yaml"


@pytest.fixture(scope="module")
def nothing_reachable(tmp_path_factory) -> Path:
    """A repository-shaped folder where every registered benchmark was fetched from an empty mirror with
    downloads off: all `missing`."""
    root = tmp_path_factory.mktemp("presence")
    empty_mirror = root / "empty_mirror"
    empty_mirror.mkdir()
    write_params(root / "params.yaml", empty_mirror, allow_download=False)
    fetch_layout(root, REGISTRY)
    for name in load_registry(REGISTRY):
        assert fetch(name, Layout(root))["status"] == "missing"
    return root


def _with_minimum(root: Path, minimum: int | None) -> None:
    params = root / "params.yaml"
    document = yaml.safe_load(params.read_text())
    document["data"]["min_present_benchmarks"] = minimum
    params.write_text(yaml.safe_dump(document, sort_keys=False))


@pytest.mark.parametrize("minimum", [None, 1, 12])
def test_too_few_benchmarks_stop_the_pipeline_naming_each_and_the_remedies(nothing_reachable, minimum):
    layout = Layout(nothing_reachable)
    _with_minimum(layout.root, minimum)
    out = layout.path("benchmarks_validation")
    with pytest.raises(SystemExit) as exited:
        guarded(validate)(layout)  # as the stage script runs it
    assert exited.value.code == EXIT_VALIDATION
    with pytest.raises(ValidationFailed) as caught:
        validate(layout)
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
    registry_file, _ = fetch_layout(tmp_path)
    registry_file.parent.mkdir(parents=True)
    registry_file.write_text(yaml.safe_dump(registry, sort_keys=False))
    write_params(tmp_path / "params.yaml", MIRROR)
    _with_minimum(tmp_path, 2)
    layout = Layout(tmp_path)
    for name in keep:
        fetch(name, layout)
    summary = validate(layout)
    assert summary["skipped_missing"] == 1
    report = json.loads(layout.path("benchmarks_validation").read_text())
    assert report["presence"]["success"] is True and report["success"] is True

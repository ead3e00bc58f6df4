"""`guardpolicy diff` rendering on canned dvc output, one real dvc run, and the PR workflow that calls it."""

from __future__ import annotations

import inspect
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.paths import REPO_ROOT

from guardpolicy.reporting.diff import (
    DIFF_COMMAND,
    DiffError,
    diff,
    headline_changes,
    render_diff,
)

# Exactly what `dvc metrics diff --json <rev>` prints (DVC 3.67): {file: {dotted key: {old, new[, diff]}}};
# without --all, unchanged metrics are left out; a value missing on one side is null and has no `diff`.
METRICS_DIFF = {
    "reports/eval/small-E8/metrics.json": {
        "headline.copy": {"old": 0.81, "new": 0.93, "diff": 0.12000000000000011},
        "headline.over_ref": {"old": 0.12, "new": 0.1, "diff": -0.019999999999999997},
        "benchmarks.xstest.clean.f1": {"old": 0.7, "new": 0.72, "diff": 0.020000000000000018},
    },
    "reports/analysis/summary.json": {
        "copyright_vs_noise.delta": {"old": 0.5, "new": 0.9, "diff": 0.4},
        "copyright_vs_noise.verdict": {"old": "within the noise floor", "new": "exceeds the noise floor"},
        "span.jbb_benign.delta": {"old": 0.3, "new": 0.25, "diff": -0.04999999999999999},
        "span.jbb_benign.phi": {"old": None, "new": 0.05},
        "rank_tests.policy_a_terminal.small.xstest.p_value": {"old": 1.0, "new": 0.004762, "diff": -0.995238},
        "views.matched.span.jbb_benign.delta": {"old": 0.2, "new": 0.26, "diff": 0.06},
        "views.ranked.copyright_vs_noise.difference": {"old": 0.3, "new": 0.31, "diff": 0.01},
        "views.ranked.rank_tests.policy_a_terminal.small.xstest.p_value": {
            "old": 1.0,
            "new": 0.5,
            "diff": -0.5,
        },
        "study_views.copyright_span.holds_in": {"old": "matched", "new": "matched,ranked"},
        "base_rate.cap_over_ref_r.own.r": {"old": 0.95, "new": 0.9, "diff": -0.05},
    },
}
# `dvc metrics diff --json --all <rev>` adds the unchanged ones (diff 0.0, or no diff for strings).
METRICS_DIFF_ALL = {
    "reports/eval/small-E8/metrics.json": {
        **METRICS_DIFF["reports/eval/small-E8/metrics.json"],
        "headline.cap": {"old": 0.74, "new": 0.74, "diff": 0.0},
        "model": {"old": "small-E8", "new": "small-E8"},
    },
    "reports/analysis/summary.json": METRICS_DIFF["reports/analysis/summary.json"],
}
PARAMS_DIFF = {
    "params.yaml": {
        "analysis.mapping": {"old": "default", "new": "boundary_unsafe"},
        "analysis.confidence": {"old": 0.95, "new": 0.9, "diff": -0.04999999999999993},
        "noise_floor.seeds": {"old": None, "new": [43, 44]},
    }
}
WORKFLOW = REPO_ROOT / ".github" / "workflows" / "pr-diff.yml"


def _table_rows(text: str, section: str) -> list[list[str]]:
    start = text.index(section)
    end = text.find("\n### ", start + 1)
    body = text[start : end if end != -1 else len(text)]
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in body.splitlines()
        if line.startswith("| ") and not line.startswith("| metric") and not line.startswith("| file")
    ]


def test_headline_lists_changed_metrics_with_old_new_change():
    text = render_diff(METRICS_DIFF, PARAMS_DIFF, "main")
    rows = _table_rows(text, "### Headline")
    assert ["`copyright_vs_noise.delta`", "0.500", "0.900", "+0.400"] in rows
    assert ["`small-E8 copy`", "0.810", "0.930", "+0.120"] in rows
    assert ["`span.jbb_benign.delta`", "0.300", "0.250", "-0.050"] in rows
    # The flipped verdict first, then by absolute change; non-headline keys stay out of the headline.
    labels = [row[0] for row in rows]
    assert labels == [
        "`copyright_vs_noise.verdict`",
        "`study_views.copyright_span.holds_in`",
        "`copyright_vs_noise.delta`",
        "`small-E8 copy`",
        "`views.matched.span.jbb_benign.delta`",
        "`span.jbb_benign.delta`",
        "`base_rate.cap_over_ref_r.own.r`",
        "`small-E8 over_ref`",
        "`views.ranked.copyright_vs_noise.difference`",
    ]
    assert "f1" not in " ".join(labels) and "p_value" not in " ".join(labels)


def test_unchanged_metrics_are_skipped_unless_all():
    text = render_diff(METRICS_DIFF_ALL, {}, "main")
    assert "small-E8 cap" not in text and "`model`" not in text
    assert "All changed metrics (13)" in text
    everything = render_diff(METRICS_DIFF_ALL, {}, "main", all_metrics=True)
    assert "All metrics (15)" in everything
    assert "| `reports/eval/small-E8/metrics.json` | `headline.cap` | 0.740 | 0.740 | = |" in everything
    assert "small-E8 cap" not in _table_rows(everything, "### Headline").__str__()


def test_params_and_details_block():
    text = render_diff(METRICS_DIFF, PARAMS_DIFF, "exp-mapping")
    assert "workspace vs `exp-mapping`" in text
    params = _table_rows(text, "### Params")
    assert ["`params.yaml`", "`analysis.mapping`", "default", "boundary_unsafe"] in params
    assert ["`params.yaml`", "`noise_floor.seeds`", "—", "[43, 44]"] in params
    details = text[text.index("<details>") : text.index("</details>")]
    assert "| `reports/analysis/summary.json` | `span.jbb_benign.phi` | — | 0.050 | added |" in details
    assert "rank_tests.policy_a_terminal.small.xstest.p_value" in details


def test_many_params_are_folded():
    plan = {f"evaluations.m{i}.seed": {"old": None, "new": 42} for i in range(30)}
    text = render_diff({}, {"data/models.yaml": plan, **PARAMS_DIFF}, "main")
    params = text[text.index("### Params") :]
    assert (
        "<details><summary>33 params changed (`data/models.yaml`: 30, `params.yaml`: 3)</summary>" in params
    )
    assert "| `data/models.yaml` | `evaluations.m7.seed` | — | 42 |" in params


def test_nothing_changed():
    text = render_diff({}, {}, "HEAD")
    assert "No headline metric changed." in text and "No param changed." in text
    assert headline_changes({"reports/analysis/summary.json": {}}) == []


def _git(repo: Path, *arguments: str) -> None:
    subprocess.run(["git", *arguments], cwd=repo, check=True, capture_output=True)


def test_diff_against_a_real_revision(tmp_path):
    """Two commits in a scratch git + dvc repository: the real dvc output goes through the renderer."""
    env_ok = subprocess.run([sys.executable, "-m", "dvc", "--version"], capture_output=True, check=False)
    if env_ok.returncode != 0:
        pytest.skip("dvc is not installed in this environment")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "test@example.com")
    _git(tmp_path, "config", "user.name", "test")
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "params.yaml").write_text("analysis:\n  mapping: default\n", encoding="utf-8")
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n  analyse:\n    cmd: 'true'\n    params: [analysis]\n    metrics:\n"
        "      - reports/analysis/summary.json: {cache: false}\n",
        encoding="utf-8",
    )
    summary = tmp_path / "reports" / "analysis" / "summary.json"
    summary.parent.mkdir(parents=True)
    summary.write_text(json.dumps({"copyright_vs_noise": {"delta": 0.5}, "span": {"x": {"delta": 0.2}}}))
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "base")
    summary.write_text(json.dumps({"copyright_vs_noise": {"delta": 0.75}, "span": {"x": {"delta": 0.2}}}))
    (tmp_path / "params.yaml").write_text("analysis:\n  mapping: boundary_unsafe\n", encoding="utf-8")

    out = tmp_path / "diff.md"
    assert diff(rev="HEAD", out=str(out), repo_dir=str(tmp_path)) == str(out)
    text = out.read_text(encoding="utf-8")
    assert "| `copyright_vs_noise.delta` | 0.500 | 0.750 | +0.250 |" in text
    assert "span.x.delta" not in text  # unchanged
    assert "| `params.yaml` | `analysis.mapping` | default | boundary_unsafe |" in text

    with pytest.raises(DiffError, match="no-such-rev"):
        diff(rev="no-such-rev", repo_dir=str(tmp_path))


def _steps() -> list[dict]:
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


def test_workflow_loads_and_is_wired():
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    # YAML 1.1 reads the bare key `on` as true.
    triggers = workflow.get("on", workflow.get(True))
    assert "pull_request" in triggers
    assert workflow["permissions"]["pull-requests"] == "write"
    steps = _steps()
    checkout = next(s for s in steps if str(s.get("uses", "")).startswith("actions/checkout"))
    assert checkout["with"]["fetch-depth"] == 0
    python = next(s for s in steps if str(s.get("uses", "")).startswith("actions/setup-python"))
    assert str(python["with"]["python-version"]) == "3.11"
    scripts = "\n".join(s.get("run", "") for s in steps)
    assert "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in scripts
    assert "pip install -e '.[dev]'" in scripts
    assert "dvc remote list" in scripts and "dvc pull" in scripts
    assert any("actions/github-script" in str(s.get("uses", "")) for s in steps)


def test_workflow_calls_the_real_cli():
    pyproject = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'guardpolicy = "guardpolicy.cli:main"' in pyproject
    calls = [
        shlex.split(line.strip())
        for s in _steps()
        for line in s.get("run", "").splitlines()
        if line.strip().startswith("guardpolicy ")
    ]
    assert len(calls) == 1
    call = calls[0]
    assert call[1] == DIFF_COMMAND
    flags = {arg[2:].split("=")[0].replace("-", "_") for arg in call[2:] if arg.startswith("--")}
    assert flags == {"rev", "out"}
    assert flags <= set(inspect.signature(diff).parameters)
    from guardpolicy import cli

    assert DIFF_COMMAND in cli.COMMANDS
    assert cli.resolve(DIFF_COMMAND).__wrapped__ is diff


def test_workflow_comment_script_updates_one_comment():
    script = next(s for s in _steps() if "github-script" in str(s.get("uses", "")))["with"]["script"]
    assert "diff.md" in script and "updateComment" in script and "createComment" in script
    assert os.path.basename(WORKFLOW) == "pr-diff.yml"

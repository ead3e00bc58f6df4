"""The `guardpolicy` command as a user runs it (a subprocess of the installed console script): output, exit
status and one-line errors; and that a command imports only its own module."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.benchmarks import EXPECTED_ROWS, write_params
from helpers.paths import REPO_ROOT

from guardpolicy import cli
from guardpolicy.config.params import load_params

PARAMS = REPO_ROOT / "params.yaml"


def _guardpolicy() -> str:
    script = Path(sys.executable).parent / "guardpolicy"
    found = str(script) if script.exists() else shutil.which("guardpolicy")
    if found is None:
        pytest.skip("the guardpolicy console script is not installed")
    return found


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_guardpolicy(), *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def test_cli_params_prints_the_active_profile() -> None:
    completed = _cli("params")
    assert completed.returncode == 0, completed.stderr
    shown = json.loads(completed.stdout)
    assert shown["profile"] == "default"
    assert shown["active"]["pool_size"] == load_params(PARAMS).active.pool_size
    assert shown["data"]["mirror_dir"] == "../shared/benchmarks"


def test_cli_params_with_another_profile(tmp_path: Path) -> None:
    path = write_params(tmp_path / "params.yaml", tmp_path / "mirror", profile="paper")
    completed = _cli("params", "--params_file", str(path))
    assert completed.returncode == 0, completed.stderr
    shown = json.loads(completed.stdout)
    assert shown["profile"] == "paper"
    assert shown["active"]["precision"] == "bf16"
    assert shown["active"]["seed"] == 42
    assert shown["active"]["large_encoder"]["name"] == "answerdotai/ModernBERT-large"


def test_cli_registry_lists_the_benchmarks() -> None:
    completed = _cli("registry")
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.strip().splitlines()
    assert len(lines) == 16
    assert [line.split()[0] for line in lines] == list(EXPECTED_ROWS)
    assert [int(line.split()[1]) for line in lines] == list(EXPECTED_ROWS.values())


@pytest.mark.parametrize(
    ("text", "expected"),
    [("profile: default\nbogus: 1\n", "unknown key(s) ['bogus']"), (None, "file not found")],
    ids=["unknown-key", "missing-file"],
)
def test_cli_bad_params_exits_2_with_one_line(tmp_path: Path, text: str | None, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    completed = _cli("params", "--params_file", str(path))
    assert completed.returncode == 2
    assert completed.stdout == ""
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith(f"error: {path}: ")
    assert expected in lines[0]
    assert "Traceback" not in completed.stderr


def test_every_command_resolves_to_a_guarded_operation() -> None:
    for name in cli.COMMANDS:
        operation = cli.resolve(name)
        assert callable(operation.__wrapped__), name


def test_a_light_command_does_not_import_the_stage_modules() -> None:
    """`guardpolicy params` parses params; it must not pay for torch, transformers or Great Expectations."""
    code = (
        "import sys\n"
        "from guardpolicy.cli import main\n"
        "main(['params', '--params_file', sys.argv[1]])\n"
        "heavy = [m for m in ('torch', 'transformers', 'great_expectations') if m in sys.modules]\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code, str(PARAMS)], capture_output=True, text=True, timeout=120, check=False
    )
    assert completed.returncode == 0, completed.stderr
    assert "HEAVY []" in completed.stderr

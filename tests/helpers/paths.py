"""Where things are: the repository, the test fixtures and the byte-exact benchmark mirror beside it."""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTS = REPO_ROOT / "tests"
FIXTURES = TESTS / "fixtures"
# The byte-exact mirror of the public benchmarks that sits beside the repository here and in CI.
MIRROR = (REPO_ROOT / ".." / "shared" / "benchmarks").resolve()
# Small upstream-format files (the mirror's layout) for fetch and loader tests.
UPSTREAM = FIXTURES / "upstream"
# The interpreter that runs stage scripts in subprocesses: the project's venv, else (CI installing into the
# running interpreter) this one.
PYTHON = REPO_ROOT / ".venv" / "bin" / "python"
if not PYTHON.exists():
    PYTHON = Path(sys.executable)

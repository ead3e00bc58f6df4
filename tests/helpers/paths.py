"""Where things are: the repository, the test fixtures and the byte-exact benchmark mirror beside it."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTS = REPO_ROOT / "tests"
FIXTURES = TESTS / "fixtures"
# The byte-exact mirror of the public benchmarks that sits beside the repository here and in CI.
MIRROR = (REPO_ROOT / ".." / "shared" / "benchmarks").resolve()

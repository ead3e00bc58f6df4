"""A repository-shaped folder for a stage under test: guardpolicy.layout paths under a temporary root."""

from __future__ import annotations

import shutil
from pathlib import Path

from guardpolicy.layout import Layout
from helpers.paths import REPO_ROOT

# The inputs versioned in git that most stages read.
SHARED_INPUTS = ("taxonomy", "benchmark_registry")


def repo_layout(root: Path, copy: tuple[str, ...] = SHARED_INPUTS) -> Layout:
    """The layout under `root`, with the named artifacts of this checkout copied in (params.yaml is the
    test's own: write it with helpers.benchmarks.write_params)."""
    layout = Layout(root)
    for name in copy:
        target = layout.path(name)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(Layout(REPO_ROOT).path(name), target)
    return layout


def stage_env(root: Path) -> dict[str, str]:
    """The environment a stage script runs under for the repository at `root`, as DVC sets it (DVC_ROOT)."""
    import os

    from guardpolicy.layout import ROOT_ENV

    return {**os.environ, ROOT_ENV: str(root)}

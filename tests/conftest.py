"""Shared fixtures. Constants and builders live in tests/helpers/ (importable as `helpers`); test modules
import from there and never from each other.

Built once per test run (session scope: every module and the end-to-end runs reuse them): the tiny
open-guard checkpoints. Per test: the fake OpenAI-compatible server and the baseline@ workspace.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")


@pytest.fixture(scope="session")
def tiny_guards(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random Qwen3Guard / Granite Guardian / Llama Guard checkpoints (local folders), by family."""
    from helpers.tiny_guards import FAMILIES, build_tiny_guard, byte_level_bpe

    bpe = byte_level_bpe()
    root = tmp_path_factory.mktemp("tiny_guards")
    return {name: build_tiny_guard(family, bpe, root / name) for name, family in FAMILIES.items()}


@pytest.fixture(scope="session")
def classifier_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Prompt-Guard-format BERT classifier (local folder)."""
    from helpers.tiny_guards import build_tiny_classifier

    return build_tiny_classifier(tmp_path_factory.mktemp("classifier") / "tiny")


@pytest.fixture
def server() -> Iterator:
    """The fake OpenAI-compatible server (helpers.fake_openai): committee judges and guards alike."""
    from helpers.fake_openai import serving

    with serving() as fake:
        yield fake


@pytest.fixture
def baseline_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_guards: dict[str, Path]) -> Path:
    """A tiny repository for stage baseline@<guard>, as the working directory (helpers.baseline_workspace)."""
    from helpers.baseline_workspace import build_workspace

    monkeypatch.chdir(tmp_path)
    return build_workspace(tmp_path, tiny_guards["qwen3guard"])


@pytest.fixture
def score_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny repository for `guardpolicy score` (helpers.score_workspace), as the working directory."""
    from helpers.score_workspace import build_score_workspace

    root = build_score_workspace(tmp_path / "repo")
    monkeypatch.chdir(root)
    return root

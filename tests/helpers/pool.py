"""A user's own pool source, declared in a copy of data/pool.yaml as a user would (issue 19's tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from helpers.benchmarks import write_params


def declare_user_source(registry_file: Path, name: str, path: str, weight: float, **entry: Any) -> None:
    """Add `kind: user` source `name` reading the CSV at `path` (column `text`; `entry` adds keys such as
    `id`) to the pool registry at `registry_file`."""
    registry = yaml.safe_load(registry_file.read_text(encoding="utf-8"))
    registry["sources"][name] = {
        "kind": "user",
        "description": "Our own prompts (test).",
        "license": "internal",
        "weight": weight,
        "files": [{"path": path, "format": "csv"}],
        "prompt": "text",
        "facts": [],
        **entry,
    }
    registry_file.write_text(yaml.safe_dump(registry, sort_keys=False), encoding="utf-8")


def write_pool_params(root: Path, sources: dict[str, Any], pool_size: int, mirror: Path) -> Path:
    """A repository-shaped `root` for stage pool: its own pool registry (`sources`) and a smoke-profile
    params.yaml pointing at it, with `pool_size` prompts and the public files under `mirror`."""
    registry_file = root / "pool.yaml"
    registry_file.write_text(yaml.safe_dump({"sources": sources}, sort_keys=False), encoding="utf-8")
    params_file = write_params(root / "params.yaml", mirror, allow_download=False, profile="smoke")
    params = yaml.safe_load(params_file.read_text(encoding="utf-8"))
    params["profiles"]["smoke"]["pool_size"] = pool_size
    params["pool"] = {"sources_file": str(registry_file), "seed": 7, "max_prompt_chars": 200}
    params_file.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    return params_file

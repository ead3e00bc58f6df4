"""A user's own pool source, declared in a copy of data/pool.yaml as a user would (issue 19's tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


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

"""Resumable training state and the final checkpoint folder.

The state file (``<work_dir>/state.pt``) holds everything a run needs to continue as if it had never stopped:
model, optimizer and scheduler state, every RNG (python, numpy, torch CPU and CUDA), the position in the
epoch's batch order, and the run fingerprint. A state is only resumed by a run with the same fingerprint -
a hash of the recipe, the examples and the initialisation - so changing any of them starts afresh.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from guardpolicy.config.encoders import EncoderConfig
from guardpolicy.io import atomic_dir, atomic_path, sha256_file
from guardpolicy.training.datasets import LEARNED_COLUMNS

log = logging.getLogger(__name__)

STATE_FILE = "state.pt"
LIVE_SNAPSHOT = "live"
# Columns of the examples frame that decide what a run learns (and therefore its fingerprint).
FINGERPRINT_COLUMNS = LEARNED_COLUMNS


def _jsonable(value: Any) -> Any:
    if value is None or value is pd.NA:
        return None
    if isinstance(value, np.ndarray | list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and np.isnan(value):
        return None
    return value


def examples_digest(examples: pd.DataFrame) -> str:
    """sha256 over the learning-relevant columns, row by row in frame order (order changes batches)."""
    digest = hashlib.sha256()
    columns = [c for c in FINGERPRINT_COLUMNS if c in examples.columns]
    digest.update(json.dumps(columns).encode())
    for row in zip(*(examples[c].tolist() for c in columns), strict=True):
        digest.update(json.dumps(_jsonable(list(row)), allow_nan=False).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def init_digest(init: EncoderConfig | str | Path) -> dict[str, Any]:
    """What a run starts from: the encoder spec, or the hashes of a checkpoint folder's files."""
    if isinstance(init, EncoderConfig):
        return {"encoder": dataclasses.asdict(init)}
    folder = Path(init)
    return {
        "checkpoint": {
            name: sha256_file(folder / name)
            for name in ("config.json", "model.safetensors")
            if (folder / name).is_file()
        }
    }


# When the resumable state is saved changes nothing it holds: a run resumed with another cadence (say, minutes
# instead of steps after a crash) must find its state, not start again from step 0.
NOT_FINGERPRINTED = ("checkpoint_every_steps", "checkpoint_every_minutes")


def run_fingerprint(recipe: Any, examples: pd.DataFrame, init: EncoderConfig | str | Path) -> str:
    fields = {k: v for k, v in dataclasses.asdict(recipe).items() if k not in NOT_FINGERPRINTED}
    payload = {
        "recipe": fields,
        "examples": examples_digest(examples),
        "init": init_digest(init),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def capture_rng() -> dict[str, Any]:
    numpy_state = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [numpy_state[0], numpy_state[1].tolist(), *numpy_state[2:]],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def restore_rng(state: dict[str, Any]) -> None:
    python_state = state["python"]
    random.setstate((python_state[0], tuple(python_state[1]), python_state[2]))
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def save_state(work_dir: Path, state: dict[str, Any], live_dir: Path | None) -> None:
    """Write the state atomically, with a copy of the dvclive folder as it was at this step."""
    if live_dir is not None and live_dir.is_dir():
        with atomic_dir(work_dir / LIVE_SNAPSHOT) as staging:
            shutil.copytree(live_dir, staging, dirs_exist_ok=True)
    # torch's writer reports a full disk as a RuntimeError without errno; atomic_path turns it into one line.
    with atomic_path(work_dir / STATE_FILE) as tmp:
        torch.save(state, tmp)


def load_state(work_dir: Path, fingerprint: str) -> dict[str, Any] | None:
    """The saved state of this very run, or None (no state, or one of a different run, which is discarded)."""
    path = work_dir / STATE_FILE
    if not path.is_file():
        return None
    state = torch.load(path, map_location="cpu", weights_only=True)
    if state.get("fingerprint") != fingerprint:
        log.info("%s belongs to a different run (recipe, data or init changed); starting afresh", path)
        return None
    return state


def discard_state(work_dir: Path) -> None:
    """Remove a finished run's state and log snapshot (the work dir itself may hold other runs' files)."""
    (work_dir / STATE_FILE).unlink(missing_ok=True)
    shutil.rmtree(work_dir / LIVE_SNAPSHOT, ignore_errors=True)


def restore_live_snapshot(work_dir: Path, live_dir: Path | None) -> bool:
    snapshot = work_dir / LIVE_SNAPSHOT
    if live_dir is None or not snapshot.is_dir():
        return False
    shutil.rmtree(live_dir, ignore_errors=True)
    shutil.copytree(snapshot, live_dir)
    return True

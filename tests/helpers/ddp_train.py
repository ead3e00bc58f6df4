"""A tiny training run for the multi-process tests: run once per rank by `torch.distributed.run` (gloo), or
called in-process as the one-process reference. Usage: python ddp_train.py OUT_DIR WORK_DIR MICRO_BATCH."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `helpers` when run as a script

from guardpolicy.devtools.gpu_check import examples_frame
from guardpolicy.training.loop import train
from guardpolicy.training.recipe import TrainRecipe
from helpers.encoders import TINY

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
MARKERS = ["safe", "harmful", "refuse", "compound"]


def ddp_examples(n: int = 22) -> pd.DataFrame:
    """Rows of varied length, equal weights and no spans: every loss term is a plain per-example mean, so
    slicing a batch across processes or micro-batches changes nothing but float rounding. 22 rows in batches
    of 8 leave a short last batch (6) whose slices are uneven under micro-batches of 2."""
    rng = np.random.default_rng(3)
    rows = []
    for i in range(n):
        label = i % 4
        filler = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 10))))
        pillars = [0] * 24
        pillars[label] = 1
        rows.append((f"d{i:03d}", f"{filler} {MARKERS[label]} {filler}", label, pillars))
    return examples_frame(rows)


def ddp_recipe(micro_batch_size: int | None = None, **changes) -> TrainRecipe:
    fields = {
        "epochs": 2,
        "batch_size": 8,
        "learning_rate": 1e-3,
        "max_length": 32,
        "seed": 5,
        "checkpoint_every_steps": 3,
        "log_every_steps": 2,
        "micro_batch_size": micro_batch_size,
    }
    return TrainRecipe(**{**fields, **changes})


def run(out_dir: Path, work_dir: Path, micro_batch_size: int | None = None, **changes):
    return train(
        ddp_examples(),
        ddp_recipe(micro_batch_size, **changes),
        TINY,
        out_dir,
        work_dir,
        None,
        "ddp",
        threads=1,
        device="cpu",
    )


if __name__ == "__main__":
    import json
    import os

    out, work, micro = sys.argv[1:4]
    result = run(Path(out), Path(work), int(micro) if micro != "none" else None)
    report = Path(work).parent / f"{Path(out).name}-rank{os.environ.get('RANK', '0')}.json"
    report.write_text(json.dumps(result.to_dict()))

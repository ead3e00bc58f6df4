"""bench-train: training throughput (samples/s) of our loop against a plain transformers.Trainer, in one run.

Both train the same guard on the same real prompts (a seeded sample of data/pool/pool.parquet) with the same
batch size, max_length, thread count, optimizer and loss; warm-up steps are not timed. Prints both figures
and their ratio (ours / Trainer) and returns them as a dict. Not a DVC stage: a measurement for the README.

    python pipelines/bench_train.py --samples 512 --batch_size 32 --max_length 64
    python pipelines/bench_train.py --num_layers 3          # the default profile's small scale
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports():
    from guardpolicy.training.bench import bench_train

if __name__ == "__main__":
    fire.Fire(guarded(bench_train))

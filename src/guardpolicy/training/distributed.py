"""The processes of one training run, through `accelerate`: one process (the default, no process group), or
one per device when launched by `accelerate launch` / `torchrun` (DDP; gloo on CPU, NCCL on CUDA).

Each global batch is cut the same way in every process (`rank_micro_batches`): the batch order stays a pure
function of (seed, epoch), each rank takes its slice, and each slice is split into the same number of
micro-batches on every rank so that DDP's gradient all-reduce happens at the same micro-step everywhere.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

log = logging.getLogger(__name__)


def launched_processes() -> int:
    """The world size a launcher (accelerate launch, torchrun) set for this process; 1 when run directly."""
    return int(os.environ.get("WORLD_SIZE", "1"))


@dataclass
class Processes:
    """This process's place in the run; `accelerator` is None in a single-process run (today's CPU path,
    untouched by any wrapper)."""

    accelerator: Any
    rank: int
    world_size: int

    @classmethod
    def start(cls, device: str | None) -> Processes:
        if launched_processes() <= 1:
            return cls(None, 0, 1)
        from accelerate import Accelerator

        # accelerate only picks the gloo (MULTI_CPU) backend when told the run is on CPU.
        on_cpu = device == "cpu" or (device is None and not torch.cuda.is_available())
        accelerator = Accelerator(cpu=on_cpu, mixed_precision="no", device_placement=False)
        return cls(accelerator, accelerator.process_index, accelerator.num_processes)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def device(self) -> str | None:
        return str(self.accelerator.device) if self.accelerator is not None else None

    def wait(self) -> None:
        if self.accelerator is not None:
            self.accelerator.wait_for_everyone()

    def wrap(self, module: torch.nn.Module) -> torch.nn.Module:
        """DDP around `module` (gradients of its trainable parameters are averaged over the ranks)."""
        if self.accelerator is None:
            return module
        return self.accelerator.prepare_model(module, device_placement=False)

    @contextlib.contextmanager
    def no_sync(self, module: torch.nn.Module, skip: bool) -> Iterator[None]:
        """Accumulate gradients locally (no all-reduce) while `skip`; the last micro-batch syncs."""
        if self.accelerator is None or not skip:
            yield
            return
        with self.accelerator.no_sync(module):
            yield

    def backward(self, loss: torch.Tensor) -> None:
        if self.accelerator is None:
            loss.backward()
        else:
            self.accelerator.backward(loss)

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.accelerator is None:
            return tensor
        return self.accelerator.reduce(tensor.to(self.accelerator.device), reduction="sum").cpu()


def rank_micro_batches(
    indices: np.ndarray, rank: int, world_size: int, accumulation: int
) -> list[tuple[np.ndarray, float]]:
    """This rank's micro-batches of one global batch and each one's loss scale.

    The scale is the micro-batch's share of the global batch's examples times world_size (DDP averages the
    ranks' gradients), so the summed gradient equals that of the global batch's mean loss however the slices
    fall. A rank left without examples (a short last batch) runs one example at scale 0: DDP needs every
    rank's backward.
    """
    total = len(indices)
    part = np.array_split(indices, world_size)[rank]
    micro = []
    for chunk in np.array_split(part, accumulation):
        if len(chunk):
            micro.append((chunk, len(chunk) / total * world_size))
        else:
            micro.append((indices[:1], 0.0))
    return micro


def is_main_process() -> bool:
    """Rank 0 of a launched run, or the only process; the one that writes a stage's outputs."""
    return int(os.environ.get("RANK", "0")) == 0


def relaunch_stage(num_processes: int, script: Path, args: list[str]) -> bool:
    """Run the stage script `script args` again under `accelerate launch` with `num_processes` processes, when
    params training.num_processes asks for more than one and this process was not launched already.

    Returns True when the stage ran in the launched processes (their rank 0 wrote its outputs) and False when
    the caller should run the stage itself. `--multi_gpu` makes accelerate start one process per device
    through torch.distributed.run (on a CPU-only machine the processes use gloo); an `accelerate config`
    file's other settings still apply. The launched ranks leave the stage's timing record to this process
    (DVC's).
    """
    if num_processes <= 1 or launched_processes() > 1:
        return False
    from guardpolicy.timing import STAGE_ENV

    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        str(num_processes),
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        str(script),
        *args,
    ]
    log.info("training.num_processes %d: %s", num_processes, " ".join(command))
    env = {k: v for k, v in os.environ.items() if k != STAGE_ENV}
    completed = subprocess.run(command, check=False, env=env)
    if completed.returncode != 0:
        raise RuntimeError(
            f"{script} {' '.join(args)} under accelerate launch ({num_processes} processes) exited with "
            f"status {completed.returncode}; see the ranks' output above"
        )
    return True

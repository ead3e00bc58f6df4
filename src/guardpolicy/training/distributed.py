"""The processes of one training run, through `accelerate`: one process (the default, no process group), or
one per device when launched by `accelerate launch` / `torchrun` (DDP; gloo on CPU, NCCL on CUDA).

Each global batch is cut the same way in every process (`rank_micro_batches`): the batch order stays a pure
function of (seed, epoch), each rank takes its slice, and each slice is split into the same number of
micro-batches on every rank so that DDP's gradient all-reduce happens at the same micro-step everywhere.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


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

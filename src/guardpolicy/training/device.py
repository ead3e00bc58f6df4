"""Where and in which precision training and inference run: CUDA + bf16 autocast if present, else CPU fp32."""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from typing import Literal

import torch

log = logging.getLogger(__name__)

Precision = Literal["auto", "fp32", "bf16"]


@dataclass(frozen=True)
class DeviceChoice:
    device: torch.device
    precision: Literal["fp32", "bf16"]

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        return torch.bfloat16 if self.precision == "bf16" else None

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast (weights and optimizer state stay fp32), or nothing for fp32."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    def describe(self) -> str:
        if self.device.type == "cuda":
            return f"cuda:{torch.cuda.get_device_name(self.device)} {self.precision}"
        return f"cpu ({torch.get_num_threads()} threads) {self.precision}"


def cpu_count() -> int:
    """CPUs this process may run on (affinity / container limits), not the host's total."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def configure_threads(threads: int | None = None) -> int:
    """Use as many intra-op threads as CPUs are available (or `threads`); returns the number set."""
    threads = threads or cpu_count()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


def choose_device(precision: Precision = "auto", device: str | None = None) -> DeviceChoice:
    """CUDA if present (bf16 when asked for or `auto` and supported), else CPU in fp32.

    bf16 on CPU is slower than fp32 on the machines this runs on and changes the numbers, so a bf16 request
    on CPU falls back to fp32 with a warning rather than failing the run.
    """
    chosen = torch.device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if chosen.type == "cuda":
        bf16_ok = torch.cuda.is_bf16_supported()
        if precision == "bf16" and not bf16_ok:
            log.warning("bf16 requested but %s does not support it; using fp32", torch.cuda.get_device_name())
        return DeviceChoice(chosen, "bf16" if precision in ("auto", "bf16") and bf16_ok else "fp32")
    if precision == "bf16":
        log.warning("bf16 requested but running on CPU; using fp32")
    return DeviceChoice(chosen, "fp32")

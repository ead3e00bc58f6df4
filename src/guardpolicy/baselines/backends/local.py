"""What both local backends (`causal_lm`, `classifier`) share: a folder or a pinned hub revision, device and
dtype, length-sorted batching, and loading under the guard's `LoadPolicy`.

Both load weights as safetensors only and never run a model's own code, unless the guard's registry entry says
`allow_pickle: true` / `trust_remote_code: true` (`LoadPolicy`); a pickle-only folder is refused before
anything is read, with the entry to change. CUDA + bf16 when present, else CPU fp32
(`guardpolicy.training.device.choose_device`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from guardpolicy.baselines.backends.common import BackendError, Dtype, all_answered, log_throughput
from guardpolicy.baselines.base import Generation, GuardAdapter, OnGeneration
from guardpolicy.errors import ConfigError
from guardpolicy.layout import relative_path
from guardpolicy.modeling.weights import (
    check_weights,
    code_kwargs,
    hub_refusal,
    load_kwargs,
    remote_code_refusal,
)
from guardpolicy.training.device import choose_device


@dataclass(frozen=True)
class LoadPolicy:
    """What a local backend may load, from the guard's registry entry (`entry` in `entry_file`, which a
    refusal names): pickle weights only with `allow_pickle`, the model's own code only with
    `trust_remote_code` (guardpolicy.modeling.weights)."""

    allow_pickle: bool = False
    trust_remote_code: bool = False
    entry: str = "guards.<name>"
    entry_file: str = relative_path("baseline_registry")


class LocalModel:
    """What both local backends share: a folder or a pinned hub revision, device and dtype, loading."""

    def __init__(
        self,
        model: str | Path,
        revision: str | None,
        device: str | None,
        dtype: Dtype,
        batch_size: int,
        local_files_only: bool,
        policy: LoadPolicy,
    ) -> None:
        if dtype not in ("auto", "bf16", "fp32"):
            raise ConfigError(f"backend dtype must be auto, bf16 or fp32, got {dtype!r}")
        if batch_size < 1:
            raise ConfigError(f"backend batch_size must be at least 1, got {batch_size}")
        self.location = Path(model) if Path(model).is_dir() else None
        if self.location is None and not revision:
            raise ConfigError(
                f"model {str(model)!r} is not a local folder, so it comes from the hub and needs a pinned "
                "revision (a commit sha) for the results to be reproducible"
            )
        self.model_id = str(model)
        # Kept for the cache key even for a local folder (e.g. the sha of a downloaded snapshot).
        self.revision = revision
        self.batch_size = batch_size
        self.local_files_only = local_files_only
        self.device_choice = choose_device(dtype, device)
        self.torch_dtype = torch.bfloat16 if self.device_choice.precision == "bf16" else torch.float32
        self.policy = policy
        # Refused before anything is read, so a pickle-only guard fails at once rather than after the
        # tokenizer, the cache lookup or half a run.
        check_weights(
            self.location or self.model_id,
            None if self.location is not None else revision,
            allow_pickle=policy.allow_pickle,
            entry=policy.entry,
            entry_file=policy.entry_file,
        )

    def _where(self) -> str:
        return repr(self.model_id) + (f" at revision {self.revision}" if self.revision else "")

    def _in_length_batches(
        self,
        adapter: GuardAdapter,
        texts: list[str],
        lengths: list[int],
        run_batch: Callable[[list[str]], list[Generation]],
        started: float,
        on_generation: OnGeneration | None = None,
    ) -> list[Generation]:
        """`run_batch` over batches of `texts`, longest first (a batch holds prompts of similar length, so
        little padding; ties in input order); the results back in input order, the throughput logged."""
        order = sorted(range(len(texts)), key=lambda i: (-lengths[i], i))
        batches = [order[start : start + self.batch_size] for start in range(0, len(order), self.batch_size)]
        results: list[Generation | None] = [None] * len(texts)
        for batch in tqdm(batches, desc=f"{self.model_id} ({adapter.family})", unit="batch"):
            for index, generation in zip(batch, run_batch([texts[i] for i in batch]), strict=True):
                results[index] = generation
                if on_generation is not None:
                    on_generation(index, generation)
        self.generated += len(texts)
        log_throughput(
            self.model_id,
            adapter.family,
            len(texts),
            time.perf_counter() - started,
            self.device_choice.describe(),
        )
        return all_answered(results)

    def _load(self, auto_class: Any, what: str, **kwargs: Any) -> Any:
        """`auto_class.from_pretrained` of this model; weights (`what` == "model") as safetensors only
        unless the entry allows pickle, remote code only as the entry says."""
        policy = self.policy
        if what == "model":
            kwargs |= load_kwargs(
                allow_pickle=policy.allow_pickle, trust_remote_code=policy.trust_remote_code
            )
        else:
            kwargs |= code_kwargs(policy.trust_remote_code)
        try:
            return auto_class.from_pretrained(
                self.model_id,
                revision=self.revision if self.location is None else None,
                local_files_only=self.local_files_only,
                **kwargs,
            )
        except (OSError, ValueError) as exc:
            refusal = (
                hub_refusal(exc, self.model_id, policy.allow_pickle, policy.entry, policy.entry_file)
                if isinstance(exc, OSError)
                else remote_code_refusal(
                    exc, self.model_id, policy.trust_remote_code, policy.entry, policy.entry_file
                )
            )
            if refusal is not None:
                raise refusal from exc
            hint = " (local_files_only: download it first or pass local_files_only=False)"
            hint = hint if self.local_files_only else ""
            raise BackendError(f"model {self._where()}: cannot load the {what}{hint}: {exc}") from exc

"""The one training loop behind every teacher and branch: hard labels, distillation and head-only calibration.

The three policy paths differ only in their inputs and recipe: which labels the `examples` carry, whether
rows carry cached teacher logits (distillation; the teacher never runs here), and which part of the model
is trainable ("full", "encoder" = all but the input embeddings, "heads" = backbone frozen). Head-only runs
the frozen backbone once over the data under ``torch.no_grad()``, writes its token states to a memory-mapped
file in the work dir (recipe.feature_cache_dtype) and trains the heads on them, so the backbone's weights
stay bit-identical and each epoch costs almost nothing.

Determinism: every RNG is seeded from the recipe, the batch order of an epoch is a pure function of
(seed, epoch), and on CPU the run is bit-reproducible - including across an interruption: the state saved
every ``checkpoint_every_steps`` / ``checkpoint_every_minutes`` (whichever comes first, and at each epoch end)
restores model, optimizer, scheduler, RNGs and the position in the batch order.

Scale-out (guardpolicy.training.distributed, on `accelerate`): launched by `accelerate launch` / `torchrun`,
every process runs this same loop on its slice of each global batch, DDP averages the gradients, and only
rank 0 writes (model folder, dvclive, resumable state). `recipe.micro_batch_size` splits each process's slice
into micro-batches whose gradients are accumulated locally (no all-reduce until the last one). Each
micro-batch's loss is scaled by its share of the global batch, so N processes x K micro-batches take the same
step as one process on the whole batch. One process with no micro-batch cap is exactly today's loop.

The run's parts live beside it: `recipe` (TrainRecipe, TrainResult), `targets` (the examples frame validated
into arrays), `model_setup` (initial model, trainable parameters, optimizer, schedule, deterministic kernels)
and `frozen_states` (the frozen part's token states, computed once).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from guardpolicy.config.encoders import EncoderConfig
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.io import atomic_dir
from guardpolicy.modeling.guard import count_parameters, save_guard
from guardpolicy.modeling.prefix import TopView
from guardpolicy.training.checkpoint import (
    capture_rng,
    discard_state,
    load_state,
    restore_live_snapshot,
    restore_rng,
    run_fingerprint,
    save_state,
    seed_everything,
)
from guardpolicy.training.collate import encode_prompts, epoch_batches, pad_batch
from guardpolicy.training.device import choose_device, configure_threads
from guardpolicy.training.distributed import Processes, rank_micro_batches
from guardpolicy.training.frozen_states import (
    FeatureCache,
    backbone_token_states,
    cached_prefix_rows,
    discard_feature_caches,
    feature_cache_path,
    top_token_states,
)
from guardpolicy.training.losses import guard_loss
from guardpolicy.training.model_setup import (
    deterministic_algorithms,
    load_init,
    make_optimizer,
    make_scheduler,
    set_attention,
    set_trainable,
)
from guardpolicy.training.prefix_cache import PrefixCache
from guardpolicy.training.recipe import TrainRecipe, TrainResult, accumulation_steps
from guardpolicy.training.targets import batch_targets, examples_to_arrays

log = logging.getLogger(__name__)

# Order of the loss parts accumulated per step (the dvclive metric names).
LOSS_NAMES = ("loss", "coarse", "ce", "distill", "pillars", "span")


class StepForward(torch.nn.Module):
    """One training step's forward as one module, so DDP (and torch.compile) see exactly what a step runs:
    the heads on cached token states (head-only), the top layers + heads on cached prefix states, or the
    whole guard on token ids."""

    def __init__(self, model: torch.nn.Module, top: TopView | None, head_only: bool) -> None:
        super().__init__()
        self.model, self.top, self.head_only = model, top, head_only

    def forward(self, inputs: torch.Tensor, attention_mask: torch.Tensor) -> object:
        # inputs: [B, T, H] token states (head-only / prefix) or [B, T] token ids; attention_mask: [B, T]
        if self.head_only:
            return self.model.heads(inputs)
        if self.top is not None:
            return self.model.heads(self.top(inputs, attention_mask))
        return self.model(input_ids=inputs, attention_mask=attention_mask)


def train(
    examples: pd.DataFrame,
    recipe: TrainRecipe,
    init: EncoderConfig | str | Path,
    out_dir: str | Path,
    work_dir: str | Path,
    live_dir: str | Path | None,
    description: str,
    *,
    coarse_names: list[str] | None = None,
    pillar_names: list[str] | None = None,
    on_step: Callable[[int, Mapping[str, float]], None] | None = None,
    threads: int | None = None,
    device: str | None = None,
    prefix: PrefixCache | None = None,
    prefix_stage: str = "prefix@<scale>",
) -> TrainResult:
    """Train a guard on `examples` and save it (with its tokenizer) to `out_dir`.

    examples: one row per training example - id (str, unique), prompt (str), coarse (int class index in
    taxonomy order), pillars (24 values 0/1), optional span_start/span_end (char offsets into prompt, null
    when unknown: that row adds nothing to the span loss), teacher_logits (C floats or null; used only when
    recipe.distill_alpha is set), weight (float, default 1), optional prompt_id (the pool id whose cached
    prefix states the row reads; default its id). Row order is part of the run's identity.
    init: an EncoderConfig (fresh guard from that backbone) or a guard checkpoint folder.
    work_dir: resumable state; a state of the same run (fingerprint) is resumed. live_dir: dvclive logs.
    on_step(step, losses) is called after every optimizer step (tests interrupt runs by raising from it).
    prefix: the scale's prefix cache, required when recipe.frozen_layers > 0 (`prefix_stage` names the stage
    that builds it in messages): the frozen prefix never runs here, only the top layers and heads.
    """
    started = time.perf_counter()
    out_dir, work_dir = Path(out_dir), Path(work_dir)
    live_path = Path(live_dir) if live_dir is not None else None
    threads_used = configure_threads(threads)
    processes = Processes.start(device)
    chosen = choose_device(recipe.precision, processes.device or device)
    accumulation = accumulation_steps(recipe.batch_size, recipe.micro_batch_size, processes.world_size)
    where = f"examples of {description}"

    with deterministic_algorithms():
        seed_everything(recipe.seed)
        model, tokenizer = load_init(init, recipe.seed, coarse_names, pillar_names)
        set_attention(model, recipe.attn_implementation)
        arrays = examples_to_arrays(examples, model.config.num_classes, model.config.num_pillars, where)
        distill = recipe.distill_alpha is not None
        if distill and not arrays.has_teacher.any():
            raise InputError(
                where,
                "distillation is on (distill_alpha set) but no row has teacher_logits",
                field="teacher_logits",
            )
        fingerprint = run_fingerprint(recipe, examples, init)
        encoded = encode_prompts(
            tokenizer,
            examples["prompt"].tolist(),
            recipe.max_length,
            arrays.span_start,
            arrays.span_end,
            truncation=recipe.truncation,
            head_tokens=recipe.truncation_head_tokens,
        )
        # The model reads prompts at inference the way it was trained to.
        model.config.truncation = recipe.truncation
        model.config.truncation_head_tokens = recipe.truncation_head_tokens
        frozen = recipe.frozen_layers
        if frozen and model.config.frozen_layers not in (0, frozen):
            raise ConfigError(
                f"recipe.frozen_layers {frozen}: the initial model was trained with frozen_layers "
                f"{model.config.frozen_layers}"
            )
        model.config.frozen_layers = max(frozen, model.config.frozen_layers)
        prefix_rows = (
            cached_prefix_rows(prefix, examples, recipe, model, encoded, prefix_stage, where)
            if frozen
            else None
        )
        top = TopView(model.backbone, frozen) if frozen else None
        set_trainable(model, recipe.trainable, frozen)
        model.to(chosen.device)
        parameters = count_parameters(model)
        n = len(encoded)
        steps_per_epoch = math.ceil(n / recipe.batch_size)
        total_steps = steps_per_epoch * recipe.epochs
        log.info(
            "train %s: %d examples (%d with teacher logits%s, %d with a usable span), trainable=%s "
            "(%d of %d parameters, %.4f%%; heads %d), %d epochs x %d steps of %d "
            "(%d process(es) x %d micro-batch(es)), max_length %d, on %s",
            description,
            n,
            int(arrays.has_teacher.sum()),
            f", alpha {recipe.distill_alpha}, tau {recipe.distill_temperature}" if distill else ", not used",
            sum(bool(m.any()) for m in encoded.span_mask),
            recipe.trainable,
            parameters["trainable"],
            parameters["total"],
            100.0 * parameters["trainable"] / parameters["total"],
            parameters["heads"],
            recipe.epochs,
            steps_per_epoch,
            recipe.batch_size,
            processes.world_size,
            accumulation,
            recipe.max_length,
            chosen.describe(),
        )

        head_only = recipe.trainable == "heads"
        cached_states: FeatureCache | None = None
        if head_only:
            # Rank 0 fills the memory-mapped cache in the work dir; the other ranks read it once written.
            cache_file = feature_cache_path(work_dir, fingerprint)
            hidden_size = model.config.encoder.hidden_size
            if processes.is_main:
                cache = FeatureCache(
                    cache_file, encoded.lengths, hidden_size, recipe.feature_cache_dtype, create=True
                )
                if top is not None:
                    top_token_states(
                        top,
                        prefix_rows,  # type: ignore[arg-type]
                        encoded.lengths,
                        recipe.batch_size,
                        chosen,
                        description,
                        cache,
                    )
                else:
                    backbone_token_states(model, encoded, recipe.batch_size, chosen, description, cache)
            processes.wait()
            cached_states = FeatureCache(
                cache_file, encoded.lengths, hidden_size, recipe.feature_cache_dtype, create=False
            )
        trained_module: torch.nn.Module = model.heads if head_only else model
        named_trainable = [(name, p) for name, p in trained_module.named_parameters() if p.requires_grad]
        optimizer = make_optimizer(named_trainable, recipe, chosen)
        scheduler = make_scheduler(optimizer, recipe, total_steps)
        step_module = processes.wrap(StepForward(model, top, head_only))
        forward = torch.compile(step_module) if recipe.compile else step_module

        global_step, start_epoch, start_batch = 0, 0, 0
        epoch_sums = torch.zeros(len(LOSS_NAMES), dtype=torch.float64)
        epoch_steps = 0
        window_sums = torch.zeros(len(LOSS_NAMES), dtype=torch.float64)
        window_steps = 0
        last_epoch_means: dict[str, float] = {}
        state = load_state(work_dir, fingerprint)
        resumed_from = None
        if state is not None:
            trained_module.load_state_dict(state["trained_module"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            restore_rng(state["rng"])
            global_step, start_epoch, start_batch = (
                state["global_step"],
                state["epoch"],
                state["batch_in_epoch"],
            )
            epoch_sums, epoch_steps = state["epoch_sums"], state["epoch_steps"]
            window_sums, window_steps = state["window_sums"], state["window_steps"]
            last_epoch_means = state["last_epoch_means"]
            resumed_from = global_step
            log.info(
                "train %s: resuming from step %d of %d (%s)", description, global_step, total_steps, work_dir
            )

        live = None
        if live_path is not None and processes.is_main:
            from dvclive import Live

            resume_live = resumed_from is not None and restore_live_snapshot(work_dir, live_path)
            live = Live(str(live_path), resume=resume_live, save_dvc_exp=False, dvcyaml=None)
            if not resume_live:
                live.log_params({"description": description, **dataclasses.asdict(recipe)})

        def checkpoint(epoch: int, batch_in_epoch: int) -> None:
            nonlocal last_checkpoint
            last_checkpoint = time.perf_counter()
            if not processes.is_main:
                return
            save_state(
                work_dir,
                {
                    "fingerprint": fingerprint,
                    "global_step": global_step,
                    "epoch": epoch,
                    "batch_in_epoch": batch_in_epoch,
                    "trained_module": trained_module.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "rng": capture_rng(),
                    "epoch_sums": epoch_sums,
                    "epoch_steps": epoch_steps,
                    "window_sums": window_sums,
                    "window_steps": window_steps,
                    "last_epoch_means": last_epoch_means,
                },
                live_path,
            )

        samples_this_call = 0
        loop_started = last_checkpoint = time.perf_counter()
        every_steps = recipe.checkpoint_every_steps
        checkpoint_seconds = (
            recipe.checkpoint_every_minutes * 60.0 if recipe.checkpoint_every_minutes is not None else None
        )
        progress = tqdm(
            total=total_steps,
            initial=global_step,
            desc=f"train {description}",
            unit="step",
            mininterval=1.0,
            disable=not processes.is_main,
        )
        trained_module.train()
        for epoch in range(start_epoch, recipe.epochs):
            batches = epoch_batches(
                encoded.lengths, recipe.batch_size, recipe.seed, epoch, recipe.length_bucketing
            )
            first = start_batch if epoch == start_epoch else 0
            for batch_index in range(first, len(batches)):
                global_indices = batches[batch_index]
                step_losses = torch.zeros(len(LOSS_NAMES), dtype=torch.float64)
                micro_batches = rank_micro_batches(
                    global_indices, processes.rank, processes.world_size, accumulation
                )
                for micro_index, (indices, scale) in enumerate(micro_batches):
                    padded = pad_batch(encoded, indices)
                    targets = batch_targets(arrays, indices, padded, chosen.device, distill)
                    attention_mask = padded["attention_mask"].to(chosen.device)
                    if head_only:
                        inputs = torch.nn.utils.rnn.pad_sequence(
                            [cached_states[i] for i in indices],  # type: ignore[index]
                            batch_first=True,
                        ).to(chosen.device)  # [B, T, H]
                    elif top is not None:
                        inputs = torch.nn.utils.rnn.pad_sequence(
                            [prefix_rows[i] for i in indices],  # type: ignore[index]
                            batch_first=True,
                        ).to(chosen.device, torch.float32)  # [B, T, H]
                    else:
                        inputs = padded["input_ids"].to(chosen.device)  # [B, T]
                    last_micro = micro_index == len(micro_batches) - 1
                    with processes.no_sync(step_module, skip=not last_micro):
                        with chosen.autocast():
                            output = forward(inputs, attention_mask)
                        parts = guard_loss(
                            output.coarse_logits,
                            output.pillar_logits,
                            output.span_logits,
                            targets,
                            recipe.loss_weights,
                            recipe.distill_alpha,
                            recipe.distill_temperature,
                        )
                        # One process on the whole batch has scale 1 and backpropagates the loss unchanged.
                        processes.backward(parts.total * scale if scale != 1.0 else parts.total)
                    share = scale / processes.world_size
                    micro_losses = (
                        torch.stack(
                            [
                                parts.total,
                                parts.coarse,
                                parts.cross_entropy,
                                parts.distill,
                                parts.pillars,
                                parts.span,
                            ]
                        )
                        .detach()
                        .to("cpu", torch.float64)
                    )
                    step_losses += micro_losses * share if share != 1.0 else micro_losses
                step_losses = processes.sum(step_losses)
                if recipe.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_([p for _, p in named_trainable], recipe.grad_clip)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                global_step += 1
                samples_this_call += len(global_indices)
                window_sums += step_losses
                epoch_sums += step_losses
                window_steps += 1
                epoch_steps += 1
                progress.update(1)
                end_of_epoch = batch_index == len(batches) - 1
                if global_step % recipe.log_every_steps == 0 or global_step == total_steps:
                    means = dict(zip(LOSS_NAMES, (window_sums / window_steps).tolist(), strict=True))
                    elapsed = time.perf_counter() - loop_started
                    progress.set_postfix(
                        loss=f"{means['loss']:.4f}", samples_s=f"{samples_this_call / elapsed:.1f}"
                    )
                    if live is not None:
                        live.step = global_step
                        for name, value in means.items():
                            live.log_metric(f"train/{name}", value)
                        live.log_metric("train/lr", scheduler.get_last_lr()[0])
                        live.next_step()
                    window_sums.zero_()
                    window_steps = 0
                if end_of_epoch:
                    last_epoch_means = dict(zip(LOSS_NAMES, (epoch_sums / epoch_steps).tolist(), strict=True))
                    epoch_sums = torch.zeros_like(epoch_sums)
                    epoch_steps = 0
                    checkpoint(epoch + 1, 0)
                elif (every_steps is not None and global_step % every_steps == 0) or (
                    checkpoint_seconds is not None
                    and time.perf_counter() - last_checkpoint >= checkpoint_seconds
                ):
                    checkpoint(epoch, batch_index + 1)
                if on_step is not None:
                    on_step(global_step, dict(zip(LOSS_NAMES, step_losses.tolist(), strict=True)))
        progress.close()
        train_seconds = time.perf_counter() - loop_started

        model.eval()
        processes.wait()
        if processes.is_main:
            # A full disk or any other failed write is one line naming out_dir, and leaves no staging folder.
            with atomic_dir(out_dir) as staging:
                save_guard(model.to("cpu"), tokenizer, staging)
            # The resumable state (model + optimizer moments, about 3x the model) and the head-only feature
            # cache have served their purpose.
            discard_state(work_dir)
            discard_feature_caches(work_dir)
        else:
            model.to("cpu")
        processes.wait()

        samples_per_second = samples_this_call / train_seconds if samples_this_call else 0.0
        if live is not None:
            for name, value in last_epoch_means.items():
                live.log_metric(f"final/{name}", value, plot=False)
            live.log_metric("final/samples_per_second", samples_per_second, plot=False)
            live.end()
        result = TrainResult(
            description=description,
            examples=n,
            epochs=recipe.epochs,
            steps=global_step,
            seconds=time.perf_counter() - started,
            train_seconds=train_seconds,
            samples_per_second=samples_per_second,
            final_losses=last_epoch_means,
            parameters=parameters,
            trainable=recipe.trainable,
            device=chosen.device.type,
            precision=chosen.precision,
            processes=processes.world_size,
            resumed_from_step=resumed_from,
            fingerprint=fingerprint,
        )
        log.info(
            "train %s: %d steps in %.1fs (%.1f samples/s, %d threads), final loss %.4f -> %s",
            description,
            global_step,
            train_seconds,
            samples_per_second,
            threads_used,
            last_epoch_means.get("loss", float("nan")),
            out_dir,
        )
        return result

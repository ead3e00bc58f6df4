"""backbone@<scale>: the scale's encoder (params `scales`: the profile's student/teacher) with fresh heads
drawn with the main seed -> models/<scale>-pretrained, the starting folder of every run at that scale, with
its MODEL_CARD.md and model_card.json (guardpolicy.training.cards)."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from guardpolicy.config import load_params
from guardpolicy.io import atomic_dir, sha256_file
from guardpolicy.layout import Layout
from guardpolicy.taxonomy import load_taxonomy
from guardpolicy.training import branches as registry
from guardpolicy.training.card_files import backbone_block, library_versions, write_card
from guardpolicy.training.cards import model_card

log = logging.getLogger(__name__)


def backbone(scale: str, layout: Layout | None = None) -> dict[str, Any]:
    """Stage backbone@<scale>: the scale's encoder + fresh heads (main seed) -> models/<scale>-pretrained
    (paths from `layout`, default: this repository)."""
    from guardpolicy.modeling.guard import GuardModel, count_parameters, save_guard

    started = time.perf_counter()
    layout = layout or Layout.discover()
    params_file = str(layout.path("params"))  # named by refusals: the full path says which checkout
    params = load_params(params_file)
    encoder = registry.scale_encoder(params, scale, params_file)
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    seed = registry.main_seed(params)
    log.info("backbone %s: %s (%s), heads seeded %d", scale, encoder.name, params.scales[scale], seed)
    model, tokenizer = GuardModel.from_backbone(
        encoder,
        seed=seed,
        coarse_names=list(taxonomy.coarse_classes),
        pillar_names=list(taxonomy.pillar_names),
        entry=f"profiles.{params.profile}.{params.scales[scale]}",
        entry_file=params_file,
    )
    out_dir = layout.path("model", model=f"{scale}-{registry.PRETRAINED}")
    parameters = count_parameters(model)
    # Read before the write block, whose OS errors are reported as failures to write out_dir.
    data_hashes = {layout.relative("taxonomy"): sha256_file(layout.path("taxonomy"))}
    with atomic_dir(out_dir) as tmp:
        save_guard(model, tokenizer, tmp)
        card = model_card(
            name=out_dir.name,
            kind="backbone",
            scale=scale,
            description=f"The {scale} scale's pretrained encoder with fresh heads (seed {seed}).",
            branch=None,
            backbone=backbone_block(encoder, params.scales[scale], tmp),
            parameters=parameters,
            examples=None,
            teacher=None,
            init={"from": registry.PRETRAINED, "dir": encoder.name, "card": None},
            data=data_hashes,
            seed=seed,
            params={"scale": params.scales[scale], "encoder": dataclasses.asdict(encoder)},
            recipe=None,
            training=None,
            environment={"versions": library_versions()},
            run={},
        )
        write_card(tmp, card)
    seconds = time.perf_counter() - started
    log.info("backbone %s: %d parameters -> %s (%.1f s)", scale, parameters["total"], out_dir, seconds)
    return card

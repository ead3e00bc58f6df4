"""backbone@<scale>: the scale's encoder (params `scales`: one of the active profile's `small_encoder` /
`large_encoder` entries) with fresh heads drawn with the profile's `seed` -> models/<scale>-pretrained, the
starting folder of every run at that scale, with its MODEL_CARD.md and model_card.json
(guardpolicy.training.cards). Reads params `profile`, `profiles.<profile>` and `scales` only."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from guardpolicy.config.core import ParamsFile
from guardpolicy.config.profiles import active_profile
from guardpolicy.config.scales import SCALES, scale_encoder
from guardpolicy.io import atomic_dir, sha256_file
from guardpolicy.layout import Layout
from guardpolicy.taxonomy import load_taxonomy
from guardpolicy.training.card_files import backbone_block, library_versions, write_card
from guardpolicy.training.cards import model_card
from guardpolicy.training.names import PRETRAINED

log = logging.getLogger(__name__)


def backbone(scale: str, layout: Layout | None = None) -> dict[str, Any]:
    """Stage backbone@<scale>: the scale's encoder + fresh heads (main seed) -> models/<scale>-pretrained
    (paths from `layout`, default: this repository)."""
    from guardpolicy.modeling.guard import GuardModel, count_parameters, save_guard

    started = time.perf_counter()
    layout = layout or Layout.discover()
    params_file = str(layout.path("params"))  # named by refusals: the full path says which checkout
    params = ParamsFile.read(params_file)
    profile_name, profile = active_profile(params)
    scales = params.load(SCALES)
    encoder = scale_encoder(profile, scales, scale, params_file)
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    seed = profile.seed
    log.info("backbone %s: %s (%s), heads seeded %d", scale, encoder.name, scales[scale], seed)
    model, tokenizer = GuardModel.from_backbone(
        encoder,
        seed=seed,
        coarse_names=list(taxonomy.coarse_classes),
        pillar_names=list(taxonomy.pillar_names),
        entry=f"profiles.{profile_name}.{scales[scale]}",
        entry_file=params_file,
    )
    out_dir = layout.path("model", model=f"{scale}-{PRETRAINED}")
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
            backbone=backbone_block(encoder, scales[scale], tmp),
            parameters=parameters,
            examples=None,
            teacher=None,
            init={"from": PRETRAINED, "dir": encoder.name, "card": None},
            data=data_hashes,
            seed=seed,
            params={"scale": scales[scale], "encoder": dataclasses.asdict(encoder)},
            recipe=None,
            training=None,
            environment={"versions": library_versions()},
            run={},
        )
        write_card(tmp, card)
    seconds = time.perf_counter() - started
    log.info("backbone %s: %d parameters -> %s (%.1f s)", scale, parameters["total"], out_dir, seconds)
    return card

"""fetch@<benchmark>: acquire, verify and normalise one benchmark of the registry (data/benchmarks.yaml) from
the mirror or its pinned URL (or a Hugging Face dataset: a pinned hub revision or a local save_to_disk folder)
-> data/benchmarks/<name>.parquet and <name>.meta.json (guardpolicy.data.fetch).

Reads params `data.mirror_dir`, `data.allow_download`, `data.download_timeout_s` and the benchmark's entry; a
benchmark that cannot be had is recorded as missing in its meta file (validate_benchmarks decides whether
enough are present).
"""

from __future__ import annotations

import logging

from guardpolicy.config.core import ParamsFile
from guardpolicy.config.data import DATA
from guardpolicy.data.fetch import fetch_benchmark, write_outputs
from guardpolicy.data.registry import load_registry
from guardpolicy.errors import ConfigError
from guardpolicy.layout import Layout

log = logging.getLogger(__name__)


def fetch(name: str, layout: Layout | None = None) -> dict:
    """Acquire, verify and normalise one benchmark; write data/benchmarks/<name>.parquet and
    <name>.meta.json (paths from `layout`, default: this repository)."""
    layout = layout or Layout.discover()
    data = ParamsFile.read(layout.path("params")).load(DATA)
    registry = load_registry(layout.path("benchmark_registry"))
    if name not in registry:
        raise ConfigError(
            f"{layout.relative('benchmark_registry')}: no benchmark named {name!r}; known: {sorted(registry)}"
        )
    mirror = layout.resolve(data.mirror_dir)
    log.info(
        "fetch %s: mirror %s (%s), downloads %s",
        name,
        mirror,
        "present" if mirror.is_dir() else "absent",
        "on" if data.allow_download else "off",
    )
    result = fetch_benchmark(
        registry[name],
        mirror_dir=mirror,
        allow_download=data.allow_download,
        timeout_s=data.download_timeout_s,
        root=layout.root,
    )
    out = layout.path("benchmark", benchmark=name)
    write_outputs(result, out, layout.path("benchmark_meta", benchmark=name))
    meta = result.meta
    log.info(
        "fetch %s: %s, %d/%d rows -> %s",
        name,
        meta["status"],
        meta["rows"],
        meta["expected_rows"],
        out,
    )
    return meta

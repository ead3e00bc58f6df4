"""Rows of a Hugging Face dataset: a hub dataset at a pinned commit, or a local `save_to_disk` folder.

A benchmark file or a user pool file of format `dataset` (`guardpolicy.data.registry.HFDataset`) is read here
into the readers' shape, ``(columns, [(row_number, record), ...])`` with 1-based rows, so that the same column
mapping, validation and errors apply as to a CSV or parquet file: a missing column, a prompt that is not text
or a duplicate id is reported with the dataset's name, the row and the field.

The hub is reached only through `datasets.load_dataset(..., revision=<commit>)`. When that cannot reach the
hub, `datasets` falls back to *the latest cached version* of the dataset, whatever its commit; so after
loading, the commit the rows were built from (the last folder of every Arrow cache file) must be the pinned
one, or the rows are refused.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardpolicy.data.acquire import Unavailable
from guardpolicy.data.readers import Records
from guardpolicy.data.registry import HFDataset
from guardpolicy.errors import InputError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedDataset:
    """A dataset's rows, ready for the column mapping; the provenance fields match `acquire.LocalFile`'s."""

    origin: str  # the dataset's display name: the folder, or hf:<repo>@<revision>[config/split]
    columns: list[str]
    records: Records
    sha256: str  # of the rows as canonical JSON: the content, independent of how it is stored
    size: int  # bytes of the Arrow table
    verified: bool  # True for a hub dataset whose rows were checked to come from the pinned commit


def load_dataset_rows(spec: HFDataset, *, root: Path, allow_download: bool) -> LoadedDataset:
    """The rows of `spec`. Unavailable: a hub dataset that cannot be had now (downloads off and not offline,
    no network, not on the hub). InputError: a folder or split that is not there, an empty split, a cached
    copy of another commit."""
    display = spec.display_name
    # Imported here: `datasets` takes a second to import, and only a registry that names a dataset needs it.
    import datasets

    if spec.path is not None:
        dataset = _from_disk(datasets, spec, root, display)
    else:
        dataset = _from_hub(datasets, spec, allow_download, display)
    if len(dataset) == 0:
        where = f"split {spec.split!r}" if spec.split else "the dataset"
        raise InputError(display, f"{where} has no rows", row="header")
    columns = list(dataset.column_names)
    rows = dataset.to_list()
    records: Records = list(enumerate(rows, start=1))
    return LoadedDataset(
        origin=display,
        columns=columns,
        records=records,
        sha256=_rows_sha256(columns, rows),
        size=int(dataset.data.nbytes),
        verified=spec.repo is not None,
    )


def _from_disk(datasets: Any, spec: HFDataset, root: Path, display: str) -> Any:
    assert spec.path is not None
    folder = Path(spec.path) if Path(spec.path).is_absolute() else root / spec.path
    if not folder.is_dir():
        raise InputError(display, f"cannot read the dataset: no such folder ({folder})")
    try:
        loaded = datasets.load_from_disk(str(folder))
    # Not a saved dataset (FileNotFoundError), a damaged one (OSError, ValueError from its JSON / Arrow), or
    # one datasets wrote but cannot read back (IndexError: an empty in-memory dataset saved with no shard).
    except (OSError, ValueError, IndexError) as exc:
        raise InputError(
            display,
            f"not a readable datasets save_to_disk folder ({type(exc).__name__}: {exc}); write it with "
            "Dataset.save_to_disk (an empty dataset built with from_dict cannot be read back)",
        ) from exc
    if isinstance(loaded, datasets.DatasetDict):
        splits = sorted(loaded)
        if spec.split is None:
            raise InputError(display, f"the folder holds the splits {splits}; name one with split")
        if spec.split not in loaded:
            raise InputError(display, f"no split {spec.split!r}; the folder holds {splits}", field="split")
        return loaded[spec.split]
    # A single saved Dataset remembers the split it was taken from (None when built in memory).
    saved_split = str(loaded.split) if loaded.split is not None else None
    if spec.split is not None and saved_split is not None and spec.split != saved_split:
        raise InputError(
            display, f"the folder holds split {saved_split!r}, not {spec.split!r}", field="split"
        )
    return loaded


def _from_hub(datasets: Any, spec: HFDataset, allow_download: bool, display: str) -> Any:
    assert spec.repo is not None and spec.revision is not None
    offline = bool(datasets.config.HF_HUB_OFFLINE)
    if not allow_download and not offline:
        # params data.allow_download: false promises no network; HF_HUB_OFFLINE is how `datasets` keeps it.
        raise Unavailable(
            f"{display}: downloads are disabled (data.allow_download: false); set HF_HUB_OFFLINE=1 to load "
            "the pinned revision from the local Hugging Face cache, or allow downloads"
        )
    try:
        dataset = datasets.load_dataset(spec.repo, name=spec.config, split=spec.split, revision=spec.revision)
    except (
        ConnectionError,
        TimeoutError,
        FileNotFoundError,
        datasets.exceptions.DatasetNotFoundError,
    ) as exc:
        raise Unavailable(
            f"{display}: cannot load from the hub{' (offline)' if offline else ''}: {exc}"
        ) from exc
    except ValueError as exc:  # an unknown config or split: the registry names something the dataset lacks
        raise InputError(display, f"cannot load the config / split the registry names: {exc}") from exc
    _check_revision(dataset, spec, display)
    return dataset


def _check_revision(dataset: Any, spec: HFDataset, display: str) -> None:
    """Refuse rows not built from the pinned commit (the cache fallback of `datasets` ignores revisions)."""
    commits = {Path(entry["filename"]).parent.name for entry in dataset.cache_files}
    if not commits:
        raise InputError(
            display,
            "cannot tell which commit the rows come from (the dataset is held in memory, not in the cache; "
            "unset HF_DATASETS_IN_MEMORY_MAX_SIZE)",
        )
    if commits != {spec.revision}:
        raise InputError(
            display,
            f"the rows loaded come from commit(s) {sorted(commits)}, not the pinned revision {spec.revision} "
            "(datasets used another cached version); allow downloads once, or cache the pinned revision",
        )


def _rows_sha256(columns: list[str], rows: list[dict[str, Any]]) -> str:
    digest = hashlib.sha256(json.dumps(columns, ensure_ascii=False).encode("utf-8"))
    for row in rows:
        # default=str: dates, bytes and the like have no JSON form; the text is stable for a given value.
        digest.update(b"\n")
        digest.update(json.dumps(row, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8"))
    return digest.hexdigest()

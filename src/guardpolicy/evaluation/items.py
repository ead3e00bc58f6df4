"""Which items every model is scored on (contract "Evaluation items"), assembled from frames (pure).

Datasets: each fetched benchmark (all its rows; `clean` marks the rows its decontaminated copy kept) and each
evaluated split (`split:<name>`, prompts from the pool, gold labels from every policy's label file). One row
per item, sorted by (dataset, id): the order of the features file, the predictions and every batch plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from guardpolicy.contracts import BENCHMARK, PREDICTIONS, SPLIT, check_frame, require_columns
from guardpolicy.errors import InputError

SPLIT_PREFIX = "split:"
# What the items take from a benchmark, and the columns the predictions carry over from it where it has them.
BENCHMARK_COLUMNS = BENCHMARK.select("id", "prompt", "expected_unsafe")
OPTIONAL_BENCHMARK_COLUMNS = PREDICTIONS.select("category", "pair_id")
GOLD = PREDICTIONS.family("policy")  # gold_<policy>
KEY_SEPARATOR = "\t"


def item_columns(policies: Iterable[str]) -> list[str]:
    """The items frame's columns, in order: the predictions' item columns with the prompt."""
    return [
        "dataset",
        "id",
        "prompt",
        *PREDICTIONS.select("clean", "expected_unsafe", "category", "pair_id"),
        *(GOLD.column(policy) for policy in policies),
    ]


def split_dataset(split: str) -> str:
    return f"{SPLIT_PREFIX}{split}"


def _check_ids(frame: pd.DataFrame, file: str | Path) -> None:
    ids = frame["id"]
    missing = ids.isna().to_numpy()
    if missing.any():
        raise InputError(file, "empty id", row=int(np.flatnonzero(missing)[0]) + 1, field="id")
    # Compared as stored (text): 2 and "2" are one item once written, so they must not pass as two here.
    stored = ids.astype("str").reset_index(drop=True)
    duplicated = stored.duplicated().to_numpy()
    if duplicated.any():
        row = int(np.flatnonzero(duplicated)[0])
        first = int(np.flatnonzero((stored == stored.iloc[row]).to_numpy())[0])
        raise InputError(
            file,
            f"duplicate id: {ids.iloc[row]!r} is stored as {stored.iloc[row]!r}, the same as id "
            f"{ids.iloc[first]!r} in row {first + 1}",
            row=row + 1,
            field="id",
        )


def _check_pairs(frame: pd.DataFrame, file: str | Path) -> None:
    """Every `pair_id` of a benchmark names exactly one safe and one unsafe prompt.

    Why: the XSTest pair analysis only counts pairs with one prompt of each kind, so a pair with a third
    member (or a lost twin) would silently drop out of the consistency rate instead of failing here.
    """
    if "pair_id" not in frame.columns:
        return
    pairs = frame["pair_id"].reset_index(drop=True)
    unsafe = frame["expected_unsafe"].reset_index(drop=True)
    for pair in pd.unique(pairs.dropna()):
        rows = np.flatnonzero((pairs == pair).to_numpy(dtype=bool))
        kinds = [bool(unsafe.iloc[i]) for i in rows]
        if sorted(kinds) == [False, True]:
            continue
        members = ", ".join(
            f"row {i + 1} (id {frame['id'].iloc[i]!r}, {'unsafe' if kind else 'safe'})"
            for i, kind in zip(rows, kinds, strict=True)
        )
        raise InputError(
            file,
            f"pair {pair!r} must be one safe and one unsafe prompt, but has {len(rows)}: {members}",
            row=int(rows[-1]) + 1,
            field="pair_id",
        )


def benchmark_items(
    name: str,
    frame: pd.DataFrame,
    clean_ids: Iterable[str],
    policies: Iterable[str],
    file: str | Path,
) -> pd.DataFrame:
    """A benchmark's rows as items: gold `expected_unsafe`, `category` / `pair_id` where the set has them.

    The columns read must be the contract's (`guardpolicy.contracts.BENCHMARK`); ids compare as stored."""
    require_columns(BENCHMARK, frame, file, BENCHMARK_COLUMNS)
    _check_ids(frame, file)
    _check_pairs(frame, file)
    empty_prompt = frame["prompt"].isna().to_numpy() | (frame["prompt"].fillna("").str.len() == 0).to_numpy()
    if empty_prompt.any():
        raise InputError(file, "empty prompt", row=int(np.flatnonzero(empty_prompt)[0]) + 1, field="prompt")
    present = [column for column in OPTIONAL_BENCHMARK_COLUMNS if column in frame.columns]
    check_frame(BENCHMARK, frame, file, columns=[*BENCHMARK_COLUMNS, *present])
    items = pd.DataFrame(
        {
            "dataset": name,
            "id": frame["id"].astype("str"),
            "prompt": frame["prompt"].astype("str"),
            "clean": frame["id"].isin(set(clean_ids)).to_numpy(),
            "expected_unsafe": frame["expected_unsafe"].astype("boolean"),
        }
    )
    for column in OPTIONAL_BENCHMARK_COLUMNS:
        items[column] = (
            frame[column].astype("str")
            if column in frame.columns
            else pd.Series(pd.NA, index=items.index, dtype="str")
        )
    for policy in policies:
        items[GOLD.column(policy)] = pd.Series(pd.NA, index=items.index, dtype="str")
    return items


def split_items(
    split: str,
    split_frame: pd.DataFrame,
    prompts: pd.Series,
    labels: Mapping[str, pd.Series],
    files: Mapping[str, str | Path],
) -> pd.DataFrame:
    """A split's rows as items: the pool prompt and each policy's coarse label (`gold_<policy>`).

    prompts: pool id -> prompt; labels: policy -> (pool id -> coarse); files: "split", "pool" and each policy
    -> the file it came from, for error messages.
    """
    require_columns(SPLIT, split_frame, files["split"], SPLIT.select("id"))
    _check_ids(split_frame, files["split"])
    ids = split_frame["id"].astype("str")
    unknown = ~ids.isin(prompts.index).to_numpy()
    if unknown.any():
        row = int(np.flatnonzero(unknown)[0])
        raise InputError(
            files["split"],
            f"id {ids.iloc[row]!r} is not in the pool {files['pool']}",
            row=row + 1,
            field="id",
        )
    items = pd.DataFrame(
        {
            "dataset": split_dataset(split),
            "id": ids.to_numpy(),
            "prompt": prompts.loc[ids].astype("str").to_numpy(),
            "clean": True,
            "expected_unsafe": pd.array([pd.NA] * len(ids), dtype="boolean"),
            "category": pd.Series(pd.NA, index=range(len(ids)), dtype="str"),
            "pair_id": pd.Series(pd.NA, index=range(len(ids)), dtype="str"),
        }
    )
    for policy, coarse in labels.items():
        unlabelled = ~ids.isin(coarse.index).to_numpy()
        if unlabelled.any():
            row = int(np.flatnonzero(unlabelled)[0])
            raise InputError(files[policy], f"no label for split {split!r} id {ids.iloc[row]!r}", field="id")
        items[GOLD.column(policy)] = coarse.loc[ids].astype("str").to_numpy()
    return items


def combine_items(frames: Iterable[pd.DataFrame], policies: Iterable[str]) -> pd.DataFrame:
    """All datasets' items in one frame, sorted by (dataset, id), with the documented dtypes."""
    columns = item_columns(policies)
    frames = [frame[columns] for frame in frames]
    if not frames:
        raise ValueError("no evaluation items: no benchmark was fetched and no split is evaluated")
    items = pd.concat(frames, ignore_index=True)
    items = items.sort_values(["dataset", "id"], kind="stable").reset_index(drop=True)
    items["clean"] = items["clean"].astype(bool)
    items["expected_unsafe"] = items["expected_unsafe"].astype("boolean")
    for column in columns:
        if column not in ("clean", "expected_unsafe"):
            items[column] = items[column].astype("str")
    return items


def item_keys(items: pd.DataFrame) -> np.ndarray:
    """`<dataset>\\t<id>` per item, in the frame's order (the features file's `keys`)."""
    return (items["dataset"] + KEY_SEPARATOR + items["id"]).to_numpy(dtype=str)

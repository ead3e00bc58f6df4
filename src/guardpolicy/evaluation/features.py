"""The features file of features@<model>: a model's first-token states over every evaluation item.

data/features/<model>.npz holds `features` (first-token states [N, H] float32), `keys` ("<dataset>\\t<id>",
the items' order), `max_length` (the tokens read per prompt), `tokenizer` (the model folder as the plan names
it), `tokenizer_sha256` and `model`. It is written byte-deterministically (stored members with a fixed
timestamp), and a head-only model's evaluation checks it covers exactly its items at its max_length before
applying its heads to it.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from guardpolicy.errors import InputError, key_difference
from guardpolicy.io import atomic_path, sha256_file

# A fixed timestamp for the members of the features archive, so the same arrays give the same bytes.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def tokenizer_sha256(model_dir: Path) -> str:
    """The sha256 of a model folder's tokenizer.json ("" without one): which tokenizer cut the features."""
    path = model_dir / "tokenizer.json"
    return sha256_file(path) if path.is_file() else ""


def write_features(path: str | Path, arrays: dict[str, np.ndarray]) -> None:
    """An .npz archive (np.load reads it) written atomically and byte-deterministically."""
    with atomic_path(path) as tmp, zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_TIME)
            with archive.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asarray(array), allow_pickle=False)


def read_features(path: str | Path) -> dict[str, np.ndarray]:
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "features file not found; run its `dvc repro features@<model>` first")
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise InputError(path, f"not a readable .npz features file: {exc}") from exc
    for name in ("features", "keys", "max_length"):
        if name not in arrays:
            raise InputError(path, f"missing array {name!r}", field=name)
    return arrays


def check_features(
    arrays: dict[str, np.ndarray], path: str | Path, keys: np.ndarray, max_length: int, hidden_size: int
) -> np.ndarray:
    """The cached states [N, H] after checking they cover exactly `keys`, in order, at `max_length`."""
    cached_keys = arrays["keys"].astype(str)
    rerun = f"rerun `dvc repro features@{Path(path).stem}`"
    if len(cached_keys) != len(keys) or not np.array_equal(cached_keys, keys):
        if len(cached_keys) != len(keys) or set(cached_keys) != set(keys):
            detail = (
                f"{len(cached_keys)} cached items vs {len(keys)} evaluation items: "
                f"{key_difference(keys, cached_keys)}"
            )
        else:
            first = int(np.flatnonzero(cached_keys != keys)[0])
            detail = f"item {first + 1} is {str(cached_keys[first])!r} there but {str(keys[first])!r} now"
        raise InputError(path, f"keys do not match the evaluation items ({detail}); {rerun}", field="keys")
    cached_length = int(arrays["max_length"])
    if cached_length != max_length:
        raise InputError(
            path,
            f"features tokenised at max_length {cached_length}, evaluation uses {max_length}; {rerun}",
            field="max_length",
        )
    features = arrays["features"]
    if features.ndim != 2 or features.shape != (len(keys), hidden_size) or features.dtype != np.float32:
        raise InputError(
            path,
            f"features must be float32 [{len(keys)}, {hidden_size}], "
            f"got {features.dtype} {list(features.shape)}",
            field="features",
        )
    return features

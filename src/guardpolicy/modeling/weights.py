"""What a model folder's weights are, and the rule for loading them: safetensors, unless the entry opts in.

A pickle checkpoint (``pytorch_model.bin``, ``*.pt``, ``*.ckpt``) is Python's pickle format, and unpickling a
file can run any code its author put in it. safetensors holds tensors and nothing else. So every model the
project loads - a backbone (params.yaml ``profiles.<profile>.<small_encoder|large_encoder>``), an open guard
baseline (data/baselines.yaml ``guards.<name>``) - must come as safetensors, unless its entry says
``allow_pickle: true``; our own checkpoints are always safetensors and never take the flag.

The same holds for code shipped with a model (``trust_remote_code``): transformers runs a hub repository's
own Python only when told to, and we tell it only what the entry's ``trust_remote_code`` says (default false,
passed explicitly, so no interactive prompt and no library default decides).

transformers' ``use_safetensors=True`` makes it refuse a checkpoint without safetensors weights, on a local
folder and on a hub snapshot alike; `check_weights` says so before anything is loaded, in our words, for a
local folder or a hub snapshot in the local cache, and `hub_refusal` / `remote_code_refusal` turn
transformers' own refusals into the same kind of message: what was refused and which entry may allow it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from guardpolicy.errors import InputError

SAFETENSORS_SUFFIX = ".safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
# Weight files in a pickle-based format (torch.save archives and raw pickles).
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
# The weight files transformers looks for in a hub snapshot, safetensors first.
HUB_SAFETENSORS_FILES = ("model.safetensors", SAFETENSORS_INDEX)
HUB_PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json")


class PickleWeightsRefused(InputError):
    """A model offers only pickle weights and its entry does not allow them."""


class RemoteCodeRefused(InputError):
    """A model needs its own Python code to load and its entry does not trust it."""


def weight_files(folder: str | Path) -> tuple[list[str], list[str]]:
    """(safetensors files, pickle weight files) at the top of `folder`, by name, sorted."""
    names = sorted(path.name for path in Path(folder).iterdir() if path.is_file())
    safe = [name for name in names if name.endswith(SAFETENSORS_SUFFIX) or name == SAFETENSORS_INDEX]
    pickled = [name for name in names if name.endswith(PICKLE_SUFFIXES)]
    return safe, pickled


def refused(location: str | Path, found: str, entry: str, entry_file: str | Path) -> PickleWeightsRefused:
    """The error for a pickle-only model: what was found, why not, and the one flag that allows it."""
    return PickleWeightsRefused(
        location,
        f"{found}; unpickling can run arbitrary code, so pickle weights are refused by default: "
        f"set allow_pickle: true on entry {entry} in {entry_file} to load it",
    )


def _pickle_only(pickled: list[str]) -> str:
    return f"only pickle weights ({', '.join(pickled)}), no safetensors"


def cached_hub_pickle_only(model_id: str, revision: str | None) -> list[str]:
    """The pickle weight files of a hub snapshot in the local cache that has no safetensors, else [].

    Reads the local Hugging Face cache only (no network): a snapshot not downloaded yet is [], and
    transformers (with ``use_safetensors=True``) refuses it at download if it has no safetensors.
    """
    from huggingface_hub import try_to_load_from_cache

    def cached(name: str) -> bool:
        try:
            return isinstance(try_to_load_from_cache(model_id, name, revision=revision), str)
        except ValueError:  # not a valid hub id (a missing folder, say): the loader names the problem
            return False

    if any(cached(name) for name in HUB_SAFETENSORS_FILES):
        return []
    return [name for name in HUB_PICKLE_FILES if cached(name)]


def check_weights(
    location: str | Path,
    revision: str | None = None,
    *,
    allow_pickle: bool,
    entry: str,
    entry_file: str | Path,
) -> None:
    """PickleWeightsRefused, before anything is loaded, when the model at `location` (a local folder, or a
    hub id whose snapshot at `revision` is in the local cache) has pickle weights but no safetensors and
    its entry does not allow pickle.

    A folder with neither is left to the loader (it names what it looked for); with both, the safetensors
    win (transformers prefers them, and `load_kwargs` forbids the others unless allowed).
    """
    if allow_pickle:
        return
    if Path(location).is_dir():
        safe, pickled = weight_files(location)
        if pickled and not safe:
            raise refused(location, _pickle_only(pickled), entry, entry_file)
        return
    pickled = cached_hub_pickle_only(str(location), revision)
    if pickled:
        where = f"@{revision}" if revision else ""
        raise refused(f"{location}{where}", _pickle_only(pickled), entry, entry_file)


def hub_refusal(
    exc: OSError, model_id: str, allow_pickle: bool, entry: str, entry_file: str | Path
) -> PickleWeightsRefused | None:
    """Our error for transformers' refusal of a downloaded hub checkpoint without safetensors, else None."""
    if allow_pickle or "cannot be loaded with `safetensors`" not in str(exc):
        return None
    return refused(model_id, "no safetensors weights at this revision", entry, entry_file)


def remote_code_refusal(
    exc: Exception, location: str | Path, trust_remote_code: bool, entry: str, entry_file: str | Path
) -> RemoteCodeRefused | None:
    """Our error for transformers' refusal to run a model's own code (trust_remote_code=False), else None."""
    if trust_remote_code or "trust_remote_code=True" not in str(exc):
        return None
    return RemoteCodeRefused(
        location,
        "the model needs its own Python code, which is never run unless its entry allows it: set "
        f"trust_remote_code: true on entry {entry} in {entry_file} to run it (only for code you trust)",
    )


def code_kwargs(trust_remote_code: bool) -> dict[str, Any]:
    """from_pretrained keyword arguments for configs and tokenizers: remote code exactly as the entry says."""
    return {"trust_remote_code": trust_remote_code}


def load_kwargs(*, allow_pickle: bool, trust_remote_code: bool) -> dict[str, Any]:
    """from_pretrained keyword arguments for model weights.

    use_safetensors=True: transformers refuses a checkpoint that has no safetensors weights. With
    allow_pickle it is None (transformers' default): safetensors first, pickle only where there are none.
    """
    return {"use_safetensors": None if allow_pickle else True, **code_kwargs(trust_remote_code)}

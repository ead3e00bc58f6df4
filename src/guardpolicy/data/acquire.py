"""Getting a benchmark file's bytes: from the local mirror when present, else from its pinned upstream URL.

Either way the bytes are checked against the registry's sha256 before anything reads them. A file that cannot
be had (not mirrored, download off or failing) is `Unavailable`, which the caller records; a file that *is*
there but has the wrong bytes is a hard `ChecksumError`, never a silent fallback.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import requests

from guardpolicy.data.registry import FileSpec, HFFile
from guardpolicy.errors import ChecksumError
from guardpolicy.io import sha256_file

log = logging.getLogger(__name__)

HF_DEFAULT_ENDPOINT = "https://huggingface.co"


class Unavailable(Exception):
    """The file cannot be had from this origin; the message says why (recorded in the benchmark report)."""


@dataclass(frozen=True)
class LocalFile:
    path: Path  # where the verified bytes are now
    origin: str  # "mirror:<relative path>" or the URL it was downloaded from
    sha256: str
    size: int
    verified: bool  # True when the registry pins a sha256 and it matched


def how_to_provide(mirror_dir: Path, allow_download: bool, where: str | None = None) -> str:
    """The two ways a pinned file that could not be had becomes available, with where things stand now.
    `where` says how the mirror was found (Layout.describe: in a DVC experiment's copy, from the workspace);
    default: its absolute path."""
    state = "present" if mirror_dir.is_dir() else "absent"
    downloads = "on" if allow_download else "off"
    where = where or str(mirror_dir.resolve())
    return (
        f"put the pinned files under params data.mirror_dir ({where}, {state}), or set "
        f"data.allow_download: true ({downloads} now) on a machine that reaches the pinned URLs"
    )


def hf_url(hf: HFFile) -> str:
    """The resolve URL of a dataset file at a pinned revision (honours HF_ENDPOINT, like huggingface_hub)."""
    endpoint = os.environ.get("HF_ENDPOINT", HF_DEFAULT_ENDPOINT).rstrip("/")
    quoted = urllib.parse.quote(hf.path)
    return f"{endpoint}/datasets/{hf.repo}/resolve/{hf.revision}/{quoted}"


def _hf_token() -> str | None:
    token = os.environ.get("HF_TOKEN")
    if token:
        return token
    try:  # a token saved by `huggingface-cli login`
        from huggingface_hub import get_token

        return get_token()
    except Exception:
        return None


def _check(spec: FileSpec, path: Path, origin: str) -> LocalFile:
    actual = sha256_file(path)
    size = path.stat().st_size
    if spec.sha256 is not None and actual != spec.sha256:
        raise ChecksumError(
            origin,
            f"sha256 mismatch: registry pins {spec.sha256}, file has {actual} ({size} bytes). "
            "The file is corrupt, truncated or a different version; refusing to use it.",
        )
    if spec.size is not None and size != spec.size and spec.sha256 is None:
        raise ChecksumError(origin, f"size mismatch: registry says {spec.size} bytes, file has {size}")
    return LocalFile(path=path, origin=origin, sha256=actual, size=size, verified=spec.sha256 is not None)


def from_mirror(spec: FileSpec, mirror_dir: Path) -> LocalFile:
    if spec.mirror is None:
        raise Unavailable("no mirror path in the registry")
    path = mirror_dir / spec.mirror
    if not path.is_file():
        raise Unavailable(f"not in the mirror ({path})")
    return _check(spec, path, f"mirror:{spec.mirror}")


def download(spec: FileSpec, dest_dir: Path, timeout_s: float) -> LocalFile:
    """Stream the pinned URL to `dest_dir`, hashing as it goes; the file appears only once complete."""
    if spec.hf is not None:
        url, headers = hf_url(spec.hf), {}
        token = _hf_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
    elif spec.url is not None:
        url, headers = spec.url, {}
    else:
        raise Unavailable("no pinned download URL in the registry")
    dest_dir.mkdir(parents=True, exist_ok=True)
    name = Path(urllib.parse.urlparse(url).path).name or "download"
    final = dest_dir / name
    partial = dest_dir / f".{name}.partial"
    digest = hashlib.sha256()
    log.info("downloading %s", url)
    try:
        if url.startswith("file://"):
            source = Path(urllib.parse.unquote(urllib.parse.urlparse(url).path))
            if not source.is_file():
                raise Unavailable(f"download failed: {url}: no such file")
            shutil.copyfile(source, partial)
        else:
            with requests.get(url, headers=headers, stream=True, timeout=timeout_s) as response:
                if response.status_code in (401, 403):
                    raise Unavailable(
                        f"download refused ({response.status_code}) for {url}: the dataset may be gated; "
                        "accept its terms on the hub and set HF_TOKEN"
                    )
                if response.status_code != 200:
                    raise Unavailable(f"download failed: HTTP {response.status_code} for {url}")
                expected_length = response.headers.get("Content-Length")
                received = 0
                with open(partial, "wb") as handle:
                    for chunk in response.iter_content(chunk_size=1 << 16):
                        handle.write(chunk)
                        digest.update(chunk)
                        received += len(chunk)
                if expected_length is not None and received != int(expected_length):
                    raise Unavailable(
                        f"download truncated: got {received} of {expected_length} bytes from {url}"
                    )
        os.replace(partial, final)
    except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ContentDecodingError) as exc:
        # urllib3 itself refuses a body shorter than its Content-Length before our own length check runs.
        raise Unavailable(f"download truncated: connection broke mid-file ({url}): {_short(exc)}") from exc
    except requests.ConnectionError as exc:
        host = urllib.parse.urlparse(url).netloc
        raise Unavailable(f"download failed: cannot connect to {host} ({url})") from exc
    except requests.Timeout as exc:
        raise Unavailable(f"download failed: no answer within {timeout_s:g}s ({url})") from exc
    except requests.RequestException as exc:
        raise Unavailable(f"download failed: {url}: {type(exc).__name__}: {_short(exc)}") from exc
    finally:
        partial.unlink(missing_ok=True)
    try:
        return _check(spec, final, url)
    except ChecksumError:
        final.unlink(missing_ok=True)
        raise


def _short(exc: BaseException, limit: int = 200) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + "…"

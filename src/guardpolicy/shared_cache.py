"""Where the LLM answer caches live (the committee's, the baselines' and score's): one folder per workspace,
shared by every run of it, on a local disk.

A cache folder given as a relative path (the default `.cache/committee`, `.cache/baselines`) is taken from the
user's *workspace*, not from the working directory: a queued or `--temp` experiment runs in DVC's copy under
`.dvc/tmp/exps/` (guardpolicy.layout), and a cache resolved there would be empty for every experiment and
thrown away with the copy, so each queue worker would pay for every answer again. An absolute path is used as
written, e.g. a fast local disk shared by several workspaces.

The caches are SQLite files in WAL mode, which several processes may share only on a local file system:
SQLite's locks are not reliable over NFS or SMB (https://www.sqlite.org/wal.html: "WAL does not work over a
network filesystem"), and a corrupted cache silently loses answers. A cache folder on a network file system
(read from /proc/mounts) is therefore refused unless GUARDPOLICY_ALLOW_NETWORK_CACHE=1 says the user accepts
that (e.g. one process only).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from guardpolicy.errors import ConfigError
from guardpolicy.layout import Layout

ALLOW_NETWORK_ENV = "GUARDPOLICY_ALLOW_NETWORK_CACHE"
MOUNTS_FILE = Path("/proc/mounts")
# File system types whose locking SQLite cannot rely on (network and FUSE-over-network file systems).
NETWORK_FILE_SYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "ncpfs",
        "afs",
        "9p",
        "ceph",
        "glusterfs",
        "lustre",
        "gpfs",
        "beegfs",
        "fuse.sshfs",
        "fuse.s3fs",
        "fuse.gcsfuse",
        "fuse.rclone",
        "fuse.glusterfs",
        "fuse.cephfs",
    }
)
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def parse_mounts(text: str) -> list[tuple[Path, str]]:
    """(mount point, file system type) per line of a /proc/mounts text; octal escapes (\\040 = space)
    decoded."""
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        point = _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), parts[1])
        mounts.append((Path(point), parts[2]))
    return mounts


def file_system_of(path: Path, mounts: list[tuple[Path, str]]) -> tuple[Path, str] | None:
    """The mount (point, type) holding `path` (absolute): the longest mount point above it, the last one
    mounted when several share a point (it hides the others)."""
    best: tuple[Path, str] | None = None
    for point, kind in mounts:
        inside = path == point or path.is_relative_to(point)
        if inside and (best is None or len(point.parts) >= len(best[0].parts)):
            best = (point, kind)
    return best


def _existing_ancestor(path: Path) -> Path:
    """The path's real location: the deepest part that exists, with symbolic links resolved."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe.resolve() / path.relative_to(probe) if probe != path else path.resolve()


def cache_folder(
    named: str | Path,
    what: str,
    layout: Layout | None = None,
    *,
    mounts_text: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Path:
    """The folder of an LLM answer cache that params name `named` (`what` is the params key, for messages):
    absolute as written, relative under the workspace root (the user's workspace also inside a DVC
    experiment's copy); refused on a network file system unless ALLOW_NETWORK_ENV is 1."""
    env = os.environ if env is None else env
    path = Path(named)
    if not path.is_absolute():
        layout = layout or Layout.discover()
        path = (layout.workspace or layout.root).resolve() / path
    if env.get(ALLOW_NETWORK_ENV) == "1":
        return path
    if mounts_text is None:
        if not MOUNTS_FILE.is_file():  # not Linux: no mount table to read, nothing to refuse
            return path
        mounts_text = MOUNTS_FILE.read_text(encoding="utf-8", errors="replace")
    mount = file_system_of(_existing_ancestor(path), parse_mounts(mounts_text))
    if mount is not None and mount[1] in NETWORK_FILE_SYSTEMS:
        raise ConfigError(
            f"{what}: the cache folder {path} is on a {mount[1]} file system (mounted at {mount[0]}); its "
            "SQLite file is shared by every run of this workspace, and SQLite's locking is not reliable on "
            "network file systems. Give an absolute path on a local disk, or set "
            f"{ALLOW_NETWORK_ENV}=1 to accept the risk (docs/queues.md)"
        )
    return path

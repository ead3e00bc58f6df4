"""Where the LLM answer caches live: relative paths under the user's workspace (also from inside a DVC
experiment's copy), absolute paths as written, and never on a network file system unless the user opts in."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardpolicy.errors import ConfigError
from guardpolicy.layout import EXPERIMENT_COPIES, Layout
from guardpolicy.shared_cache import ALLOW_NETWORK_ENV, cache_folder, file_system_of, parse_mounts

LOCAL = "/dev/sda1 / ext4 rw,relatime 0 0\ntmpfs /tmp tmpfs rw 0 0\n"
NFS = LOCAL + "server:/export /mnt/shared nfs4 rw,vers=4.2 0 0\nhost:/x /mnt/my\\040disk cifs rw 0 0\n"


def test_mount_table_parsing_and_the_deepest_mount_wins() -> None:
    mounts = parse_mounts(NFS)
    assert (Path("/mnt/my disk"), "cifs") in mounts  # \040 is a space
    assert file_system_of(Path("/mnt/shared/cache/x"), mounts) == (Path("/mnt/shared"), "nfs4")
    assert file_system_of(Path("/mnt/sharedother"), mounts) == (Path("/"), "ext4")
    assert file_system_of(Path("/tmp/a"), mounts) == (Path("/tmp"), "tmpfs")


def test_a_relative_cache_is_the_workspaces_also_inside_an_experiment_copy(tmp_path: Path) -> None:
    workspace = tmp_path / "repo"
    copy = workspace / EXPERIMENT_COPIES / "tmpabc"
    inside_copy = Layout(root=copy, workspace=workspace)
    folder = cache_folder(".cache/committee", "committee.cache_dir", inside_copy, mounts_text=LOCAL, env={})
    assert folder == workspace.resolve() / ".cache" / "committee"
    plain = Layout(root=workspace)
    assert cache_folder(".cache/x", "k", plain, mounts_text=LOCAL, env={}) == workspace.resolve() / ".cache/x"
    assert cache_folder("/data/llm", "k", inside_copy, mounts_text=LOCAL, env={}) == Path("/data/llm")


def test_a_cache_on_nfs_or_smb_is_refused_unless_the_user_opts_in(tmp_path: Path) -> None:
    layout = Layout(root=tmp_path)
    with pytest.raises(ConfigError) as refused:
        cache_folder("/mnt/shared/llm-cache", "baselines.cache_dir", layout, mounts_text=NFS, env={})
    message = str(refused.value)
    assert "baselines.cache_dir" in message and "nfs4" in message and "/mnt/shared" in message
    assert ALLOW_NETWORK_ENV in message
    with pytest.raises(ConfigError, match="cifs"):
        cache_folder("/mnt/my disk/c", "score.cache_dir", layout, mounts_text=NFS, env={})
    allowed = cache_folder(
        "/mnt/shared/llm-cache", "k", layout, mounts_text=NFS, env={ALLOW_NETWORK_ENV: "1"}
    )
    assert allowed == Path("/mnt/shared/llm-cache")


def test_the_check_follows_symbolic_links_to_the_real_disk(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    # A mount table in which only the link's target lies on NFS.
    table = LOCAL + f"server:/export {real} nfs rw 0 0\n"
    with pytest.raises(ConfigError, match="nfs"):
        cache_folder(tmp_path / "link" / "cache", "k", Layout(root=tmp_path), mounts_text=table, env={})

"""Hugging Face datasets as a user pool source and as a benchmark (format `dataset`, issue 16 item 4).

A local `save_to_disk` folder gives the same pool rows / benchmark table as the same data in a file; a hub
dataset is loaded with its pinned revision (the network is the one thing faked: `datasets.load_dataset` is
replaced by a stand-in that records its call and returns a dataset cached under a commit folder, as the hub
cache lays it out); bad data and bad registry entries fail with the source, row and field named.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import datasets
import pandas as pd
import pyarrow.parquet as pq
import pytest
from helpers.benchmarks import entry_for_fixture, fetch_layout, registry_with, sha256_bytes, write_params
from helpers.layout import repo_layout
from helpers.paths import FIXTURES, REPO_ROOT, UPSTREAM
from helpers.pool import write_pool_params

from guardpolicy.data.registry import parse_registry
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.layout import Layout
from guardpolicy.pool.loaders import acquire_files, load_source
from guardpolicy.pool.registry import parse_pool_registry
from guardpolicy.stages.fetch import fetch
from guardpolicy.stages.pool import build
from guardpolicy.taxonomy import load_taxonomy

TAXONOMY = load_taxonomy(REPO_ROOT / "data" / "taxonomy.yaml")
REVISION = "0123456789abcdef0123456789abcdef01234567"
OTHER_REVISION = "fedcba9876543210fedcba9876543210fedcba98"
XSTEST = "xstest/xstest_prompts.csv"
USER_ROWS = {
    "pid": ["u1", "u2", "u3"],
    "text": [
        "How do I bake sourdough bread at home?",
        "Explain how a heat pump works.",
        "Write a short poem about the sea.",
    ],
    "verdict": ["safe", "safe", "unsafe"],
}


def _user_source(file: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "user",
        "description": "mine",
        "license": "internal",
        "weight": 1.0,
        "files": [file],
        "prompt": "text",
        "id": "pid",
        "labels": {"moderator": "verdict"},
        "facts": ["benign_request"],
    }


def _saved(folder: Path, rows: dict[str, list[Any]], split: str | None = None) -> Path:
    dataset = datasets.Dataset.from_dict(rows)
    (datasets.DatasetDict({split: dataset}) if split else dataset).save_to_disk(str(folder))
    return folder


def _load_user(file: dict[str, Any], *, allow_download: bool = False) -> list:
    source = parse_pool_registry({"sources": {"mine": _user_source(file)}}, "test", TAXONOMY)["mine"]
    files, missing = acquire_files(
        source,
        mirror_dir=FIXTURES,
        allow_download=allow_download,
        timeout_s=1,
        work_dir=FIXTURES,
        root=REPO_ROOT,
    )
    assert not missing
    return load_source(source, files)[0]


@pytest.fixture
def fake_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """`datasets.load_dataset` without the network: it records each call and returns USER_ROWS as the hub
    cache holds them (Arrow files in a folder named by the commit); OTHER_REVISION's rows are cached for the
    repo `org/stale`, as datasets' offline fallback would give whatever commit it has; `org/unreachable`
    fails as an unreachable hub does."""
    calls: list[dict[str, Any]] = []

    def load_dataset(path: str, **kwargs: Any) -> datasets.Dataset:
        calls.append({"path": path, **kwargs})
        if path == "org/unreachable":
            raise ConnectionError("Couldn't reach 'org/unreachable' on the Hub (ConnectError)")
        commit = OTHER_REVISION if path == "org/stale" else kwargs["revision"]
        folder = tmp_path / "hub-cache" / path.replace("/", "___") / (kwargs["name"] or "default") / commit
        if not folder.is_dir():
            _saved(folder, USER_ROWS)
        return datasets.load_from_disk(str(folder))

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    return calls


# -------------------------------------------------------------------------------------------- the user pool


@pytest.mark.parametrize("form", ["csv", "dataset", "dataset_dict"])
def test_a_user_pool_from_a_saved_dataset_gives_the_pool_rows_of_the_same_data_as_parquet(
    tmp_path: Path, form: str
) -> None:
    def pool_rows(name: str, file: dict[str, Any]) -> pd.DataFrame:
        root = tmp_path / name
        root.mkdir()
        write_pool_params(root, {"mine": _user_source(file)}, pool_size=10, mirror=FIXTURES)
        layout = repo_layout(root)
        build(layout)
        return pd.read_parquet(layout.path("pool"))

    parquet = tmp_path / "mine.parquet"
    pd.DataFrame(USER_ROWS).to_parquet(parquet)
    expected = pool_rows("parquet", {"path": str(parquet), "format": "parquet"})
    if form == "csv":
        pd.DataFrame(USER_ROWS).to_csv(tmp_path / "mine.csv", index=False)
        file = {"path": str(tmp_path / "mine.csv"), "format": "csv"}
    elif form == "dataset":
        file = {"format": "dataset", "dataset": {"path": str(_saved(tmp_path / "ds", USER_ROWS))}}
    else:
        folder = _saved(tmp_path / "dsd", USER_ROWS, split="train")
        file = {"format": "dataset", "dataset": {"path": str(folder), "split": "train"}}
    got = pool_rows(form, file)
    assert len(got) == 3 and set(got["prompt"]) == set(USER_ROWS["text"])
    assert set(got["import_moderator"]) == {"safe", "unsafe"}
    pd.testing.assert_frame_equal(got, expected)


def test_a_user_pool_from_the_hub_carries_the_pinned_revision(fake_hub: list[dict[str, Any]]) -> None:
    hub = {"repo": "org/mine", "revision": REVISION, "config": "en", "split": "train"}
    rows = _load_user({"format": "dataset", "dataset": hub}, allow_download=True)
    assert fake_hub == [{"path": "org/mine", "name": "en", "split": "train", "revision": REVISION}]
    assert [r.prompt for r in rows] == USER_ROWS["text"]
    assert rows[0].origin == "mine:u1" and rows[2].imports == {"import_moderator": "unsafe"}


def test_a_hub_dataset_cached_at_another_commit_is_refused(fake_hub: list[dict[str, Any]]) -> None:
    hub = {"repo": "org/stale", "revision": REVISION, "split": "train"}
    with pytest.raises(InputError, match=rf"come from commit\(s\) \['{OTHER_REVISION}'\], not the pinned"):
        _load_user({"format": "dataset", "dataset": hub}, allow_download=True)


def test_an_unreachable_hub_dataset_is_an_error_for_the_user_pool(fake_hub: list[dict[str, Any]]) -> None:
    hub = {"repo": "org/unreachable", "revision": REVISION, "split": "train"}
    with pytest.raises(
        InputError, match=r"cannot load the user dataset: .*cannot load from the hub: Couldn't"
    ):
        _load_user({"format": "dataset", "dataset": hub}, allow_download=True)


def test_downloads_off_loads_a_hub_dataset_only_offline(
    fake_hub: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    file = {"format": "dataset", "dataset": {"repo": "org/mine", "revision": REVISION, "split": "train"}}
    with pytest.raises(
        InputError,
        match=r"hf:org/mine@0123.*\[train\]: cannot load the user dataset: .*"
        r"downloads are disabled .*HF_HUB_OFFLINE=1",
    ):
        _load_user(file)
    assert fake_hub == []
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # the cache only: what `datasets` honours
    assert len(_load_user(file)) == 3 and len(fake_hub) == 1


@pytest.mark.parametrize(
    ("rows", "split", "expected"),
    [
        (
            {"pid": ["u1"], "body": ["hello"], "verdict": ["safe"]},
            None,
            r"ds, row header, field 'text': the prompt column 'text'",
        ),
        (
            {"pid": ["u1", "u2"], "text": [3, 4], "verdict": ["safe", "safe"]},
            None,
            r"ds, row 1, field 'text': the prompt is not text \(int\)",
        ),
        (
            {"pid": ["u1", "u2"], "text": ["hi", " "], "verdict": ["a", "b"]},
            None,
            r"ds, row 2, field 'text': the prompt is empty",
        ),
        (
            {"pid": ["u1"], "text": ["hi"], "verdict": ["safe"]},
            "test",
            r"ds\[test\], field 'split': no split 'test'; .*\['train'\]",
        ),
    ],
    ids=["missing-column", "wrong-type", "empty-prompt", "unknown-split"],
)
def test_a_bad_user_dataset_names_the_row_and_field(
    tmp_path: Path, rows: dict[str, list[Any]], split: str | None, expected: str
) -> None:
    folder = _saved(tmp_path / "ds", rows, split="train" if split else None)
    dataset: dict[str, Any] = {"path": str(folder), **({"split": split} if split else {})}
    with pytest.raises(InputError, match=expected):
        _load_user({"format": "dataset", "dataset": dataset})


def test_an_empty_user_split_is_an_error(tmp_path: Path) -> None:
    # Filtered to nothing, as a real empty split is (an empty from_dict dataset saves no readable shard).
    empty = datasets.Dataset.from_dict(USER_ROWS).filter(lambda _: False)
    datasets.DatasetDict({"train": empty}).save_to_disk(str(tmp_path / "ds"))
    dataset = {"path": str(tmp_path / "ds"), "split": "train"}
    with pytest.raises(InputError, match=r"ds\[train\], row header: split 'train' has no rows"):
        _load_user({"format": "dataset", "dataset": dataset})
    datasets.Dataset.from_dict({"pid": [], "text": [], "verdict": []}).save_to_disk(str(tmp_path / "unsaved"))
    with pytest.raises(
        InputError, match=r"unsaved: not a readable datasets save_to_disk folder \(IndexError"
    ):
        _load_user({"format": "dataset", "dataset": {"path": str(tmp_path / "unsaved")}})


def test_a_user_dataset_folder_needs_its_split_named_and_must_exist(tmp_path: Path) -> None:
    folder = _saved(tmp_path / "dsd", USER_ROWS, split="train")
    with pytest.raises(InputError, match=r"holds the splits \['train'\]; name one with split"):
        _load_user({"format": "dataset", "dataset": {"path": str(folder)}})
    with pytest.raises(InputError, match=r"absent: cannot read the dataset: no such folder"):
        _load_user({"format": "dataset", "dataset": {"path": str(tmp_path / "absent")}})


# ------------------------------------------------------------------------------------------------ benchmarks


def _fetch_xstest(root: Path, file_update: dict[str, Any]) -> tuple[dict, pd.DataFrame]:
    root.mkdir(parents=True)
    entry = entry_for_fixture("xstest", [file_update], expected_rows=5)
    entry["label"]["expected_unsafe_rows"] = 2
    registry, out_dir = fetch_layout(root)
    registry.parent.mkdir(parents=True, exist_ok=True)
    registry_with({"xstest": entry}, registry)
    write_params(root / "params.yaml", UPSTREAM)
    meta = fetch("xstest", Layout(root))
    return meta, pq.read_table(out_dir / "xstest.parquet").to_pandas()


def _as_dataset_file(dataset: dict[str, Any]) -> dict[str, Any]:
    return {"format": "dataset", "dataset": dataset, "mirror": None, "url": None, "hf": None, "sha256": None}


def _xstest_folder(folder: Path) -> Path:
    frame = pd.read_csv(UPSTREAM / XSTEST, dtype=str, keep_default_na=False)
    datasets.Dataset.from_pandas(frame, preserve_index=False).save_to_disk(str(folder))
    return folder


def test_a_benchmark_from_a_saved_dataset_normalises_like_the_file(tmp_path: Path) -> None:
    pin = {"mirror": XSTEST, "sha256": sha256_bytes((UPSTREAM / XSTEST).read_bytes()), "url": None}
    _, from_file = _fetch_xstest(tmp_path / "file", pin)
    folder = _xstest_folder(tmp_path / "xstest_ds")
    meta, from_dataset = _fetch_xstest(tmp_path / "dataset", _as_dataset_file({"path": str(folder)}))
    assert meta["status"] == "ok" and meta["files"][0]["origin"] == str(folder)
    assert set(from_dataset["source_file"]) == {str(folder)}
    columns = [c for c in from_file.columns if c != "source_file"]
    assert from_file["pair_id"].notna().sum() == 4  # the transform ran on both
    pd.testing.assert_frame_equal(from_dataset[columns], from_file[columns])


def test_a_benchmark_from_the_hub_is_loaded_at_its_revision(tmp_path: Path, fake_hub: list) -> None:
    # USER_ROWS as a benchmark: the prompt in `text`, the gold label in `verdict`.
    entry = {
        "description": "a hub benchmark",
        "license": "CC0",
        "expected_rows": 3,
        "label": {"kind": "column", "unsafe_values": ["unsafe"], "safe_values": ["safe"]},
        "sources": [
            {
                "name": "hub",
                "provenance": "original",
                "files": [
                    {
                        "format": "dataset",
                        "dataset": {"repo": "org/bench", "revision": REVISION, "split": "test"},
                        "columns": {"prompt": "text", "id": "pid", "label": "verdict"},
                    }
                ],
            }
        ],
    }
    registry, out_dir = fetch_layout(tmp_path)
    registry.parent.mkdir(parents=True, exist_ok=True)
    registry_with({"mine": entry}, registry)
    write_params(tmp_path / "params.yaml", UPSTREAM, allow_download=True)
    meta = fetch("mine", Layout(tmp_path))
    assert fake_hub == [{"path": "org/bench", "name": None, "split": "test", "revision": REVISION}]
    assert meta["status"] == "ok" and meta["files"][0]["sha256_pinned"] is True
    table = pq.read_table(out_dir / "mine.parquet").to_pandas()
    assert list(table["id"]) == ["mine:u1", "mine:u2", "mine:u3"]
    assert list(table["expected_unsafe"]) == [False, False, True]
    # Downloads off and not offline: the benchmark is missing (like an unmirrored file), with the reason.
    write_params(tmp_path / "params.yaml", UPSTREAM, allow_download=False)
    meta = fetch("mine", Layout(tmp_path))
    assert meta["status"] == "missing" and "downloads are disabled" in meta["reason"]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda d: d.remove_columns("prompt").add_column("prompt", [1, 2, 3, 4, 5]),
            r"xstest_ds, row 1, field 'prompt': prompt must be text, got int",
        ),
        (
            lambda d: d.remove_columns("label"),
            r"xstest_ds, row header, field 'label': column\(s\) \['label'\] not found",
        ),
        (lambda d: d.filter(lambda _: False), r"xstest_ds, row header: the dataset has no rows"),
    ],
    ids=["wrong-type", "missing-column", "empty"],
)
def test_a_bad_benchmark_dataset_names_the_row_and_field(tmp_path: Path, mutate: Any, expected: str) -> None:
    frame = pd.read_csv(UPSTREAM / XSTEST, dtype=str, keep_default_na=False)
    mutate(datasets.Dataset.from_pandas(frame, preserve_index=False)).save_to_disk(
        str(tmp_path / "xstest_ds")
    )
    with pytest.raises(InputError, match=expected):
        _fetch_xstest(tmp_path / "root", _as_dataset_file({"path": str(tmp_path / "xstest_ds")}))
    assert not (tmp_path / "root" / "data" / "benchmarks" / "xstest.parquet").exists()


# ------------------------------------------------------------------------------------- registry validation

_HUB = {"repo": "org/x", "revision": REVISION, "split": "test"}


@pytest.mark.parametrize(
    ("dataset", "extra", "expected"),
    [
        ({"repo": "org/x", "split": "test"}, {}, r"dataset: hub dataset 'org/x' needs revision: a 40-hex"),
        ({**_HUB, "revision": "main"}, {}, r"dataset: revision must be a 40-hex commit sha .*'main'"),
        ({"repo": "org/x", "revision": REVISION}, {}, r"dataset: hub dataset 'org/x' needs split"),
        ({**_HUB, "revison": REVISION}, {}, r"dataset: unknown key\(s\) \['revison'\]"),
        ({**_HUB, "path": "data/x"}, {}, r"dataset: a dataset needs exactly one of repo .* or path"),
        ({"path": "data/x", "revision": REVISION}, {}, r"dataset: revision / config apply to a hub dataset"),
        (_HUB, {"mirror": "x.csv"}, r"a dataset file takes no \['mirror'\]"),
        (_HUB, {"format": "csv"}, r"format dataset and a dataset block go together"),
    ],
    ids=["unpinned", "branch", "no-split", "unknown-key", "both", "folder-revision", "mirror-too", "format"],
)
def test_registries_refuse_a_bad_dataset_entry_with_its_key_path(
    dataset: dict[str, Any], extra: dict[str, Any], expected: str
) -> None:
    file = {"format": "dataset", "dataset": dataset, **extra}
    with pytest.raises(ConfigError, match=r"test: sources\.mine\.files\[0\]\.?.*" + expected):
        parse_pool_registry({"sources": {"mine": _user_source(file)}}, "test", TAXONOMY)
    benchmark = {
        "description": "x",
        "license": "x",
        "expected_rows": 1,
        "label": {"kind": "all_unsafe"},
        "sources": [
            {"name": "s", "provenance": "original", "files": [{**file, "columns": {"prompt": "text"}}]}
        ],
    }
    with pytest.raises(ConfigError, match=r"benchmarks\.mine\.sources\[0\]\.files\[0\]\.?.*" + expected):
        parse_registry({"benchmarks": {"mine": benchmark}}, "test")


def test_a_public_pool_source_cannot_be_a_dataset() -> None:
    source = copy.deepcopy(_user_source({"format": "dataset", "dataset": _HUB}))
    source.update(kind="public", labels={})
    with pytest.raises(ConfigError, match=r"a dataset file belongs to a user source"):
        parse_pool_registry({"sources": {"mine": source}}, "test", TAXONOMY)

"""Stage baseline@<guard> on a tiny workspace: a tiny random Qwen3 guard through the transformers backend
(contract columns, every parse counted, a cached rerun with zero model calls and the same bytes), a local
chat-completions server for known answers and metrics, failure policies, and configuration errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers.baseline_workspace import (
    BENCHMARKS,
    COLUMNS,
    LABEL_REVISION,
    N_ITEMS,
    read_outputs,
    set_baselines,
)
from helpers.fake_openai import FakeOpenAIServer
from helpers.paths import REPO_ROOT

from guardpolicy.errors import ConfigError
from guardpolicy.stages.baselines import baseline
from guardpolicy.taxonomy import COARSE_CLASSES


def test_tiny_transformers_guard_writes_the_contract_files_and_reruns_from_cache(
    baseline_workspace: Path,
) -> None:
    set_baselines(
        baseline_workspace, {"tiny": {"backend": "transformers", "model": "models/tiny", "dtype": "fp32"}}
    )
    first = baseline("tiny")
    table, metrics, first_bytes = read_outputs(baseline_workspace, "tiny")
    assert table.column_names == COLUMNS
    frame = table.to_pandas()
    assert len(frame) == N_ITEMS and (frame["model"] == "baseline-tiny").all()
    keys = list(zip(frame["dataset"], frame["id"], strict=True))
    assert keys == sorted(keys) and ("split:val", "p_1") in keys
    assert frame[[f"p_{c}" for c in COARSE_CLASSES]].isna().all().all() and frame["pred_coarse"].isna().all()
    assert str(table.schema.field("p_HARMFUL").type) == "float" and not frame["span_computed"].any()
    # A random model answers garbage: under `exclude` a failed parse has no decision, never a silent safe.
    failed = frame["parse_status"] == "failed"
    assert frame.loc[failed, "unsafe"].isna().all() and frame.loc[failed, "unsafe_bu"].isna().all()
    assert frame.loc[~failed, "unsafe"].notna().all()
    parse = metrics["parse"]
    assert parse["ok"] + parse["partial"] + parse["failed"] == parse["rows"] == N_ITEMS
    per_set = [b["parse"] for b in metrics["benchmarks"].values()] + [metrics["val"]["val"]["parse"]]
    assert sum(sum(p.values()) for p in per_set) == N_ITEMS
    assert parse["failed"] == int(failed.sum())
    assert metrics["guard"]["revision"] == LABEL_REVISION and metrics["guard"]["family"] == "qwen3guard"
    assert metrics["run"]["backend"] == "transformers" and metrics["run"]["items"] == N_ITEMS
    # Every prompt is distinct: one backend call generates them all.
    assert first["cache"] == {"backend_calls": 1, "cache_hits": 0, "prompts_generated": N_ITEMS}
    assert "cache" not in metrics

    again = baseline("tiny")
    assert again["cache"] == {"backend_calls": 0, "cache_hits": N_ITEMS, "prompts_generated": 0}
    _, rerun, second_bytes = read_outputs(baseline_workspace, "tiny")
    # Both files are byte-identical: how the answers were obtained is returned and logged, not written.
    assert second_bytes == first_bytes and rerun == metrics


def test_server_guard_gives_known_decisions_scores_and_metrics(
    baseline_workspace: Path, server: FakeOpenAIServer
) -> None:
    served = {"backend": "server", "base_url": server.base_url, "model": "qwen-guard"}
    set_baselines(baseline_workspace, {"served": served})
    metrics = baseline("served")
    table, written, _ = read_outputs(baseline_workspace, "served")
    assert written == json.loads(json.dumps({k: v for k, v in metrics.items() if k != "cache"}))
    frame = table.to_pandas().set_index(["dataset", "id"])
    assert len(server.requests) == N_ITEMS and (frame["parse_status"] == "ok").all()
    bomb = frame.loc[("xstest", "x:2")]
    assert bomb["guard_label"] == "unsafe" and bomb["categories"] == "Violent"
    assert bomb["raw"] == "Safety: Unsafe\nCategories: Violent"
    # The server's alternatives after "Safety:": Unsafe .70, Cont(roversial) .20, Safe .06 + .02 (+ "\n").
    assert bomb["unsafe_score"] == pytest.approx(0.70 / 0.98, abs=1e-6)
    assert bomb["unsafe_score_bu"] == pytest.approx(0.90 / 0.98, abs=1e-6)
    expected_unsafe = {key: "bomb" in prompt for key, prompt in _prompts(baseline_workspace).items()}
    assert frame["unsafe"].to_dict() == expected_unsafe == frame["unsafe_bu"].to_dict()
    copyright_block = metrics["benchmarks"]["harmbench_copyright"]
    assert copyright_block["full"]["cap"] == 0.5 and copyright_block["clean"]["cap_strict"] == 0.0
    benign = metrics["benchmarks"]["jbb_benign"]
    assert (
        benign["full"]["over_ref"] == 0.5
        and benign["clean"]["over_ref"] == 1.0
        and "cap" not in benign["full"]
    )
    xstest = metrics["benchmarks"]["xstest"]["full"]
    assert (
        xstest["f1"] == 1.0
        and xstest["auprc"] == 1.0
        and xstest["n_scored"] == 3
        and xstest["n_excluded"] == 0
    )
    assert metrics["headline"] == {"copy": 0.0, "cap": 0.0, "over_ref": 1.0, "mapping": "strict"}
    assert metrics["val"]["val"] == {
        "n": 2,
        "parse": {"ok": 2, "partial": 0, "failed": 0},
        "unsafe_rate": 0.5,
    }


def _prompts(root: Path) -> dict[tuple[str, str], str]:
    import pandas as pd

    prompts = {(name, i): p for name, rows in BENCHMARKS.items() for i, p, _ in rows}
    pool = pd.read_parquet(root / "data" / "pool" / "pool.parquet").set_index("id")["prompt"]
    return prompts | {("split:val", i): pool[i] for i in ("p_1", "p_2")}


@pytest.mark.parametrize(("policy", "decision"), [("unsafe", True), ("safe", False), ("exclude", None)])
def test_empty_answers_count_as_the_failure_policy_says(
    baseline_workspace: Path,
    server: FakeOpenAIServer,
    policy: str,
    decision: bool | None,
) -> None:
    served = {"backend": "server", "base_url": server.base_url, "model": "empty-guard"}
    set_baselines(baseline_workspace, {"served": served}, failure_policy=policy)
    metrics = baseline("served")
    frame = read_outputs(baseline_workspace, "served")[0].to_pandas()
    assert (frame["parse_status"] == "failed").all() and metrics["parse"]["failed"] == N_ITEMS
    assert frame["unsafe"].tolist() == [decision] * N_ITEMS == frame["unsafe_bu"].tolist()
    assert frame["unsafe_score"].isna().all()
    xstest = metrics["benchmarks"]["xstest"]["full"]
    if decision is None:
        assert xstest == {"n_scored": 0, "n_excluded": 3} and metrics["headline"] == {"mapping": "strict"}
    else:
        assert xstest["cap"] == float(decision) and xstest["over_ref"] == float(decision)


def test_unknown_or_unpinned_guards_are_config_errors(baseline_workspace: Path) -> None:
    set_baselines(baseline_workspace, {"tiny": {"backend": "transformers", "model": "models/tiny"}})
    with pytest.raises(ConfigError, match=r"baselines\.guards: no guard 'llama'; configured: \['tiny'\]"):
        baseline("llama")
    # A hub id (not a local folder) needs the registry's pinned revision.
    registry = yaml.safe_load((baseline_workspace / "data" / "baselines.yaml").read_text())
    registry["guards"]["tiny"]["revision"] = None
    (baseline_workspace / "data" / "baselines.yaml").write_text(yaml.safe_dump(registry))
    set_baselines(baseline_workspace, {"tiny": {"backend": "transformers"}})
    with pytest.raises(ConfigError, match=r"guards\.tiny\.revision: not pinned"):
        baseline("tiny")
    set_baselines(baseline_workspace, {"other": {"backend": "transformers", "model": "models/tiny"}})
    with pytest.raises(ConfigError, match=r"guards: no entry 'other'"):
        baseline("other")


def test_sub_pipeline_declares_existing_deps_and_the_stage_outputs() -> None:
    document = yaml.safe_load((REPO_ROOT / "pipelines" / "baselines" / "dvc.yaml").read_text())
    assert document["vars"] == ["../../params.yaml:baselines,profile"]
    stage = document["stages"]["baseline"]
    assert stage["foreach"] == "${baselines.guards}"
    body = stage["do"]
    assert body["wdir"] == "../.." and body["cmd"] == "python pipelines/baseline.py ${key}"
    # A dep is a file of the repository or an output of a stage of the default pipeline (data/benchmarks, the
    # splits, ...: absent from a fresh clone until `dvc repro`).
    root = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())["stages"]
    produced = {
        str(out if isinstance(out, str) else next(iter(out))).split("${", 1)[0].rstrip("/")
        for entry in root.values()
        for out in (entry.get("do", entry).get("outs", []))
    }
    for dep in body["deps"]:
        made = any(dep == out or dep.startswith(out + "/") or out.startswith(dep + "/") for out in produced)
        assert (REPO_ROOT / dep).exists() or made, f"dependency {dep} is not in the repository nor produced"
    assert {
        "src/guardpolicy/stages/baselines.py",
        "src/guardpolicy/baselines/factory.py",
        "data/baselines.yaml",
    } <= set(body["deps"])
    assert body["outs"][0] == "reports/baselines/${key}/predictions.parquet"
    assert list(body["metrics"][0]) == ["reports/baselines/${key}/metrics.json"]
    # The root analysis reads the guards' folder, and each guard card depends on the report: so
    # `dvc repro pipelines/baselines/dvc.yaml` runs baseline@ -> analyse -> report -> guard_card@.
    assert "reports/baselines" in root["analyse"]["deps"]
    card = document["stages"]["guard_card"]
    assert card["foreach"] == "${baselines.guards}"
    assert card["do"]["wdir"] == "../.." and "reports/REPORT.md" in card["do"]["deps"]
    for dep in card["do"]["deps"]:
        made = any(dep == out or dep.startswith(out + "/") for out in produced)
        assert (REPO_ROOT / dep).exists() or made, f"dependency {dep} is not in the repository nor produced"

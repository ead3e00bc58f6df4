"""Synthetic evaluation items and per-model predictions (contract "Predictions") with a known skill, and a
model plan, for the analysis tests and stage `analyse` on inputs whose answers are known."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from helpers.benchmarks import write_params
from helpers.paths import REPO_ROOT

REGISTRY = REPO_ROOT / "data" / "benchmarks.yaml"
LABEL_KINDS = {"harmbench_copyright": "all_unsafe", "jbb_benign": "all_safe", "xstest": "column"}
COARSE = ("GENERIC_SAFE", "BOUNDARY_SAFE", "HARMFUL", "COMPOUND")
POLICIES = ("policy_a", "policy_b")


def model_entry(kind: str, scale: str, branch: str, seed: int) -> dict[str, Any]:
    recipe = f"{scale}-{branch}" if kind == "branch" else branch
    return {"kind": kind, "scale": scale, "branch": branch, "seed": seed, "recipe": recipe}


def small_plan() -> dict[str, dict[str, Any]]:
    """Two scales x five branches at seed 42, E8 again at seeds 43 and 44 (small), one teacher."""
    plan = {"teacher-policy_a": model_entry("teacher", "large", "teacher-policy_a", 42)}
    for scale in ("small", "large"):
        for branch in ("E1", "E2", "E7", "E8", "E10"):
            plan[f"{scale}-{branch}"] = model_entry("branch", scale, branch, 42)
    for seed in (43, 44):
        plan[f"small-E8-s{seed}"] = model_entry("branch", "small", "E8", seed)
    return plan


def synthetic_items(rng: np.random.Generator, sizes: dict[str, int]) -> pd.DataFrame:
    """Evaluation items of the named benchmarks (roles from LABEL_KINDS-like names) plus split:val."""
    frames = []
    for name, n in sizes.items():
        ids = [f"{name}:{i:05d}" for i in range(n)]
        frame = pd.DataFrame({"dataset": name, "id": ids, "clean": rng.random(n) < 0.75})
        frame["category"] = None
        frame["pair_id"] = None
        for policy in POLICIES:
            frame[f"gold_{policy}"] = None
        if name.startswith("split:"):
            frame["clean"] = True
            frame["expected_unsafe"] = None
            for policy in POLICIES:
                frame[f"gold_{policy}"] = rng.choice(COARSE, n)
        elif name == "xstest" or name.startswith("mixed"):
            unsafe = np.arange(n) % 2 == 1
            frame["expected_unsafe"] = unsafe
            frame["category"] = np.where(unsafe, "contrast_homonyms", "homonyms")
            frame["pair_id"] = [f"{name}:pair:{i // 2}" for i in range(n)]
        else:
            frame["expected_unsafe"] = not any(word in name for word in ("benign", "hard"))
        frames.append(frame)
    items = pd.concat(frames, ignore_index=True)
    items["expected_unsafe"] = items["expected_unsafe"].astype("boolean")
    return items


def synthetic_predictions(items: pd.DataFrame, model: str, skill: float, seed: int) -> pd.DataFrame:
    """A predictions frame (contract "Predictions") whose coarse head leans towards the gold by `skill`."""
    rng = np.random.default_rng(seed)
    n = len(items)
    logits = rng.normal(size=(n, 4))
    unsafe_gold = items["expected_unsafe"].fillna(False).to_numpy(dtype=bool)
    logits[:, 2] += skill * np.where(unsafe_gold, 1.0, -1.0)
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)  # [n, 4]
    pred = np.array(COARSE)[probs.argmax(axis=1)]
    frame = items.copy()
    frame.insert(0, "model", model)
    for i, name in enumerate(COARSE):
        frame[f"p_{name}"] = probs[:, i].astype(np.float32)
    frame["pred_coarse"] = pred
    frame["unsafe_score"] = (probs[:, 2] + probs[:, 3]).astype(np.float32)
    frame["unsafe_score_bu"] = (probs[:, 1] + probs[:, 2] + probs[:, 3]).astype(np.float32)
    frame["unsafe"] = np.isin(pred, ("HARMFUL", "COMPOUND"))
    frame["unsafe_bu"] = np.isin(pred, ("BOUNDARY_SAFE", "HARMFUL", "COMPOUND"))
    frame["span_computed"] = False
    return frame.sort_values(["dataset", "id"]).reset_index(drop=True)


def write_predictions(eval_dir: Path, frames: dict[str, pd.DataFrame]) -> None:
    for model, frame in frames.items():
        folder = eval_dir / model
        folder.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(folder / "predictions.parquet", index=False)


def stage_inputs(tmp_path: Path, sizes: dict[str, int] | None = None) -> tuple[Path, Path, dict[str, Any]]:
    """A repository-shaped folder for stage analyse (guardpolicy.layout): params.yaml, the benchmark registry
    and taxonomy, and every planned model's predictions under reports/eval/. Returns (params file, the eval
    folder, the plan)."""
    params_file = write_params(tmp_path / "params.yaml", mirror_dir=tmp_path)
    (tmp_path / "data").mkdir(exist_ok=True)
    for name in ("benchmarks.yaml", "taxonomy.yaml"):
        shutil.copy(REPO_ROOT / "data" / name, tmp_path / "data" / name)
    plan = small_plan()
    sizes = sizes or {
        "harmbench_copyright": 40,
        "advbench": 60,
        "jbb_benign": 50,
        "xstest": 80,
        "split:val": 100,
    }
    items = synthetic_items(np.random.default_rng(7), sizes)
    frames = {
        model: synthetic_predictions(items, model, 0.5 + 0.2 * i, seed=i)
        for i, model in enumerate(sorted(plan))
    }
    eval_dir = tmp_path / "reports" / "eval"
    write_predictions(eval_dir, frames)
    return params_file, eval_dir, plan


# The synthetic fingerprint: policy A labels every copyright and jbb_benign prompt unsafe, policy B none of
# them; both follow the gold elsewhere. So copyright and jbb_benign swing 1 (policy-load), advbench and xstest
# swing 0 (capability-load), and advbench is the one set both label entirely unsafe (the competence set).
FINGERPRINT_A_ONLY = ("harmbench_copyright", "jbb_benign")


def write_fingerprint(root: Path, eval_dir: Path, pair: tuple[str, str] = POLICIES) -> None:
    """reports/fingerprint.csv, fingerprint.json and fingerprint_labels.parquet under `root` (stage
    fingerprint's contract) for the benchmark items of the predictions in `eval_dir`."""
    folder = root / "reports"
    any_file = next(iter(sorted(eval_dir.glob("*/predictions.parquet"))))
    items = pd.read_parquet(any_file, columns=["dataset", "id", "expected_unsafe"])
    items = items[~items["dataset"].str.startswith("split:")]
    labels, rows, benchmarks = [], [], {}
    for benchmark, group in items.groupby("dataset", sort=True):
        gold = group["expected_unsafe"].to_numpy(dtype=bool)
        entry: dict[str, Any] = {"n": len(group), "gold_unsafe": int(gold.sum()), "policies": {}}
        for policy in pair:
            unsafe = np.full(len(group), policy == pair[0]) if benchmark in FINGERPRINT_A_ONLY else gold
            coarse = np.where(unsafe, "HARMFUL", "GENERIC_SAFE")
            labels.append(
                pd.DataFrame(
                    {
                        "benchmark": benchmark,
                        "id": group["id"],
                        "policy": policy,
                        "labeler": "rules",
                        "coarse": coarse,
                    }
                )
            )
            agree = int((unsafe == gold).sum())
            entry["policies"][policy] = {"agreement": agree / len(group), "unsafe": int(unsafe.sum())}
            rows.append(
                {
                    "benchmark": benchmark,
                    "policy": policy,
                    "labeler": "rules",
                    "n": len(group),
                    "agree": agree,
                    "agreement": agree / len(group),
                    "ci_low": 0.0,
                    "ci_high": 1.0,
                    "agreement_bu": agree / len(group),
                }
            )
        first, second = (entry["policies"][p]["agreement"] for p in pair)
        entry["swing"] = abs(first - second)
        benchmarks[str(benchmark)] = entry
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(folder / "fingerprint.csv", index=False)
    (folder / "fingerprint.json").write_text(
        json.dumps({"pair": list(pair), "benchmarks": benchmarks}), encoding="utf-8"
    )
    pd.concat(labels, ignore_index=True).to_parquet(folder / "fingerprint_labels.parquet", index=False)

"""correlations.csv: Spearman correlations across branch models between VAL and how well their benchmark
decisions agree with each benchmark's gold, or with the VAL policy's own labels of its prompts
(`policy_label_agreement`), per load group and scale."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from guardpolicy.analysis.matrices import DEFAULT, SPLIT, SPLIT_PREFIX, DatasetMatrix
from guardpolicy.analysis.scores import ACC_PREFIX, GOLD_AGREEMENT, DrawStore
from guardpolicy.analysis.sensitivity import (
    ALL_SCALES,
    GOLD_TARGET,
    LOADS,
    POLICY_TARGET,
    branch_models,
    column_index,
)
from guardpolicy.analysis.stats import spearman
from guardpolicy.contracts.analysis import ANALYSIS_CORRELATIONS
from guardpolicy.errors import InputError
from guardpolicy.metrics import confusion, gold_agreement

# correlations.csv (`guardpolicy.contracts.ANALYSIS_CORRELATIONS`).
CORRELATION_COLUMNS = tuple(ANALYSIS_CORRELATIONS.names())


def _gold_agreement(store: DrawStore, benchmark: str, subset: str, mapping: str) -> np.ndarray | None:
    result = store.get(benchmark, subset, mapping, GOLD_AGREEMENT)
    return None if result is None else result.point


def policy_label_agreement(
    matrices: Sequence[DatasetMatrix],
    labels: pd.DataFrame,
    subset: str,
    mapping: str,
    file: str,
) -> dict[str, np.ndarray]:
    """benchmark -> [M]: how often each model's binary decision under `mapping` equals the VAL policy's
    binary label of the same prompt, over the `subset` rows of every benchmark the labels cover.

    `labels`: benchmark, id, unsafe (bool) — the VAL policy's labels of the benchmark prompts under the same
    mapping (stage fingerprint's per-prompt labels). A benchmark the labels cover must cover every one of its
    evaluated items, else an InputError naming `file`, the benchmark and an id.
    """
    out = {}
    by_benchmark = {str(b): group for b, group in labels.groupby("benchmark", sort=True)}
    for matrix in matrices:
        if matrix.role == SPLIT or matrix.name not in by_benchmark:
            continue
        unsafe = by_benchmark[matrix.name].set_index("id")["unsafe"]
        rows = matrix.subset_rows(subset)
        ids = matrix.ids[rows]
        missing = [str(i) for i in ids if i not in unsafe.index]
        if missing:
            raise InputError(
                file,
                f"benchmark {matrix.name!r}: {len(missing)} evaluated prompt(s) have no policy label, e.g. "
                f"id {missing[0]!r}; rerun `dvc repro fingerprint`",
                field="id",
            )
        label = unsafe.loc[ids].to_numpy(dtype=bool)  # [n]
        decided = matrix.decisions[mapping][rows]  # [n, M]
        valid = matrix.valid_mask(mapping)[rows]  # [n, M]
        # The policy's labels play the gold: the share of each model's decided items that match them.
        counts = confusion(np.ones((1, len(ids)), dtype=np.float32), label, decided, valid)
        out[matrix.name] = gold_agreement(counts)[0]  # [M]
    return out


def correlation_table(
    store: DrawStore,
    models: pd.DataFrame,
    main_seed: int,
    groupings: Mapping[str, Mapping[str, Sequence[str]]],
    val_split: str,
    val_policy: str,
    subset: str,
    mapping: str,
    policy_agreement: Mapping[str, np.ndarray] | None = None,
    policy_note: str = "",
) -> pd.DataFrame:
    """correlations.csv: Spearman ρ across branch models (main seed) between VAL and benchmark agreement.

    VAL = 4-class accuracy on split `val_split` against `val_policy`'s labels. The benchmark side is the
    mean, over the present benchmarks of a load group (`groupings`: grouping -> load -> benchmarks), of
    either the agreement with the benchmark's own gold (target `gold`: cap on harmful sets, 1 − over_ref on
    benign ones, accuracy on mixed ones) or the agreement with `val_policy`'s own labels of the same prompts
    (target `val_policy_labels`, the study's construct; `policy_agreement` from `policy_label_agreement`,
    None when those labels are absent — `policy_note` says why), on `subset` and `mapping`. One row per
    scale and for all scales pooled; rho and p are null with a note when undefined.
    """
    column = column_index(store)
    branches = branch_models(models, main_seed)
    branches = branches[branches["model"].isin(column)]
    val = store.get(f"{SPLIT_PREFIX}{val_split}", "full", DEFAULT, f"{ACC_PREFIX}{val_policy}")
    groups = [(str(scale), list(group["model"])) for scale, group in branches.groupby("scale", sort=True)]
    groups.append((ALL_SCALES, list(branches["model"])))
    rows = []
    for grouping, loads in groupings.items():
        for load_name in LOADS:
            benchmarks = loads.get(load_name, ())
            for target in (GOLD_TARGET, POLICY_TARGET):
                if target == GOLD_TARGET:
                    values = {b: _gold_agreement(store, b, subset, mapping) for b in benchmarks}
                else:
                    values = {b: (policy_agreement or {}).get(b) for b in benchmarks}
                present = sorted(b for b, v in values.items() if v is not None)
                agreement = np.stack([values[b] for b in present], axis=1).mean(axis=1) if present else None
                for scale, members in groups:
                    indices = [column[m] for m in members]
                    rho = p_value = None
                    n = 0
                    if val is None:
                        note = f"split {val_split!r} scored against {val_policy!r} absent"
                    elif target == POLICY_TARGET and policy_agreement is None:
                        note = policy_note or f"no per-prompt labels of {val_policy!r}"
                    elif agreement is None:
                        note = f"no {load_name}-load benchmark ({grouping} grouping) evaluated"
                    else:
                        test = spearman(val.point[indices], agreement[indices])
                        rho, p_value, n, note = test.rho, test.p_value, test.n, test.note
                    rows.append(
                        {
                            "scale": scale,
                            "val_policy": val_policy,
                            "grouping": grouping,
                            "load": load_name,
                            "target": target,
                            "rho": rho,
                            "p_value": p_value,
                            "n_models": n,
                            "note": note,
                        }
                    )
    table = pd.DataFrame(rows, columns=list(CORRELATION_COLUMNS))
    return table.sort_values(["scale", "grouping", "target", "load"], kind="stable").reset_index(drop=True)

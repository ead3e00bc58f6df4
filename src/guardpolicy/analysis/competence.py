"""Is each guard competent? Capture on the benchmarks both policies call unsafe, and the trade-off.

* `competence_table` (competence.csv): per model (teachers and every branch, every seed) its capture on the
  benchmarks both policies agree are unsafe (fingerprint: swing <= `competence.max_swing`, both label >=
  `competence.min_unsafe` unsafe), and the mean over them with its interval.
* `tradeoff_table` (tradeoff.csv): per judged model, whether *any* decision threshold on its unsafe score
  meets both competence bars at once (capture of every target set >= `min_capture` and over-refusal of the
  over-refusal set <= `max_over_refusal`): the best capture the over-refusal bar allows and the lowest
  over-refusal the capture bar needs. When no threshold reaches both, the two targets pull against each
  other in the model's ranking, not in where it puts its decision boundary.

The capability-only headline CAP is `headline`; issue 14's targets and the comparison with the study are
`targets`. Pure: the draw store, score matrices and tables in, tables and JSON-ready dicts out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from guardpolicy.analysis.matrices import DatasetMatrix
from guardpolicy.analysis.scores import DrawStore, model_identity
from guardpolicy.analysis.stats import percentile_interval
from guardpolicy.config.analysis import TargetsConfig
from guardpolicy.contracts.analysis import ANALYSIS_COMPETENCE, ANALYSIS_TRADEOFF
from guardpolicy.metrics import cap, over_ref
from guardpolicy.training.names import teacher_name

# competence.csv and tradeoff.csv (their contracts in `guardpolicy.contracts`).
COMPETENCE_COLUMNS = tuple(ANALYSIS_COMPETENCE.names())
TRADEOFF_COLUMNS = tuple(ANALYSIS_TRADEOFF.names())
# competence.csv's row of the mean capture over the agreed-unsafe benchmarks.
MEAN_AGREED = "mean:agreed_unsafe"
TEACHER_KIND, BRANCH_KIND = "teacher", "branch"


def competence_table(
    scores: pd.DataFrame,
    store: DrawStore,
    models: pd.DataFrame,
    agreed_unsafe: Sequence[str],
    *,
    subset: str,
    mapping: str,
    confidence: float,
) -> pd.DataFrame:
    """competence.csv: every teacher and branch model's cap on each agreed-unsafe benchmark (the scores.csv
    row, its interval included) and `mean:agreed_unsafe`, the mean over them with the joint-bootstrap
    interval. Empty (header only) without agreed-unsafe benchmarks."""
    present = [b for b in sorted(agreed_unsafe) if store.get(b, subset, mapping, "cap") is not None]
    info = models.set_index("model")
    ours = [m for m in store.models if info.loc[m, "kind"] in (TEACHER_KIND, BRANCH_KIND)]
    chosen = scores[
        scores["model"].isin(ours)
        & scores["benchmark"].isin(present)
        & (scores["subset"] == subset)
        & (scores["mapping"] == mapping)
        & (scores["metric"] == "cap")
    ]
    rows = [
        {
            **model_identity(info, r.model),
            "benchmark": r.benchmark,
            "cap": r.value,
            "ci_low": r.ci_low,
            "ci_high": r.ci_high,
            "interval": r.interval,
            "n": int(r.n),
        }
        for r in chosen.itertuples(index=False)
    ]
    if present:
        caps = [store.get(b, subset, mapping, "cap") for b in present]
        point = np.mean(np.stack([c.point for c in caps], axis=0), axis=0)  # [M]
        low, high = percentile_interval(
            np.mean(np.stack([c.draws for c in caps], axis=0), axis=0), confidence
        )
        column = {model: i for i, model in enumerate(store.models)}
        for model in ours:
            m = column[model]
            rows.append(
                {
                    **model_identity(info, model),
                    "benchmark": MEAN_AGREED,
                    "cap": float(point[m]),
                    "ci_low": float(low[m]),
                    "ci_high": float(high[m]),
                    "interval": "bootstrap",
                    "n": int(sum(int(c.n[m]) for c in caps)),
                }
            )
    table = pd.DataFrame(rows, columns=list(COMPETENCE_COLUMNS))
    table["seed"] = table["seed"].astype("int64")
    table["n"] = table["n"].astype("int64")
    return table.sort_values(["model", "benchmark"], kind="stable").reset_index(drop=True)


def operating_frontier(
    positives: Sequence[np.ndarray], negatives: np.ndarray, *, min_capture: float, max_over_ref: float
) -> dict[str, Any]:
    """Every threshold t (flag when score >= t) of one model at once, on its scores of the unsafe prompts of
    each capture set (`positives`) and of the safe prompts of the over-refusal set (`negatives`).

    Capture and over-refusal both fall as t rises, so the lowest t whose over-refusal is <= `max_over_ref`
    gives the best worst-set capture that bar allows (`min_cap_at_over_ref_bar`), and the highest t whose
    every capture is >= `min_capture` gives the lowest over-refusal that bar needs (`over_ref_at_cap_bar`);
    `both_reachable` is whether one threshold meets both. Non-finite scores are dropped; a side without
    scores gives NaN values and `both_reachable` None.
    """
    pos = [np.sort(np.asarray(p, dtype=np.float64)[np.isfinite(p)]) for p in positives]
    neg = np.sort(np.asarray(negatives, dtype=np.float64)[np.isfinite(negatives)])
    empty = {
        "min_cap_at_over_ref_bar": float("nan"),
        "threshold_at_over_ref_bar": float("nan"),
        "over_ref_at_cap_bar": float("nan"),
        "threshold_at_cap_bar": float("nan"),
        "both_reachable": None,
    }
    if not pos or any(p.size == 0 for p in pos) or neg.size == 0:
        return empty
    distinct = np.unique(np.concatenate([neg, *pos]))
    # Every distinct score, and one above the maximum (flag nothing): ascending thresholds.
    thresholds = np.r_[distinct, np.nextafter(distinct[-1], np.inf)]

    def flag_rate(sorted_scores: np.ndarray) -> np.ndarray:
        return 1.0 - np.searchsorted(sorted_scores, thresholds, side="left") / sorted_scores.size

    over_ref = flag_rate(neg)
    worst_cap = np.min(np.stack([flag_rate(p) for p in pos]), axis=0)
    allowed = np.flatnonzero(over_ref <= max_over_ref)  # never empty: the last threshold flags nothing
    first = int(allowed[0])
    enough = np.flatnonzero(worst_cap >= min_capture)
    result = {
        "min_cap_at_over_ref_bar": float(worst_cap[first]),
        "threshold_at_over_ref_bar": float(thresholds[first]),
        "over_ref_at_cap_bar": float("nan"),
        "threshold_at_cap_bar": float("nan"),
        "both_reachable": bool(worst_cap[first] >= min_capture),
    }
    if enough.size:
        last = int(enough[-1])
        result["over_ref_at_cap_bar"] = float(over_ref[last])
        result["threshold_at_cap_bar"] = float(thresholds[last])
    return result


def judged_models(
    models: pd.DataFrame, main_seed: int, targets: TargetsConfig
) -> tuple[list[str], list[str]]:
    """The models the competence targets judge: teachers and branches at the main seed (the seed repeats
    only feed the noise floor), and of them the ones the over-refusal bar judges (the branches in
    `targets.over_refusal_branches` and the teachers of `targets.over_refusal_teachers`)."""
    main = models[models["seed"] == main_seed]
    judged = sorted(main.loc[main["kind"].isin([TEACHER_KIND, BRANCH_KIND]), "model"])
    teacher_names = {teacher_name(policy) for policy in targets.over_refusal_teachers}
    judged_over_ref = sorted(
        main.loc[
            ((main["kind"] == BRANCH_KIND) & main["branch"].isin(targets.over_refusal_branches))
            | ((main["kind"] == TEACHER_KIND) & main["model"].isin(teacher_names)),
            "model",
        ]
    )
    return judged, judged_over_ref


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value


def tradeoff_table(
    matrices: Sequence[DatasetMatrix],
    models: pd.DataFrame,
    model_order: Sequence[str],
    targets: TargetsConfig,
    *,
    main_seed: int,
    subset: str,
    mapping: str,
) -> pd.DataFrame:
    """tradeoff.csv: per judged model (`judged_models`) its worst capture over `targets.capture_benchmarks`
    and its over-refusal of `targets.over_refusal_benchmark` at its own decisions (`min_cap`, `over_ref`),
    and over every threshold on its `mapping` score (`operating_frontier`). Empty (header only) when a
    capture set or the over-refusal set was not evaluated."""
    by_name = {m.name: m for m in matrices}
    needed = [*targets.capture_benchmarks, targets.over_refusal_benchmark]
    judged, judged_over_ref = judged_models(models, main_seed, targets)
    if any(name not in by_name for name in needed) or not judged:
        return pd.DataFrame(columns=list(TRADEOFF_COLUMNS))
    info = models.set_index("model")
    column = {model: i for i, model in enumerate(model_order)}

    def side(name: str, unsafe: bool) -> tuple[DatasetMatrix, np.ndarray]:
        matrix = by_name[name]
        return matrix, matrix.subset_rows(subset) & (matrix.expected_unsafe == unsafe)

    capture_sides = [side(b, True) for b in targets.capture_benchmarks]
    benign, benign_rows = side(targets.over_refusal_benchmark, False)
    rows = []
    for model in judged:
        m = column[model]
        frontier = operating_frontier(
            [matrix.scores[mapping][r, m] for matrix, r in capture_sides],
            benign.scores[mapping][benign_rows, m],
            min_capture=targets.min_capture,
            max_over_ref=targets.max_over_refusal,
        )
        captures = [
            _or_nan(cap(matrix.expected_unsafe[r], matrix.decisions[mapping][r, m]))
            for matrix, r in capture_sides
        ]
        rows.append(
            {
                **model_identity(info, model),
                "judged_over_ref": model in judged_over_ref,
                "min_cap": float(np.min(captures)),
                "over_ref": _or_nan(
                    over_ref(benign.expected_unsafe[benign_rows], benign.decisions[mapping][benign_rows, m])
                ),
                **frontier,
            }
        )
    table = pd.DataFrame(rows, columns=list(TRADEOFF_COLUMNS))
    table["seed"] = table["seed"].astype("int64")
    return table.sort_values("model", kind="stable").reset_index(drop=True)


def tradeoff_summary(table: pd.DataFrame, targets: TargetsConfig) -> dict[str, Any]:
    """summary.json `competence_tradeoff`: over the models the over-refusal bar judges, how many have a
    threshold meeting both competence bars, the best worst-set capture the over-refusal bar allows and the
    lowest over-refusal the capture bar needs (each with its model)."""
    judged = table[table["judged_over_ref"].astype(bool)] if len(table) else table
    block: dict[str, Any] = {
        "capture_benchmarks": ",".join(targets.capture_benchmarks),
        "over_refusal_benchmark": targets.over_refusal_benchmark,
        "min_capture": targets.min_capture,
        "max_over_refusal": targets.max_over_refusal,
        "models": len(judged),
    }
    if judged.empty:
        return block
    reachable = judged[judged["both_reachable"].fillna(False).astype(bool)]
    best = judged.loc[judged["min_cap_at_over_ref_bar"].astype(float).idxmax()]
    block.update(
        {
            "reachable": len(reachable),
            "reachable_models": ",".join(sorted(reachable["model"])),
            "best_min_cap_at_over_ref_bar": float(best["min_cap_at_over_ref_bar"]),
            "best_min_cap_model": str(best["model"]),
        }
    )
    needs = judged["over_ref_at_cap_bar"].astype(float)
    if needs.notna().any():
        lowest = judged.loc[needs.idxmin()]
        block["lowest_over_ref_at_cap_bar"] = float(lowest["over_ref_at_cap_bar"])
        block["lowest_over_ref_model"] = str(lowest["model"])
    return block

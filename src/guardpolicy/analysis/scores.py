"""Score matrices -> every metric of every model, its bootstrap replicates, and the tidy scores table.

`compute_draws` resamples each dataset's prompts (`matrices.DatasetMatrix`) once per subset (full | clean) and
evaluates every metric of every model on those same replicates (`counts @ values`), which is what makes the
spans, noise floors and contrasts of `sensitivity` joint. The results are pure data (`DrawStore`);
`scores_table` turns them into the `scores.csv` table, `mapping_effect_table` into mapping_effect.csv.

Metrics (`guardpolicy.metrics`, the implementation evaluate@'s metrics.json uses too; unsafe = positive):
`cap` = share of the unsafe items predicted unsafe, `over_ref` = share of the safe items predicted unsafe,
`f1` and `auprc` where both classes exist, `acc_<policy>` = 4-class accuracy of a split against that
policy's labels; `gold_agreement` (internal) = how often the binary decision equals the benchmark's own gold
(cap on harmful sets, 1 - over_ref on benign ones, accuracy on mixed ones).

Besides the datasets, scores.csv carries the headline means: `mean:harmful` (cap) and `mean:benign`
(over_ref), the unweighted mean over the present harmful / benign benchmarks, whose replicate r is the mean of
the benchmarks' replicates r (`role_mean_draws`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from guardpolicy.analysis.matrices import (
    BENIGN,
    DEFAULT,
    HARMFUL,
    MAPPINGS,
    MIXED,
    SPLIT,
    SUBSETS,
    DatasetMatrix,
)
from guardpolicy.analysis.stats import (
    bootstrap_count_blocks,
    named_rng,
    percentile_interval,
    wilson_interval,
)
from guardpolicy.config.analysis import View
from guardpolicy.contracts.analysis import ANALYSIS_BENCHMARKS, ANALYSIS_MAPPING_EFFECT, ANALYSIS_SCORES
from guardpolicy.metrics import (
    BINARY_METRICS,
    applies,
    average_precision,
    cap_rate,
    confusion,
    f1_score,
    gold_agreement,
    over_ref_rate,
    ratio,
)

log = logging.getLogger(__name__)

BENCHMARK_METRICS = BINARY_METRICS
GOLD_AGREEMENT = "gold_agreement"
# `acc_<policy>`: with the default policy names, acc_policy_a / acc_policy_b as in metrics.json.
ACC_PREFIX = "acc_"
BOOTSTRAP, WILSON = "bootstrap", "wilson"
# The headline means' pseudo-benchmarks: role -> (benchmark key in scores.csv, the rate averaged). Mixed sets
# (xstest) have both rates and belong to neither mean.
MEAN_PREFIX = "mean:"
MEAN_HARMFUL, MEAN_BENIGN = f"{MEAN_PREFIX}{HARMFUL}", f"{MEAN_PREFIX}{BENIGN}"
ROLE_MEANS = {HARMFUL: (MEAN_HARMFUL, "cap"), BENIGN: (MEAN_BENIGN, "over_ref")}
# scores.csv and mapping_effect.csv: their contracts' columns (guardpolicy.contracts); the plan's model
# columns are the first of scores.csv.
MODEL_INFO_COLUMNS = ANALYSIS_SCORES.select("model", "kind", "scale", "branch", "seed", "recipe")
SCORE_COLUMNS = tuple(ANALYSIS_SCORES.names())
MAPPING_EFFECT_COLUMNS = tuple(ANALYSIS_MAPPING_EFFECT.names())


@dataclass(frozen=True)
class MetricDraws:
    """One metric of every model on one dataset subset: the estimate and its bootstrap replicates."""

    point: np.ndarray  # [M]
    draws: np.ndarray  # [B, M]
    n: np.ndarray  # [M] int: the items the metric is a rate over (fewer where a guard's answer is excluded)
    single_class: bool  # the subset holds one gold class only (Wilson intervals apply to its rates)


@dataclass(frozen=True)
class DrawStore:
    """Every (dataset, subset, mapping, metric) -> MetricDraws, over the models in `models` order."""

    models: tuple[str, ...]
    samples: int
    roles: dict[str, str]
    draws: dict[tuple[str, str, str, str], MetricDraws]
    # Which view of the scores it holds (guardpolicy.analysis.views): the models' own decisions unless a view
    # store says otherwise; the spans, rank tests and their tables carry it.
    view: View = "own"

    def get(self, dataset: str, subset: str, mapping: str, metric: str) -> MetricDraws | None:
        return self.draws.get((dataset, subset, mapping, metric))

    def datasets(self) -> list[str]:
        return sorted({key[0] for key in self.draws})


def _benchmark_block(
    matrix: DatasetMatrix, rows: np.ndarray, counts: np.ndarray
) -> dict[tuple[str, str], np.ndarray]:
    """Every benchmark metric of every model for one block of weights counts [b, n_rows].

    Returns {(mapping, metric): [b, M]}. Per-model denominators: a model whose answer to an item is excluded
    is not scored on it.
    """
    positive = matrix.expected_unsafe[rows]  # [n]
    has_unsafe, has_safe = bool(positive.any()), not bool(positive.all())
    out = {}
    for mapping in MAPPINGS:
        counted = confusion(counts, positive, matrix.decisions[mapping][rows], _valid(matrix, mapping, rows))
        if applies("cap", has_unsafe, has_safe):
            out[(mapping, "cap")] = cap_rate(counted)
        if applies("over_ref", has_unsafe, has_safe):
            out[(mapping, "over_ref")] = over_ref_rate(counted)
        if applies("f1", has_unsafe, has_safe):
            out[(mapping, "f1")] = f1_score(counted)
        if applies("auprc", has_unsafe, has_safe):
            out[(mapping, "auprc")] = _auprc_block(matrix, mapping, rows, counts)
        out[(mapping, GOLD_AGREEMENT)] = gold_agreement(counted)
    return out


def _valid(matrix: DatasetMatrix, mapping: str, rows: np.ndarray) -> np.ndarray | None:
    """[n, M] where each model has a decision, None when every model has every one."""
    return None if matrix.valid is None else matrix.valid[mapping][rows]


def _auprc_block(matrix: DatasetMatrix, mapping: str, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """AUPRC of every model [b, M] over its scored items; NaN for a model missing the score of an item it
    has a decision for (a guard served without log-probabilities ranks nothing)."""
    positive = matrix.expected_unsafe[rows]  # [n]
    scores = matrix.scores[mapping][rows]  # [n, M]
    valid = matrix.valid_mask(mapping)[rows]  # [n, M]
    columns = []
    for m in range(scores.shape[1]):
        keep = valid[:, m]
        if not keep.any() or np.isnan(scores[keep, m]).any():
            columns.append(np.full(counts.shape[0], np.nan))
        elif keep.all():
            columns.append(average_precision(counts, positive, scores[:, m]))
        else:
            columns.append(average_precision(counts[:, keep], positive[keep], scores[keep, m]))
    return np.stack(columns, axis=1)


def _split_block(
    matrix: DatasetMatrix, rows: np.ndarray, counts: np.ndarray
) -> dict[tuple[str, str], np.ndarray]:
    """4-class accuracy against every policy's labels for one block of weights counts [b, n_rows]."""
    out = {}
    for policy, (present, correct) in sorted(matrix.gold.items()):
        if not present[rows].any():
            continue
        n_models = correct.shape[1]
        sums = counts @ np.concatenate(
            [present[rows].astype(np.float32), correct[rows].astype(np.float32)], axis=1
        )  # [b, 2M]
        out[(DEFAULT, f"{ACC_PREFIX}{policy}")] = ratio(
            sums[:, n_models:].astype(np.float64), sums[:, :n_models].astype(np.float64)
        )
    return out


def metric_sizes(matrix: DatasetMatrix, rows: np.ndarray, mapping: str) -> dict[str, np.ndarray]:
    """metric -> [M] int: the items each model's rate is over (its scored items of the subset)."""
    positive = matrix.expected_unsafe[rows][:, None]  # [n, 1]
    valid = matrix.valid_mask(mapping)[rows]  # [n, M]
    total = valid.sum(axis=0).astype(np.int64)
    sizes = {
        "cap": (valid & positive).sum(axis=0).astype(np.int64),
        "over_ref": (valid & ~positive).sum(axis=0).astype(np.int64),
        GOLD_AGREEMENT: total,
        "f1": total,
        "auprc": total,
    }
    for policy, (present, _) in matrix.gold.items():
        sizes[f"{ACC_PREFIX}{policy}"] = present[rows].sum(axis=0).astype(np.int64)
    return sizes


def dataset_draws(
    matrix: DatasetMatrix, subset: str, samples: int, seed: int
) -> dict[tuple[str, str], MetricDraws]:
    """Point estimates and `samples` bootstrap replicates of every metric on one dataset subset.

    The replicates are drawn from a generator named by (seed, dataset, subset), so they do not depend on which
    other datasets are analysed or in what order. Empty subsets give no metrics.
    """
    rows = matrix.subset_rows(subset)
    n = int(rows.sum())
    if n == 0:
        return {}
    block_metrics = _split_block if matrix.role == SPLIT else _benchmark_block
    point = block_metrics(matrix, rows, np.ones((1, n), dtype=np.float32))
    blocks = [
        block_metrics(matrix, rows, counts)
        for counts in bootstrap_count_blocks(n, samples, named_rng(seed, matrix.name, subset))
    ]
    sizes = {mapping: metric_sizes(matrix, rows, mapping) for mapping in MAPPINGS}
    positive = matrix.expected_unsafe[rows]
    single_class = matrix.role != SPLIT and (positive.all() or not positive.any())
    return {
        key: MetricDraws(
            point=values[0],
            draws=np.concatenate([block[key] for block in blocks], axis=0),
            n=sizes[key[0]][key[1]],
            single_class=bool(single_class),
        )
        for key, values in point.items()
    }


def compute_draws(
    models: Sequence[str], matrices: Sequence[DatasetMatrix], samples: int, seed: int
) -> DrawStore:
    """Bootstrap every metric of every model on every dataset x subset (full, clean), `samples` replicates.

    A clean subset that is the whole dataset (split rows; benchmarks without overlap) reuses the full
    subset's replicates instead of drawing a second, different set for the same items.
    """
    draws: dict[tuple[str, str, str, str], MetricDraws] = {}
    for matrix in tqdm(matrices, desc="analyse: bootstrap", unit="dataset", mininterval=1.0):
        full = dataset_draws(matrix, "full", samples, seed)
        clean = full if matrix.clean.all() else dataset_draws(matrix, "clean", samples, seed)
        for subset, results in (("full", full), ("clean", clean)):
            for (mapping, metric), result in results.items():
                draws[(matrix.name, subset, mapping, metric)] = result
        log.debug("bootstrap: %s (%d items, %d clean)", matrix.name, len(matrix.ids), int(matrix.clean.sum()))
    roles = {matrix.name: matrix.role for matrix in matrices}
    return DrawStore(models=tuple(models), samples=samples, roles=roles, draws=draws)


def role_mean_draws(
    store: DrawStore, metrics: Mapping[str, str] | None = None
) -> dict[tuple[str, str, str, str], MetricDraws]:
    """The headline means per subset x mapping: mean cap over harmful sets, mean over_ref over benign ones
    (`metrics`: role -> another metric to average, e.g. the ranked view's AUROC).

    Keys are (`mean:harmful` | `mean:benign`, subset, mapping, metric). The point is the unweighted mean of
    the present benchmarks' points; replicate r is the mean of their replicates r, and since every benchmark
    is resampled from its own generator, the spread of those means carries each benchmark's sampling noise
    independently. `n` is the prompts summed over the benchmarks; a subset and mapping where no benchmark of
    the role has the rate gets no entry.
    """
    means: dict[tuple[str, str, str, str], MetricDraws] = {}
    for role, (name, rate) in ROLE_MEANS.items():
        metric = (metrics or {}).get(role, rate)
        members = [dataset for dataset in store.datasets() if store.roles.get(dataset) == role]
        for subset in SUBSETS:
            for mapping in MAPPINGS:
                results = [
                    result
                    for dataset in members
                    if (result := store.get(dataset, subset, mapping, metric)) is not None
                ]
                if not results:
                    continue
                points = np.stack([r.point for r in results], axis=0)  # [k, M]
                replicates = np.stack([r.draws for r in results], axis=0)  # [k, B, M]
                means[(name, subset, mapping, metric)] = MetricDraws(
                    point=points.mean(axis=0),  # [M]
                    draws=replicates.mean(axis=0),  # [B, M]
                    n=sum(r.n for r in results),
                    single_class=False,  # a mean of rates is no binomial proportion: bootstrap interval
                )
    return means


def benchmark_table(matrices: Sequence[DatasetMatrix], small_set_n: int) -> pd.DataFrame:
    """benchmarks.csv: per benchmark and subset its gold counts, its role there (what its CAP / OVER-REF rows
    are over: unsafe items make CAP defined, safe ones OVER-REF) and whether it is a small set (the prompts
    its rate is over, `n_scored`, fewer than `small_set_n`). Splits are not benchmarks; a subset with no
    items has no row, as it has no scores."""
    rows = []
    for matrix in matrices:
        if matrix.role == SPLIT:
            continue
        for subset in SUBSETS:
            unsafe = matrix.expected_unsafe[matrix.subset_rows(subset)]
            n_unsafe, n_safe = int(unsafe.sum()), int((~unsafe).sum())
            if n_unsafe + n_safe == 0:
                continue
            role = MIXED if n_unsafe and n_safe else (HARMFUL if n_unsafe else BENIGN)
            n_scored = {HARMFUL: n_unsafe, BENIGN: n_safe}.get(role, max(n_unsafe, n_safe))
            rows.append(
                {
                    "benchmark": matrix.name,
                    "subset": subset,
                    "role": role,
                    "n_items": n_unsafe + n_safe,
                    "n_unsafe": n_unsafe,
                    "n_safe": n_safe,
                    "n_scored": n_scored,
                    "small_set": n_scored < small_set_n,
                }
            )
    table = pd.DataFrame(rows, columns=ANALYSIS_BENCHMARKS.names())
    subset_order = {name: i for i, name in enumerate(SUBSETS)}
    table = table.sort_values(
        ["benchmark", "subset"], key=lambda c: c.map(subset_order) if c.name == "subset" else c, kind="stable"
    )
    return table.reset_index(drop=True)


def model_frame(evaluations: Mapping[str, Mapping[str, object]]) -> pd.DataFrame:
    """The plan's `evaluations` as a table: model, kind, scale, branch, seed, recipe (sorted by model)."""
    rows = [
        {"model": name, **{column: entry[column] for column in MODEL_INFO_COLUMNS[1:]}}
        for name, entry in evaluations.items()
    ]
    frame = pd.DataFrame(rows, columns=list(MODEL_INFO_COLUMNS))
    frame["seed"] = frame["seed"].astype("int64")
    return frame.sort_values("model", kind="stable").reset_index(drop=True)


def model_identity(info: pd.DataFrame, model: str) -> dict[str, Any]:
    """model, kind, scale, branch, seed of one model; `info` is `model_frame`'s table indexed by model."""
    entry = info.loc[model]
    return {
        "model": model,
        "kind": entry["kind"],
        "scale": entry["scale"],
        "branch": entry["branch"],
        "seed": int(entry["seed"]),
    }


def scores_table(
    store: DrawStore, models: pd.DataFrame, confidence: float, wilson_max_n: int
) -> pd.DataFrame:
    """The tidy scores.csv table: every model x dataset x subset x mapping x metric with its interval.

    Rates (cap, over_ref) on a single-class subset of at most `wilson_max_n` items get a Wilson interval;
    everything else the percentile bootstrap interval. The headline means of `role_mean_draws` are rows of
    their own (benchmark `mean:harmful` / `mean:benign`, bootstrap interval).
    """
    info = models.set_index("model").loc[list(store.models)].reset_index()
    blocks = []
    everything = {**store.draws, **role_mean_draws(store)}
    for (dataset, subset, mapping, metric), result in sorted(everything.items()):
        if metric == GOLD_AGREEMENT:
            continue
        low, high = percentile_interval(result.draws, confidence)
        interval = np.full(len(store.models), BOOTSTRAP, dtype=object)
        if result.single_class and metric in ("cap", "over_ref"):
            # Per model: a guard with excluded answers has a smaller n than the others.
            for m, n in enumerate(result.n):
                if 0 < n <= wilson_max_n and np.isfinite(result.point[m]):
                    k = int(np.rint(result.point[m] * n))
                    low[m], high[m] = wilson_interval(k, int(n), confidence)
                    interval[m] = WILSON
        block = info.copy()
        block["benchmark"], block["subset"], block["mapping"], block["metric"] = (
            dataset,
            subset,
            mapping,
            metric,
        )
        block["value"], block["ci_low"], block["ci_high"] = result.point, low, high
        block["interval"], block["n"] = interval, result.n
        blocks.append(block)
    if not blocks:
        return pd.DataFrame(columns=list(SCORE_COLUMNS))
    table = pd.concat(blocks, ignore_index=True)[list(SCORE_COLUMNS)]
    table["n"] = table["n"].astype("int64")
    return table.sort_values(
        ["model", "benchmark", "subset", "mapping", "metric"], kind="stable"
    ).reset_index(drop=True)


def mapping_effect_table(store: DrawStore) -> pd.DataFrame:
    """mapping_effect.csv: per model and benchmark with safe items, over_ref under both mappings."""
    rows = []
    for benchmark in store.datasets():
        for subset in SUBSETS:
            default = store.get(benchmark, subset, MAPPINGS[0], "over_ref")
            boundary = store.get(benchmark, subset, MAPPINGS[1], "over_ref")
            if default is None or boundary is None:
                continue
            for i, model in enumerate(store.models):
                rows.append(
                    {
                        "model": model,
                        "benchmark": benchmark,
                        "subset": subset,
                        "over_ref_default": float(default.point[i]),
                        "over_ref_boundary_unsafe": float(boundary.point[i]),
                        "change": float(boundary.point[i] - default.point[i]),
                    }
                )
    table = pd.DataFrame(rows, columns=list(MAPPING_EFFECT_COLUMNS))
    return table.sort_values(["model", "benchmark", "subset"], kind="stable").reset_index(drop=True)

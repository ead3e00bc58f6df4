"""Every model's predictions -> per-dataset score matrices, their bootstrap replicates, and tidy scores.

The predictions of all models are aligned item by item into one `DatasetMatrix` per dataset (benchmark or
`split:<name>`), so each score is computed for all models at once. `compute_draws` resamples each dataset's
prompts once per subset (full | clean) and evaluates every metric of every model on those same replicates
(`counts @ values`), which is what makes the spans, noise floors and contrasts of `sensitivity` joint. The
results are pure data (`DrawStore`); `scores_table` turns them into the `scores.csv` table.

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
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from guardpolicy.analysis.stats import (
    bootstrap_count_blocks,
    named_rng,
    percentile_interval,
    wilson_interval,
)
from guardpolicy.errors import KEYS_SHOWN, InputError, few_keys
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

HARMFUL, BENIGN, MIXED, SPLIT = "harmful", "benign", "mixed", "split"
# Registry label kind -> the role of the benchmark in the study.
ROLE_OF_LABEL_KIND = {"all_unsafe": HARMFUL, "all_safe": BENIGN, "column": MIXED}
SPLIT_PREFIX = "split:"
SUBSETS = ("full", "clean")
DEFAULT, BOUNDARY_UNSAFE = "default", "boundary_unsafe"
MAPPINGS = (DEFAULT, BOUNDARY_UNSAFE)
# Prediction columns per mapping: the binary decision and the score that ranks for AUPRC.
DECISION_COLUMN = {DEFAULT: "unsafe", BOUNDARY_UNSAFE: "unsafe_bu"}
SCORE_COLUMN = {DEFAULT: "unsafe_score", BOUNDARY_UNSAFE: "unsafe_score_bu"}
BENCHMARK_METRICS = BINARY_METRICS
GOLD_AGREEMENT = "gold_agreement"
GOLD_PREFIX = "gold_"
# `acc_<policy>`: with the default policy names, acc_policy_a / acc_policy_b as in metrics.json.
ACC_PREFIX = "acc_"
BOOTSTRAP, WILSON = "bootstrap", "wilson"
# The headline means' pseudo-benchmarks: role -> (benchmark key in scores.csv, the rate averaged). Mixed sets
# (xstest) have both rates and belong to neither mean.
MEAN_PREFIX = "mean:"
MEAN_HARMFUL, MEAN_BENIGN = f"{MEAN_PREFIX}{HARMFUL}", f"{MEAN_PREFIX}{BENIGN}"
ROLE_MEANS = {HARMFUL: (MEAN_HARMFUL, "cap"), BENIGN: (MEAN_BENIGN, "over_ref")}
MODEL_INFO_COLUMNS = ("model", "kind", "scale", "branch", "seed", "recipe")
SCORE_COLUMNS = (
    *MODEL_INFO_COLUMNS,
    "benchmark",
    "subset",
    "mapping",
    "metric",
    "value",
    "ci_low",
    "ci_high",
    "interval",
    "n",
)
# The columns every predictions file must carry (besides one gold_<policy> per policy).
# Baseline guards' predictions only (optional): why a decision may be missing.
PARSE_STATUS = "parse_status"
PREDICTION_COLUMNS = (
    "model",
    "dataset",
    "id",
    "clean",
    "expected_unsafe",
    "category",
    "pair_id",
    "pred_coarse",
    "unsafe_score",
    "unsafe_score_bu",
    "unsafe",
    "unsafe_bu",
)


@dataclass(frozen=True)
class DatasetMatrix:
    """One dataset's items (rows) x every model (columns), in the order of `models`."""

    name: str
    role: str  # harmful | benign | mixed | split
    ids: np.ndarray  # [n] str
    clean: np.ndarray  # [n] bool
    expected_unsafe: np.ndarray  # [n] bool (all False for split rows, which have no benchmark gold)
    category: np.ndarray  # [n] object, None where absent
    pair_id: np.ndarray  # [n] object, None where absent
    decisions: dict[str, np.ndarray]  # mapping -> [n, M] bool (False where the decision is missing)
    scores: dict[str, np.ndarray]  # mapping -> [n, M] float32 (NaN where a guard gave no score)
    # Split rows only: policy -> ([n, M] bool gold present and the model made a 4-class prediction,
    # [n, M] bool prediction equals that gold).
    gold: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    # mapping -> [n, M] bool: the model has a decision for the item. None = every decision present (our
    # models); a baseline guard's answer that could not be parsed, under failure policy `exclude`, is False
    # and leaves that item out of that model's rates (per-model denominators).
    valid: dict[str, np.ndarray] | None = None
    # Split rows only: mapping -> [n] bool, every policy's gold label is safe under that mapping (the
    # held-out benign items the calibrated comparison matches over-refusal on). None when not computed.
    safe_everywhere: dict[str, np.ndarray] | None = None

    def subset_rows(self, subset: str) -> np.ndarray:
        """Row mask [n] of a subset: every row, or the decontaminated ones."""
        return np.ones(len(self.ids), dtype=bool) if subset == "full" else self.clean.copy()

    def valid_mask(self, mapping: str) -> np.ndarray:
        """[n, M] bool: where each model has a decision under `mapping`."""
        if self.valid is None:
            return np.ones(self.decisions[mapping].shape, dtype=bool)
        return self.valid[mapping]


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

    def get(self, dataset: str, subset: str, mapping: str, metric: str) -> MetricDraws | None:
        return self.draws.get((dataset, subset, mapping, metric))

    def datasets(self) -> list[str]:
        return sorted({key[0] for key in self.draws})


def benchmark_role(name: str, label_kinds: Mapping[str, str], file: str) -> str:
    """harmful / benign / mixed from the registry's label kind; split rows are `split`."""
    if name.startswith(SPLIT_PREFIX):
        return SPLIT
    if name not in label_kinds:
        raise InputError(
            file,
            f"dataset {name!r} is not in the benchmark registry ({sorted(label_kinds)})",
            field="dataset",
        )
    return ROLE_OF_LABEL_KIND[label_kinds[name]]


def _nullable_strings(values: pd.Series) -> np.ndarray:
    return np.array([None if pd.isna(v) else str(v) for v in values], dtype=object)


def build_matrices(
    predictions: Mapping[str, pd.DataFrame],
    label_kinds: Mapping[str, str],
    files: Mapping[str, str],
    policies: Sequence[str],
    unsafe_labels: Mapping[str, Sequence[str]] | None = None,
) -> tuple[tuple[str, ...], list[DatasetMatrix]]:
    """Align every model's predictions into one matrix per dataset.

    `predictions`: model -> its predictions frame (contract "Predictions"); `files` names each model's file
    for error messages; `label_kinds`: benchmark -> registry label kind; `unsafe_labels` (mapping -> the
    coarse classes that count as unsafe) marks each split's items every policy calls safe. A model's
    decision may be null only where its `parse_status` is `failed` (a guard answer excluded from its rates).
    All models must cover the same
    (dataset, id) items with the same gold and `clean` flags, else InputError naming the differing file and
    what differs (datasets, items, or the column and items); a pair may not hold two safe or two unsafe items.
    Returns the model order (sorted) and the matrices (sorted by dataset name).
    """
    models = tuple(sorted(predictions))
    if not models:
        raise InputError("<predictions>", "no model predictions to analyse")
    frames = {
        m: predictions[m].sort_values(["dataset", "id"], kind="stable").reset_index(drop=True) for m in models
    }
    reference_model = models[0]
    reference = frames[reference_model]
    ref_file = files[reference_model]
    for model in models:
        frame, file = frames[model], files[model]
        if frame["clean"].isna().any():
            row = int(np.flatnonzero(frame["clean"].isna().to_numpy())[0]) + 1
            raise InputError(file, "null in bool column", row=row, field="clean")
        # A missing decision is allowed only for a guard answer the parser could not read (baseline
        # predictions carry `parse_status`; failure policy `exclude` leaves its decisions null).
        failed = (
            frame[PARSE_STATUS].eq("failed").fillna(False).to_numpy(dtype=bool)
            if PARSE_STATUS in frame.columns
            else np.zeros(len(frame), dtype=bool)
        )
        for column in ("unsafe", "unsafe_bu"):
            unexplained = frame[column].isna().to_numpy() & ~failed
            if unexplained.any():
                row = int(np.flatnonzero(unexplained)[0]) + 1
                raise InputError(
                    file,
                    "null decision (only a guard answer with parse_status 'failed' may have none)",
                    row=row,
                    field=column,
                )
        coarse_missing = frame["pred_coarse"].isna()
        if coarse_missing.any() and not coarse_missing.all():
            row = int(np.flatnonzero(coarse_missing.to_numpy())[0]) + 1
            raise InputError(
                file,
                "null pred_coarse on some rows only (a model has a 4-class head for every item or none)",
                row=row,
                field="pred_coarse",
            )
        wrong_model = frame["model"].astype(str) != model
        if wrong_model.any():
            row = int(np.flatnonzero(wrong_model.to_numpy())[0]) + 1
            raise InputError(
                file, f"model is {frame['model'].iloc[row - 1]!r}, expected {model!r}", row=row, field="model"
            )
        if model == reference_model:
            continue
        golds = [
            f"{GOLD_PREFIX}{policy}" for policy in policies if f"{GOLD_PREFIX}{policy}" in reference.columns
        ]
        _check_same_items(frame, file, reference, ref_file, ("clean", "expected_unsafe", *golds))

    dataset_of = reference["dataset"].astype(str).to_numpy()
    names = sorted(set(dataset_of))
    stacked = {
        column: np.stack([_float_column(frames[m][column]) for m in models], axis=1)
        for column in ("unsafe_score", "unsafe_score_bu")
    }  # each [N, M] float32, NaN where missing
    present = {
        column: np.stack([frames[m][column].notna().to_numpy() for m in models], axis=1)
        for column in ("unsafe", "unsafe_bu")
    }  # each [N, M] bool
    for column in ("unsafe", "unsafe_bu"):
        stacked[column] = np.stack(
            [frames[m][column].fillna(False).to_numpy(dtype=bool) for m in models], axis=1
        )  # [N, M]
    any_missing = any(not mask.all() for mask in present.values())
    predicted = np.stack([frames[m]["pred_coarse"].astype(str).to_numpy() for m in models], axis=1)  # [N, M]
    has_coarse = np.array([bool(frames[m]["pred_coarse"].notna().all()) for m in models])  # [M]
    matrices = []
    for name in names:
        rows = dataset_of == name
        role = benchmark_role(name, label_kinds, ref_file)
        expected = reference.loc[rows, "expected_unsafe"]
        gold: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        safe_everywhere = None
        if role == SPLIT:
            expected_unsafe = np.zeros(int(rows.sum()), dtype=bool)
            if unsafe_labels is not None:
                safe_everywhere = {
                    mapping: np.logical_and.reduce(
                        [
                            reference.loc[rows, f"{GOLD_PREFIX}{policy}"].notna().to_numpy()
                            & ~reference.loc[rows, f"{GOLD_PREFIX}{policy}"].isin(list(unsafe)).to_numpy()
                            for policy in policies
                        ]
                    )
                    for mapping, unsafe in unsafe_labels.items()
                }  # each [n] bool
            for policy in policies:
                column = f"{GOLD_PREFIX}{policy}"
                if column not in reference.columns:
                    continue
                labels = reference.loc[rows, column]
                scored = labels.notna().to_numpy()[:, None] & has_coarse[None, :]  # [n, M]
                correct = predicted[rows] == labels.astype(str).to_numpy()[:, None]  # [n, M]
                gold[policy] = (scored, correct & scored)
        else:
            if expected.isna().any():
                row = int(np.flatnonzero(rows)[np.flatnonzero(expected.isna().to_numpy())[0]]) + 1
                raise InputError(
                    ref_file, f"benchmark {name!r} item has no gold label", row=row, field="expected_unsafe"
                )
            expected_unsafe = expected.to_numpy(dtype=bool)
            _check_pairs(reference.loc[rows], expected_unsafe, ref_file)
        matrices.append(
            DatasetMatrix(
                name=name,
                role=role,
                ids=reference.loc[rows, "id"].astype(str).to_numpy(),
                clean=reference.loc[rows, "clean"].to_numpy(dtype=bool),
                expected_unsafe=expected_unsafe,
                category=_nullable_strings(reference.loc[rows, "category"]),
                pair_id=_nullable_strings(reference.loc[rows, "pair_id"]),
                decisions={mapping: stacked[DECISION_COLUMN[mapping]][rows] for mapping in MAPPINGS},
                scores={mapping: stacked[SCORE_COLUMN[mapping]][rows] for mapping in MAPPINGS},
                gold=gold,
                valid=(
                    {mapping: present[DECISION_COLUMN[mapping]][rows] for mapping in MAPPINGS}
                    if any_missing
                    else None
                ),
                safe_everywhere=safe_everywhere,
            )
        )
    log.info("scores: %d models x %d datasets (%d items each)", len(models), len(matrices), len(reference))
    return models, matrices


_RERUN = (
    "models must be evaluated on the same benchmark, split and label versions: rerun the evaluate@ stages"
)


def _item_labels(frame: pd.DataFrame) -> pd.Series:
    return frame["dataset"].astype(str) + "/" + frame["id"].astype(str)


def _value_text(value: object) -> str:
    """A cell as a reader wants it in a message: null, or the plain Python value (not numpy's repr)."""
    if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)):
        return "null"
    return repr(value.item() if isinstance(value, np.generic) else value)


def _check_same_items(
    frame: pd.DataFrame, file: str, reference: pd.DataFrame, ref_file: str, columns: Sequence[str]
) -> None:
    """Both frames (sorted by dataset, id) must hold the same items with the same values in `columns`.

    The message names what differs, coarsest first: the datasets one file has and the other lacks, then the
    items (`<dataset>/<id>`), then for the same items the column and the items whose values differ.
    """
    datasets, ref_datasets = set(frame["dataset"].astype(str)), set(reference["dataset"].astype(str))
    if datasets != ref_datasets:
        parts = []
        if ref_datasets - datasets:
            parts.append(f"missing dataset(s) {few_keys(list(ref_datasets - datasets))} that {ref_file} has")
        if datasets - ref_datasets:
            parts.append(f"extra dataset(s) {few_keys(list(datasets - ref_datasets))} that {ref_file} lacks")
        raise InputError(
            file, f"its items differ from {ref_file}: {'; '.join(parts)} ({_RERUN})", field="dataset"
        )
    items, ref_items = _item_labels(frame), _item_labels(reference)
    if len(items) != len(ref_items) or not items.reset_index(drop=True).equals(ref_items):
        here, there = set(items), set(ref_items)
        parts = []
        if there - here:
            parts.append(
                f"{len(there - here)} item(s) of {ref_file} are missing: {few_keys(list(there - here))}"
            )
        if here - there:
            parts.append(f"{len(here - there)} item(s) are not in {ref_file}: {few_keys(list(here - there))}")
        for name, labels in ((file, items), (ref_file, ref_items)):
            repeated = labels[labels.duplicated()]
            if len(repeated):
                parts.append(f"{name} repeats {len(repeated)} item(s): {few_keys(list(repeated))}")
        raise InputError(file, f"its items differ from {ref_file}: {'; '.join(parts)} ({_RERUN})", field="id")
    for column in columns:
        if column not in frame.columns:
            raise InputError(
                file,
                f"its items differ from {ref_file}: it has no column {column!r} ({_RERUN})",
                field=column,
            )
        values, ref_values = frame[column].reset_index(drop=True), reference[column].reset_index(drop=True)
        if values.equals(ref_values):
            continue
        differs = ~((values == ref_values).fillna(False) | (values.isna() & ref_values.isna()))
        where = np.flatnonzero(differs.to_numpy(dtype=bool))
        if not len(where):  # equal item by item: what differs is how the column is stored
            raise InputError(
                file,
                f"its items differ from {ref_file} in column {column!r}: the values agree but are stored as "
                f"{values.dtype} here, {ref_values.dtype} there ({_RERUN})",
                field=column,
            )
        shown = ", ".join(
            f"{ref_items.iloc[i]} ({_value_text(values.iloc[i])} here, "
            f"{_value_text(ref_values.iloc[i])} there)"
            for i in where[:KEYS_SHOWN]
        )
        more = f" and {len(where) - KEYS_SHOWN} more" if len(where) > KEYS_SHOWN else ""
        raise InputError(
            file,
            f"its items differ from {ref_file} in column {column!r}: {len(where)} item(s), "
            f"e.g. {shown}{more} ({_RERUN})",
            row=int(where[0]) + 1,
            field=column,
        )


def _check_pairs(items: pd.DataFrame, expected_unsafe: np.ndarray, file: str) -> None:
    """Refuse a pair with two safe or two unsafe items: the XSTest pair analysis (`xstest.contrast_pairs`)
    would silently leave it out. A pair short of a member is refused where items are built
    (`evaluation.items`); in the clean subset it is normal and the analysis skips it."""
    pairs = items["pair_id"].to_numpy(dtype=object)
    seen: dict[tuple[str, bool], int] = {}
    for i, pair in enumerate(pairs):
        if pair is None or pd.isna(pair):
            continue
        key = (str(pair), bool(expected_unsafe[i]))
        if key in seen:
            first = seen[key]
            kind = "unsafe" if key[1] else "safe"
            raise InputError(
                file,
                f"pair {key[0]!r} has two {kind} items, {items['dataset'].iloc[i]}/{items['id'].iloc[first]} "
                f"(row {items.index[first] + 1}) and {items['dataset'].iloc[i]}/{items['id'].iloc[i]} "
                f"(row {items.index[i] + 1}); a pair is one safe and one unsafe item",
                row=int(items.index[i]) + 1,
                field="pair_id",
            )
        seen[key] = i


def _float_column(values: pd.Series) -> np.ndarray:
    """[N] float32 with NaN for nulls (a guard without log-probabilities has no score)."""
    return pd.to_numeric(values, errors="raise").astype("float64").fillna(np.nan).to_numpy(np.float32)


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


def _metric_sizes(matrix: DatasetMatrix, rows: np.ndarray, mapping: str) -> dict[str, np.ndarray]:
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
    sizes = {mapping: _metric_sizes(matrix, rows, mapping) for mapping in MAPPINGS}
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


def role_mean_draws(store: DrawStore) -> dict[tuple[str, str, str, str], MetricDraws]:
    """The headline means per subset x mapping: mean cap over harmful sets, mean over_ref over benign ones.

    Keys are (`mean:harmful` | `mean:benign`, subset, mapping, metric). The point is the unweighted mean of
    the present benchmarks' points; replicate r is the mean of their replicates r, and since every benchmark
    is resampled from its own generator, the spread of those means carries each benchmark's sampling noise
    independently. `n` is the prompts summed over the benchmarks; a subset and mapping where no benchmark of
    the role has the rate gets no entry.
    """
    means: dict[tuple[str, str, str, str], MetricDraws] = {}
    for role, (name, metric) in ROLE_MEANS.items():
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


def model_frame(evaluations: Mapping[str, Mapping[str, object]]) -> pd.DataFrame:
    """The plan's `evaluations` as a table: model, kind, scale, branch, seed, recipe (sorted by model)."""
    rows = [
        {"model": name, **{column: entry[column] for column in MODEL_INFO_COLUMNS[1:]}}
        for name, entry in evaluations.items()
    ]
    frame = pd.DataFrame(rows, columns=list(MODEL_INFO_COLUMNS))
    frame["seed"] = frame["seed"].astype("int64")
    return frame.sort_values("model", kind="stable").reset_index(drop=True)


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

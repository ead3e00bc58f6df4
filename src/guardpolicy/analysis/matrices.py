"""Every model's predictions aligned item by item into one score matrix per dataset (`DatasetMatrix`).

One matrix per dataset (benchmark or `split:<name>`) holds the items (rows) x every model (columns), so each
score of `scores` is computed for all models at once. `build_matrices` refuses predictions that do not cover
the same items with the same gold and `clean` flags, naming the file and what differs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from guardpolicy.analysis.agreement import BOUNDARY_CLASS
from guardpolicy.errors import KEYS_SHOWN, InputError, few_keys
from guardpolicy.taxonomy import Taxonomy

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
GOLD_PREFIX = "gold_"
# Baseline guards' predictions only (optional): why a decision may be missing.
PARSE_STATUS = "parse_status"
# The columns every predictions file must carry (besides one gold_<policy> per policy).
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
    # Split rows only: mapping -> [n] bool, every policy's gold label is unsafe under that mapping (the
    # agreed-unsafe reference of the ranked view's benign sets). None when not computed.
    unsafe_everywhere: dict[str, np.ndarray] | None = None

    def subset_rows(self, subset: str) -> np.ndarray:
        """Row mask [n] of a subset: every row, or the decontaminated ones."""
        return np.ones(len(self.ids), dtype=bool) if subset == "full" else self.clean.copy()

    def valid_mask(self, mapping: str) -> np.ndarray:
        """[n, M] bool: where each model has a decision under `mapping`."""
        if self.valid is None:
            return np.ones(self.decisions[mapping].shape, dtype=bool)
        return self.valid[mapping]


def unsafe_labels(taxonomy: Taxonomy) -> dict[str, tuple[str, ...]]:
    """Mapping -> the coarse classes that count as unsafe under it (BOUNDARY_SAFE is unsafe under
    `boundary_unsafe` only): how `build_matrices` marks a split's agreed-safe and agreed-unsafe prompts."""
    return {
        DEFAULT: tuple(taxonomy.unsafe_classes),
        BOUNDARY_UNSAFE: tuple(dict.fromkeys((*taxonomy.unsafe_classes, BOUNDARY_CLASS))),
    }


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
        safe_everywhere = unsafe_everywhere = None
        if role == SPLIT:
            expected_unsafe = np.zeros(int(rows.sum()), dtype=bool)
            if unsafe_labels is not None:
                safe_everywhere = {
                    mapping: _every_policy(reference.loc[rows], policies, unsafe, unsafe=False)
                    for mapping, unsafe in unsafe_labels.items()
                }  # each [n] bool
                unsafe_everywhere = {
                    mapping: _every_policy(reference.loc[rows], policies, unsafe, unsafe=True)
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
                unsafe_everywhere=unsafe_everywhere,
            )
        )
    log.info("scores: %d models x %d datasets (%d items each)", len(models), len(matrices), len(reference))
    return models, matrices


def _every_policy(
    frame: pd.DataFrame, policies: Sequence[str], unsafe_classes: Sequence[str], *, unsafe: bool
) -> np.ndarray:
    """[n] bool: every policy labelled the item, and every label is unsafe (`unsafe`) or every one safe."""
    agree = []
    for policy in policies:
        labels = frame[f"{GOLD_PREFIX}{policy}"]
        called_unsafe = labels.isin(list(unsafe_classes)).to_numpy()
        agree.append(labels.notna().to_numpy() & (called_unsafe if unsafe else ~called_unsafe))
    return np.logical_and.reduce(agree)


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

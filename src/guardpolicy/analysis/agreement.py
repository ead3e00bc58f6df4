"""How far two policies' labels of the same pool agree, and where their disagreement concentrates.

Pure functions: two label frames (`id`, `coarse`, ...) and the pool (`id`, `source`) in, one JSON-ready dict
out. Binary agreement is reported under the default mapping (unsafe = the taxonomy's unsafe classes) and under
the alternative mapping that also counts BOUNDARY_SAFE as unsafe, because the study's two policies differ most
on exactly that boundary.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from guardpolicy.errors import InputError
from guardpolicy.taxonomy import Taxonomy

# The class the alternative binary mapping moves to the unsafe side.
BOUNDARY_CLASS = "BOUNDARY_SAFE"
COMPOUND_CLASS = "COMPOUND"
# The study found the two policies' disagreements concentrated in these two classes; the report tests that.
CONCENTRATION_CLASSES = (BOUNDARY_CLASS, COMPOUND_CLASS)
# Rounding of every rate in the report, so the JSON metric is stable and readable.
DIGITS = 6
EXAMPLE_IDS = 5
TOP_CELLS = 5


def confusion_matrix(first: pd.Series, second: pd.Series, classes: tuple[str, ...]) -> np.ndarray:
    """Counts [k, k]: row = the first policy's class, column = the second's, in `classes` order."""
    index = {name: i for i, name in enumerate(classes)}
    rows = first.map(index).to_numpy(dtype=np.int64)
    cols = second.map(index).to_numpy(dtype=np.int64)
    counts = np.zeros((len(classes), len(classes)), dtype=np.int64)
    np.add.at(counts, (rows, cols), 1)
    return counts


def cohen_kappa(counts: np.ndarray) -> float | None:
    """Cohen's kappa of a square confusion table [k, k] of two raters.

    None when chance agreement is 1 (both raters put every item in one and the same class): kappa is then
    0/0, undefined.
    """
    counts = np.asarray(counts, dtype=np.float64)
    n = counts.sum()
    if n == 0:
        return None
    observed = np.trace(counts) / n
    expected = float(counts.sum(axis=1) @ counts.sum(axis=0)) / (n * n)
    if np.isclose(expected, 1.0):
        return None
    return float((observed - expected) / (1.0 - expected))


def row_normalise(counts: np.ndarray) -> np.ndarray:
    """Each row divided by its total [k, k]; a row with no items stays all zero."""
    totals = counts.sum(axis=1, keepdims=True)
    return np.divide(counts, totals, out=np.zeros(counts.shape, dtype=np.float64), where=totals > 0)


def _rate(numerator: float, denominator: float) -> float:
    return round(float(numerator) / float(denominator), DIGITS) if denominator else 0.0


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, DIGITS)


def _few(ids: list[str] | set[str]) -> list[str]:
    return sorted(ids)[:EXAMPLE_IDS]


def _checked_frame(
    frame: pd.DataFrame, file: str, columns: tuple[str, ...], coarse_classes: tuple[str, ...] | None
) -> pd.DataFrame:
    """The needed columns of one input, with ids present and unique and (labels) coarse values known."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(file, f"missing column(s) {missing}", row="header", field=missing[0])
    frame = frame.loc[:, list(columns)].reset_index(drop=True)
    null_ids = frame.index[frame["id"].isna()]
    if len(null_ids):
        raise InputError(file, "id is null", row=int(null_ids[0]) + 1, field="id")
    duplicated = frame["id"].duplicated(keep="first")
    if duplicated.any():
        first_row = int(np.flatnonzero(duplicated.to_numpy())[0])
        examples = _few(set(frame.loc[duplicated, "id"]))
        raise InputError(file, f"duplicate id(s), e.g. {examples}", row=first_row + 1, field="id")
    if coarse_classes is not None:
        unknown = ~frame["coarse"].isin(coarse_classes)
        if unknown.any():
            row = int(np.flatnonzero(unknown.to_numpy())[0])
            value = frame.loc[row, "coarse"]
            raise InputError(
                file,
                f"{value!r} is not a coarse class; expected one of {list(coarse_classes)}",
                row=row + 1,
                field="coarse",
            )
    return frame


def _check_same_ids(labels: pd.DataFrame, label_file: str, pool_ids: set[str], pool_file: str) -> None:
    label_ids = set(labels["id"])
    if label_ids == pool_ids:
        return
    absent = pool_ids - label_ids
    extra = label_ids - pool_ids
    parts = []
    if absent:
        parts.append(f"{len(absent)} pool id(s) have no label here, e.g. {_few(absent)}")
    if extra:
        parts.append(f"{len(extra)} id(s) are not in the pool, e.g. {_few(extra)}")
    raise InputError(label_file, f"ids differ from the pool {pool_file}: " + "; ".join(parts), field="id")


def _binary_summary(
    first: pd.Series, second: pd.Series, unsafe: tuple[str, ...]
) -> tuple[float, float | None]:
    first_unsafe = first.isin(unsafe).to_numpy()
    second_unsafe = second.isin(unsafe).to_numpy()
    counts = np.array(
        [
            [np.sum(~first_unsafe & ~second_unsafe), np.sum(~first_unsafe & second_unsafe)],
            [np.sum(first_unsafe & ~second_unsafe), np.sum(first_unsafe & second_unsafe)],
        ]
    )
    return _rate(np.trace(counts), counts.sum()), _round(cohen_kappa(counts))


def _per_class(joined: pd.DataFrame, classes: tuple[str, ...], total_disagreements: int) -> dict[str, Any]:
    disagree = joined["first"] != joined["second"]
    per_class = {}
    for name in classes:
        involved = (joined["first"] == name) | (joined["second"] == name)
        count = int((involved & disagree).sum())
        per_class[name] = {
            "n": int(involved.sum()),
            "disagreements": count,
            "share_of_disagreements": _rate(count, total_disagreements),
        }
    return per_class


def _per_source(joined: pd.DataFrame, total_disagreements: int) -> dict[str, Any]:
    per_source = {}
    for source, group in joined.groupby("source", sort=True):
        disagreements = int((group["first"] != group["second"]).sum())
        per_source[str(source)] = {
            "n": len(group),
            "agreement": _rate(len(group) - disagreements, len(group)),
            "disagreements": disagreements,
            "share_of_disagreements": _rate(disagreements, total_disagreements),
        }
    return per_source


def _top_cells(
    counts: np.ndarray, classes: tuple[str, ...], total_disagreements: int, limit: int
) -> list[dict[str, Any]]:
    cells = [
        (int(counts[i, j]), i, j)
        for i in range(len(classes))
        for j in range(len(classes))
        if i != j and counts[i, j] > 0
    ]
    # Largest first; ties in taxonomy order so the list is deterministic.
    cells.sort(key=lambda cell: (-cell[0], cell[1], cell[2]))
    return [
        {
            "first": classes[i],
            "second": classes[j],
            "count": count,
            "share_of_disagreements": _rate(count, total_disagreements),
        }
        for count, i, j in cells[:limit]
    ]


def verdict(report: dict[str, Any]) -> str:
    """One sentence: the coarse agreement and the classes that hold most of the disagreement, with numbers."""
    head = f"{report['coarse_agreement']:.1%} coarse agreement over {report['n']:,} prompts"
    total = report["disagreements"]
    if total == 0:
        return head + "; the two policies never disagree."
    ranked = sorted(
        report["per_class"].items(),
        key=lambda item: (-item[1]["disagreements"], report["classes"].index(item[0])),
    )
    (top_name, top), (second_name, second) = ranked[0], ranked[1]
    sentence = (
        f"{head}; {top['share_of_disagreements']:.0%} of the {total:,} disagreements involve {top_name}"
    )
    if second["disagreements"]:
        sentence += f" and {second['share_of_disagreements']:.0%} {second_name}"
    concentration = report.get("disagreements_in_boundary_or_compound")
    if concentration is not None:
        sentence += f"; {concentration:.0%} involve BOUNDARY_SAFE or COMPOUND"
    cell = report["top_disagreements"][0]
    first_name, second_policy = report["pair"]
    sentence += (
        f", the largest cell being {first_name} {cell['first']} -> {second_policy} {cell['second']}"
        f" ({cell['count']:,}, {cell['share_of_disagreements']:.0%})."
    )
    return sentence


def agreement_report(
    first: pd.DataFrame,
    second: pd.DataFrame,
    pool: pd.DataFrame,
    taxonomy: Taxonomy,
    names: tuple[str, str],
    files: tuple[str, str, str] | None = None,
    top_cells: int = TOP_CELLS,
) -> dict[str, Any]:
    """Agreement between two policies' labels of the pool.

    `first` / `second`: label frames of policies `names[0]` / `names[1]`; `pool`: the pool (id, source).
    `files` names the three inputs in error messages (first labels, second labels, pool). Every label file
    must hold exactly the pool's ids, else InputError.
    """
    first_file, second_file, pool_file = files or (names[0], names[1], "pool")
    classes = taxonomy.coarse_classes
    pool = _checked_frame(pool, pool_file, ("id", "source"), None)
    if pool.empty:
        raise InputError(pool_file, "the pool has no rows; agreement is undefined")
    first = _checked_frame(first, first_file, ("id", "coarse"), classes)
    second = _checked_frame(second, second_file, ("id", "coarse"), classes)
    pool_ids = set(pool["id"])
    _check_same_ids(first, first_file, pool_ids, pool_file)
    _check_same_ids(second, second_file, pool_ids, pool_file)

    joined = (
        pool.merge(first.rename(columns={"coarse": "first"}), on="id", validate="one_to_one")
        .merge(second.rename(columns={"coarse": "second"}), on="id", validate="one_to_one")
        .sort_values("id", kind="stable")
        .reset_index(drop=True)
    )
    n = len(joined)
    counts = confusion_matrix(joined["first"], joined["second"], classes)  # [4, 4]
    total_disagreements = int(n - np.trace(counts))
    binary, kappa_binary = _binary_summary(joined["first"], joined["second"], taxonomy.unsafe_classes)
    boundary_unsafe = tuple(dict.fromkeys((*taxonomy.unsafe_classes, BOUNDARY_CLASS)))
    binary_boundary, kappa_binary_boundary = _binary_summary(
        joined["first"], joined["second"], boundary_unsafe
    )
    normalised = row_normalise(counts)

    report: dict[str, Any] = {
        "pair": list(names),
        "n": n,
        "classes": list(classes),
        "unsafe_classes": list(taxonomy.unsafe_classes),
        "coarse_agreement": _rate(n - total_disagreements, n),
        "binary_agreement": binary,
        "binary_agreement_boundary_unsafe": binary_boundary,
        "cohen_kappa_coarse": _round(cohen_kappa(counts)),
        "cohen_kappa_binary": kappa_binary,
        "cohen_kappa_binary_boundary_unsafe": kappa_binary_boundary,
        "disagreements": total_disagreements,
        "disagreements_in_boundary_or_compound": _concentration(joined, total_disagreements),
        "class_counts": {
            names[0]: {c: int(v) for c, v in zip(classes, counts.sum(axis=1), strict=True)},
            names[1]: {c: int(v) for c, v in zip(classes, counts.sum(axis=0), strict=True)},
        },
        "confusion": {
            row: {col: int(counts[i, j]) for j, col in enumerate(classes)} for i, row in enumerate(classes)
        },
        "confusion_row_normalised": {
            row: {col: round(float(normalised[i, j]), DIGITS) for j, col in enumerate(classes)}
            for i, row in enumerate(classes)
        },
        "per_class": _per_class(joined, classes, total_disagreements),
        "per_source": _per_source(joined, total_disagreements),
        "top_disagreements": _top_cells(counts, classes, total_disagreements, top_cells),
    }
    report["verdict"] = verdict(report)
    return report


def _concentration(joined: pd.DataFrame, total: int) -> float | None:
    """Share of disagreements in which either policy chose BOUNDARY_SAFE or COMPOUND (None without any)."""
    disagree = joined["first"] != joined["second"]
    involved = disagree & (
        joined["first"].isin(CONCENTRATION_CLASSES) | joined["second"].isin(CONCENTRATION_CLASSES)
    )
    return _rate(int(involved.sum()), total) if total else None


def confusion_arrays(report: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The report's confusion back as arrays (counts [k, k] int, row-normalised [k, k] float), class order."""
    classes = report["classes"]
    counts = np.array([[report["confusion"][r][c] for c in classes] for r in classes], dtype=np.int64)
    normalised = np.array(
        [[report["confusion_row_normalised"][r][c] for c in classes] for r in classes], dtype=np.float64
    )
    return counts, normalised

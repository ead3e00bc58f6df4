"""Three views of every score: the models' own decisions, one threshold matched on a common reference, and
threshold-free ranks (docs/study.md, "Three views of every score").

* **own** — each model's decisions: `scores.compute_draws`' store as it is.
* **matched** — each model at the threshold on its unsafe score where it flags `matched_over_ref` of the
  *reference* (the calibration split's prompts every policy labels safe), every benchmark's rates read there.
* **ranked** — AUROC: a harmful set's unsafe prompts against the reference; the *agreed-unsafe reference*
  (the calibration split's prompts every policy labels unsafe) against a benign set's prompts; a mixed set's
  own classes.

Each view is a `DrawStore` shaped like the own view's (`DrawStore.view` names it), so spans, noise floors,
rank tests, contrasts and targets run on it unchanged. Replicate r of a benchmark in the matched and ranked
views combines the benchmark's resample r — the very multinomial counts the own view drew, named by benchmark
and subset — with resample r of the calibration split (named by the split, as its accuracy draws are),
shared by every benchmark and model: the threshold's and the reference's own uncertainty enters every
interval, and spans and differences between models stay joint.

Where a model has no score (an open guard served without log-probabilities) it has no matched or ranked
value (NaN), as it has no AUPRC; an item a model has no decision for (an excluded guard answer) is left out of
that model's sums, as in the own view. Pure: matrices and stores in, stores and tables out.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import get_args

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from guardpolicy.analysis.matrices import (
    BENIGN,
    HARMFUL,
    MAPPINGS,
    MIXED,
    SPLIT,
    SPLIT_PREFIX,
    DatasetMatrix,
)
from guardpolicy.analysis.scores import BOOTSTRAP, ROLE_MEANS, DrawStore, MetricDraws, role_mean_draws
from guardpolicy.analysis.stats import bootstrap_count_blocks, named_rng, percentile_interval
from guardpolicy.config.analysis import View
from guardpolicy.contracts.analysis import ANALYSIS_BASE_RATE, ANALYSIS_VIEW_SCORES
from guardpolicy.metrics import Confusion, applies, cap_rate, f1_score, over_ref_rate, ratio

log = logging.getLogger(__name__)

VIEWS: tuple[str, ...] = get_args(View)
OWN, MATCHED, RANKED = VIEWS
AUROC = "auroc"
# The metrics the matched view reads at the threshold (a mixed set's primary metric may be any of them, or
# the threshold-free auprc, which the matched view takes over from the own view unchanged).
MATCHED_RATES = ("cap", "over_ref", "f1")
VIEW_SCORE_COLUMNS = tuple(ANALYSIS_VIEW_SCORES.names())
BASE_RATE_COLUMNS = tuple(ANALYSIS_BASE_RATE.names())
# The ranked view's role means: mean AUROC over the harmful sets and over the benign ones.
RANKED_ROLE_METRICS = {HARMFUL: AUROC, BENIGN: AUROC}


# ------------------------------------------------------------------------------------ weighted primitives


def bootstrap_counts(n: int, samples: int, rng: np.random.Generator) -> np.ndarray:
    """All `samples` rows of `stats.bootstrap_count_blocks` at once [samples, n] (the same counts, row for
    row, as the blocks a store's draws were computed on when `rng` is named alike)."""
    return np.concatenate(list(bootstrap_count_blocks(n, samples, rng)), axis=0)


def weighted_match_threshold(
    weights: np.ndarray, scores: np.ndarray, target: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per weight row, the threshold t (flag when score >= t) whose flag rate is closest to `target`.

    weights [b, n] (multinomial counts, or one row of ones), scores [n] -> (thresholds [b], rates [b]).
    Row r gives exactly what `match_threshold` gives on the multiset its weights describe (item i repeated
    w[r, i] times): the candidates are the scores present in the row (weight > 0) and one just above the
    largest of them (flag none); only reachable rates count, tied scores move together, and of two equally
    close candidates the higher threshold (fewer flags) wins. NaN scores are left out; a row with no weight
    gives (NaN, NaN).
    """
    weights = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    scores = np.asarray(scores, dtype=np.float64)
    keep = np.isfinite(scores)
    weights, scores = weights[:, keep], scores[keep]
    rows = weights.shape[0]
    thresholds, rates = np.full(rows, np.nan), np.full(rows, np.nan)
    if scores.size == 0 or not np.isfinite(target):
        return thresholds, rates
    distinct, group = np.unique(scores, return_inverse=True)  # ascending
    distinct, group = distinct[::-1], len(distinct) - 1 - group  # descending: candidate k flags group <= k
    one_hot = np.zeros((len(scores), len(distinct)))
    one_hot[np.arange(len(scores)), group] = 1.0
    mass = weights @ one_hot  # [b, d]: each distinct score's weight
    total = mass.sum(axis=1)  # [b]
    usable = total > 0
    flagged = np.cumsum(mass, axis=1)  # [b, d]: weight of the scores >= distinct[k]
    candidate_rates = np.divide(flagged, total[:, None], out=np.zeros_like(flagged), where=usable[:, None])
    # An absent score is no candidate of its row: its rate equals a present neighbour's anyway, but its
    # value would move the threshold off the row's own scores.
    gap = np.where(mass > 0, np.abs(candidate_rates - target), np.inf)  # [b, d]
    best = np.argmin(gap, axis=1)  # first = highest threshold among equally close ones
    best_gap = gap[np.arange(rows), best]
    none_wins = abs(target) <= best_gap  # flagging none is the first candidate, so it wins ties
    top_present = np.argmax(mass > 0, axis=1)  # [b]: the row's largest present score
    above = np.nextafter(distinct[top_present], np.inf)
    thresholds = np.where(none_wins, above, distinct[best])
    rates = np.where(none_wins, 0.0, candidate_rates[np.arange(rows), best])
    thresholds[~usable], rates[~usable] = np.nan, np.nan
    return thresholds, rates


def flagged_weight(weights: np.ndarray, scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Σ_i w[r, i] · [scores_i >= thresholds_r] per row: weights [b, n], scores [n] (finite),
    thresholds [b] -> [b] (NaN where the threshold is NaN)."""
    order = np.argsort(scores, kind="stable")
    sorted_scores = scores[order]
    weights = np.asarray(weights, dtype=np.float64)[:, order]
    # suffix[r, k] = weight of the items from sorted position k on (a last column of 0: none flagged).
    suffix = np.concatenate(
        [np.cumsum(weights[:, ::-1], axis=1)[:, ::-1], np.zeros((weights.shape[0], 1))], axis=1
    )
    finite = np.isfinite(thresholds)
    first = np.searchsorted(sorted_scores, np.where(finite, thresholds, np.inf), side="left")  # [b]
    out = suffix[np.arange(weights.shape[0]), first]
    return np.where(finite, out, np.nan)


def weighted_auroc(
    positive_scores: np.ndarray,
    positive_weights: np.ndarray,
    negative_scores: np.ndarray,
    negative_weights: np.ndarray,
) -> np.ndarray:
    """AUROC per weight row: Σ w_i v_j ([s_i > q_j] + ½ [s_i = q_j]) over positive i, negative j, divided by
    Σ w_i · Σ v_j — `metrics.auroc` with the two classes weighted row by row (the bootstrap resamples of a
    benchmark and of the reference). Scores finite; weights [b, p] and [b, q] -> [b], NaN for a row where
    either class weighs 0."""
    order = np.argsort(negative_scores, kind="stable")
    sorted_negatives = negative_scores[order]
    v = np.asarray(negative_weights, dtype=np.float64)[:, order]  # [b, q]
    below = np.concatenate([np.zeros((v.shape[0], 1)), np.cumsum(v, axis=1)], axis=1)  # [b, q + 1]
    # Per positive: the negative weight strictly below it and up to it (ties count half).
    lower = np.searchsorted(sorted_negatives, positive_scores, side="left")  # [p]
    upper = np.searchsorted(sorted_negatives, positive_scores, side="right")  # [p]
    credit = 0.5 * (below[:, lower] + below[:, upper])  # [b, p]
    w = np.asarray(positive_weights, dtype=np.float64)  # [b, p]
    return ratio((w * credit).sum(axis=1), w.sum(axis=1) * v.sum(axis=1))


# -------------------------------------------------------------------------------------------- the reference


@dataclass(frozen=True)
class Reference:
    """The calibration split's scores and its bootstrap resamples: the common ground of both views."""

    matrix: DatasetMatrix  # split:<calibration_split>, every model's scores on it
    counts: np.ndarray  # [B + 1, n]: a row of ones (the point estimate), then the B resamples
    target: float  # analysis.matched_over_ref

    @property
    def split(self) -> str:
        return self.matrix.name

    def safe(self, mapping: str) -> np.ndarray:
        """[n] bool: the reference, the prompts every policy labels safe under `mapping`."""
        assert self.matrix.safe_everywhere is not None
        return self.matrix.safe_everywhere[mapping]

    def unsafe(self, mapping: str) -> np.ndarray:
        """[n] bool: the agreed-unsafe reference, the prompts every policy labels unsafe under `mapping`."""
        assert self.matrix.unsafe_everywhere is not None
        return self.matrix.unsafe_everywhere[mapping]

    def side(self, mapping: str, model: int, unsafe: bool) -> tuple[np.ndarray, np.ndarray] | None:
        """One model's scores [k] and weights [B + 1, k] on one side of the reference, over the items it has
        a decision for; None when it lacks a score there (it has no matched or ranked value)."""
        rows = (self.unsafe(mapping) if unsafe else self.safe(mapping)) & self.matrix.valid_mask(mapping)[
            :, model
        ]
        scores = self.matrix.scores[mapping][rows, model].astype(np.float64)
        if not scores.size or not np.isfinite(scores).all():
            return None
        return scores, self.counts[:, rows]


def reference_of(
    matrices: Sequence[DatasetMatrix], calibration_split: str, target: float, samples: int, seed: int
) -> Reference:
    """The calibration split's matrix and its resamples (drawn as `scores.dataset_draws` draws the split's
    own: the generator named by seed, split and `full`), or a ValueError when the split was not scored."""
    name = f"{SPLIT_PREFIX}{calibration_split}"
    matrix = next((m for m in matrices if m.name == name), None)
    if matrix is None or matrix.safe_everywhere is None or matrix.unsafe_everywhere is None:
        raise ValueError(f"calibration split {name!r} is not among the scored datasets")
    n = len(matrix.ids)
    counts = bootstrap_counts(n, samples, named_rng(seed, matrix.name, "full"))
    return Reference(matrix, np.concatenate([np.ones((1, n), dtype=np.float32), counts]), target)


@dataclass(frozen=True)
class Thresholds:
    """Every model's matched threshold under one mapping: the point (row 0) and per resample (rows 1..B)."""

    values: np.ndarray  # [B + 1, M]
    rates: np.ndarray  # [B + 1, M]: the reference's share flagged at it (the reachable rate nearest target)


def matched_thresholds(reference: Reference, mapping: str, n_models: int) -> Thresholds:
    """Each model's threshold flagging `reference.target` of the reference under `mapping`, on the point
    estimate and every resample of the calibration split (NaN for a model without reference scores)."""
    rows = reference.counts.shape[0]
    values, rates = np.full((rows, n_models), np.nan), np.full((rows, n_models), np.nan)
    for m in range(n_models):
        side = reference.side(mapping, m, unsafe=False)
        if side is None:
            continue
        scores, weights = side
        values[:, m], rates[:, m] = weighted_match_threshold(weights, scores, reference.target)
    return Thresholds(values, rates)


# ------------------------------------------------------------------------------------------ view stores


def _model_side(
    matrix: DatasetMatrix, rows: np.ndarray, mapping: str, model: int, unsafe: bool | None
) -> tuple[np.ndarray, np.ndarray] | None:
    """One model's decided items among `rows` (of one gold class; None: both) as a mask over `rows`, and
    their scores; None when one of them has no score."""
    keep = matrix.valid_mask(mapping)[rows, model]
    if unsafe is not None:
        keep = keep & (matrix.expected_unsafe[rows] == unsafe)
    scores = matrix.scores[mapping][rows][keep, model].astype(np.float64)
    if not np.isfinite(scores).all():
        return None
    return keep, scores


def _matched_rates(
    matrix: DatasetMatrix, rows: np.ndarray, weights: np.ndarray, mapping: str, thresholds: Thresholds
) -> dict[str, np.ndarray]:
    """metric -> [B + 1, M]: every model's rates on one benchmark subset at each row's matched threshold —
    the weighted confusion counts there, turned into rates by the metrics' own functions."""
    positive = matrix.expected_unsafe[rows]
    shape = (weights.shape[0], thresholds.values.shape[1])
    sums = {key: np.full(shape, np.nan) for key in ("unsafe", "safe", "true_pos", "false_pos")}
    for m in range(shape[1]):
        side = _model_side(matrix, rows, mapping, m, None)
        if side is None or not np.isfinite(thresholds.values[:, m]).any():
            continue
        keep, scores = side
        w = weights[:, keep].astype(np.float64)
        unsafe_w, safe_w = w * positive[keep], w * ~positive[keep]
        sums["unsafe"][:, m], sums["safe"][:, m] = unsafe_w.sum(axis=1), safe_w.sum(axis=1)
        sums["true_pos"][:, m] = flagged_weight(unsafe_w, scores, thresholds.values[:, m])
        sums["false_pos"][:, m] = flagged_weight(safe_w, scores, thresholds.values[:, m])
    counts = Confusion(**sums)
    has_unsafe, has_safe = bool(positive.any()), not bool(positive.all())
    rates = {"cap": cap_rate, "over_ref": over_ref_rate, "f1": f1_score}
    return {metric: rate(counts) for metric, rate in rates.items() if applies(metric, has_unsafe, has_safe)}


def _ranked_auroc(
    matrix: DatasetMatrix, rows: np.ndarray, weights: np.ndarray, mapping: str, reference: Reference
) -> np.ndarray:
    """[B + 1, M]: every model's ranked-view AUROC on one benchmark subset — a harmful set's unsafe prompts
    against the reference, the agreed-unsafe reference against a benign set's prompts, a mixed set's own
    unsafe prompts against its safe ones."""
    out = np.full((weights.shape[0], matrix.scores[mapping].shape[1]), np.nan)
    for m in range(out.shape[1]):
        if matrix.role == HARMFUL:
            mine, theirs = _model_side(matrix, rows, mapping, m, True), reference.side(mapping, m, False)
            sides = None if mine is None or theirs is None else ((mine[1], weights[:, mine[0]]), theirs)
        elif matrix.role == BENIGN:
            mine, theirs = _model_side(matrix, rows, mapping, m, False), reference.side(mapping, m, True)
            sides = None if mine is None or theirs is None else (theirs, (mine[1], weights[:, mine[0]]))
        else:
            pos, neg = (
                _model_side(matrix, rows, mapping, m, True),
                _model_side(matrix, rows, mapping, m, False),
            )
            sides = (
                None
                if pos is None or neg is None
                else ((pos[1], weights[:, pos[0]]), (neg[1], weights[:, neg[0]]))
            )
        if sides is not None:
            (p_scores, p_weights), (n_scores, n_weights) = sides
            out[:, m] = weighted_auroc(p_scores, p_weights, n_scores, n_weights)
    return out


def _view_sizes(matrix: DatasetMatrix, rows: np.ndarray, mapping: str) -> dict[str, np.ndarray]:
    """metric -> [M] int: the benchmark prompts each model's view score is over."""
    positive = matrix.expected_unsafe[rows][:, None]
    valid = matrix.valid_mask(mapping)[rows]
    unsafe = (valid & positive).sum(axis=0).astype(np.int64)
    safe = (valid & ~positive).sum(axis=0).astype(np.int64)
    return {
        "cap": unsafe,
        "over_ref": safe,
        "f1": unsafe + safe,
        AUROC: {HARMFUL: unsafe, BENIGN: safe}.get(matrix.role, unsafe + safe),
    }


def _subset_views(
    matrix: DatasetMatrix,
    subset: str,
    own: DrawStore,
    reference: Reference,
    thresholds: Mapping[str, Thresholds],
    seed: int,
) -> dict[tuple[str, str, str], MetricDraws]:
    """(view, mapping, metric) -> the matched and ranked scores of one benchmark subset; empty without
    items. The resample counts are the own view's for the same benchmark and subset."""
    rows = matrix.subset_rows(subset)
    n = int(rows.sum())
    if n == 0:
        return {}
    counts = bootstrap_counts(n, own.samples, named_rng(seed, matrix.name, subset))
    weights = np.concatenate([np.ones((1, n), dtype=np.float32), counts])  # [B + 1, n]: point, resamples
    out: dict[tuple[str, str, str], MetricDraws] = {}
    for mapping in MAPPINGS:
        sizes = _view_sizes(matrix, rows, mapping)
        for metric, values in _matched_rates(matrix, rows, weights, mapping, thresholds[mapping]).items():
            out[(MATCHED, mapping, metric)] = _draws(values, sizes[metric])
        auprc = own.get(matrix.name, subset, mapping, "auprc")
        if matrix.role == MIXED and auprc is not None:
            out[(MATCHED, mapping, "auprc")] = auprc  # threshold-free already: the own view's
        values = _ranked_auroc(matrix, rows, weights, mapping, reference)
        out[(RANKED, mapping, AUROC)] = _draws(values, sizes[AUROC])
    return out


def _draws(values: np.ndarray, n: np.ndarray) -> MetricDraws:
    """Rows [B + 1, M] (the point, then the resamples) as MetricDraws; intervals are always bootstrap."""
    return MetricDraws(point=values[0], draws=values[1:], n=n, single_class=False)


def view_stores(
    own: DrawStore,
    matrices: Sequence[DatasetMatrix],
    reference: Reference,
    thresholds: Mapping[str, Thresholds],
    seed: int,
) -> dict[str, DrawStore]:
    """{own, matched, ranked} -> the store of every benchmark subset x mapping's scores in that view.

    The matched store holds cap / over_ref / f1 where they apply (and a mixed set's auprc, the own view's:
    it has no threshold), the ranked store one `auroc` per benchmark subset; neither scores the splits.
    `thresholds`: mapping -> `matched_thresholds`; `seed`: the bootstrap seed the own store was drawn with.
    An all-clean benchmark's clean subset reuses its full subset's scores, as the own view does.
    """
    stores: dict[str, dict[tuple[str, str, str, str], MetricDraws]] = {MATCHED: {}, RANKED: {}}
    benchmarks = [m for m in matrices if m.role != SPLIT]
    for matrix in tqdm(benchmarks, desc="analyse: views", unit="dataset", mininterval=1.0):
        full = _subset_views(matrix, "full", own, reference, thresholds, seed)
        clean = (
            full if matrix.clean.all() else _subset_views(matrix, "clean", own, reference, thresholds, seed)
        )
        for subset, results in (("full", full), ("clean", clean)):
            for (view, mapping, metric), result in results.items():
                stores[view][(matrix.name, subset, mapping, metric)] = result
    log.info(
        "views: %d benchmarks matched at %.3g of %s's %d agreed-safe prompts (default mapping) and ranked "
        "against them, B = %d",
        len(benchmarks),
        reference.target,
        reference.split,
        int(reference.safe(MAPPINGS[0]).sum()),
        own.samples,
    )
    roles = {name: role for name, role in own.roles.items() if role != SPLIT}
    return {
        OWN: own,
        MATCHED: DrawStore(own.models, own.samples, roles, stores[MATCHED], view=MATCHED),
        RANKED: DrawStore(own.models, own.samples, roles, stores[RANKED], view=RANKED),
    }


# ---------------------------------------------------------------------------------------------- tables


def view_metric(view: str, own_primary: str) -> str:
    """A benchmark's primary metric in a view: the own view's (cap, over_ref, a mixed set's choice) in the
    own and matched views, AUROC in the ranked one."""
    return AUROC if view == RANKED else own_primary


def view_role_means(store: DrawStore) -> dict[tuple[str, str, str, str], MetricDraws]:
    """A view's headline means: mean cap / over_ref over the harmful / benign sets (own, matched), mean
    AUROC over each (ranked)."""
    return role_mean_draws(store, RANKED_ROLE_METRICS if store.view == RANKED else None)


def reference_size(reference: Reference, view: str, role: str, mapping: str) -> int:
    """The calibration-split prompts a view's score of a benchmark of `role` reads besides its own: the
    reference (matched threshold; ranked harmful negatives), the agreed-unsafe reference (ranked benign
    positives), none (own; a ranked mixed set's own AUROC)."""
    if view == OWN or (view == RANKED and role == MIXED):
        return 0
    side = reference.unsafe(mapping) if view == RANKED and role == BENIGN else reference.safe(mapping)
    return int(side.sum())


def view_scores_table(
    stores: Mapping[str, DrawStore],
    scores: pd.DataFrame,
    models: pd.DataFrame,
    primary: Mapping[str, str],
    reference: Reference,
    confidence: float,
) -> pd.DataFrame:
    """view_scores.csv: every model's primary metric per benchmark x subset x mapping in each view, and the
    views' headline means (a mean's role: the benchmark role it averages), with intervals.

    `primary`: benchmark -> its own-view primary metric (`sensitivity.primary_metric`). The own rows are
    scores.csv's rows of that metric, copied with their intervals (Wilson where scores.csv has them); the
    matched and ranked rows carry percentile intervals over the joint resamples of the benchmark and the
    calibration split.
    """
    own = stores[OWN]
    info = models.set_index("model").loc[list(own.models)].reset_index()
    wanted = pd.DataFrame(
        [*primary.items(), *((name, metric) for _, (name, metric) in ROLE_MEANS.items())],
        columns=["benchmark", "metric"],
    )
    blocks = [scores.merge(wanted, on=["benchmark", "metric"]).assign(view=OWN, n_reference=0)]
    role_of_mean = {name: role for role, (name, _) in ROLE_MEANS.items()}
    for view in (MATCHED, RANKED):
        store = stores[view]
        for (dataset, subset, mapping, metric), result in sorted(
            {**store.draws, **view_role_means(store)}.items()
        ):
            if dataset in primary and metric != view_metric(view, primary[dataset]):
                continue
            low, high = percentile_interval(result.draws, confidence)
            role = role_of_mean.get(dataset) or store.roles[dataset]
            block = info.assign(
                benchmark=dataset,
                subset=subset,
                mapping=mapping,
                view=view,
                metric=metric,
                value=result.point,
                ci_low=low,
                ci_high=high,
                interval=BOOTSTRAP,
                n=result.n,
                n_reference=reference_size(reference, view, role, mapping),
            )
            blocks.append(block)
    table = pd.concat(blocks, ignore_index=True)[list(VIEW_SCORE_COLUMNS)]
    table = table.astype({"n": "int64", "n_reference": "int64"})
    return sort_views(table, ["model", "benchmark", "subset", "mapping", "view"])


def sort_views(table: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """`table` sorted by `keys`, the `view` column in the order own, matched, ranked (not by name)."""
    order = {view: i for i, view in enumerate(VIEWS)}
    return table.sort_values(
        list(keys), key=lambda c: c.map(order) if c.name == "view" else c, kind="stable"
    ).reset_index(drop=True)


def base_rate_table(
    reference: Reference,
    thresholds: Mapping[str, Thresholds],
    models: pd.DataFrame,
    model_order: Sequence[str],
    confidence: float,
) -> pd.DataFrame:
    """base_rate.csv: per model and mapping, how often it flags the reference and the agreed-unsafe reference
    at its own decisions and at the matched threshold, and the AUROC between the two — what it tells apart,
    beside how often it flags. Intervals: percentile over the calibration split's resamples."""
    info = models.set_index("model")
    matrix = reference.matrix
    rows = []
    for mapping in MAPPINGS:
        threshold = thresholds[mapping]
        for m, model in enumerate(model_order):
            decided = matrix.valid_mask(mapping)[:, m]
            safe, unsafe = reference.safe(mapping) & decided, reference.unsafe(mapping) & decided
            flags = matrix.decisions[mapping][:, m].astype(np.float64)
            own_flag = _weighted_share(reference.counts[:, safe], flags[safe])
            own_unsafe = _weighted_share(reference.counts[:, unsafe], flags[unsafe])
            matched_unsafe = np.full(reference.counts.shape[0], np.nan)
            auroc = np.full(reference.counts.shape[0], np.nan)
            flagged, negatives = reference.side(mapping, m, True), reference.side(mapping, m, False)
            if flagged is not None:
                scores, weights = flagged
                matched_unsafe = ratio(
                    flagged_weight(weights, scores, threshold.values[:, m]), weights.sum(1)
                )
                if negatives is not None:
                    auroc = weighted_auroc(scores, weights, *negatives)
            entry = info.loc[model]
            rows.append(
                {
                    "model": model,
                    "kind": entry["kind"],
                    "scale": entry["scale"],
                    "branch": entry["branch"],
                    "seed": int(entry["seed"]),
                    "mapping": mapping,
                    "n_reference": int(safe.sum()),
                    "n_unsafe_reference": int(unsafe.sum()),
                    **_with_interval("own_flag_rate", own_flag, confidence),
                    **_with_interval("own_unsafe_flag_rate", own_unsafe, confidence),
                    "threshold": threshold.values[0, m],
                    "matched_flag_rate": threshold.rates[0, m],
                    **_with_interval("matched_unsafe_flag_rate", matched_unsafe, confidence),
                    **_with_interval("auroc", auroc, confidence),
                }
            )
    table = pd.DataFrame(rows, columns=list(BASE_RATE_COLUMNS))
    table["seed"] = table["seed"].astype("int64")
    return table.sort_values(["model", "mapping"], kind="stable").reset_index(drop=True)


def _weighted_share(weights: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Σ w·v / Σ w per row: weights [b, k], values [k] (0/1) -> [b], NaN for a row of no weight."""
    return ratio(weights.astype(np.float64) @ values, weights.sum(axis=1).astype(np.float64))


def _with_interval(name: str, rows: np.ndarray, confidence: float) -> dict[str, float]:
    """{name: row 0 (the point), name_ci_low / _ci_high: the percentile interval of rows 1..B}."""
    low, high = percentile_interval(rows[1:, None], confidence)
    return {name: float(rows[0]), f"{name}_ci_low": float(low[0]), f"{name}_ci_high": float(high[0])}

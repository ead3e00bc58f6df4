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
from dataclasses import dataclass, field
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
from guardpolicy.analysis.scores import (
    BOOTSTRAP,
    ROLE_MEANS,
    DrawStore,
    MetricDraws,
    metric_sizes,
    role_mean_draws,
)
from guardpolicy.analysis.stats import bootstrap_count_blocks, named_rng, percentile_interval
from guardpolicy.config.analysis import View
from guardpolicy.contracts.analysis import ANALYSIS_BASE_RATE, ANALYSIS_VIEW_SCORES
from guardpolicy.metrics import Confusion, applies, cap_rate, f1_score, over_ref_rate, ratio

log = logging.getLogger(__name__)

VIEWS: tuple[str, ...] = get_args(View)
OWN, MATCHED, RANKED = VIEWS
AUROC = "auroc"
VIEW_SCORE_COLUMNS = tuple(ANALYSIS_VIEW_SCORES.names())
BASE_RATE_COLUMNS = tuple(ANALYSIS_BASE_RATE.names())
# The ranked view's role means: mean AUROC over the harmful sets and over the benign ones.
RANKED_ROLE_METRICS = {HARMFUL: AUROC, BENIGN: AUROC}


# ------------------------------------------------------------------------------------ weighted primitives
# Weights are item-major, [n, r]: one column per weighting — the point estimate's ones, then the bootstrap
# resamples' multinomial counts — so that picking items copies contiguous rows and a sum over items is one
# matrix product shared by every model. Float32 counts stay exact (every sum of counts, halves included, is
# far below 2**23).


def bootstrap_counts(n: int, samples: int, rng: np.random.Generator) -> np.ndarray:
    """Ones (the point estimate), then the `samples` resamples of `stats.bootstrap_count_blocks`, item-major
    [n, samples + 1]: the same counts, resample for resample, as a store's draws were computed on when `rng`
    is named alike."""
    counts = np.concatenate(list(bootstrap_count_blocks(n, samples, rng)), axis=0)  # [samples, n]
    return np.ascontiguousarray(np.concatenate([np.ones((1, n), dtype=np.float32), counts]).T)


def weighted_match_threshold(
    weights: np.ndarray, scores: np.ndarray, target: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per weighting, the threshold t (flag when score >= t) whose flag rate is closest to `target`.

    weights [n, r] (multinomial counts, or a column of ones), scores [n] -> (thresholds [r], rates [r]).
    Column c gives exactly what `match_threshold` gives on the multiset its weights describe (item i repeated
    w[i, c] times): the candidates are the scores present in it (weight > 0) and one just above the largest
    of them (flag none); only reachable rates count, tied scores move together, and of two equally close
    candidates the higher threshold (fewer flags) wins. NaN scores are left out; a column with no weight
    gives (NaN, NaN).
    """
    weights = np.asarray(weights, dtype=np.float64)
    weights = weights[:, None] if weights.ndim == 1 else weights
    scores = np.asarray(scores, dtype=np.float64)
    keep = np.isfinite(scores)
    weights, scores = weights[keep], scores[keep]
    columns = weights.shape[1]
    thresholds, rates = np.full(columns, np.nan), np.full(columns, np.nan)
    if scores.size == 0 or not np.isfinite(target):
        return thresholds, rates
    order = np.argsort(-scores, kind="stable")  # descending: candidate k flags the groups up to k
    descending = scores[order]
    starts = np.r_[0, np.flatnonzero(np.diff(descending)) + 1]  # where each run of equal scores begins
    distinct = descending[starts]  # [d]
    mass = np.add.reduceat(weights[order], starts, axis=0)  # [d, r]: each distinct score's weight
    total = mass.sum(axis=0)  # [r]
    usable = total > 0
    flagged = np.cumsum(mass, axis=0)  # [d, r]: weight of the scores >= distinct[k]
    candidate_rates = np.divide(flagged, total, out=np.zeros_like(flagged), where=usable)
    # An absent score is no candidate of its column: its rate equals a present neighbour's anyway, but its
    # value would move the threshold off the column's own scores.
    gap = np.where(mass > 0, np.abs(candidate_rates - target), np.inf)  # [d, r]
    best = np.argmin(gap, axis=0)  # first = highest threshold among equally close ones
    best_gap = gap[best, np.arange(columns)]
    none_wins = abs(target) <= best_gap  # flagging none is the first candidate, so it wins ties
    top_present = np.argmax(mass > 0, axis=0)  # [r]: the column's largest present score
    above = np.nextafter(distinct[top_present], np.inf)
    thresholds = np.where(none_wins, above, distinct[best])
    rates = np.where(none_wins, 0.0, candidate_rates[best, np.arange(columns)])
    thresholds[~usable], rates[~usable] = np.nan, np.nan
    return thresholds, rates


def flagged_weight(weights: np.ndarray, scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Σ_i w[i, c] · [scores_i >= thresholds_c] per weighting: weights [n, r], scores [n] (finite),
    thresholds [r] -> [r] (NaN where the threshold is NaN).

    The thresholds of a reference's resamples lie close together, so the items at or above all of them are
    flagged in every column (one matrix-vector product) and only those between the lowest and the highest
    are compared column by column."""
    out = np.full(weights.shape[1], np.nan)
    finite = np.isfinite(thresholds)
    if not finite.any():
        return out
    low, high = thresholds[finite].min(), thresholds[finite].max()
    always = scores >= high
    band = (scores >= low) & ~always
    total = always.astype(np.float32) @ weights  # [r]
    if band.any():
        total = total + ((scores[band][:, None] >= thresholds[None, :]) * weights[band]).sum(axis=0)
    out[finite] = total[finite]
    return out


def weighted_auroc(
    positive_scores: np.ndarray,
    positive_weights: np.ndarray,
    negative_scores: np.ndarray,
    negative_weights: np.ndarray,
) -> np.ndarray:
    """AUROC per weighting: Σ w_i v_j ([s_i > q_j] + ½ [s_i = q_j]) over positive i, negative j, divided by
    Σ w_i · Σ v_j — `metrics.auroc` with the two classes weighted column by column (the bootstrap resamples
    of a benchmark and of the reference). Scores finite; weights [p, r] and [q, r] -> [r], NaN for a column
    where either class weighs 0."""
    order = np.argsort(negative_scores, kind="stable")
    sorted_negatives = negative_scores[order]
    v = negative_weights[order]  # [q, r]
    below = np.concatenate([np.zeros((1, v.shape[1]), dtype=v.dtype), np.cumsum(v, axis=0)])  # [q + 1, r]
    # Per positive: the negative weight strictly below it, and for the few tied with a negative the tied
    # weight, which counts half.
    lower = np.searchsorted(sorted_negatives, positive_scores, side="left")  # [p]
    upper = np.searchsorted(sorted_negatives, positive_scores, side="right")  # [p]
    numerator = np.einsum("pr,pr->r", positive_weights, below[lower], dtype=np.float64)
    tied = upper > lower
    if tied.any():
        half = 0.5 * (below[upper[tied]] - below[lower[tied]])
        numerator = numerator + np.einsum("pr,pr->r", positive_weights[tied], half, dtype=np.float64)
    totals = positive_weights.sum(axis=0, dtype=np.float64) * v.sum(axis=0, dtype=np.float64)
    return ratio(numerator, totals)


# -------------------------------------------------------------------------------------------- the reference


@dataclass(frozen=True)
class Reference:
    """The calibration split's scores and its bootstrap resamples: the common ground of both views."""

    matrix: DatasetMatrix  # split:<calibration_split>, every model's scores on it
    counts: np.ndarray  # [n, B + 1] item-major: ones (the point estimate), then the B resamples
    target: float  # analysis.matched_over_ref
    # (mapping, model, unsafe side) -> `side`'s answer: every benchmark of a view reads the same sides.
    _sides: dict[tuple[str, int, bool], tuple[np.ndarray, np.ndarray] | None] = field(
        default_factory=dict, compare=False, repr=False
    )

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
        """One model's scores [k] and weights [k, B + 1] on one side of the reference, over the items it has
        a decision for; None when it lacks a score there (it has no matched or ranked value)."""
        key = (mapping, model, unsafe)
        if key not in self._sides:
            rows = (self.unsafe(mapping) if unsafe else self.safe(mapping)) & self.matrix.valid_mask(mapping)[
                :, model
            ]
            scores = self.matrix.scores[mapping][rows, model].astype(np.float64)
            usable = scores.size and np.isfinite(scores).all()
            self._sides[key] = (scores, self.counts[rows]) if usable else None
        return self._sides[key]


def reference_of(
    matrices: Sequence[DatasetMatrix], calibration_split: str, target: float, samples: int, seed: int
) -> Reference:
    """The calibration split's matrix and its resamples (drawn as `scores.dataset_draws` draws the split's
    own: the generator named by seed, split and `full`), or a ValueError when the split was not scored."""
    name = f"{SPLIT_PREFIX}{calibration_split}"
    matrix = next((m for m in matrices if m.name == name), None)
    if matrix is None or matrix.safe_everywhere is None or matrix.unsafe_everywhere is None:
        raise ValueError(f"calibration split {name!r} is not among the scored datasets")
    counts = bootstrap_counts(len(matrix.ids), samples, named_rng(seed, matrix.name, "full"))
    reference = Reference(matrix, counts, target)
    for mapping in MAPPINGS:
        if not reference.safe(mapping).any():
            log.warning(
                "views: %s has no prompt every policy labels safe under mapping %s: the matched and ranked "
                "views have no values there",
                name,
                mapping,
            )
        if not reference.unsafe(mapping).any():
            log.warning(
                "views: %s has no prompt every policy labels unsafe under mapping %s: the ranked view has no "
                "value for a benign set there",
                name,
                mapping,
            )
    return reference


@dataclass(frozen=True)
class Thresholds:
    """Every model's matched threshold under one mapping: the point (row 0) and per resample (rows 1..B)."""

    values: np.ndarray  # [B + 1, M]
    rates: np.ndarray  # [B + 1, M]: the reference's share flagged at it (the reachable rate nearest target)


def matched_thresholds(reference: Reference, mapping: str, n_models: int) -> Thresholds:
    """Each model's threshold flagging `reference.target` of the reference under `mapping`, on the point
    estimate and every resample of the calibration split (NaN for a model without reference scores)."""
    rows = reference.counts.shape[1]
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
    """metric -> [B + 1, M]: every model's rates on one benchmark subset at each resample's matched threshold
    — the weighted confusion counts there, turned into rates by the metrics' own functions.

    weights [n, B + 1]. The items at or above a model's highest threshold are flagged in every resample and
    the counts of all models are one matrix product; only the items between a model's lowest and highest
    threshold are compared resample by resample."""
    positive = matrix.expected_unsafe[rows][:, None]  # [n, 1]
    scores = matrix.scores[mapping][rows].astype(np.float64)  # [n, M]
    valid = matrix.valid_mask(mapping)[rows]  # [n, M]
    t = thresholds.values  # [B + 1, M]
    # A model without a score for an item it decided, or without a threshold, has no matched value.
    usable = ~(valid & ~np.isfinite(scores)).any(axis=0) & np.isfinite(t).any(axis=0)  # [M]
    bounded = np.where(np.isfinite(t), t, np.nan)[:, usable]
    low, high = np.full(t.shape[1], np.inf), np.full(t.shape[1], np.inf)
    low[usable], high[usable] = np.nanmin(bounded, axis=0), np.nanmax(bounded, axis=0)
    decided = np.where(valid, scores, -np.inf)  # an undecided item is flagged in no resample
    always = valid & (decided >= high)
    band = valid & (decided >= low) & ~always
    classes = np.concatenate(
        [valid & positive, valid & ~positive, always & positive, always & ~positive], axis=1
    )  # [n, 4M]
    sums = (classes.astype(np.float32).T @ weights).astype(np.float64)  # [4M, B + 1]
    unsafe, safe, true_pos, false_pos = np.split(sums, 4, axis=0)  # each [M, B + 1]
    for m in np.flatnonzero(band.any(axis=0) & usable):
        items = band[:, m]
        flagged = (scores[items, m][:, None] >= t[:, m][None, :]) * weights[items]  # [k, B + 1]
        true_pos[m] += flagged[positive[items, 0]].sum(axis=0)
        false_pos[m] += flagged[~positive[items, 0]].sum(axis=0)
    undefined = ~usable[None, :] | ~np.isfinite(t)  # [B + 1, M]
    counts = Confusion(
        **{
            name: np.where(undefined, np.nan, value.T)
            for name, value in (
                ("unsafe", unsafe),
                ("safe", safe),
                ("true_pos", true_pos),
                ("false_pos", false_pos),
            )
        }
    )
    has_unsafe, has_safe = bool(positive.any()), not bool(positive.all())
    rates = {"cap": cap_rate, "over_ref": over_ref_rate, "f1": f1_score}
    return {metric: rate(counts) for metric, rate in rates.items() if applies(metric, has_unsafe, has_safe)}


def _ranked_auroc(
    matrix: DatasetMatrix, rows: np.ndarray, weights: np.ndarray, mapping: str, reference: Reference
) -> np.ndarray:
    """[B + 1, M]: every model's ranked-view AUROC on one benchmark subset — a harmful set's unsafe prompts
    against the reference, the agreed-unsafe reference against a benign set's prompts, a mixed set's own
    unsafe prompts against its safe ones. weights [n, B + 1]."""
    out = np.full((weights.shape[1], matrix.scores[mapping].shape[1]), np.nan)
    for m in range(out.shape[1]):
        if matrix.role == MIXED:
            positive = _model_side(matrix, rows, mapping, m, True)
            negative = _model_side(matrix, rows, mapping, m, False)
            if positive is None or negative is None:
                continue
            out[:, m] = weighted_auroc(positive[1], weights[positive[0]], negative[1], weights[negative[0]])
            continue
        harmful = matrix.role == HARMFUL
        mine = _model_side(matrix, rows, mapping, m, harmful)
        theirs = reference.side(mapping, m, unsafe=not harmful)
        if mine is None or theirs is None:
            continue
        ours = (mine[1], weights[mine[0]])
        (p_scores, p_weights), (n_scores, n_weights) = (ours, theirs) if harmful else (theirs, ours)
        out[:, m] = weighted_auroc(p_scores, p_weights, n_scores, n_weights)
    return out


def _view_sizes(matrix: DatasetMatrix, rows: np.ndarray, mapping: str) -> dict[str, np.ndarray]:
    """metric -> [M] int: the benchmark prompts each model's view score is over — the own view's sizes, and
    for the ranked AUROC the set's side it reads (all of a mixed set)."""
    sizes = metric_sizes(matrix, rows, mapping)
    return {**sizes, AUROC: {HARMFUL: sizes["cap"], BENIGN: sizes["over_ref"]}.get(matrix.role, sizes["f1"])}


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
    weights = bootstrap_counts(n, own.samples, named_rng(seed, matrix.name, subset))  # [n, B + 1]
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


def role_mean_key(view: str, role: str, subset: str, mapping: str) -> tuple[str, str, str, str]:
    """The key of a view's headline mean over the benchmarks of `role` (harmful | benign) in its store."""
    name, rate = ROLE_MEANS[role]
    return (name, subset, mapping, RANKED_ROLE_METRICS[role] if view == RANKED else rate)


def view_role_means(store: DrawStore) -> dict[tuple[str, str, str, str], MetricDraws]:
    """A view's headline means: mean cap / over_ref over the harmful / benign sets (own, matched), mean
    AUROC over each (ranked)."""
    return role_mean_draws(store, RANKED_ROLE_METRICS if store.view == RANKED else None)


def reference_sizes(reference: Reference, view: str, role: str, mapping: str) -> np.ndarray:
    """[M] int: the calibration-split prompts each model's view score of a benchmark of `role` reads besides
    the benchmark's own — those of the reference (matched threshold; ranked harmful negatives) or of the
    agreed-unsafe reference (ranked benign positives) it has a decision for; none for the own view and a
    ranked mixed set's own AUROC."""
    decided = reference.matrix.valid_mask(mapping)  # [n, M]
    if view == OWN or (view == RANKED and role == MIXED):
        return np.zeros(decided.shape[1], dtype=np.int64)
    side = reference.unsafe(mapping) if view == RANKED and role == BENIGN else reference.safe(mapping)
    return (decided & side[:, None]).sum(axis=0).astype(np.int64)


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
                n_reference=reference_sizes(reference, view, role, mapping),
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
            own_flag = _weighted_share(reference.counts[safe], flags[safe])
            own_unsafe = _weighted_share(reference.counts[unsafe], flags[unsafe])
            matched_unsafe = np.full(reference.counts.shape[1], np.nan)
            auroc = np.full(reference.counts.shape[1], np.nan)
            flagged, negatives = reference.side(mapping, m, True), reference.side(mapping, m, False)
            if flagged is not None:
                scores, weights = flagged
                matched_unsafe = ratio(
                    flagged_weight(weights, scores, threshold.values[:, m]), weights.sum(axis=0)
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
    """Σ w·v / Σ w per weighting: weights [k, r], values [k] (0/1) -> [r], NaN where nothing weighs."""
    return ratio(values @ weights.astype(np.float64), weights.sum(axis=0, dtype=np.float64))


def _with_interval(name: str, rows: np.ndarray, confidence: float) -> dict[str, float]:
    """{name: row 0 (the point), name_ci_low / _ci_high: the percentile interval of rows 1..B}."""
    low, high = percentile_interval(rows[1:, None], confidence)
    return {name: float(rows[0]), f"{name}_ci_low": float(low[0]), f"{name}_ci_high": float(high[0])}

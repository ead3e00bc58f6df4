"""How far each benchmark's score moves with the label policy, against how far it moves with the seed alone.

* Δ_b (label supervision span): per scale, max − min of the benchmark's primary metric over the branch models
  trained at the main seed; Δ_b is the mean of those ranges over scales.
* Φ_b (seed noise floor): per recipe trained at >= 2 seeds, max − min over its seeds; Φ_b at a scale is the
  MEDIAN of that scale's recipes' spreads, and Φ_b overall the median over every recipe (null, not 0, when no
  recipe has several seeds). The widest spread is kept beside it (`phi_max`).
* The load of each benchmark: the grouping read off the policy fingerprint (swing above / at most
  `load.swing_threshold`) and the study's grouping as a second view (`load_groupings`).

This module computes the spans (`compute_spans`); the tables built on them are in `span_tables` (span.csv,
span_scale.csv, noise_floor.csv), `contrasts` (load contrast, copyright vs noise, swing vs span), `ranks` (the
rank test) and `correlations` (VAL vs agreement).

Every interval is a percentile interval over the joint bootstrap replicates of `scores.compute_draws`: the
same replicate index is one resample of each benchmark's prompts, shared by every model, so a span, a
difference of spans or a mean over benchmarks is computed per replicate and its spread is honest. Replicates
of different benchmarks are independent draws (each benchmark has its own named generator).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from guardpolicy.analysis.matrices import BENIGN, HARMFUL, MAPPINGS, MIXED, SPLIT, SUBSETS
from guardpolicy.analysis.scores import DrawStore, MetricDraws
from guardpolicy.analysis.stats import percentile_interval, range_ratio
from guardpolicy.analysis.views import OWN, view_metric
from guardpolicy.config.analysis import LoadConfig
from guardpolicy.errors import ConfigError

log = logging.getLogger(__name__)

POLICY_LOAD, CAPABILITY_LOAD, OTHER_LOAD = "policy", "capability", "other"
LOADS = (POLICY_LOAD, CAPABILITY_LOAD)
# The two load groupings: read off the policy fingerprint (the analysis' own) and the study's lists.
FINGERPRINT_GROUPING, STUDY_GROUPING = "fingerprint", "study"
GROUPINGS = (FINGERPRINT_GROUPING, STUDY_GROUPING)
# What a model's benchmark decisions are compared with: the benchmark's gold, or the VAL policy's labels.
GOLD_TARGET, POLICY_TARGET = "gold", "val_policy_labels"
# The primary metric of a mixed benchmark that `analysis.primary_metric` does not name.
MIXED_FALLBACK_METRIC = "f1"
ALL_SCALES = "all"


@dataclass(frozen=True)
class PolicyFingerprint:
    """What the analysis reads of reports/fingerprint.json (stage `fingerprint`, before any training)."""

    pair: tuple[str, str]
    # benchmark -> |agreement(pair[0]) − agreement(pair[1])| with the benchmark's gold (absent: not both
    # policies labelled it).
    swing: dict[str, float]
    # benchmark -> policy -> the share of the benchmark's prompts the policy labels unsafe.
    unsafe_share: dict[str, dict[str, float]]

    def agreed(self, max_swing: float) -> list[str]:
        """The benchmarks the two policies agree on: swing <= max_swing (sorted)."""
        return sorted(b for b, swing in self.swing.items() if swing <= max_swing)

    def agreed_unsafe(self, max_swing: float, min_unsafe: float) -> list[str]:
        """Agreed benchmarks that both policies of the pair label at least `min_unsafe` unsafe (sorted)."""
        return [
            b
            for b in self.agreed(max_swing)
            if all(self.unsafe_share.get(b, {}).get(p, -1.0) >= min_unsafe for p in self.pair)
        ]


def fingerprint_load(benchmark: str, fingerprint: PolicyFingerprint | None, threshold: float) -> str:
    """policy (swing > threshold) / capability (swing <= threshold) / other (no swing for the benchmark)."""
    if fingerprint is None or benchmark not in fingerprint.swing:
        return OTHER_LOAD
    return POLICY_LOAD if fingerprint.swing[benchmark] > threshold else CAPABILITY_LOAD


def load_of(benchmark: str, load: LoadConfig) -> str:
    """The study's grouping (params `analysis.load.policy` / `.capability`)."""
    if benchmark in load.policy:
        return POLICY_LOAD
    if benchmark in load.capability:
        return CAPABILITY_LOAD
    return OTHER_LOAD


def primary_metric(benchmark: str, role: str, overrides: Mapping[str, str]) -> str:
    """cap for harmful sets, over_ref for benign ones; mixed ones take `analysis.primary_metric` (else f1)."""
    valid = {HARMFUL: ("cap",), BENIGN: ("over_ref",), MIXED: ("cap", "over_ref", "f1", "auprc")}[role]
    if benchmark in overrides:
        metric = overrides[benchmark]
        if metric not in valid:
            raise ConfigError(
                f"analysis.primary_metric.{benchmark}: {metric!r} does not apply to a {role} benchmark; "
                f"choose one of {list(valid)}"
            )
        return metric
    return {HARMFUL: "cap", BENIGN: "over_ref"}.get(role, MIXED_FALLBACK_METRIC)


def branch_models(models: pd.DataFrame, main_seed: int) -> pd.DataFrame:
    """The branch models trained at the main seed (no teachers, no -s<seed> noise-floor repeats)."""
    chosen = models[(models["kind"] == "branch") & (models["seed"] == main_seed)]
    return chosen.reset_index(drop=True)


def seed_groups(models: pd.DataFrame) -> dict[str, list[str]]:
    """recipe -> its models, for the branch recipes evaluated at two or more distinct seeds (the noise floor
    of the branch spans; a teacher trained at several seeds is not one of them)."""
    groups = {}
    for recipe, group in models[models["kind"] == "branch"].groupby("recipe", sort=True):
        if group["seed"].nunique() >= 2:
            groups[str(recipe)] = sorted(group["model"])
    return groups


def column_index(store: DrawStore) -> dict[str, int]:
    return {model: i for i, model in enumerate(store.models)}


def _spread(values: np.ndarray) -> np.ndarray:
    """max − min over the last axis (models); values [..., m]."""
    return values.max(axis=-1) - values.min(axis=-1)


@dataclass(frozen=True)
class SeedSpread:
    recipe: str
    scale: str
    seeds: tuple[int, ...]
    spread: float
    draws: np.ndarray  # [B]


@dataclass(frozen=True)
class Span:
    """Δ_b and Φ_b of one benchmark subset under one mapping, with their joint replicates."""

    benchmark: str
    subset: str
    mapping: str
    view: str  # own | matched | ranked (guardpolicy.analysis.views): the store the span was computed on
    load: str  # the fingerprint's grouping (other: the benchmark has no swing)
    study_load: str  # the study's grouping (params analysis.load.policy / .capability)
    swing: float | None  # the fingerprint's swing of the benchmark
    metric: str
    delta: float  # NaN when no scale has two branch models
    delta_draws: np.ndarray  # [B]
    ranges: dict[str, float]  # scale -> max − min over its branches (NaN: fewer than two)
    range_draws: dict[str, np.ndarray]  # scale -> [B], the scales with two or more branches
    n_branches: dict[str, int]  # scale -> branch models at the main seed
    spreads: tuple[SeedSpread, ...]  # one per seed group (recipe)

    def spreads_at(self, scale: str | None) -> list[SeedSpread]:
        return [s for s in self.spreads if scale is None or s.scale == scale]

    def phi_at(self, scale: str | None = None) -> tuple[float | None, np.ndarray | None]:
        """Φ (median spread over the recipes of `scale`, every recipe when None) and its replicates [B]."""
        chosen = self.spreads_at(scale)
        if not chosen:
            return None, None
        point = float(np.median([s.spread for s in chosen]))
        return point, np.median(np.stack([s.draws for s in chosen], axis=1), axis=1)

    @property
    def phi(self) -> float | None:
        return self.phi_at()[0]

    @property
    def phi_draws(self) -> np.ndarray | None:
        """Per replicate, the median spread over recipes [B] (the statistic Φ_b itself, resampled)."""
        return self.phi_at()[1]

    @property
    def phi_max(self) -> float | None:
        return max(s.spread for s in self.spreads) if self.spreads else None

    def noise_range(self, scale: str) -> tuple[float | None, np.ndarray | None]:
        """The range seed noise alone would give the scale's n branch runs, and its replicates [B]: the
        median over the scale's recipes of spread · d2(n) / d2(k) (k = that recipe's seeds)."""
        chosen = self.spreads_at(scale)
        runs = self.n_branches.get(scale, 0)
        if not chosen or runs < 2:
            return None, None
        ratios = np.array([range_ratio(runs, len(s.seeds)) for s in chosen])  # [r]
        point = float(np.median(np.array([s.spread for s in chosen]) * ratios))
        draws = np.median(np.stack([s.draws for s in chosen], axis=1) * ratios[None, :], axis=1)
        return point, draws


def primary_results(
    store: DrawStore, primary_overrides: Mapping[str, str]
) -> Iterator[tuple[str, str, str, str, MetricDraws]]:
    """(benchmark, subset, mapping, primary metric, its draws) for every benchmark subset the store scored;
    the primary metric in the store's view (`views.view_metric`: AUROC in the ranked view)."""
    for benchmark in store.datasets():
        role = store.roles[benchmark]
        if role == SPLIT:
            continue
        metric = view_metric(store.view, primary_metric(benchmark, role, primary_overrides))
        for subset in SUBSETS:
            for mapping in MAPPINGS:
                result = store.get(benchmark, subset, mapping, metric)
                if result is not None:
                    yield benchmark, subset, mapping, metric, result


def compute_spans(
    store: DrawStore,
    models: pd.DataFrame,
    main_seed: int,
    load: LoadConfig,
    primary_overrides: Mapping[str, str],
    fingerprint: PolicyFingerprint | None = None,
) -> list[Span]:
    """Δ_b and the seed spreads of every benchmark x subset x mapping on its primary metric.

    The load of a benchmark is the fingerprint's (swing above `load.swing_threshold`: policy), `other` for
    every benchmark when no fingerprint is given; `study_load` is the study's lists.
    """
    column = column_index(store)
    branches = branch_models(models, main_seed)
    by_scale = {
        str(scale): [column[m] for m in group["model"] if m in column]
        for scale, group in branches.groupby("scale", sort=True)
    }
    groups = {
        recipe: [column[m] for m in members if m in column] for recipe, members in seed_groups(models).items()
    }
    info = models.set_index("model")
    seeds_of, scale_of = info["seed"], info["scale"]
    spans = []
    for benchmark, subset, mapping, metric, result in primary_results(store, primary_overrides):
        # Every scale gets a column; one with fewer than two branch models has no range (NaN).
        ranges = {scale: float("nan") for scale in by_scale}
        range_draws: dict[str, np.ndarray] = {}
        for scale, indices in by_scale.items():
            if len(indices) >= 2:
                ranges[scale] = float(_spread(result.point[indices]))
                range_draws[scale] = _spread(result.draws[:, indices])
        measured = [r for r in ranges.values() if np.isfinite(r)]
        # A view where a model has no value (no score to threshold or rank) leaves a scale without a range.
        delta = float(np.mean(measured)) if measured else float("nan")
        delta_draws = (
            np.mean(np.stack(list(range_draws.values()), axis=1), axis=1)
            if range_draws
            else np.full(store.samples, np.nan)
        )
        spreads = tuple(
            SeedSpread(
                recipe=recipe,
                scale=str(scale_of[store.models[indices[0]]]),
                seeds=tuple(sorted(int(seeds_of[store.models[i]]) for i in indices)),
                spread=float(_spread(result.point[indices])),
                draws=_spread(result.draws[:, indices]),
            )
            for recipe, indices in groups.items()
            if len(indices) >= 2
        )
        swing = fingerprint.swing.get(benchmark) if fingerprint is not None else None
        spans.append(
            Span(
                benchmark=benchmark,
                subset=subset,
                mapping=mapping,
                view=store.view,
                load=fingerprint_load(benchmark, fingerprint, load.swing_threshold),
                study_load=load_of(benchmark, load),
                swing=swing,
                metric=metric,
                delta=delta,
                delta_draws=delta_draws,
                ranges=ranges,
                range_draws=range_draws,
                n_branches={scale: len(indices) for scale, indices in by_scale.items()},
                spreads=spreads,
            )
        )
    log.info(
        "spans: %d benchmark subsets x mappings over %d branch models; %d seed groups",
        len(spans),
        len(branches),
        len(groups),
    )
    return spans


def finite(value: float | None) -> float | None:
    """A table cell: the float, or None for a missing or non-finite value."""
    return None if value is None or not np.isfinite(value) else float(value)


def interval(draws: np.ndarray | None, confidence: float) -> tuple[float | None, float | None]:
    """The percentile interval of replicates [B] (None bounds without replicates or finite ones)."""
    if draws is None:
        return None, None
    low, high = percentile_interval(np.asarray(draws)[:, None], confidence)
    return finite(low[0]), finite(high[0])


def spans_view(spans: Sequence[Span]) -> str:
    """The one view a list of spans is in (each view's verdicts are computed on its own spans); `own` for no
    spans, a ValueError for spans of several views."""
    views = sorted({s.view for s in spans})
    if len(views) > 1:
        raise ValueError(f"spans of several views {views}: compute each view's verdicts on its own spans")
    return views[0] if views else OWN


def spans_at(spans: Sequence[Span], subset: str, mapping: str) -> dict[str, Span]:
    """benchmark -> its span at the (headline) subset and mapping."""
    return {s.benchmark: s for s in spans if s.subset == subset and s.mapping == mapping}


def load_groupings(spans: Sequence[Span], subset: str, mapping: str) -> dict[str, dict[str, list[str]]]:
    """grouping -> load -> the benchmarks of that load at the headline subset and mapping (both groupings)."""
    chosen = spans_at(spans, subset, mapping)
    return {
        FINGERPRINT_GROUPING: {
            load_name: sorted(b for b, s in chosen.items() if s.load == load_name) for load_name in LOADS
        },
        STUDY_GROUPING: {
            load_name: sorted(b for b, s in chosen.items() if s.study_load == load_name)
            for load_name in LOADS
        },
    }

"""How far each benchmark's score moves with the label policy, against how far it moves with the seed alone.

* Δ_b (label supervision span): per scale, max − min of the benchmark's primary metric over the branch models
  trained at the main seed; Δ_b is the mean of those ranges over scales.
* Φ_b (seed noise floor): per recipe trained at >= 2 seeds, max − min over its seeds; Φ_b at a scale is the
  MEDIAN of that scale's recipes' spreads, and Φ_b overall the median over every recipe (null, not 0, when no
  recipe has several seeds). The widest spread is kept beside it (`phi_max`).
* Per scale (`span_scale_table`): Δ at that scale against Φ at the same scale, and against the range seed
  noise alone would give the scale's n branch runs — a k-seed spread scaled by d2(n) / d2(k), the ratio of
  the expected ranges of n and k normal draws (`stats.range_ratio`) — with the interval of Δ minus that
  range and a verdict; where the policies agree on a benchmark (fingerprint swing <= `competence.max_swing`)
  a span beyond seed noise is flagged as possible competence, not policy.
* The load contrast (mean Δ over policy-load vs capability-load benchmarks), the grouping read off the policy
  fingerprint (swing above / at most `load.swing_threshold`) and the study's grouping as a second view; the
  copyright span vs the noise floor; Spearman ρ between the fingerprint's swing and Δ_b across benchmarks.
* The exact rank test of named branch sets (one-sided in the direction params fix beforehand, else
  two-sided), each hit's bootstrap stability and the hits expected by chance; Spearman correlations between
  VAL and agreement with each benchmark's gold and with the VAL policy's own labels of its prompts; the
  effect of the binary mapping on over-refusal.

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
from scipy import stats as scipy_stats

from guardpolicy.analysis.scores import (
    ACC_PREFIX,
    BENIGN,
    DEFAULT,
    GOLD_AGREEMENT,
    HARMFUL,
    MAPPINGS,
    MIXED,
    SPLIT,
    SPLIT_PREFIX,
    SUBSETS,
    DatasetMatrix,
    DrawStore,
    MetricDraws,
)
from guardpolicy.analysis.stats import (
    TWO_SIDED,
    percentile_interval,
    range_ratio,
    rank_stability,
    rank_test,
    spearman,
)
from guardpolicy.config import LoadConfig
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.layout import relative_path
from guardpolicy.metrics import COPYRIGHT_BENCHMARK, confusion, gold_agreement

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

NOISE_FLOOR_COLUMNS = (
    "recipe",
    "scale",
    "benchmark",
    "subset",
    "mapping",
    "seeds",
    "spread",
    "ci_low",
    "ci_high",
)
# span.csv: these, then `range_<scale>` per scale, then SPAN_TRAILING_COLUMNS.
SPAN_LEADING_COLUMNS = (
    "benchmark",
    "subset",
    "mapping",
    "load",
    "study_load",
    "swing",
    "primary_metric",
    "delta",
    "delta_ci_low",
    "delta_ci_high",
)
SPAN_TRAILING_COLUMNS = ("phi", "phi_ci_low", "phi_ci_high", "phi_max", "n_recipes")
SPAN_SCALE_COLUMNS = (
    "benchmark",
    "subset",
    "mapping",
    "scale",
    "load",
    "study_load",
    "swing",
    "primary_metric",
    "n_branches",
    "delta",
    "delta_ci_low",
    "delta_ci_high",
    "phi",
    "phi_ci_low",
    "phi_ci_high",
    "n_recipes",
    "seeds",
    "difference",
    "difference_ci_low",
    "difference_ci_high",
    "noise_range",
    "noise_range_ci_low",
    "noise_range_ci_high",
    "excess",
    "excess_ci_low",
    "excess_ci_high",
    "verdict",
)
RANK_TEST_COLUMNS = (
    "benchmark",
    "scale",
    "subset",
    "mapping",
    "set_name",
    "k",
    "n",
    "direction",
    "extreme",
    "p_value",
    "null_probability",
    "hit",
    "stability",
)
CORRELATION_COLUMNS = (
    "scale",
    "val_policy",
    "grouping",
    "load",
    "target",
    "rho",
    "p_value",
    "n_models",
    "note",
)
SWING_SPAN_COLUMNS = (
    "scale",
    "n_benchmarks",
    "benchmarks",
    "rho",
    "p_value",
    "ci_low",
    "ci_high",
    "swing_resampled",
    "note",
)
MAPPING_EFFECT_COLUMNS = (
    "model",
    "benchmark",
    "subset",
    "over_ref_default",
    "over_ref_boundary_unsafe",
    "change",
)
# Verdicts of span_scale.csv (the text before the colon).
COMPETENCE, EXCEEDS_NOISE, WITHIN_NOISE, INDISTINGUISHABLE, UNDETERMINED = (
    "competence",
    "exceeds noise",
    "within noise",
    "indistinguishable",
    "undetermined",
)


# --------------------------------------------------------------------------------------------- fingerprint


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


def _column_index(store: DrawStore) -> dict[str, int]:
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


def _primary_results(
    store: DrawStore, primary_overrides: Mapping[str, str]
) -> Iterator[tuple[str, str, str, str, MetricDraws]]:
    """(benchmark, subset, mapping, primary metric, its draws) for every benchmark subset the store scored."""
    for benchmark in store.datasets():
        role = store.roles[benchmark]
        if role == SPLIT:
            continue
        metric = primary_metric(benchmark, role, primary_overrides)
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
    column = _column_index(store)
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
    for benchmark, subset, mapping, metric, result in _primary_results(store, primary_overrides):
        # Every scale gets a column; one with fewer than two branch models has no range (NaN).
        ranges = {scale: float("nan") for scale in by_scale}
        range_draws: dict[str, np.ndarray] = {}
        for scale, indices in by_scale.items():
            if len(indices) >= 2:
                ranges[scale] = float(_spread(result.point[indices]))
                range_draws[scale] = _spread(result.draws[:, indices])
        delta = (
            float(np.mean([r for r in ranges.values() if np.isfinite(r)])) if range_draws else float("nan")
        )
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


def _finite(value: float | None) -> float | None:
    return None if value is None or not np.isfinite(value) else float(value)


def _interval(draws: np.ndarray | None, confidence: float) -> tuple[float | None, float | None]:
    if draws is None:
        return None, None
    low, high = percentile_interval(np.asarray(draws)[:, None], confidence)
    return _finite(low[0]), _finite(high[0])


def _bounds(name: str, draws: np.ndarray | None, confidence: float) -> dict[str, float | None]:
    """{`<name>_ci_low`, `<name>_ci_high`}: the percentile interval of `draws` [B] (nulls without draws)."""
    low, high = _interval(draws, confidence)
    return {f"{name}_ci_low": low, f"{name}_ci_high": high}


def span_table(spans: Sequence[Span], confidence: float) -> pd.DataFrame:
    """span.csv: per benchmark, subset, mapping: both loads, the swing, Δ_b with its interval, the range per
    scale, Φ_b (median over every seed recipe) with its interval, the widest spread, the recipes."""
    scales = sorted({scale for span in spans for scale in span.ranges})
    rows = []
    for span in spans:
        delta_low, delta_high = _interval(span.delta_draws, confidence)
        phi_low, phi_high = _interval(span.phi_draws, confidence)
        rows.append(
            {
                "benchmark": span.benchmark,
                "subset": span.subset,
                "mapping": span.mapping,
                "load": span.load,
                "study_load": span.study_load,
                "swing": span.swing,
                "primary_metric": span.metric,
                "delta": _finite(span.delta),
                "delta_ci_low": delta_low,
                "delta_ci_high": delta_high,
                **{f"range_{scale}": _finite(span.ranges.get(scale)) for scale in scales},
                "phi": span.phi,
                "phi_ci_low": phi_low,
                "phi_ci_high": phi_high,
                "phi_max": span.phi_max,
                "n_recipes": len(span.spreads),
            }
        )
    columns = [*SPAN_LEADING_COLUMNS, *(f"range_{scale}" for scale in scales), *SPAN_TRAILING_COLUMNS]
    table = pd.DataFrame(rows, columns=columns)
    return table.sort_values(["benchmark", "subset", "mapping"], kind="stable").reset_index(drop=True)


def _scale_verdict(
    span: Span, scale: str, low: float | None, high: float | None, max_swing: float, runs: int
) -> str:
    if not np.isfinite(span.ranges.get(scale, float("nan"))):
        return f"{UNDETERMINED}: fewer than two branch models at this scale"
    if not span.spreads_at(scale):
        return f"{UNDETERMINED}: no recipe trained at several seeds at this scale"
    if low is None or high is None:
        return f"{UNDETERMINED}: no finite bootstrap replicates"
    if low > 0:
        if span.swing is not None and span.swing <= max_swing:
            return (
                f"{COMPETENCE}: the policies agree on this benchmark (swing {span.swing:.3g} <= "
                f"{max_swing:.3g}) yet its span exceeds the range seed noise alone gives {runs} runs: "
                "competence, not policy"
            )
        return f"{EXCEEDS_NOISE}: the span is wider than seed noise alone gives {runs} runs"
    if high < 0:
        return f"{WITHIN_NOISE}: the span is narrower than seed noise alone gives {runs} runs"
    return (
        f"{INDISTINGUISHABLE}: the interval of Δ minus the seed-noise range of {runs} runs includes 0, "
        "so the span cannot be told from seed noise"
    )


def span_scale_table(spans: Sequence[Span], confidence: float, max_swing: float) -> pd.DataFrame:
    """span_scale.csv: per benchmark, subset, mapping and scale, Δ at that scale beside Φ at the same scale.

    `difference` = Δ − Φ; `noise_range` = the range seed noise alone gives the scale's n branch runs
    (Span.noise_range: Φ scaled by d2(n) / d2(k)); `excess` = Δ − noise_range, each with the percentile
    interval of its per-replicate value, and a verdict (COMPETENCE where the policies agree on the benchmark
    but the span exceeds the noise range).
    """
    rows = []
    for span in spans:
        for scale in sorted(span.ranges):
            delta, delta_draws = span.ranges[scale], span.range_draws.get(scale)
            phi, phi_draws = span.phi_at(scale)
            noise, noise_draws = span.noise_range(scale)
            both = delta_draws is not None
            difference = delta_draws - phi_draws if both and phi_draws is not None else None
            excess = delta_draws - noise_draws if both and noise_draws is not None else None
            excess_low, excess_high = _interval(excess, confidence)
            runs = span.n_branches.get(scale, 0)
            rows.append(
                {
                    "benchmark": span.benchmark,
                    "subset": span.subset,
                    "mapping": span.mapping,
                    "scale": scale,
                    "load": span.load,
                    "study_load": span.study_load,
                    "swing": span.swing,
                    "primary_metric": span.metric,
                    "n_branches": runs,
                    "delta": _finite(delta),
                    **_bounds("delta", delta_draws, confidence),
                    "phi": phi,
                    **_bounds("phi", phi_draws, confidence),
                    "n_recipes": len(span.spreads_at(scale)),
                    "seeds": ",".join(str(k) for k in sorted({len(s.seeds) for s in span.spreads_at(scale)})),
                    "difference": _finite(delta - phi) if phi is not None else None,
                    **_bounds("difference", difference, confidence),
                    "noise_range": noise,
                    **_bounds("noise_range", noise_draws, confidence),
                    "excess": _finite(delta - noise) if noise is not None else None,
                    "excess_ci_low": excess_low,
                    "excess_ci_high": excess_high,
                    "verdict": _scale_verdict(span, scale, excess_low, excess_high, max_swing, runs),
                }
            )
    table = pd.DataFrame(rows, columns=list(SPAN_SCALE_COLUMNS))
    return table.sort_values(["benchmark", "subset", "mapping", "scale"], kind="stable").reset_index(
        drop=True
    )


def noise_floor_table(spans: Sequence[Span], confidence: float) -> pd.DataFrame:
    """noise_floor.csv: every seed group's spread per benchmark, subset, mapping, with its scale and
    interval (Φ_b at a scale is the median of that scale's rows)."""
    rows = []
    for span in spans:
        for spread in span.spreads:
            low, high = _interval(spread.draws, confidence)
            rows.append(
                {
                    "recipe": spread.recipe,
                    "scale": spread.scale,
                    "benchmark": span.benchmark,
                    "subset": span.subset,
                    "mapping": span.mapping,
                    "seeds": ",".join(str(seed) for seed in spread.seeds),
                    "spread": spread.spread,
                    "ci_low": low,
                    "ci_high": high,
                }
            )
    table = pd.DataFrame(rows, columns=list(NOISE_FLOOR_COLUMNS))
    return table.sort_values(["recipe", "benchmark", "subset", "mapping"], kind="stable").reset_index(
        drop=True
    )


def _headline(spans: Sequence[Span], subset: str, mapping: str) -> dict[str, Span]:
    return {s.benchmark: s for s in spans if s.subset == subset and s.mapping == mapping}


def _verdict(low: float | None, high: float | None, above: str, below: str) -> str:
    if low is None or high is None:
        return "undetermined: no finite bootstrap replicates"
    if low > 0:
        return above
    if high < 0:
        return below
    return "indistinguishable: the interval of the difference includes 0"


def _mean_delta(chosen: Mapping[str, Span], members: Sequence[str]) -> tuple[float | None, np.ndarray | None]:
    """The mean Δ over `members` and its replicates (replicate r averages every member's replicate r)."""
    if not members:
        return None, None
    point = float(np.mean([chosen[b].delta for b in members]))
    return point, np.mean(np.stack([chosen[b].delta_draws for b in members], axis=1), axis=1)


def load_contrast(
    spans: Sequence[Span], subset: str, mapping: str, confidence: float, grouping: str = FINGERPRINT_GROUPING
) -> dict:
    """Mean Δ over the present policy-load vs capability-load benchmarks, and their difference.

    `grouping`: `fingerprint` (Span.load, from the fingerprint's swing) or `study` (Span.study_load). Each
    replicate averages that replicate's Δ of every benchmark, so the interval of the difference carries the
    resampling of every benchmark's prompts (independently per benchmark).
    """
    if grouping not in GROUPINGS:
        raise ValueError(f"grouping must be one of {list(GROUPINGS)}, got {grouping!r}")
    chosen = _headline(spans, subset, mapping)
    load_of_span = (lambda s: s.load) if grouping == FINGERPRINT_GROUPING else (lambda s: s.study_load)
    means: dict[str, tuple[float | None, np.ndarray | None, list[str]]] = {}
    for load_name in LOADS:
        members = sorted(
            b for b, s in chosen.items() if load_of_span(s) == load_name and np.isfinite(s.delta)
        )
        means[load_name] = (*_mean_delta(chosen, members), members)
    policy_point, policy_draws, policy_members = means[POLICY_LOAD]
    capability_point, capability_draws, capability_members = means[CAPABILITY_LOAD]
    result: dict[str, object] = {
        "grouping": grouping,
        "policy_mean_delta": policy_point,
        "capability_mean_delta": capability_point,
        "policy_benchmarks": ",".join(policy_members),
        "capability_benchmarks": ",".join(capability_members),
    }
    result["policy_ci_low"], result["policy_ci_high"] = _interval(policy_draws, confidence)
    result["capability_ci_low"], result["capability_ci_high"] = _interval(capability_draws, confidence)
    if policy_point is None or capability_point is None:
        if grouping == FINGERPRINT_GROUPING and all(s.swing is None for s in chosen.values()):
            fingerprint = relative_path("fingerprint_json")
            reason = f"no fingerprint swing for any benchmark ({fingerprint} absent or empty)"
        else:
            reason = f"no {'policy' if policy_point is None else 'capability'}-load benchmark with a span"
        result.update(
            difference=None,
            difference_ci_low=None,
            difference_ci_high=None,
            verdict=f"undetermined: {reason}",
        )
        return result
    low, high = _interval(policy_draws - capability_draws, confidence)
    result.update(
        difference=policy_point - capability_point,
        difference_ci_low=low,
        difference_ci_high=high,
        verdict=_verdict(low, high, "policy-load spans wider", "capability-load spans wider"),
    )
    return result


def agreed_mean_delta(
    spans: Sequence[Span],
    subset: str,
    mapping: str,
    confidence: float,
    fingerprint: PolicyFingerprint | None,
    max_swing: float,
) -> dict:
    """The mean Δ over the benchmarks the policies agree on (swing <= max_swing), with its interval."""
    chosen = _headline(spans, subset, mapping)
    agreed = fingerprint.agreed(max_swing) if fingerprint is not None else []
    members = sorted(b for b in agreed if b in chosen and np.isfinite(chosen[b].delta))
    point, draws = _mean_delta(chosen, members)
    low, high = _interval(draws, confidence)
    return {
        "max_swing": max_swing,
        "benchmarks": ",".join(members),
        "mean_delta": point,
        "ci_low": low,
        "ci_high": high,
    }


def copyright_vs_noise(
    spans: Sequence[Span], subset: str, mapping: str, confidence: float, benchmark: str = COPYRIGHT_BENCHMARK
) -> dict:
    """Δ and Φ (median over every seed recipe) of the copyright benchmark and the interval of Δ − Φ (per
    replicate), with a verdict. The same comparison per scale, and against the range of the scale's n
    branch runs, is span_scale.csv."""
    span = _headline(spans, subset, mapping).get(benchmark)
    empty = {
        key: None
        for key in (
            "delta",
            "delta_ci_low",
            "delta_ci_high",
            "phi",
            "phi_ci_low",
            "phi_ci_high",
            "difference",
            "difference_ci_low",
            "difference_ci_high",
        )
    }
    empty["n_recipes"] = 0
    if span is None:
        return {**empty, "verdict": f"undetermined: {benchmark} was not evaluated"}
    delta_low, delta_high = _interval(span.delta_draws, confidence)
    result = {
        **empty,
        "delta": _finite(span.delta),
        "delta_ci_low": delta_low,
        "delta_ci_high": delta_high,
        "n_recipes": len(span.spreads),
    }
    phi_draws = span.phi_draws
    if phi_draws is None:
        return {**result, "verdict": "undetermined: no seed triples"}
    if not np.isfinite(span.delta):
        return {**result, "phi": span.phi, "verdict": "undetermined: no scale has two branch models"}
    result["phi"] = span.phi
    result["phi_ci_low"], result["phi_ci_high"] = _interval(phi_draws, confidence)
    low, high = _interval(span.delta_draws - phi_draws, confidence)
    result.update(
        difference=span.delta - span.phi,
        difference_ci_low=low,
        difference_ci_high=high,
        verdict=_verdict(
            low,
            high,
            "wider: the span exceeds the seed noise floor",
            "narrower: the span is within the seed noise floor",
        ),
    )
    return result


# ------------------------------------------------------------------------------------- swing predicts span


def _rank_rows(values: np.ndarray) -> np.ndarray:
    """Average ranks along the last axis (ties share their mean rank)."""
    return scipy_stats.rankdata(values, axis=-1)


def _spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman ρ of the fixed x [k] against every row of y [B, k] (NaN for a constant row)."""
    rx = _rank_rows(x) - (len(x) + 1) / 2.0  # [k]
    ry = _rank_rows(y)
    ry = ry - ry.mean(axis=1, keepdims=True)  # [B, k]
    denominator = np.sqrt((rx**2).sum() * (ry**2).sum(axis=1))
    out = np.full(y.shape[0], np.nan)
    np.divide((ry * rx[None, :]).sum(axis=1), denominator, out=out, where=denominator > 0)
    return out


def swing_vs_span_table(spans: Sequence[Span], subset: str, mapping: str, confidence: float) -> pd.DataFrame:
    """swing_vs_span.csv: Spearman ρ across benchmarks between the fingerprint's swing and Δ_b.

    One row for Δ_b (the mean over scales, scale `all`) and one per scale (that scale's range). p is
    scipy's; the interval is the percentile interval of ρ recomputed on every joint bootstrap replicate of
    the spans (each benchmark's prompts resampled). The swing is held fixed (`swing_resampled` false): it is
    a census of each benchmark under the policies' labelers, computed before any training, not an estimate
    from our models. Benchmarks without a swing or a span are left out.
    """
    chosen = _headline(spans, subset, mapping)
    with_swing = sorted(b for b, s in chosen.items() if s.swing is not None)
    scales = sorted({scale for s in chosen.values() for scale in s.ranges})
    views: list[tuple[str, dict[str, tuple[float, np.ndarray | None]]]] = [
        (ALL_SCALES, {b: (chosen[b].delta, chosen[b].delta_draws) for b in with_swing})
    ]
    for scale in scales:
        views.append(
            (
                scale,
                {
                    b: (chosen[b].ranges.get(scale, np.nan), chosen[b].range_draws.get(scale))
                    for b in with_swing
                },
            )
        )
    rows = []
    for scale, values in views:
        members = [b for b, (point, draws) in values.items() if np.isfinite(point) and draws is not None]
        swing = np.array([chosen[b].swing for b in members], dtype=np.float64)
        test = spearman(swing, [values[b][0] for b in members])
        low = high = None
        if test.rho is not None:
            draws = np.stack([values[b][1] for b in members], axis=1)  # [B, k]
            usable = np.isfinite(draws).all(axis=1)
            if usable.any():
                low, high = _interval(_spearman_rows(swing, draws[usable]), confidence)
        rows.append(
            {
                "scale": scale,
                "n_benchmarks": test.n,
                "benchmarks": ",".join(members),
                "rho": test.rho,
                "p_value": test.p_value,
                "ci_low": low,
                "ci_high": high,
                "swing_resampled": False,
                "note": test.note
                if with_swing
                else f"no fingerprint swing ({relative_path('fingerprint_json')})",
            }
        )
    return pd.DataFrame(rows, columns=list(SWING_SPAN_COLUMNS))


# ----------------------------------------------------------------------------------------------- rank test


def rank_test_table(
    store: DrawStore,
    models: pd.DataFrame,
    main_seed: int,
    rank_sets: Mapping[str, Sequence[str]],
    primary_overrides: Mapping[str, str],
    directions: Mapping[str, Mapping[str, str]] | None = None,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """rank_test.csv: whether each named branch set fills the extreme ranks, per scale and benchmark subset.

    Ranks are of the point estimates of the primary metric over the branch models at the main seed.
    `directions` (set -> benchmark -> top | bottom, params `analysis.rank_direction`, fixed before the run)
    makes the test one-sided, p = 1 / C(n, k); elsewhere it is two-sided, p = 2 / C(n, k)
    (stats.rank_test). `null_probability` is the chance of a hit under exchangeability; `hit`: p <= 1 −
    confidence; `stability`: the share of the joint bootstrap replicates in which the observed extreme
    ranking still holds (null when the set is not extreme).
    """
    directions = directions or {}
    alpha = 1.0 - confidence
    column = _column_index(store)
    branches = branch_models(models, main_seed)
    rows = []
    for benchmark, subset, mapping, _metric, result in _primary_results(store, primary_overrides):
        for scale, group in branches.groupby("scale", sort=True):
            present = [
                (m, str(b)) for m, b in zip(group["model"], group["branch"], strict=True) if m in column
            ]
            scores = {branch: float(result.point[column[model]]) for model, branch in present}
            indices = [column[model] for model, _ in present]
            for set_name, members in sorted(rank_sets.items()):
                direction = directions.get(set_name, {}).get(benchmark)
                test = rank_test(scores, members, direction)
                if test.k == 0 or test.k == test.n:
                    # No member, or no non-member at this scale: there is no ranking to test.
                    continue
                inside = np.array([branch in set(members) for _, branch in present])
                rows.append(
                    {
                        "benchmark": benchmark,
                        "scale": str(scale),
                        "subset": subset,
                        "mapping": mapping,
                        "set_name": set_name,
                        "k": test.k,
                        "n": test.n,
                        "direction": test.direction,
                        "extreme": test.extreme,
                        "p_value": test.p_value,
                        "null_probability": test.null_probability,
                        "hit": test.p_value is not None and test.p_value <= alpha + 1e-12,
                        "stability": rank_stability(result.draws[:, indices], inside, test.extreme),
                    }
                )
    table = pd.DataFrame(rows, columns=list(RANK_TEST_COLUMNS))
    table["hit"] = table["hit"].astype(bool)
    return table.sort_values(
        ["set_name", "scale", "benchmark", "subset", "mapping"], kind="stable"
    ).reset_index(drop=True)


def rank_chance(rank_tests: pd.DataFrame, subset: str, mapping: str, confidence: float) -> dict:
    """Hits vs the hits expected by chance over every benchmark x scale x set tested (headline subset and
    mapping): `expected_hits` = the sum of each test's exact chance of a hit under exchangeability (its null
    probability where that can reach p <= alpha, else 0), `alpha_bound` = tests x alpha."""
    alpha = 1.0 - confidence
    chosen = rank_tests[(rank_tests["subset"] == subset) & (rank_tests["mapping"] == mapping)]
    null = chosen["null_probability"].astype(float)
    can_hit = null <= alpha + 1e-12
    hits = chosen[chosen["hit"].astype(bool)]
    return {
        "alpha": alpha,
        "tests": len(chosen),
        "one_sided": int((chosen["direction"] != TWO_SIDED).sum()),
        "tests_that_can_hit": int(can_hit.sum()),
        "hits": len(hits),
        "expected_hits": float(null[can_hit].sum()),
        "alpha_bound": len(chosen) * alpha,
        "hit_list": ",".join(f"{r.set_name}/{r.scale}/{r.benchmark}" for r in hits.itertuples(index=False)),
    }


# ------------------------------------------------------------------------------------------- correlations


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
    column = _column_index(store)
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


def load_groupings(spans: Sequence[Span], subset: str, mapping: str) -> dict[str, dict[str, list[str]]]:
    """grouping -> load -> the benchmarks of that load at the headline subset and mapping (both groupings)."""
    chosen = _headline(spans, subset, mapping)
    return {
        FINGERPRINT_GROUPING: {
            load_name: sorted(b for b, s in chosen.items() if s.load == load_name) for load_name in LOADS
        },
        STUDY_GROUPING: {
            load_name: sorted(b for b, s in chosen.items() if s.study_load == load_name)
            for load_name in LOADS
        },
    }


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

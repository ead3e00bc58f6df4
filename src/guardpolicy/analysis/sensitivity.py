"""How far each benchmark's score moves with the label policy, against how far it moves with the seed alone.

* Δ_b (label supervision span): per scale, max − min of the benchmark's primary metric over the branch models
  trained at the main seed; Δ_b is the mean of those ranges over scales.
* Φ_b (seed noise floor): per recipe trained at >= 2 seeds, max − min over its seeds; Φ_b is the widest such
  spread (null, not 0, when no recipe has several seeds).
* The load contrast (mean Δ over policy-load vs capability-load benchmarks) and the copyright span vs the
  noise floor, with intervals of their differences.
* The exact rank test of named branch sets, Spearman correlations between VAL and gold agreement, and the
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
    DrawStore,
    MetricDraws,
)
from guardpolicy.analysis.stats import percentile_interval, rank_test, spearman
from guardpolicy.config import LoadConfig
from guardpolicy.errors import ConfigError

log = logging.getLogger(__name__)

POLICY_LOAD, CAPABILITY_LOAD, OTHER_LOAD = "policy", "capability", "other"
# The study's headline policy-load benchmark, compared with the noise floor.
COPYRIGHT_BENCHMARK = "harmbench_copyright"
# The primary metric of a mixed benchmark that `analysis.primary_metric` does not name.
MIXED_FALLBACK_METRIC = "f1"
ALL_SCALES = "all"

NOISE_FLOOR_COLUMNS = ("recipe", "benchmark", "subset", "mapping", "seeds", "spread", "ci_low", "ci_high")
RANK_TEST_COLUMNS = ("benchmark", "scale", "subset", "mapping", "set_name", "k", "n", "extreme", "p_value")
CORRELATION_COLUMNS = ("scale", "val_policy", "load", "rho", "p_value", "n_models", "note")
MAPPING_EFFECT_COLUMNS = (
    "model",
    "benchmark",
    "subset",
    "over_ref_default",
    "over_ref_boundary_unsafe",
    "change",
)


def load_of(benchmark: str, load: LoadConfig) -> str:
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
    """recipe -> its models, for the recipes evaluated at two or more distinct seeds."""
    groups = {}
    for recipe, group in models.groupby("recipe", sort=True):
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
    seeds: tuple[int, ...]
    spread: float
    draws: np.ndarray  # [B]


@dataclass(frozen=True)
class Span:
    """Δ_b and Φ_b of one benchmark subset under one mapping, with their joint replicates."""

    benchmark: str
    subset: str
    mapping: str
    load: str
    metric: str
    delta: float  # NaN when no scale has two branch models
    delta_draws: np.ndarray  # [B]
    ranges: dict[str, float]  # scale -> max − min over its branches (NaN: fewer than two)
    spreads: tuple[SeedSpread, ...]  # one per seed group (recipe)

    @property
    def phi(self) -> float | None:
        return max(s.spread for s in self.spreads) if self.spreads else None

    @property
    def phi_draws(self) -> np.ndarray | None:
        """Per replicate, the widest spread over recipes [B] (the statistic Φ_b itself, resampled)."""
        return np.stack([s.draws for s in self.spreads], axis=1).max(axis=1) if self.spreads else None

    @property
    def phi_median(self) -> float | None:
        return float(np.median([s.spread for s in self.spreads])) if self.spreads else None


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
) -> list[Span]:
    """Δ_b and the seed spreads of every benchmark x subset x mapping on its primary metric."""
    column = _column_index(store)
    branches = branch_models(models, main_seed)
    by_scale = {
        str(scale): [column[m] for m in group["model"] if m in column]
        for scale, group in branches.groupby("scale", sort=True)
    }
    groups = {
        recipe: [column[m] for m in members if m in column] for recipe, members in seed_groups(models).items()
    }
    seeds_of = models.set_index("model")["seed"]
    spans = []
    for benchmark, subset, mapping, metric, result in _primary_results(store, primary_overrides):
        # Every scale gets a column; one with fewer than two branch models has no range (NaN).
        ranges, range_draws = {scale: float("nan") for scale in by_scale}, []
        for scale, indices in by_scale.items():
            if len(indices) >= 2:
                ranges[scale] = float(_spread(result.point[indices]))
                range_draws.append(_spread(result.draws[:, indices]))
        delta = (
            float(np.mean([r for r in ranges.values() if np.isfinite(r)])) if range_draws else float("nan")
        )
        delta_draws = (
            np.mean(np.stack(range_draws, axis=1), axis=1) if range_draws else np.full(store.samples, np.nan)
        )
        spreads = tuple(
            SeedSpread(
                recipe=recipe,
                seeds=tuple(sorted(int(seeds_of[store.models[i]]) for i in indices)),
                spread=float(_spread(result.point[indices])),
                draws=_spread(result.draws[:, indices]),
            )
            for recipe, indices in groups.items()
            if len(indices) >= 2
        )
        spans.append(
            Span(
                benchmark,
                subset,
                mapping,
                load_of(benchmark, load),
                metric,
                delta,
                delta_draws,
                ranges,
                spreads,
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


def span_table(spans: Sequence[Span], confidence: float) -> pd.DataFrame:
    """span.csv: per benchmark, subset, mapping: Δ_b with its interval, the range per scale, Φ_b."""
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
                "primary_metric": span.metric,
                "delta": _finite(span.delta),
                "delta_ci_low": delta_low,
                "delta_ci_high": delta_high,
                **{f"range_{scale}": _finite(span.ranges.get(scale)) for scale in scales},
                "phi": span.phi,
                "phi_ci_low": phi_low,
                "phi_ci_high": phi_high,
                "phi_median": span.phi_median,
                "n_triples": len(span.spreads),
            }
        )
    columns = [
        "benchmark",
        "subset",
        "mapping",
        "load",
        "primary_metric",
        "delta",
        "delta_ci_low",
        "delta_ci_high",
        *(f"range_{scale}" for scale in scales),
        "phi",
        "phi_ci_low",
        "phi_ci_high",
        "phi_median",
        "n_triples",
    ]
    table = pd.DataFrame(rows, columns=columns)
    return table.sort_values(["benchmark", "subset", "mapping"], kind="stable").reset_index(drop=True)


def noise_floor_table(spans: Sequence[Span], confidence: float) -> pd.DataFrame:
    """noise_floor.csv: every seed group's spread per benchmark, subset, mapping, with its interval."""
    rows = []
    for span in spans:
        for spread in span.spreads:
            low, high = _interval(spread.draws, confidence)
            rows.append(
                {
                    "recipe": spread.recipe,
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


def load_contrast(spans: Sequence[Span], subset: str, mapping: str, confidence: float) -> dict:
    """Mean Δ over the present policy-load vs capability-load benchmarks, and their difference.

    Each replicate averages that replicate's Δ of every benchmark, so the interval of the difference carries
    the resampling of every benchmark's prompts (independently per benchmark).
    """
    chosen = _headline(spans, subset, mapping)
    means: dict[str, tuple[float | None, np.ndarray | None, list[str]]] = {}
    for load_name in (POLICY_LOAD, CAPABILITY_LOAD):
        members = sorted(b for b, s in chosen.items() if s.load == load_name and np.isfinite(s.delta))
        if members:
            point = float(np.mean([chosen[b].delta for b in members]))
            draws = np.mean(np.stack([chosen[b].delta_draws for b in members], axis=1), axis=1)
            means[load_name] = (point, draws, members)
        else:
            means[load_name] = (None, None, [])
    policy_point, policy_draws, policy_members = means[POLICY_LOAD]
    capability_point, capability_draws, capability_members = means[CAPABILITY_LOAD]
    result: dict[str, object] = {
        "policy_mean_delta": policy_point,
        "capability_mean_delta": capability_point,
        "policy_benchmarks": ",".join(policy_members),
        "capability_benchmarks": ",".join(capability_members),
    }
    result["policy_ci_low"], result["policy_ci_high"] = _interval(policy_draws, confidence)
    result["capability_ci_low"], result["capability_ci_high"] = _interval(capability_draws, confidence)
    if policy_point is None or capability_point is None:
        missing = "policy" if policy_point is None else "capability"
        result.update(
            difference=None,
            difference_ci_low=None,
            difference_ci_high=None,
            verdict=f"undetermined: no {missing}-load benchmark with a span",
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


def copyright_vs_noise(
    spans: Sequence[Span], subset: str, mapping: str, confidence: float, benchmark: str = COPYRIGHT_BENCHMARK
) -> dict:
    """Δ and Φ of the copyright benchmark and the interval of Δ − Φ (per replicate), with a verdict."""
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
    if span is None:
        return {**empty, "verdict": f"undetermined: {benchmark} was not evaluated"}
    delta_low, delta_high = _interval(span.delta_draws, confidence)
    result = {**empty, "delta": _finite(span.delta), "delta_ci_low": delta_low, "delta_ci_high": delta_high}
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


def rank_test_table(
    store: DrawStore,
    models: pd.DataFrame,
    main_seed: int,
    rank_sets: Mapping[str, Sequence[str]],
    primary_overrides: Mapping[str, str],
) -> pd.DataFrame:
    """rank_test.csv: whether each named branch set fills the extreme ranks, per scale and benchmark subset.

    Ranks are of the point estimates of the primary metric over the branch models at the main seed;
    p = 1 / C(n, k) when the set is extreme (stats.rank_test), null otherwise.
    """
    column = _column_index(store)
    branches = branch_models(models, main_seed)
    rows = []
    for benchmark, subset, mapping, _metric, result in _primary_results(store, primary_overrides):
        for scale, group in branches.groupby("scale", sort=True):
            scores = {
                str(branch): float(result.point[column[model]])
                for model, branch in zip(group["model"], group["branch"], strict=True)
                if model in column
            }
            for set_name, members in sorted(rank_sets.items()):
                test = rank_test(scores, members)
                if test.k == 0 or test.k == test.n:
                    # No member, or no non-member at this scale: there is no ranking to test.
                    continue
                rows.append(
                    {
                        "benchmark": benchmark,
                        "scale": str(scale),
                        "subset": subset,
                        "mapping": mapping,
                        "set_name": set_name,
                        "k": test.k,
                        "n": test.n,
                        "extreme": test.extreme,
                        "p_value": test.p_value,
                    }
                )
    table = pd.DataFrame(rows, columns=list(RANK_TEST_COLUMNS))
    return table.sort_values(
        ["set_name", "scale", "benchmark", "subset", "mapping"], kind="stable"
    ).reset_index(drop=True)


def _load_agreement(
    store: DrawStore, benchmarks: Sequence[str], subset: str, mapping: str
) -> tuple[np.ndarray, list[str]]:
    """Mean over the present `benchmarks` of each model's agreement with the benchmark's own gold [M]."""
    present = [b for b in benchmarks if store.get(b, subset, mapping, GOLD_AGREEMENT) is not None]
    if not present:
        return np.full(len(store.models), np.nan), []
    values = np.stack([store.get(b, subset, mapping, GOLD_AGREEMENT).point for b in present], axis=1)
    return values.mean(axis=1), present


def correlation_table(
    store: DrawStore,
    models: pd.DataFrame,
    main_seed: int,
    load: LoadConfig,
    val_split: str,
    val_policy: str,
    subset: str,
    mapping: str,
) -> pd.DataFrame:
    """correlations.csv: Spearman ρ across branch models (main seed) between VAL and gold agreement.

    VAL = 4-class accuracy on split `val_split` against `val_policy`'s labels; the benchmark side is the mean
    over the present policy-load (or capability-load) benchmarks of agreement with the benchmark's own gold
    (cap on harmful sets, 1 − over_ref on benign ones, accuracy on mixed ones), on `subset` and `mapping`.
    One row per scale and for all scales pooled; rho and p are null with a note when undefined.
    """
    column = _column_index(store)
    branches = branch_models(models, main_seed)
    branches = branches[branches["model"].isin(column)]
    val = store.get(f"{SPLIT_PREFIX}{val_split}", "full", DEFAULT, f"{ACC_PREFIX}{val_policy}")
    groups = [(str(scale), list(group["model"])) for scale, group in branches.groupby("scale", sort=True)]
    groups.append((ALL_SCALES, list(branches["model"])))
    rows = []
    for load_name, benchmarks in ((POLICY_LOAD, load.policy), (CAPABILITY_LOAD, load.capability)):
        agreement, present = _load_agreement(store, benchmarks, subset, mapping)
        for scale, members in groups:
            indices = [column[m] for m in members]
            if val is None:
                rho, p_value, n, note = (
                    None,
                    None,
                    0,
                    f"split {val_split!r} scored against {val_policy!r} absent",
                )
            elif not present:
                rho, p_value, n, note = None, None, 0, f"no {load_name}-load benchmark evaluated"
            else:
                test = spearman(val.point[indices], agreement[indices])
                rho, p_value, n, note = test.rho, test.p_value, test.n, test.note
            rows.append(
                {
                    "scale": scale,
                    "val_policy": val_policy,
                    "load": load_name,
                    "rho": rho,
                    "p_value": p_value,
                    "n_models": n,
                    "note": note,
                }
            )
    table = pd.DataFrame(rows, columns=list(CORRELATION_COLUMNS))
    return table.sort_values(["scale", "load"], kind="stable").reset_index(drop=True)


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

"""span.csv, span_scale.csv and noise_floor.csv: the spans of `sensitivity` as tables, with intervals.

Each table has a `view` column (own, matched, ranked: `guardpolicy.analysis.views`), the view of the spans.

* span.csv: per benchmark, subset, mapping, Δ_b with its interval, the range per scale, Φ_b (median over every
  seed recipe) with its interval.
* span_scale.csv: per scale, Δ at that scale against Φ at the same scale, and against the range seed noise
  alone would give the scale's n branch runs — a k-seed spread scaled by d2(n) / d2(k), the ratio of the
  expected ranges of n and k normal draws (`stats.range_ratio`) — with the interval of Δ minus that range and
  a verdict; where the policies agree on a benchmark (fingerprint swing <= `competence.max_swing`) a span
  beyond seed noise is flagged as possible competence, not policy.
* noise_floor.csv: every seed group's spread.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from guardpolicy.analysis.sensitivity import Span, finite, interval
from guardpolicy.analysis.views import sort_views
from guardpolicy.contracts.analysis import ANALYSIS_NOISE_FLOOR, ANALYSIS_SPAN, ANALYSIS_SPAN_SCALE

# The tables' columns, from their contracts (guardpolicy.contracts); span.csv's `range_<scale>` is a family.
NOISE_FLOOR_COLUMNS = tuple(ANALYSIS_NOISE_FLOOR.names())
SPAN_SCALE_COLUMNS = tuple(ANALYSIS_SPAN_SCALE.names())
# Verdicts of span_scale.csv (the text before the colon).
COMPETENCE, EXCEEDS_NOISE, WITHIN_NOISE, INDISTINGUISHABLE, UNDETERMINED = (
    "competence",
    "exceeds noise",
    "within noise",
    "indistinguishable",
    "undetermined",
)


def _bounds(name: str, draws: np.ndarray | None, confidence: float) -> dict[str, float | None]:
    """{`<name>_ci_low`, `<name>_ci_high`}: the percentile interval of `draws` [B] (nulls without draws)."""
    low, high = interval(draws, confidence)
    return {f"{name}_ci_low": low, f"{name}_ci_high": high}


def span_table(spans: Sequence[Span], confidence: float) -> pd.DataFrame:
    """span.csv: per benchmark, subset, mapping: both loads, the swing, Δ_b with its interval, the range per
    scale, Φ_b (median over every seed recipe) with its interval, the widest spread, the recipes, and Δ_b −
    Φ_b with the interval of its per-replicate value (pooled over scales; per scale: span_scale.csv)."""
    scales = sorted({scale for span in spans for scale in span.ranges})
    rows = []
    for span in spans:
        delta_low, delta_high = interval(span.delta_draws, confidence)
        phi_low, phi_high = interval(span.phi_draws, confidence)
        phi_draws = span.phi_draws
        difference = (
            finite(span.delta - span.phi) if span.phi is not None and np.isfinite(span.delta) else None
        )
        difference_low, difference_high = interval(
            None if phi_draws is None else span.delta_draws - phi_draws, confidence
        )
        rows.append(
            {
                "benchmark": span.benchmark,
                "subset": span.subset,
                "mapping": span.mapping,
                "view": span.view,
                "load": span.load,
                "study_load": span.study_load,
                "swing": span.swing,
                "primary_metric": span.metric,
                "delta": finite(span.delta),
                "delta_ci_low": delta_low,
                "delta_ci_high": delta_high,
                **{f"range_{scale}": finite(span.ranges.get(scale)) for scale in scales},
                "phi": span.phi,
                "phi_ci_low": phi_low,
                "phi_ci_high": phi_high,
                "phi_max": span.phi_max,
                "n_recipes": len(span.spreads),
                "difference": difference,
                "difference_ci_low": difference_low if difference is not None else None,
                "difference_ci_high": difference_high if difference is not None else None,
            }
        )
    columns = ANALYSIS_SPAN.names(scale=scales)  # `range_<scale>` per scale among the fixed columns
    return sort_views(pd.DataFrame(rows, columns=columns), ["benchmark", "subset", "mapping", "view"])


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
            excess_low, excess_high = interval(excess, confidence)
            runs = span.n_branches.get(scale, 0)
            rows.append(
                {
                    "benchmark": span.benchmark,
                    "subset": span.subset,
                    "mapping": span.mapping,
                    "view": span.view,
                    "scale": scale,
                    "load": span.load,
                    "study_load": span.study_load,
                    "swing": span.swing,
                    "primary_metric": span.metric,
                    "n_branches": runs,
                    "delta": finite(delta),
                    **_bounds("delta", delta_draws, confidence),
                    "phi": phi,
                    **_bounds("phi", phi_draws, confidence),
                    "n_recipes": len(span.spreads_at(scale)),
                    "seeds": ",".join(str(k) for k in sorted({len(s.seeds) for s in span.spreads_at(scale)})),
                    "difference": finite(delta - phi) if phi is not None else None,
                    **_bounds("difference", difference, confidence),
                    "noise_range": noise,
                    **_bounds("noise_range", noise_draws, confidence),
                    "excess": finite(delta - noise) if noise is not None else None,
                    "excess_ci_low": excess_low,
                    "excess_ci_high": excess_high,
                    "verdict": _scale_verdict(span, scale, excess_low, excess_high, max_swing, runs),
                }
            )
    table = pd.DataFrame(rows, columns=list(SPAN_SCALE_COLUMNS))
    return sort_views(table, ["benchmark", "subset", "mapping", "view", "scale"])


def noise_floor_table(spans: Sequence[Span], confidence: float) -> pd.DataFrame:
    """noise_floor.csv: every seed group's spread per benchmark, subset, mapping, with its scale and
    interval (Φ_b at a scale is the median of that scale's rows)."""
    rows = []
    for span in spans:
        for spread in span.spreads:
            low, high = interval(spread.draws, confidence)
            rows.append(
                {
                    "recipe": spread.recipe,
                    "scale": spread.scale,
                    "benchmark": span.benchmark,
                    "subset": span.subset,
                    "mapping": span.mapping,
                    "view": span.view,
                    "seeds": ",".join(str(seed) for seed in spread.seeds),
                    "spread": spread.spread,
                    "ci_low": low,
                    "ci_high": high,
                }
            )
    table = pd.DataFrame(rows, columns=list(NOISE_FLOOR_COLUMNS))
    return sort_views(table, ["recipe", "benchmark", "subset", "mapping", "view"])

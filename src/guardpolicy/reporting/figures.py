"""The report's figures: Δ_b beside Φ_b per benchmark (in the primary view, and in every view side by side),
and mean CAP vs mean OVER-REF per model.

Pure: tables in, PNG bytes out. Bytes are identical for the same tables (Agg backend, fixed size and dpi,
fixed colours and markers, no software/date metadata), so DVC sees a figure change only when its data does.
"""

from __future__ import annotations

import io
import math

import pandas as pd

from guardpolicy.analysis.baselines import GUARD_MAPPING, GUARD_SCALE
from guardpolicy.reporting.formatting import natural_key

FIGURE_DPI = 100
# One colour per benchmark load group and per model scale (matplotlib's tab10, fixed so runs match).
LOAD_COLOURS = {"policy": "#d62728", "capability": "#1f77b4", "other": "#7f7f7f"}
SCALE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2")
BRANCH_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "<", ">", "p", "h", "*", "8", "d")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=FIGURE_DPI, metadata={"Software": None})
    return buffer.getvalue()


def _error(value: float, low: float, high: float) -> tuple[float, float]:
    """Asymmetric error bar lengths below / above a value; none where the interval is absent."""
    if any(isinstance(v, float) and math.isnan(v) for v in (value, low, high)):
        return 0.0, 0.0
    return max(value - low, 0.0), max(high - value, 0.0)


def span_vs_floor_png(span: pd.DataFrame) -> bytes:
    """Horizontal bars per benchmark: Δ_b (solid) and Φ_b (hatched), coloured by load, with their intervals.

    `span` has one row per benchmark (headline subset and mapping) with columns benchmark, load, delta,
    delta_ci_low, delta_ci_high, phi, phi_ci_low, phi_ci_high, in the order to draw from top to bottom.
    """
    plt = _pyplot()
    rows = span.reset_index(drop=True)
    n = len(rows)
    figure, axes = plt.subplots(figsize=(7.5, max(2.5, 0.45 * n + 1.5)), dpi=FIGURE_DPI)
    try:
        bar = 0.38
        for i, r in rows.iterrows():
            y = n - 1 - i  # first row at the top
            colour = LOAD_COLOURS.get(str(r["load"]), LOAD_COLOURS["other"])
            delta = float(r["delta"]) if pd.notna(r["delta"]) else math.nan
            below, above = _error(delta, float(r["delta_ci_low"]), float(r["delta_ci_high"]))
            if not math.isnan(delta):
                axes.barh(y + bar / 2, delta, height=bar, color=colour)
                axes.errorbar(
                    delta, y + bar / 2, xerr=[[below], [above]], fmt="none", ecolor="black", capsize=3
                )
            phi = float(r["phi"]) if pd.notna(r["phi"]) else math.nan
            if math.isnan(phi):
                axes.text(0.005, y - bar / 2, "Φ not measured", va="center", fontsize=7, color="#555555")
            else:
                below, above = _error(phi, float(r["phi_ci_low"]), float(r["phi_ci_high"]))
                axes.barh(y - bar / 2, phi, height=bar, color="white", edgecolor=colour, hatch="///")
                axes.errorbar(
                    phi, y - bar / 2, xerr=[[below], [above]], fmt="none", ecolor="black", capsize=3
                )
        axes.set_yticks(range(n), labels=list(rows["benchmark"])[::-1])
        axes.set_xlim(0.0, 1.05)
        axes.set_xlabel("score range (primary metric)")
        axes.set_title("Label-supervision span Δ_b (solid) vs seed noise floor Φ_b (hatched)")
        from matplotlib.patches import Patch

        handles = [Patch(color=c, label=f"{load}-load") for load, c in LOAD_COLOURS.items()]
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="///", label="Φ_b"))
        axes.legend(handles=handles, loc="lower right", fontsize=8)
        figure.tight_layout()
        return _png(figure)
    finally:
        plt.close(figure)


def cap_vs_overref_png(scores: pd.DataFrame, scales: list[str], main_seed: int) -> bytes:
    """Mean CAP (x) vs mean OVER-REF (y) per model: one marker shape per branch, one colour per scale.

    `scores` has columns model, scale, branch, seed, cap, over_ref (one row per model). Models at a seed
    other than `main_seed` are labelled with it (`E8 s43`); open guard baselines (scale `guard`) are black
    stars labelled with the guard's name.
    """
    plt = _pyplot()
    rows = scores.dropna(subset=["cap", "over_ref"]).reset_index(drop=True)
    guards = rows[rows["scale"] == GUARD_SCALE]
    rows = rows[rows["scale"] != GUARD_SCALE].reset_index(drop=True)
    branches = sorted(set(rows["branch"]), key=natural_key)
    markers = {b: BRANCH_MARKERS[i % len(BRANCH_MARKERS)] for i, b in enumerate(branches)}
    ordered_scales = [s for s in scales if s in set(rows["scale"])]
    ordered_scales += sorted(set(rows["scale"]) - set(ordered_scales))
    colours = {s: SCALE_COLOURS[i % len(SCALE_COLOURS)] for i, s in enumerate(ordered_scales)}
    figure, axes = plt.subplots(figsize=(7.0, 5.5), dpi=FIGURE_DPI)
    try:
        for _, r in rows.iterrows():
            axes.scatter(
                float(r["cap"]),
                float(r["over_ref"]),
                marker=markers[r["branch"]],
                color=colours[r["scale"]],
                s=45,
            )
            label = str(r["branch"]) if int(r["seed"]) == main_seed else f"{r['branch']} s{int(r['seed'])}"
            axes.annotate(
                label,
                (float(r["cap"]), float(r["over_ref"])),
                xytext=(4, 3),
                textcoords="offset points",
                fontsize=7,
            )
        for _, r in guards.iterrows():
            axes.scatter(float(r["cap"]), float(r["over_ref"]), marker="*", color="black", s=110)
            axes.annotate(
                str(r["branch"]),
                (float(r["cap"]), float(r["over_ref"])),
                xytext=(5, -9),
                textcoords="offset points",
                fontsize=7,
            )
        axes.set_xlim(-0.02, 1.02)
        axes.set_ylim(-0.02, 1.02)
        axes.set_xlabel("mean CAP over harmful sets")
        axes.set_ylabel("mean OVER-REF over benign sets")
        axes.set_title("Capture vs over-refusal per model")
        from matplotlib.lines import Line2D

        handles = [Line2D([], [], marker="o", linestyle="", color=c, label=s) for s, c in colours.items()]
        if not guards.empty:
            handles.append(Line2D([], [], marker="*", linestyle="", color="black", label="open guard"))
        axes.legend(handles=handles, title="scale", loc="upper left", fontsize=8)
        figure.tight_layout()
        return _png(figure)
    finally:
        plt.close(figure)


# The gold bar of the score fingerprint, then one colour per policy (in name order).
GOLD_COLOUR = "#333333"


def score_fingerprint_png(fingerprint: pd.DataFrame, subset: str, mapping: str, title: str) -> bytes:
    """Per benchmark, grouped horizontal bars: the guard's agreement with the benchmark's gold (dark) and
    with each policy's labels (one colour per policy), with their Wilson intervals.

    `fingerprint`: the rows of `guardpolicy score`'s fingerprint.csv (benchmark, subset, mapping, reference,
    agreement, ci_low, ci_high); only `subset` / `mapping` are drawn, benchmarks top to bottom by name.
    """
    plt = _pyplot()
    rows = fingerprint[(fingerprint["subset"] == subset) & (fingerprint["mapping"] == mapping)]
    benchmarks = sorted(set(rows["benchmark"]))
    references = ["gold", *sorted(set(rows["reference"]) - {"gold"})]
    colours = {"gold": GOLD_COLOUR} | {
        ref: SCALE_COLOURS[i % len(SCALE_COLOURS)] for i, ref in enumerate(references[1:])
    }
    n = len(benchmarks)
    figure, axes = plt.subplots(figsize=(7.5, max(2.5, 0.55 * n * max(1, len(references)) / 2 + 1.5)))
    try:
        height = 0.8 / max(1, len(references))
        for i, benchmark in enumerate(benchmarks):
            y = n - 1 - i
            for j, reference in enumerate(references):
                row = rows[(rows["benchmark"] == benchmark) & (rows["reference"] == reference)]
                if row.empty:
                    continue
                value = float(row["agreement"].iloc[0])
                below, above = _error(value, float(row["ci_low"].iloc[0]), float(row["ci_high"].iloc[0]))
                offset = y + 0.4 - height * (j + 0.5)
                axes.barh(offset, value, height=height, color=colours[reference])
                axes.errorbar(value, offset, xerr=[[below], [above]], fmt="none", ecolor="black", capsize=2)
        axes.set_yticks(range(n), labels=benchmarks[::-1])
        axes.set_xlim(0.0, 1.05)
        shown = GUARD_MAPPING.get(mapping, mapping)
        axes.set_xlabel(f"share of prompts where the guard's decision agrees ({subset}, {shown})")
        axes.set_title(title)
        from matplotlib.patches import Patch

        handles = [Patch(color=colours[ref], label=ref) for ref in references]
        axes.legend(handles=handles, loc="lower right", fontsize=8)
        figure.tight_layout()
        return _png(figure)
    finally:
        plt.close(figure)


# One colour per view of the scores (own, matched, ranked).
VIEW_COLOURS = {"own": "#7f7f7f", "matched": "#1f77b4", "ranked": "#2ca02c"}


def spans_by_view_png(span: pd.DataFrame, benchmarks: list[str]) -> bytes:
    """Per benchmark, the three views side by side: Δ_b (solid) and Φ_b (hatched) in each view's colour, with
    their intervals.

    `span`: span.csv's rows at the headline subset and mapping, every view (columns benchmark, view, delta,
    delta_ci_low, delta_ci_high, phi, phi_ci_low, phi_ci_high); `benchmarks`: the order to draw, top to
    bottom. The own and matched views are rates, the ranked view AUROCs: one axis, [0, 1], serves all three.
    """
    plt = _pyplot()
    views = [view for view in VIEW_COLOURS if view in set(span["view"])]
    by = span.set_index(["benchmark", "view"])
    n = len(benchmarks)
    bar = 0.8 / (2 * max(1, len(views)))
    figure, axes = plt.subplots(figsize=(7.5, max(3.0, 0.9 * n + 1.5)), dpi=FIGURE_DPI)
    try:
        for i, benchmark in enumerate(benchmarks):
            top = n - 1 - i + 0.4  # first benchmark at the top
            for j, view in enumerate(views):
                if (benchmark, view) not in by.index:
                    continue
                r = by.loc[(benchmark, view)]
                colour = VIEW_COLOURS[view]
                for k, (name, style) in enumerate((("delta", {"color": colour}), ("phi", {}))):
                    y = top - bar * (2 * j + k + 0.5)
                    value = float(r[name]) if pd.notna(r[name]) else math.nan
                    if math.isnan(value):
                        continue
                    if name == "phi":
                        style = {"color": "white", "edgecolor": colour, "hatch": "///"}
                    axes.barh(y, value, height=bar, **style)
                    below, above = _error(value, float(r[f"{name}_ci_low"]), float(r[f"{name}_ci_high"]))
                    axes.errorbar(value, y, xerr=[[below], [above]], fmt="none", ecolor="black", capsize=2)
        axes.set_yticks(range(n), labels=benchmarks[::-1])
        axes.set_xlim(0.0, 1.05)
        axes.set_xlabel("score range over branches (own, matched: rates; ranked: AUROC)")
        axes.set_title("Δ_b (solid) and Φ_b (hatched) in each view")
        from matplotlib.patches import Patch

        handles = [Patch(color=c, label=view) for view, c in VIEW_COLOURS.items() if view in views]
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="///", label="Φ_b"))
        axes.legend(handles=handles, loc="lower right", fontsize=8)
        figure.tight_layout()
        return _png(figure)
    finally:
        plt.close(figure)

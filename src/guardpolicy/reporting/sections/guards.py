"""Table 2: the open guards relaxed and strict beside our models, mapping vs retraining, and the calibrated
comparison of our models at each guard's over-refusal (pipelines/baselines/dvc.yaml)."""

from __future__ import annotations

import pandas as pd

from guardpolicy.analysis.baselines import BASELINE_KIND, GUARD_MAPPING
from guardpolicy.analysis.mapping import MAPPING_LEVER, RETRAINING_LEVER
from guardpolicy.analysis.matrices import DEFAULT
from guardpolicy.analysis.scores import MEAN_BENIGN, MEAN_HARMFUL
from guardpolicy.baselines import MODEL_PREFIX
from guardpolicy.layout import relative_path
from guardpolicy.metrics import COPYRIGHT_BENCHMARK
from guardpolicy.reporting.formatting import (
    MISSING,
    fmt,
    fmt_ci,
    fmt_count,
    fmt_signed,
    markdown_table,
    natural_key,
)
from guardpolicy.reporting.headline import guard_models
from guardpolicy.reporting.inputs import ReportInputs


def _guard_label(inputs: ReportInputs, model: str) -> str:
    guard = model.removeprefix(MODEL_PREFIX)
    facts = inputs.guards.get(guard, {})
    revision = facts.get("revision") or "unpinned"
    where = facts.get("model_id", guard)
    return f"`{guard}` ({where} @ {revision[:10]})"


def _comparison_models(inputs: ReportInputs, headline: pd.DataFrame) -> pd.DataFrame:
    """Our models for the baseline tables: teachers and branches at the main seed, by scale then branch."""
    ours = headline[(headline["kind"] != BASELINE_KIND) & (headline["seed"] == inputs.main_seed)].copy()
    ours["_scale"] = [inputs.scale_rank(str(s)) for s in ours["scale"]]
    ours["_branch"] = [natural_key(str(b)) for b in ours["branch"]]
    return ours.sort_values(["_scale", "_branch", "model"]).drop(columns=["_scale", "_branch"])


def guard_baselines_section(inputs: ReportInputs) -> list[str]:
    """Table 2: every open guard relaxed vs strict beside our models, then the calibrated comparison."""
    guards = guard_models(inputs.scores)
    title = "## Table 2 — open guard baselines beside our branches"
    if not guards:
        return [
            title,
            "",
            f"No open guard was run. The optional sub-pipeline `{relative_path('baselines_pipeline')}` "
            "scores Qwen3Guard, Granite Guardian or Llama Guard "
            f"({relative_path('baseline_registry')}) on the same items: configure `baselines.guards` in "
            f"{relative_path('params')} and run `dvc repro {relative_path('baselines_pipeline')}` (README, "
            '"Open guard baselines").',
            "",
        ]
    by_mapping = {mapping: inputs.headlines[mapping].set_index("model") for mapping in GUARD_MAPPING}
    ours = _comparison_models(inputs, inputs.headlines[DEFAULT])
    labels = {
        m: f"{scale} {branch}"
        for m, scale, branch in zip(ours["model"], ours["scale"], ours["branch"], strict=True)
    }
    # summary.json `baselines.<guard>`: the analysis' parse counts over every item the guard was asked about.
    parse = inputs.summary.get("baselines") or {}
    rows = []
    for model in [*guards, *ours["model"]]:
        is_guard = model in guards
        cells = [_guard_label(inputs, model) if is_guard else labels[model]]
        for mapping in GUARD_MAPPING:
            r = by_mapping[mapping].loc[model]
            for column in ("cap", "over_ref", "copy"):
                cells.append(fmt_ci(r[column], r[f"{column}_ci_low"], r[f"{column}_ci_high"]))
        counts = parse.get(model.removeprefix(MODEL_PREFIX)) if is_guard else None
        if counts:
            cells.append(f"{fmt_count(counts.get('parse_failed'))} / {fmt_count(counts.get('parse_items'))}")
        else:
            cells.append(MISSING)
        rows.append(cells)
    header = ["model", "CAP relaxed", "OVER-REF relaxed", "COPY relaxed"]
    header += ["CAP strict", "OVER-REF strict", "COPY strict", "unparsed / items"]
    lines = [
        title,
        "",
        "The open guards of `pipelines/baselines/dvc.yaml` on the same items as our models, subset "
        f"`{inputs.subset}`. *relaxed*: the guard's middle label (Qwen3Guard's Controversial) counts as safe "
        "— for our models the `default` mapping (BOUNDARY_SAFE safe); *strict*: it counts as unsafe — our "
        "`boundary_unsafe` mapping. Guards without a middle label give the same decision under both. CAP, "
        "OVER-REF and COPY as in Table 1 (bootstrap / Wilson intervals); *unparsed*: answers the parser "
        "could not read, counted under `baselines.failure_policy` (excluded answers leave the rates' "
        "denominators). Our models: teachers and branches at seed "
        f"{inputs.main_seed}.",
        "",
        *markdown_table(header, rows, "l" + "r" * (len(header) - 1)),
        "",
    ]
    return [*lines, *_mapping_vs_retraining(inputs), *_calibrated(inputs, guards)]


def _mapping_vs_retraining(inputs: ReportInputs) -> list[str]:
    """The study's contrast (mapping_vs_retraining.csv): relabelling the guard's middle class vs retraining
    (the spread of mean OVER-REF over our branches)."""
    levers = inputs.mapping_vs_retraining
    levers = levers[levers["subset"] == inputs.subset]
    mapping = levers[levers["lever"] == MAPPING_LEVER].sort_values("model")
    lines = [
        f"- {_guard_label(inputs, r['model'])}: strict − relaxed moves mean OVER-REF by "
        f"{fmt_signed(r['change'])} ({fmt(r['over_ref_from'])} → {fmt(r['over_ref_to'])})."
        for _, r in mapping.iterrows()
    ]
    retraining = levers[levers["lever"] == RETRAINING_LEVER].copy()
    retraining["_scale"] = [inputs.scale_rank(str(s)) for s in retraining["scale"]]
    spreads = [
        f"{r['scale']}: {fmt(r['over_ref_from'])}–{fmt(r['over_ref_to'])} (span {fmt(r['change'])})"
        for _, r in retraining.sort_values("_scale").iterrows()
    ]
    return [
        "**Mapping vs retraining.** Changing only how the guard's middle label maps:",
        "",
        *lines,
        "",
        "Retraining across our branches (mean OVER-REF, default mapping, seed "
        f"{inputs.main_seed}) — {'; '.join(spreads) if spreads else 'fewer than two branches per scale'}.",
        "",
    ]


def _calibrated(inputs: ReportInputs, guards: list[str]) -> list[str]:
    table = inputs.calibration
    title = "### Calibrated comparison — our models at each guard's over-refusal"
    if table is None or table.empty:
        source = inputs.sources.get("calibration", relative_path("analysis_table", table="calibration"))
        return [title, "", f"No calibrated comparison: `{source}` is absent or empty.", ""]
    lines = [
        title,
        "",
        "A guard answers with a label, so it sits at one operating point; our models give scores. Each of "
        "our models is put at the threshold (flag when its unsafe score ≥ t) whose flag rate on the held-out "
        f"benign items — split `{table['calibration_split'].iloc[0]}` prompts that every policy labels safe "
        "under the mapping — is closest to the guard's over-refusal there. The threshold is chosen on that "
        "split only and then applied unchanged to the benchmarks (subset "
        f"`{inputs.subset}`). CAP / OVER-REF: means over the harmful / benign sets (no interval: the "
        "threshold's own uncertainty is not resampled); COPY with its Wilson interval. Full table: "
        f"`{relative_path('analysis_table', table='calibration')}`.",
        "",
    ]
    for guard in guards:
        for mapping, guard_mapping in GUARD_MAPPING.items():
            chosen = table[(table["guard"] == guard) & (table["mapping"] == mapping)]
            if chosen.empty:
                continue
            target = chosen["target_over_ref"].iloc[0]
            n_cal = chosen[chosen["model"] == guard]["calibration_n"]
            rows = []
            models = chosen.drop_duplicates("model")
            models = models[(models["model"] == guard) | (models["seed"] == inputs.main_seed)].copy()
            models["_rank"] = [
                (0, (0, 0, ""), ()) if m == guard else (1, inputs.scale_rank(str(sc)), natural_key(str(b)))
                for m, sc, b in zip(models["model"], models["scale"], models["branch"], strict=True)
            ]
            for _, m in models.sort_values("_rank").iterrows():
                mine = chosen[chosen["model"] == m["model"]].set_index(["benchmark", "metric"])

                def cell(benchmark: str, metric: str, interval: bool = False, mine=mine) -> str:
                    if (benchmark, metric) not in mine.index:
                        return MISSING
                    r = mine.loc[(benchmark, metric)]
                    return fmt_ci(r["value"], r["ci_low"], r["ci_high"]) if interval else fmt(r["value"])

                name = "**guard**" if m["model"] == guard else f"{m['scale']} {m['branch']}"
                rows.append(
                    [
                        name,
                        fmt(m["threshold"]),
                        fmt(m["achieved_over_ref"]),
                        cell(MEAN_HARMFUL, "cap"),
                        cell(MEAN_BENIGN, "over_ref"),
                        cell(COPYRIGHT_BENCHMARK, "cap", interval=True),
                    ]
                )
            lines += [
                f"**{_guard_label(inputs, guard)}, {guard_mapping}** — over-refusal on the calibration items "
                f"{fmt(target)} (n = {fmt_count(n_cal.iloc[0]) if len(n_cal) else MISSING}):",
                "",
                *markdown_table(
                    ["model", "threshold", "calibration over-ref", "CAP", "OVER-REF", "COPY"], rows
                ),
                "",
            ]
    return lines

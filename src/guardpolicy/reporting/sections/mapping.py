"""The binary mapping effect: how much over-refusal changes when BOUNDARY_SAFE counts as unsafe, per model
(mapping_effect_by_model.csv) and over our models (summary.json `mapping_effect`)."""

from __future__ import annotations

from guardpolicy.reporting.formatting import MISSING, fmt, fmt_signed, markdown_table, natural_key
from guardpolicy.reporting.inputs import ReportInputs


def mapping_effect_section(inputs: ReportInputs) -> list[str]:
    effect = inputs.mapping_effect_by_model
    effect = effect[effect["subset"] == inputs.subset]
    info = inputs.headline.set_index("model")
    rows = []
    for _, r in effect.iterrows():
        model = r["model"]
        scale = info.loc[model, "scale"] if model in info.index else MISSING
        branch = info.loc[model, "branch"] if model in info.index else model
        rows.append(
            (
                (inputs.scale_rank(str(scale)), natural_key(str(branch)), str(model)),
                [
                    str(scale),
                    str(model),
                    fmt_signed(r["mean_change"]),
                    f"{r['largest_benchmark']}: {fmt(r['largest_over_ref_default'])} → "
                    f"{fmt(r['largest_over_ref_boundary_unsafe'])} ({fmt_signed(r['largest_change'])})",
                ],
            )
        )
    rows.sort(key=lambda item: item[0])
    m = inputs.summary.get("mapping_effect") or {}
    return [
        "## Binary mapping effect",
        "",
        "Over-refusal when BOUNDARY_SAFE also counts as unsafe (mapping `boundary_unsafe`) minus the default "
        f"mapping, subset `{inputs.subset}`: per model the mean change over the sets with safe prompts, and "
        "the largest (the analysis gives no interval for a change).",
        "",
        *markdown_table(
            ["scale", "model", "mean change", "largest change"],
            [r for _, r in rows],
            "llrl",
            empty="No mapping effect was measured (no set with safe prompts was scored).",
        ),
        "",
        f"Largest over our models: `{m.get('largest_model', MISSING)}` on "
        f"`{m.get('largest_benchmark', MISSING)}`, "
        f"{fmt_signed(m.get('largest_change'))}; mean change {fmt_signed(m.get('mean_change'))}.",
        "",
    ]

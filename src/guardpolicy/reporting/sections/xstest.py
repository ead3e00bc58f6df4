"""XSTest: over-refusal per prompt type and pair consistency, per branch at the main seed."""

from __future__ import annotations

from guardpolicy.reporting.formatting import MISSING, fmt_ci, fmt_count, markdown_table
from guardpolicy.reporting.inputs import ReportInputs


def xstest_section(inputs: ReportInputs) -> list[str]:
    per_type = inputs.xstest[inputs.xstest["subset"] == inputs.subset]
    pairs = inputs.xstest_pairs[inputs.xstest_pairs["subset"] == inputs.subset]
    if per_type.empty and pairs.empty:
        return [
            "## XSTest",
            "",
            f"No XSTest rows at subset `{inputs.subset}` (XSTest missing from this run).",
            "",
        ]
    main = inputs.headline[inputs.headline["seed"] == inputs.main_seed]
    types = sorted(set(per_type["xstest_type"]))
    lines = [
        "## XSTest",
        "",
        "Over-refusal per XSTest prompt type, and pair consistency (both prompts of a safe/contrast pair "
        f"answered right), seed {inputs.main_seed}.",
        "",
    ]
    for scale in inputs.ordered_scales(main):
        models = main[main["scale"] == scale]
        rows = []
        for _, m in models.iterrows():
            mine = per_type[per_type["model"] == m["model"]].set_index("xstest_type")
            pair = pairs[pairs["model"] == m["model"]]
            cells = [m["branch"]]
            for t in types:
                cells.append(
                    fmt_ci(*mine.loc[t, ["over_ref", "ci_low", "ci_high"]]) if t in mine.index else MISSING
                )
            if len(pair):
                p = pair.iloc[0]
                cells.append(
                    f"{fmt_ci(p['consistency'], p['ci_low'], p['ci_high'])} "
                    f"({fmt_count(p['consistent'])}/{fmt_count(p['pairs'])})"
                )
            else:
                cells.append(MISSING)
            rows.append(cells)
        lines += [
            f"<details><summary>{scale} scale</summary>",
            "",
            *markdown_table(["branch", *types, "pair consistency"], rows),
            "",
            "</details>",
            "",
        ]
    return lines

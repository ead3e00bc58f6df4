"""`reports/agreement.md` and `reports/figures/agreement_heatmap.png` from the agreement report.

Pure: the report dict in, Markdown text or PNG bytes out. The PNG is byte-identical for the same report
(Agg backend, fixed size and dpi, no software/date metadata).
"""

from __future__ import annotations

import io
from typing import Any

from guardpolicy.analysis.agreement import confusion_arrays

FIGURE_SIZE_INCHES = (6.4, 5.2)
FIGURE_DPI = 100


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _num(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.3f}"


def agreement_markdown(report: dict[str, Any], figure_link: str = "figures/agreement_heatmap.png") -> str:
    """The report as Markdown; `figure_link` is the heatmap's path relative to the Markdown file."""
    first, second = report["pair"]
    classes = report["classes"]
    unsafe = " + ".join(report["unsafe_classes"])
    lines = [
        f"# Policy agreement: {first} vs {second}",
        "",
        f"**{report['verdict']}**",
        "",
        "| measure | value |",
        "|---|---|",
        f"| prompts | {report['n']:,} |",
        f"| coarse agreement (4 classes) | {_pct(report['coarse_agreement'])} |",
        f"| Cohen's κ, coarse | {_num(report['cohen_kappa_coarse'])} |",
        f"| binary agreement (unsafe = {unsafe}) | {_pct(report['binary_agreement'])} |",
        f"| Cohen's κ, binary | {_num(report['cohen_kappa_binary'])} |",
        f"| binary agreement (unsafe = {unsafe} + BOUNDARY_SAFE) "
        f"| {_pct(report['binary_agreement_boundary_unsafe'])} |",
        f"| Cohen's κ, binary with BOUNDARY_SAFE unsafe "
        f"| {_num(report['cohen_kappa_binary_boundary_unsafe'])} |",
        f"| disagreements | {report['disagreements']:,} |",
        f"| disagreements involving BOUNDARY_SAFE or COMPOUND "
        f"| {_pct(report.get('disagreements_in_boundary_or_compound'))} |",
        "",
        f"## Confusion (rows: {first}, columns: {second})",
        "",
        "Counts, with the row share in brackets.",
        "",
        f"| {first} \\ {second} | " + " | ".join(classes) + " | total |",
        "|---|" + "---:|" * (len(classes) + 1),
    ]
    for row in classes:
        cells = [
            f"{report['confusion'][row][col]:,} ({report['confusion_row_normalised'][row][col]:.0%})"
            for col in classes
        ]
        lines.append(f"| {row} | " + " | ".join(cells) + f" | {report['class_counts'][first][row]:,} |")
    lines.append(
        "| total | "
        + " | ".join(f"{report['class_counts'][second][c]:,}" for c in classes)
        + f" | {report['n']:,} |"
    )
    lines += [
        "",
        "## Disagreement per class",
        "",
        "An item counts for a class when either policy put it there; a disagreement involves two classes, "
        "so the shares add up to 200%.",
        "",
        "| class | items | disagreements | share of all disagreements |",
        "|---|---:|---:|---:|",
    ]
    for name in classes:
        entry = report["per_class"][name]
        lines.append(
            f"| {name} | {entry['n']:,} | {entry['disagreements']:,} | "
            f"{_pct(entry['share_of_disagreements'])} |"
        )
    lines += [
        "",
        "## Largest disagreement cells",
        "",
        f"| {first} | {second} | count | share of all disagreements |",
        "|---|---|---:|---:|",
    ]
    for cell in report["top_disagreements"]:
        lines.append(
            f"| {cell['first']} | {cell['second']} | {cell['count']:,} | "
            f"{_pct(cell['share_of_disagreements'])} |"
        )
    if not report["top_disagreements"]:
        lines.append("| – | – | 0 | – |")
    lines += [
        "",
        "## Agreement per source",
        "",
        "| source | prompts | coarse agreement | disagreements | share of all disagreements |",
        "|---|---:|---:|---:|---:|",
    ]
    for source, entry in sorted(report["per_source"].items()):
        lines.append(
            f"| {source} | {entry['n']:,} | {_pct(entry['agreement'])} | {entry['disagreements']:,} | "
            f"{_pct(entry['share_of_disagreements'])} |"
        )
    lines += ["", f"![row-normalised confusion]({figure_link})", ""]
    return "\n".join(lines)


def agreement_heatmap(report: dict[str, Any]) -> bytes:
    """PNG bytes: the row-normalised confusion as a heatmap, with counts and row shares in the cells."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first, second = report["pair"]
    classes = report["classes"]
    counts, normalised = confusion_arrays(report)  # [k, k] each
    figure, axes = plt.subplots(figsize=FIGURE_SIZE_INCHES, dpi=FIGURE_DPI)
    try:
        image = axes.imshow(normalised, cmap="Blues", vmin=0.0, vmax=1.0)
        figure.colorbar(image, ax=axes, fraction=0.046, pad=0.04, label=f"share of the {first} row")
        axes.set_xticks(range(len(classes)), labels=classes, rotation=30, ha="right")
        axes.set_yticks(range(len(classes)), labels=classes)
        axes.set_xlabel(second)
        axes.set_ylabel(first)
        axes.set_title(f"{first} vs {second}: coarse agreement {report['coarse_agreement']:.1%}")
        for i in range(len(classes)):
            for j in range(len(classes)):
                # White text on the dark end of the colour map so the numbers stay readable.
                colour = "white" if normalised[i, j] > 0.6 else "black"
                axes.text(
                    j,
                    i,
                    f"{counts[i, j]:,}\n{normalised[i, j]:.0%}",
                    ha="center",
                    va="center",
                    color=colour,
                    fontsize=9,
                )
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=FIGURE_DPI, metadata={"Software": None})
    finally:
        plt.close(figure)
    return buffer.getvalue()

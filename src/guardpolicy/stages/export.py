"""export@<policy> and `guardpolicy export <model> <dir>`: a guard checkpoint as a folder plain transformers
loads (`AutoModelForSequenceClassification`, guardpolicy.export.folder says what is in it and why).

The stage exports a teacher (``teacher-<policy>``, a model the report names) into exports/<model>, with its
evaluation metrics (reports/eval/<model>/metrics.json, a dependency of the stage). The command takes any
checkpoint: a model of the plan's `evaluations` (resolved through the layout, its metrics required unless
``--without_metrics``), or a checkpoint folder (metrics only from ``--metrics``). It refuses a target folder
that exists and is not empty. Reads no params.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from guardpolicy.errors import InputError
from guardpolicy.layout import Layout
from guardpolicy.training.names import planned_entry, teacher_name


def _planned_checkpoint(model: str, layout: Layout) -> Path:
    """A plan model's checkpoint folder: the model must be in the plan's `evaluations`."""
    planned_entry(layout.path("plan"), "evaluations", model, layout.relative("plan"))
    return layout.path("model", model=model)


def _metrics_of(model: str, layout: Layout, hint: str) -> Path:
    metrics = layout.path("eval_metrics", model=model)
    if not metrics.is_file():
        raise InputError(
            layout.relative("eval_metrics", model=model), f"evaluation metrics not found; {hint}"
        )
    return metrics


def export(
    model: str,
    directory: str,
    metrics: str | None = None,
    without_metrics: bool = False,
    license: str | None = None,
    layout: Layout | None = None,
) -> dict[str, Any]:
    """`guardpolicy export <model> <dir>`: `model` is a plan model (e.g. teacher-policy_a) or a checkpoint
    folder; `dir` must not exist or be empty. --metrics PATH: the evaluation metrics.json to summarise;
    --without_metrics: export a plan model without its metrics; --license ID: the card's license (default:
    what the encoder declares)."""
    from guardpolicy.export.folder import export_guard

    layout = layout or Layout.discover()
    if metrics is not None and without_metrics:
        raise InputError(metrics, "--metrics and --without_metrics exclude each other")
    folder = Path(model)
    if folder.is_dir():
        checkpoint = folder
        metrics_file = Path(metrics) if metrics is not None else None
    else:
        checkpoint = _planned_checkpoint(model, layout)
        if metrics is not None:
            metrics_file = Path(metrics)
        elif without_metrics:
            metrics_file = None
        else:
            metrics_file = _metrics_of(
                model, layout, f"run `dvc repro evaluate@{model}` or pass --without_metrics"
            )
    return export_guard(checkpoint, Path(directory), metrics_file=metrics_file, license_id=license)


def export_teacher(policy: str, layout: Layout | None = None) -> dict[str, Any]:
    """Stage export@<policy>: models/teacher-<policy> with its metrics -> exports/teacher-<policy> (paths
    from `layout`, default: this repository). The output is the stage's own, so an old one is replaced."""
    from guardpolicy.export.folder import export_guard

    layout = layout or Layout.discover()
    model = teacher_name(policy)
    checkpoint = _planned_checkpoint(model, layout)
    metrics_file = _metrics_of(model, layout, f"run `dvc repro evaluate@{model}` first")
    return export_guard(
        checkpoint, layout.path("export", model=model), metrics_file=metrics_file, overwrite=True
    )

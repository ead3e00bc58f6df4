"""Everything REPORT.md reads, already loaded (`ReportInputs`), and the orders its sections list scales in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from guardpolicy.analysis.views import OWN
from guardpolicy.metrics import COPYRIGHT_BENCHMARK


@dataclass(frozen=True)
class ReportInputs:
    """Everything the report reads, already loaded; the stage module fills it from files."""

    profile: str
    profile_description: str
    main_seed: int
    scales: tuple[str, ...]
    policies: tuple[str, ...]
    subset: str
    mapping: str
    val_split: str
    val_policy: str
    # analysis.small_set_n: benchmarks.csv flags sets scored on fewer prompts.
    small_set_n: int
    load_policy: tuple[str, ...]
    load_capability: tuple[str, ...]
    branch_descriptions: dict[str, str]
    teacher_descriptions: dict[str, str]
    # data/models.yaml `evaluations` as rows: model, kind, scale, branch, seed, recipe.
    plan: pd.DataFrame
    summary: dict[str, Any]
    scores: pd.DataFrame
    # benchmarks.csv: per benchmark and subset its role, gold counts and whether it is a small set.
    benchmark_sets: pd.DataFrame
    # mapping -> Table 1's numbers per model (reporting.headline.branch_headlines): the headline mapping,
    # and each guard mapping when open guards were scored.
    headlines: dict[str, pd.DataFrame]
    span: pd.DataFrame
    rank_test: pd.DataFrame
    correlations: pd.DataFrame
    mapping_effect_by_model: pd.DataFrame
    mapping_vs_retraining: pd.DataFrame
    xstest: pd.DataFrame
    xstest_pairs: pd.DataFrame
    contamination: dict[str, Any]
    agreement: dict[str, Any]
    benchmarks: dict[str, Any]
    # Optional inputs: None when the file is absent (the report says so, naming the file).
    noise_floor: pd.DataFrame | None = None
    fingerprint: pd.DataFrame | None = None
    # Issue 14's tables (stage analyse): per-scale spans vs noise, swing vs span, capability-only headline
    # (CAP, AUROC, CAP at a matched over-refusal) and competence on the benchmarks both policies call unsafe.
    span_scale: pd.DataFrame | None = None
    swing_vs_span: pd.DataFrame | None = None
    capability_headline: pd.DataFrame | None = None
    competence: pd.DataFrame | None = None
    # Per judged model: can any threshold meet both competence bars (tradeoff.csv)?
    tradeoff: pd.DataFrame | None = None
    # Open guard baselines (pipelines/baselines/dvc.yaml): the matched-threshold comparison, and per
    # configured guard its registry / run facts (model_id, revision, family, backend, model).
    calibration: pd.DataFrame | None = None
    guards: dict[str, dict[str, str]] = field(default_factory=dict)
    # analysis.primary_view: the view the Reading leads with (fixed in params before the run); the matched and
    # ranked views' verdicts are summary.json `views`, the flag rates on the reference base_rate.csv (None:
    # absent, an analysis older than the views).
    primary_view: str = OWN
    # analysis.targets: the copyright benchmark and the rank set expected on top of it.
    copyright_benchmark: str = COPYRIGHT_BENCHMARK
    top_set: str | None = None
    base_rate: pd.DataFrame | None = None
    # Figure name -> link relative to REPORT.md (None: the figure is absent).
    figure_links: dict[str, str | None] = field(default_factory=dict)
    # Input name -> path as given to the stage, for sentences naming an absent file.
    sources: dict[str, str] = field(default_factory=dict)

    def view_summary(self, view: str) -> dict[str, Any]:
        """summary.json as one view reads it: its verdict blocks (`views.<view>`; the top level is the own
        view's) over the blocks every view shares (competence settings, correlations, ...)."""
        if view == OWN:
            return self.summary
        return {**self.summary, **((self.summary.get("views") or {}).get(view) or {})}

    @property
    def primary(self) -> dict[str, Any]:
        """summary.json in the primary view."""
        return self.view_summary(self.primary_view)

    @property
    def headline(self) -> pd.DataFrame:
        """Table 1's numbers per model at the headline subset and mapping."""
        return self.headlines[self.mapping]

    def scale_rank(self, scale: str) -> tuple:
        """`all` first, then the params' scale order, then any other scale by name."""
        if scale == "all":
            return (0, 0, "")
        if scale in self.scales:
            return (1, self.scales.index(scale), "")
        return (2, 0, scale)

    def ordered_scales(self, frame: pd.DataFrame) -> list[str]:
        """The scales of `frame`'s rows: the params' order, then any other by name."""
        present = set(frame["scale"])
        ordered = [s for s in self.scales if s in present]
        return ordered + sorted(present - set(ordered))

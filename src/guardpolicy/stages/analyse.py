"""Stage analyse: every evaluated model's predictions -> the study's statistics in reports/analysis/.

Reads params `analysis`, the profile's `bootstrap_samples` and `seed` (the main seed picks the branch models
of the spans), `policies`, `evaluation.splits`, `branches` (to check `analysis.rank_sets`),
`baselines.guards`, the evaluation plan (data/models.yaml, checked against params by
guardpolicy.preconditions), the benchmark registry (each benchmark's role from its label kind),
reports/eval/<model>/predictions.parquet of every planned evaluation and, when given, the
fingerprint stage's reports/fingerprint.csv, reports/fingerprint.json (each benchmark's swing and the share
each policy labels unsafe: the load grouping, the competence set, swing vs span) and
reports/fingerprint_labels.parquet (every benchmark prompt's label under each policy: agreement with the VAL
policy's own labels); and, for every guard of params `baselines.guards` (the optional sub-pipeline
pipelines/baselines/dvc.yaml), reports/baselines/<guard>/predictions.parquet, analysed as model
`baseline-<guard>` beside ours (data/taxonomy.yaml says which gold classes are safe for the calibration).
Writes benchmarks.csv (per benchmark and subset: gold counts, role, small set), scores.csv (per dataset,
plus the headline means `mean:harmful` / `mean:benign` with their bootstrap intervals), span.csv,
span_scale.csv, noise_floor.csv, swing_vs_span.csv, rank_test.csv, correlations.csv, headline.csv,
competence.csv, tradeoff.csv, mapping_effect.csv, mapping_effect_by_model.csv, mapping_vs_retraining.csv,
xstest.csv, xstest_pairs.csv, baseline_parse.csv, calibration.csv and summary.json (see
docs/data-contracts.md, "Analysis"). With no guard configured the two baseline tables have a header only.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from guardpolicy.analysis.baselines import (
    baseline_evaluations,
    baseline_summary,
    calibrated_comparison,
    guard_model_name,
    parse_counts,
)
from guardpolicy.analysis.competence import competence_table, tradeoff_summary, tradeoff_table
from guardpolicy.analysis.correlations import correlation_table, policy_label_agreement
from guardpolicy.analysis.fingerprint import PROMPT_LABEL_COLUMNS
from guardpolicy.analysis.headline import headline_table
from guardpolicy.analysis.mapping import mapping_effect_by_model, mapping_vs_retraining
from guardpolicy.analysis.matrices import (
    GOLD_PREFIX,
    MAPPINGS,
    PARSE_STATUS,
    PREDICTION_COLUMNS,
    SPLIT,
    build_matrices,
    unsafe_labels,
)
from guardpolicy.analysis.scores import (
    benchmark_table,
    compute_draws,
    mapping_effect_table,
    model_frame,
    scores_table,
)
from guardpolicy.analysis.sensitivity import (
    PolicyFingerprint,
    compute_spans,
    load_groupings,
    primary_metric,
)
from guardpolicy.analysis.summary import build_summary
from guardpolicy.analysis.view_verdicts import (
    VIEW_TABLES,
    base_rate_summary,
    findings_by_view,
    flag_correlation,
    stacked_tables,
    targets_by_view,
    view_block,
    view_verdicts,
)
from guardpolicy.analysis.views import (
    MATCHED,
    OWN,
    RANKED,
    base_rate_table,
    matched_thresholds,
    reference_of,
    view_scores_table,
    view_stores,
)
from guardpolicy.analysis.xstest import (
    PAIR_COLUMNS,
    TYPE_COLUMNS,
    XSTEST,
    pair_consistency,
    type_over_refusal,
)
from guardpolicy.config.analysis import ANALYSIS, AnalysisConfig
from guardpolicy.config.baselines import BASELINES, BaselinesConfig
from guardpolicy.config.branches import BRANCHES, BranchConfig
from guardpolicy.config.core import ParamsFile
from guardpolicy.config.evaluation import EVALUATION, EvaluationConfig
from guardpolicy.config.policies import POLICIES, PolicyParams
from guardpolicy.config.profiles import ProfileConfig, active_profile
from guardpolicy.contracts.analysis import ANALYSIS_TABLES
from guardpolicy.contracts.model import write_csv
from guardpolicy.data.registry import load_registry
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.io import read_json, write_json
from guardpolicy.layout import Layout
from guardpolicy.preconditions import require_current_plan
from guardpolicy.taxonomy import load_taxonomy
from guardpolicy.training.names import read_plan_document

log = logging.getLogger(__name__)

FINGERPRINT_COLUMNS = ("benchmark", "policy", "agreement")
# Six significant digits: enough for any rate over the study's largest benchmark, stable across platforms.
MODEL_KEYS = ("kind", "scale", "branch", "seed", "recipe")


def read_predictions(
    path: Path, model: str, policies: tuple[str, ...], stage: str | None = None
) -> pd.DataFrame:
    """One model's predictions, the columns the analysis needs (and `parse_status` where present: a guard's);
    a missing file or column is an InputError naming the stage that writes it."""
    stage = stage or f"evaluate@{model}"
    if not path.is_file():
        raise InputError(path, f"file not found; stage {stage} writes it (`dvc repro {stage}`)")
    wanted = [*PREDICTION_COLUMNS, *(f"{GOLD_PREFIX}{policy}" for policy in policies)]
    present = set(pq.read_schema(path).names)
    missing = [column for column in wanted if column not in present]
    if missing:
        raise InputError(
            path,
            f"missing column(s) {missing}; rerun `dvc repro {stage}`",
            row="header",
            field=missing[0],
        )
    optional = [PARSE_STATUS] if PARSE_STATUS in present else []
    return pd.read_parquet(path, columns=[*wanted, *optional])


def read_fingerprint(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise InputError(path, "file not found; stage fingerprint writes it (`dvc repro fingerprint`)")
    frame = pd.read_csv(path)
    missing = [column for column in FINGERPRINT_COLUMNS if column not in frame.columns]
    if missing:
        raise InputError(path, f"missing column(s) {missing}", row="header", field=missing[0])
    return frame[list(FINGERPRINT_COLUMNS)]


def _fingerprint_stage_error(path: Path, message: str, **where: Any) -> InputError:
    return InputError(path, f"{message}; stage fingerprint writes it (`dvc repro fingerprint`)", **where)


def read_fingerprint_json(path: Path) -> PolicyFingerprint:
    """reports/fingerprint.json -> each benchmark's swing and the share of its prompts each policy labels
    unsafe; a missing file, key or a bad number is an InputError naming the file and the field."""
    if not path.is_file():
        raise _fingerprint_stage_error(path, "file not found")
    try:
        payload = read_json(path)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"not valid JSON: {exc.msg}", row=exc.lineno) from exc
    pair = payload.get("pair") if isinstance(payload, dict) else None
    benchmarks = payload.get("benchmarks") if isinstance(payload, dict) else None
    if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
        raise _fingerprint_stage_error(path, "expected `pair`: a list of two policy names", field="pair")
    if not isinstance(benchmarks, dict):
        raise _fingerprint_stage_error(path, "expected `benchmarks`: a mapping", field="benchmarks")
    swing: dict[str, float] = {}
    unsafe_share: dict[str, dict[str, float]] = {}
    for name, entry in sorted(benchmarks.items()):
        where = f"benchmarks.{name}"
        n = entry.get("n") if isinstance(entry, dict) else None
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            raise InputError(path, f"expected a positive prompt count, got {n!r}", field=f"{where}.n")
        shares = {}
        for policy, result in (entry.get("policies") or {}).items():
            unsafe = result.get("unsafe") if isinstance(result, dict) else None
            if not isinstance(unsafe, int) or isinstance(unsafe, bool) or not 0 <= unsafe <= n:
                raise InputError(
                    path,
                    f"expected an unsafe count in [0, {n}], got {unsafe!r}",
                    field=f"{where}.{policy}.unsafe",
                )
            shares[policy] = unsafe / n
        unsafe_share[name] = shares
        if "swing" in entry:
            value = entry["swing"]
            if not isinstance(value, int | float) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
                raise InputError(path, f"expected a swing in [0, 1], got {value!r}", field=f"{where}.swing")
            swing[name] = float(value)
    return PolicyFingerprint(pair=(pair[0], pair[1]), swing=swing, unsafe_share=unsafe_share)


def read_policy_labels(path: Path, policy: str, unsafe_classes: tuple[str, ...]) -> pd.DataFrame:
    """reports/fingerprint_labels.parquet -> `policy`'s binary label of every benchmark prompt it labelled
    (benchmark, id, unsafe), `unsafe_classes` counting as unsafe. Empty when the policy labelled none (an
    `import` policy cannot label benchmark prompts)."""
    if not path.is_file():
        raise _fingerprint_stage_error(path, "file not found (every benchmark prompt's label per policy)")
    present = set(pq.read_schema(path).names)
    missing = [column for column in PROMPT_LABEL_COLUMNS if column not in present]
    if missing:
        raise _fingerprint_stage_error(path, f"missing column(s) {missing}", row="header", field=missing[0])
    frame = pd.read_parquet(path, columns=["benchmark", "id", "policy", "coarse"])
    frame = frame[frame["policy"].astype(str) == policy]
    # Rows are numbered as in the file (the frame keeps the file's row index after the policy filter).
    if frame["coarse"].isna().any():
        row = int(frame.index[frame["coarse"].isna().to_numpy()][0]) + 1
        raise InputError(path, f"null label of policy {policy!r}", row=row, field="coarse")
    duplicated = frame.duplicated(["benchmark", "id"])
    if duplicated.any():
        row = int(frame.index[duplicated.to_numpy()][0]) + 1
        raise InputError(path, f"prompt labelled twice by policy {policy!r}", row=row, field="id")
    return pd.DataFrame(
        {
            "benchmark": frame["benchmark"].astype(str).to_numpy(),
            "id": frame["id"].astype(str).to_numpy(),
            "unsafe": frame["coarse"].astype(str).isin(list(unsafe_classes)).to_numpy(),
        }
    )


@dataclass(frozen=True)
class AnalysisParams:
    """The params sections stage analyse reads."""

    analysis: AnalysisConfig
    policies: dict[str, PolicyParams]
    evaluation: EvaluationConfig
    branches: dict[str, BranchConfig]
    active: ProfileConfig
    baselines: BaselinesConfig

    @classmethod
    def read(cls, path: str | Path) -> AnalysisParams:
        params = ParamsFile.read(path)
        _, profile = active_profile(params)
        return cls(
            params.load(ANALYSIS),
            params.load(POLICIES),
            params.load(EVALUATION),
            params.load(BRANCHES),
            profile,
            params.load(BASELINES),
        )


def check_analysis_params(params: AnalysisParams, where: str) -> None:
    """Cross-references of params `analysis` one section cannot check alone (ConfigError naming the key)."""
    config = params.analysis
    if config.val_policy not in params.policies:
        raise ConfigError(
            f"{where}: analysis.val_policy: {config.val_policy!r} is not one of the policies "
            f"{sorted(params.policies)}"
        )
    for key in ("val_split", "calibration_split"):
        split = getattr(config, key)
        if split not in params.evaluation.splits:
            raise ConfigError(
                f"{where}: analysis.{key}: {split!r} is not scored; evaluation.splits lists "
                f"{list(params.evaluation.splits)}"
            )
    for name, members in config.rank_sets.items():
        unknown = sorted(set(members) - set(params.branches))
        if unknown:
            raise ConfigError(f"{where}: analysis.rank_sets.{name}: unknown branch(es) {unknown}")
    unknown = sorted(set(config.targets.over_refusal_teachers) - set(params.policies))
    if unknown:
        raise ConfigError(
            f"{where}: analysis.targets.over_refusal_teachers: {unknown} are not among the policies "
            f"{sorted(params.policies)}"
        )


def warn_unregistered(params: AnalysisParams, registry: Mapping[str, Any], where: str) -> None:
    """Log each benchmark that params `analysis.rank_direction` / `analysis.targets` name but the registry
    lacks (a typo, or a trimmed registry): its rank test is then two-sided and its target not measured."""
    config = params.analysis
    named = {
        f"analysis.rank_direction.{name}.{benchmark}": benchmark
        for name, directions in config.rank_direction.items()
        for benchmark in directions
    }
    targets = config.targets
    named |= {
        f"analysis.targets.capture_benchmarks[{i}]": b for i, b in enumerate(targets.capture_benchmarks)
    }
    named["analysis.targets.over_refusal_benchmark"] = targets.over_refusal_benchmark
    named["analysis.targets.copyright_benchmark"] = targets.copyright_benchmark
    for key, benchmark in named.items():
        if benchmark not in registry:
            log.warning("%s: %s: %r is not in the benchmark registry", where, key, benchmark)


def check_evaluations(evaluations: Mapping[str, Any], where: str) -> None:
    for model, entry in evaluations.items():
        missing = [key for key in MODEL_KEYS if not isinstance(entry, Mapping) or key not in entry]
        if missing:
            raise ConfigError(f"{where}: evaluations.{model}: missing key(s) {missing}")


def analyse(
    layout: Layout | None = None,
    *,
    evaluations: Mapping[str, Mapping[str, Any]] | None = None,
    use_fingerprint: bool = True,
) -> dict:
    """Compute every table of the analysis and summary.json; returns the summary. Paths from `layout`
    (default: this repository).

    `evaluations` (model -> kind, scale, branch, seed, recipe) replaces the plan file when given (tests and
    ad-hoc model sets); otherwise the plan's `evaluations` are used after checking the plan is current.
    `use_fingerprint=False` runs without the fingerprint: no fingerprint summary, load grouping, competence
    set, swing-vs-span test or VAL-policy agreement (each says so). Otherwise fingerprint.csv, its JSON twin
    and the per-prompt labels must all exist. Every guard of params `baselines.guards` must have its
    predictions in reports/baselines/<guard>/.
    """
    started = time.perf_counter()
    layout = layout or Layout.discover()
    params_file = str(layout.path("params"))
    plan_file = str(layout.path("plan"))
    params = AnalysisParams.read(params_file)
    config = params.analysis
    check_analysis_params(params, params_file)
    if evaluations is None:
        require_current_plan(layout)
        evaluations = read_plan_document(plan_file)["evaluations"]
        where = plan_file
    else:
        where = "evaluations"
    check_evaluations(evaluations, where)
    label_kinds = {
        name: spec.label.kind for name, spec in load_registry(layout.path("benchmark_registry")).items()
    }
    warn_unregistered(params, label_kinds, params_file)
    policies = tuple(params.policies)
    samples = params.active.bootstrap_samples

    files = {model: str(layout.path("predictions", model=model)) for model in evaluations}
    predictions = {
        model: read_predictions(Path(files[model]), model, policies) for model in sorted(evaluations)
    }
    guards = sorted(params.baselines.guards)
    for guard in guards:
        model = guard_model_name(guard)
        files[model] = str(layout.path("baseline_predictions", guard=guard))
        predictions[model] = read_predictions(
            Path(files[model]), model, policies, stage=f"baseline@{guard} (pipelines/baselines/dvc.yaml)"
        )
    fingerprint = read_fingerprint(layout.path("fingerprint")) if use_fingerprint else None
    swings: PolicyFingerprint | None = None
    labels_path: Path | None = None
    if use_fingerprint:
        swings = read_fingerprint_json(layout.path("fingerprint_json"))
        labels_path = layout.path("fingerprint_labels")
    models = model_frame({**evaluations, **baseline_evaluations(guards)})
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    unsafe = unsafe_labels(taxonomy)
    model_order, matrices = build_matrices(predictions, label_kinds, files, policies, unsafe)
    policy_agreement, policy_note = None, "no fingerprint given: no per-prompt labels of the VAL policy"
    if labels_path is not None:
        labels = read_policy_labels(labels_path, config.val_policy, unsafe[config.mapping])
        if labels.empty:
            policy_note = f"policy {config.val_policy!r} labelled no benchmark prompt ({labels_path})"
        else:
            policy_agreement = policy_label_agreement(
                matrices, labels, config.subset, config.mapping, layout.relative("fingerprint_labels")
            )
    log.info(
        "analyse: %d models (%d open guards), %d datasets, B = %d bootstrap samples (seed %d)",
        len(model_order),
        len(guards),
        len(matrices),
        samples,
        config.bootstrap_seed,
    )
    store = compute_draws(model_order, matrices, samples, config.bootstrap_seed)
    seed = params.active.seed

    scores = scores_table(store, models, config.confidence, config.wilson_max_n)
    # The matched and ranked views (docs/study.md, "Three views of every score"): the calibration split's
    # agreed-safe prompts are the reference, resampled alongside every benchmark.
    reference = reference_of(
        matrices, config.calibration_split, config.matched_over_ref, samples, config.bootstrap_seed
    )
    thresholds = {mapping: matched_thresholds(reference, mapping, len(model_order)) for mapping in MAPPINGS}
    stores = view_stores(store, matrices, reference, thresholds, config.bootstrap_seed)
    primary = {
        m.name: primary_metric(m.name, m.role, config.primary_metric) for m in matrices if m.role != SPLIT
    }
    view_scores = view_scores_table(stores, scores, models, primary, reference, config.confidence)
    spans = {
        view: compute_spans(view_store, models, seed, config.load, config.primary_metric, swings)
        for view, view_store in stores.items()
    }
    groupings = load_groupings(spans[OWN], config.subset, config.mapping)
    correlations = correlation_table(
        store,
        models,
        seed,
        groupings,
        config.val_split,
        config.val_policy,
        config.subset,
        config.mapping,
        policy_agreement,
        policy_note,
    )
    rates = {OWN: scores, MATCHED: view_scores[view_scores["view"] == MATCHED], RANKED: None}
    verdicts = {
        view: view_verdicts(
            view_store,
            spans[view],
            models=models,
            main_seed=seed,
            config=config,
            fingerprint=swings,
            rates=rates[view],
            correlations=correlations if view == OWN else None,
        )
        for view, view_store in stores.items()
    }
    own = verdicts[OWN]
    view_tables = stacked_tables(list(verdicts.values()))
    headline = headline_table(
        matrices,
        store,
        models,
        groupings,
        subset=config.subset,
        mapping=config.mapping,
        calibration_split=config.calibration_split,
        matched_over_ref=config.matched_over_ref,
        confidence=config.confidence,
    )
    agreed_unsafe = (
        swings.agreed_unsafe(config.competence.max_swing, config.competence.min_unsafe) if swings else []
    )
    competence = competence_table(
        scores,
        store,
        models,
        agreed_unsafe,
        subset=config.subset,
        mapping=config.mapping,
        confidence=config.confidence,
    )
    tradeoff = tradeoff_table(
        matrices,
        models,
        model_order,
        config.targets,
        main_seed=seed,
        subset=config.subset,
        mapping=config.mapping,
    )
    mapping_effect = mapping_effect_table(store)
    mapping_by_model = mapping_effect_by_model(mapping_effect)
    levers = mapping_vs_retraining(scores, subset=config.subset, main_seed=seed)
    xstest = [m for m in matrices if m.name == XSTEST]
    if xstest:
        types = type_over_refusal(xstest[0], model_order, config.mapping, config.confidence)
        pairs = pair_consistency(xstest[0], model_order, config.mapping, config.confidence)
    else:
        log.info("analyse: %s was not evaluated; xstest.csv and xstest_pairs.csv are empty", XSTEST)
        types = pd.DataFrame(columns=list(TYPE_COLUMNS))
        pairs = pd.DataFrame(columns=list(PAIR_COLUMNS))
    parse = parse_counts(predictions)
    calibration = calibrated_comparison(
        matrices,
        model_order,
        models,
        calibration_split=config.calibration_split,
        subset=config.subset,
        confidence=config.confidence,
    )
    base_rate = base_rate_table(reference, thresholds, models, model_order, config.confidence)
    benchmarks = [m.name for m in matrices if m.role != SPLIT]
    guard_models = {guard_model_name(guard) for guard in guards}
    summary = build_summary(
        subset=config.subset,
        mapping=config.mapping,
        confidence=config.confidence,
        bootstrap_samples=samples,
        n_models=len(model_order) - len(guard_models),
        n_benchmarks=len(benchmarks),
        spans=own.tables["span"],
        copyright_vs_noise=own.copyright_vs_noise,
        load_contrast=own.load_contrast,
        rank_tests=own.tables["rank_test"],
        correlations=correlations,
        # Our models' mapping effect; the guards' (relaxed vs strict) is summarised under `baselines`.
        mapping_effect=mapping_effect[~mapping_effect["model"].isin(guard_models)],
        fingerprint=fingerprint,
        baselines=baseline_summary(scores, parse, config.subset),
        load_contrast_study=own.load_contrast_study,
        agreed_spans=own.agreed_spans,
        span_scale=own.tables["span_scale"],
        swing_vs_span=own.tables["swing_vs_span"],
        rank_chance=own.rank_chance,
        competence={
            "max_swing": config.competence.max_swing,
            "min_unsafe": config.competence.min_unsafe,
            "benchmarks": ",".join(agreed_unsafe),
            "fingerprint": swings is not None,
        },
        targets=own.targets,
        competence_tradeoff=tradeoff_summary(tradeoff, config.targets),
        study=own.study,
        primary_view=config.primary_view,
        views={
            view: view_block(verdict, config.subset, config.mapping)
            for view, verdict in verdicts.items()
            if view != OWN
        },
        study_views=findings_by_view(verdicts, config.primary_view),
        targets_views=targets_by_view(verdicts, config.primary_view),
        base_rate=base_rate_summary(
            base_rate,
            {
                view: flag_correlation(
                    view_store, models, seed, config.subset, config.mapping, config.confidence
                )
                for view, view_store in stores.items()
            },
            models,
            seed,
            reference=reference.split,
            mapping=config.mapping,
            matched_over_ref=config.matched_over_ref,
        ),
    )

    tables = {
        "benchmarks.csv": benchmark_table(matrices, config.small_set_n),
        "scores.csv": scores,
        "view_scores.csv": view_scores,
        **{f"{name}.csv": view_tables[name] for name in VIEW_TABLES},
        "correlations.csv": correlations,
        "headline.csv": headline,
        "competence.csv": competence,
        "tradeoff.csv": tradeoff,
        "mapping_effect.csv": mapping_effect,
        "mapping_effect_by_model.csv": mapping_by_model,
        "mapping_vs_retraining.csv": levers,
        "xstest.csv": types,
        "xstest_pairs.csv": pairs,
        "baseline_parse.csv": parse,
        "calibration.csv": calibration,
        "base_rate.csv": base_rate,
    }
    for name, table in tables.items():
        path = layout.path("analysis_table", table=name.removesuffix(".csv"))
        write_csv(path, table, ANALYSIS_TABLES[name.removesuffix(".csv")])
        log.info("analyse: wrote %s (%d rows)", path, len(table))
    write_json(layout.path("summary"), summary)
    for view, verdict in verdicts.items():
        log.info(
            "analyse: %s view: copyright vs noise floor: %s; load contrast: %s",
            view,
            verdict.copyright_vs_noise["verdict"],
            verdict.load_contrast["verdict"],
        )
    log.info("analyse: done in %.1f s", time.perf_counter() - started)
    return summary

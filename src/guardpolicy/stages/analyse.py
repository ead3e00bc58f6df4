"""Stage analyse: every evaluated model's predictions -> the study's statistics in reports/analysis/.

Reads params `analysis`, the profile's `bootstrap_samples` and seeds (the main seed picks the branch models
of the spans), `policies`, `evaluation.splits`, `branches` (to check `analysis.rank_sets`), the evaluation
plan (data/models.yaml, checked against params), the benchmark registry (each benchmark's role from its label
kind), reports/eval/<model>/predictions.parquet of every planned evaluation and, when given,
reports/fingerprint.csv; and, for every guard of params `baselines.guards` (the optional sub-pipeline
pipelines/baselines/dvc.yaml), reports/baselines/<guard>/predictions.parquet, analysed as model
`baseline-<guard>` beside ours (data/taxonomy.yaml says which gold classes are safe for the calibration).
Writes scores.csv (per dataset, plus the headline means `mean:harmful` / `mean:benign` with their bootstrap
intervals), span.csv, noise_floor.csv, rank_test.csv, correlations.csv, mapping_effect.csv, xstest.csv,
xstest_pairs.csv, baseline_parse.csv, calibration.csv and summary.json (see docs/data-contracts.md,
"Analysis"). With no guard configured the two baseline tables have a header only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from guardpolicy.analysis.agreement import BOUNDARY_CLASS
from guardpolicy.analysis.baselines import (
    baseline_evaluations,
    baseline_summary,
    calibrated_comparison,
    guard_model_name,
    parse_counts,
)
from guardpolicy.analysis.scores import (
    BOUNDARY_UNSAFE,
    DEFAULT,
    GOLD_PREFIX,
    PARSE_STATUS,
    PREDICTION_COLUMNS,
    SPLIT,
    build_matrices,
    compute_draws,
    model_frame,
    scores_table,
)
from guardpolicy.analysis.sensitivity import (
    compute_spans,
    copyright_vs_noise,
    correlation_table,
    load_contrast,
    mapping_effect_table,
    noise_floor_table,
    rank_test_table,
    span_table,
)
from guardpolicy.analysis.summary import build_summary
from guardpolicy.analysis.xstest import (
    PAIR_COLUMNS,
    TYPE_COLUMNS,
    XSTEST,
    pair_consistency,
    type_over_refusal,
)
from guardpolicy.baselines import BASELINES_DIR
from guardpolicy.config import Params, load_params
from guardpolicy.data.registry import load_registry
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.io import atomic_path, write_json
from guardpolicy.taxonomy import TAXONOMY_FILE, load_taxonomy
from guardpolicy.training.branches import PLAN_FILE, check_plan_document, main_seed

log = logging.getLogger(__name__)

EVAL_DIR = "reports/eval"
ANALYSIS_DIR = "reports/analysis"
REGISTRY_FILE = "data/benchmarks.yaml"
FINGERPRINT_FILE = "reports/fingerprint.csv"
PREDICTIONS_NAME = "predictions.parquet"
FINGERPRINT_COLUMNS = ("benchmark", "policy", "agreement")
# Six significant digits: enough for any rate over the study's largest benchmark, stable across platforms.
FLOAT_FORMAT = "%.6g"
MODEL_KEYS = ("kind", "scale", "branch", "seed", "recipe")


def predictions_path(eval_dir: str | Path, model: str) -> Path:
    return Path(eval_dir) / model / PREDICTIONS_NAME


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


def check_analysis_params(params: Params, where: str) -> None:
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


def check_evaluations(evaluations: Mapping[str, Any], where: str) -> None:
    for model, entry in evaluations.items():
        missing = [key for key in MODEL_KEYS if not isinstance(entry, Mapping) or key not in entry]
        if missing:
            raise ConfigError(f"{where}: evaluations.{model}: missing key(s) {missing}")


def write_csv(path: Path, frame: pd.DataFrame) -> None:
    """A table as CSV, atomically: one header row, floats with 6 significant digits, nulls empty."""
    frame = frame.copy()
    for name in frame.columns:
        column = frame[name]
        # Columns that mix floats with None (undefined statistics) must be float for float_format to apply.
        if column.dtype == object and all(
            value is None or (isinstance(value, int | float | np.number) and not isinstance(value, bool))
            for value in column
        ):
            frame[name] = column.astype("float64")
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False, float_format=FLOAT_FORMAT, lineterminator="\n")


def analyse(
    params_file: str = "params.yaml",
    plan_file: str = PLAN_FILE,
    eval_dir: str = EVAL_DIR,
    registry_file: str = REGISTRY_FILE,
    fingerprint_file: str | None = FINGERPRINT_FILE,
    out_dir: str = ANALYSIS_DIR,
    evaluations: Mapping[str, Mapping[str, Any]] | None = None,
    baselines_dir: str = BASELINES_DIR,
    taxonomy_file: str = TAXONOMY_FILE,
) -> dict:
    """Compute every table of the analysis and summary.json; returns the summary.

    `evaluations` (model -> kind, scale, branch, seed, recipe) replaces the plan file when given (tests and
    ad-hoc model sets); otherwise the plan's `evaluations` are used after checking the plan is current.
    `fingerprint_file=None` skips the fingerprint summary; a named file that is missing is an error.
    Every guard of params `baselines.guards` must have its predictions in `baselines_dir`.
    """
    started = time.perf_counter()
    params = load_params(params_file)
    config = params.analysis
    check_analysis_params(params, params_file)
    if evaluations is None:
        evaluations = check_plan_document(params, plan_file, params_file)["evaluations"]
        where = plan_file
    else:
        where = "evaluations"
    check_evaluations(evaluations, where)
    label_kinds = {name: spec.label.kind for name, spec in load_registry(registry_file).items()}
    policies = tuple(params.policies)
    samples = params.active.bootstrap_samples

    files = {model: str(predictions_path(eval_dir, model)) for model in evaluations}
    predictions = {
        model: read_predictions(Path(files[model]), model, policies) for model in sorted(evaluations)
    }
    guards = sorted(params.baselines.guards)
    for guard in guards:
        model = guard_model_name(guard)
        files[model] = str(Path(baselines_dir) / guard / PREDICTIONS_NAME)
        predictions[model] = read_predictions(
            Path(files[model]), model, policies, stage=f"baseline@{guard} (pipelines/baselines/dvc.yaml)"
        )
    fingerprint = read_fingerprint(Path(fingerprint_file)) if fingerprint_file is not None else None
    models = model_frame({**evaluations, **baseline_evaluations(guards)})
    taxonomy = load_taxonomy(taxonomy_file)
    unsafe_labels = {
        DEFAULT: tuple(taxonomy.unsafe_classes),
        BOUNDARY_UNSAFE: tuple(dict.fromkeys((*taxonomy.unsafe_classes, BOUNDARY_CLASS))),
    }
    model_order, matrices = build_matrices(predictions, label_kinds, files, policies, unsafe_labels)
    log.info(
        "analyse: %d models (%d open guards), %d datasets, B = %d bootstrap samples (seed %d)",
        len(model_order),
        len(guards),
        len(matrices),
        samples,
        config.bootstrap_seed,
    )
    store = compute_draws(model_order, matrices, samples, config.bootstrap_seed)
    seed = main_seed(params)

    scores = scores_table(store, models, config.confidence, config.wilson_max_n)
    spans = compute_spans(store, models, seed, config.load, config.primary_metric)
    spans_frame = span_table(spans, config.confidence)
    noise = noise_floor_table(spans, config.confidence)
    ranks = rank_test_table(store, models, seed, config.rank_sets, config.primary_metric)
    correlations = correlation_table(
        store, models, seed, config.load, config.val_split, config.val_policy, config.subset, config.mapping
    )
    mapping_effect = mapping_effect_table(store)
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
    contrast = load_contrast(spans, config.subset, config.mapping, config.confidence)
    copyright_noise = copyright_vs_noise(spans, config.subset, config.mapping, config.confidence)
    benchmarks = [m.name for m in matrices if m.role != SPLIT]
    guard_models = {guard_model_name(guard) for guard in guards}
    summary = build_summary(
        subset=config.subset,
        mapping=config.mapping,
        confidence=config.confidence,
        bootstrap_samples=samples,
        n_models=len(model_order) - len(guard_models),
        n_benchmarks=len(benchmarks),
        spans=spans_frame,
        copyright_vs_noise=copyright_noise,
        load_contrast=contrast,
        rank_tests=ranks,
        correlations=correlations,
        # Our models' mapping effect; the guards' (relaxed vs strict) is summarised under `baselines`.
        mapping_effect=mapping_effect[~mapping_effect["model"].isin(guard_models)],
        fingerprint=fingerprint,
        baselines=baseline_summary(scores, parse, config.subset),
    )

    out = Path(out_dir)
    tables = {
        "scores.csv": scores,
        "span.csv": spans_frame,
        "noise_floor.csv": noise,
        "rank_test.csv": ranks,
        "correlations.csv": correlations,
        "mapping_effect.csv": mapping_effect,
        "xstest.csv": types,
        "xstest_pairs.csv": pairs,
        "baseline_parse.csv": parse,
        "calibration.csv": calibration,
    }
    for name, table in tables.items():
        write_csv(out / name, table)
        log.info("analyse: wrote %s (%d rows)", out / name, len(table))
    write_json(out / "summary.json", summary)
    log.info(
        "analyse: copyright vs noise floor: %s; load contrast: %s (%.1f s)",
        copyright_noise["verdict"],
        contrast["verdict"],
        time.perf_counter() - started,
    )
    return summary

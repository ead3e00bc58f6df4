"""A finished run's analysis tables and reports, synthetic, with known answers planted
(docs/data-contracts.md): the inputs of stage report and of the guard cards."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pandas as pd
import yaml

from guardpolicy.analysis.mapping import mapping_effect_by_model, mapping_vs_retraining
from guardpolicy.analysis.summary import VIEW_BLOCK_KEYS
from guardpolicy.layout import Layout
from helpers.benchmarks import write_params
from helpers.paths import MIRROR

SCALES = ("small", "large")
BRANCHES = tuple(f"E{i}" for i in range(1, 11))
TEACHERS = ("teacher-policy_a", "teacher-policy_b")
# benchmark -> (role, load, n); harmbench_standard is small on purpose (the small-set caveat).
BENCHMARKS = {
    "harmbench_copyright": ("harmful", "policy", 100),
    "advbench": ("harmful", "capability", 500),
    "harmbench_standard": ("harmful", "capability", 40),
    "jbb_benign": ("benign", "policy", 100),
    "wildguard_benign": ("benign", "other", 900),
    "xstest": ("mixed", "policy", 450),
}
HEADLINE = ("clean", "default")
MAIN_SEED = 42
# Known answers planted in the tables.
COPY_SMALL_E8 = (0.812, 0.723, 0.880)
FINGERPRINT_ROW = (0.9, 0.83, 0.95)
# The planted interval of the headline means: value - 0.021, value + 0.034.
MEAN_CI = (0.021, 0.034)
# The fingerprint's swing per benchmark (wildguard_benign: none).
SWINGS = {
    "harmbench_copyright": 1.0,
    "advbench": 0.52,
    "harmbench_standard": 0.0,
    "jbb_benign": 1.0,
    "xstest": 0.0,
}
# Issue 14's planted numbers: the competence verdict, the swing-vs-span ρ, the capability-only CAP.
COMPETENCE_FLAG = ("harmbench_standard", "small")
SWING_RHO = (0.81, 0.42, 0.97)
CAPABILITY_CAP = 0.777
# The threshold trade-off: the best worst-set capture at the over-refusal bar, planted on small-E2.
TRADEOFF_BEST = ("small-E2", 0.654)
VIEWS = ("own", "matched", "ranked")
# The views' spans: the own view's planted Δ, lowered by this much in the other views.
VIEW_SHIFT = {"own": 0.0, "matched": 0.1, "ranked": 0.2}
# The copyright verdict in the matched view (the primary one): Δ, and Δ − Φ, each with its interval.
MATCHED_COPYRIGHT = ((0.777, 0.7, 0.85), (0.727, 0.65, 0.8))
# The CAP/OVER-REF correlation across branches per view.
FLAG_R = {"own": (0.957, 0.9, 0.99), "matched": (0.41, 0.05, 0.7), "ranked": (-0.12, -0.5, 0.3)}


def models_table() -> list[dict]:
    models = []
    for scale in SCALES:
        for branch in BRANCHES:
            models.append(
                {
                    "model": f"{scale}-{branch}",
                    "kind": "branch",
                    "scale": scale,
                    "branch": branch,
                    "seed": MAIN_SEED,
                    "recipe": f"{scale}-{branch}",
                }
            )
    for seed in (43, 44):
        models.append(
            {
                "model": f"small-E8-s{seed}",
                "kind": "branch",
                "scale": "small",
                "branch": "E8",
                "seed": seed,
                "recipe": "small-E8",
            }
        )
    for teacher in TEACHERS:
        models.append(
            {
                "model": teacher,
                "kind": "teacher",
                "scale": "large",
                "branch": teacher,
                "seed": MAIN_SEED,
                "recipe": teacher,
            }
        )
    return models


def planted_value(
    model_index: int, benchmark_index: int, metric_index: int, subset: str, mapping: str
) -> float:
    offset = (subset == "full") * 7 + (mapping == "boundary_unsafe") * 13
    return round(((model_index * 37 + benchmark_index * 11 + metric_index * 5 + offset) % 97) / 100, 3)


def benchmarks_table(small_set_n: int = 100) -> pd.DataFrame:
    """benchmarks.csv of the planted benchmarks: a mixed set has `n` prompts of each class."""
    rows = []
    for benchmark, (role, _, n) in sorted(BENCHMARKS.items()):
        n_unsafe = 0 if role == "benign" else n
        n_safe = 0 if role == "harmful" else n
        for subset in ("full", "clean"):
            rows.append(
                {
                    "benchmark": benchmark,
                    "subset": subset,
                    "role": role,
                    "n_items": n_unsafe + n_safe,
                    "n_unsafe": n_unsafe,
                    "n_safe": n_safe,
                    "n_scored": n,
                    "small_set": n < small_set_n,
                }
            )
    return pd.DataFrame(rows)


def scores_table() -> pd.DataFrame:
    rows = []
    for m_index, model in enumerate(models_table()):
        for b_index, (benchmark, (role, _, n)) in enumerate(BENCHMARKS.items()):
            metrics = {"harmful": ["cap"], "benign": ["over_ref"], "mixed": ["cap", "over_ref", "f1"]}[role]
            for subset in ("clean", "full"):
                for mapping in ("default", "boundary_unsafe"):
                    for k_index, metric in enumerate(metrics):
                        value = planted_value(m_index, b_index, k_index, subset, mapping)
                        low, high = max(value - 0.05, 0.0), min(value + 0.05, 1.0)
                        if (model["model"], benchmark, metric, subset, mapping) == (
                            "small-E8",
                            "harmbench_copyright",
                            "cap",
                            *HEADLINE,
                        ):
                            value, low, high = COPY_SMALL_E8
                        rows.append(
                            {
                                **model,
                                "benchmark": benchmark,
                                "subset": subset,
                                "mapping": mapping,
                                "metric": metric,
                                "value": value,
                                "ci_low": low,
                                "ci_high": high,
                                "interval": "bootstrap",
                                "n": n,
                            }
                        )
        # VAL: 4-class accuracy on the val split, written once (clean, default).
        for p_index, policy in enumerate(("policy_a", "policy_b")):
            value = planted_value(m_index, 20, p_index, "clean", "default")
            rows.append(
                {
                    **model,
                    "benchmark": "split:val",
                    "subset": "clean",
                    "mapping": "default",
                    "metric": f"acc_{policy}",
                    "value": value,
                    "ci_low": value - 0.03,
                    "ci_high": value + 0.03,
                    "interval": "bootstrap",
                    "n": 600,
                }
            )
    return with_headline_means(pd.DataFrame(rows))


def with_headline_means(scores: pd.DataFrame) -> pd.DataFrame:
    """The analysis' `mean:harmful` / `mean:benign` rows: the unweighted mean and a planted interval."""
    means = []
    for key, metric, role in (("mean:harmful", "cap", "harmful"), ("mean:benign", "over_ref", "benign")):
        members = [b for b, (r, _, _) in BENCHMARKS.items() if r == role]
        rows = scores[scores["benchmark"].isin(members) & (scores["metric"] == metric)]
        identity = ["model", "kind", "scale", "branch", "seed", "recipe", "subset", "mapping"]
        grouped = rows.groupby(identity, sort=True).agg(value=("value", "mean"), n=("n", "sum")).reset_index()
        grouped["benchmark"], grouped["metric"], grouped["interval"] = key, metric, "bootstrap"
        grouped["ci_low"], grouped["ci_high"] = grouped["value"] - MEAN_CI[0], grouped["value"] + MEAN_CI[1]
        means.append(grouped[list(scores.columns)])
    return pd.concat([scores, *means], ignore_index=True)


def span_table() -> pd.DataFrame:
    rows = []
    for b_index, (benchmark, (role, load, _)) in enumerate(BENCHMARKS.items()):
        for subset, mapping, view in (
            (subset, mapping, view)
            for subset in ("clean", "full")
            for mapping in ("default", "boundary_unsafe")
            for view in VIEWS
        ):
            delta = round(max(0.9 - 0.1 * b_index - VIEW_SHIFT[view], 0.05), 3)
            phi = None if benchmark == "wildguard_benign" else round(0.05 + 0.01 * b_index, 3)
            own_metric = "over_ref" if role != "harmful" else "cap"
            rows.append(
                {
                    "benchmark": benchmark,
                    "subset": subset,
                    "mapping": mapping,
                    "view": view,
                    "load": load,
                    "study_load": load,
                    "swing": SWINGS.get(benchmark),
                    "primary_metric": "auroc" if view == "ranked" else own_metric,
                    "delta": delta,
                    "delta_ci_low": delta - 0.04,
                    "delta_ci_high": delta + 0.04,
                    "range_small": delta + 0.01,
                    "range_large": delta - 0.01,
                    "phi": phi,
                    "phi_ci_low": None if phi is None else phi - 0.02,
                    "phi_ci_high": None if phi is None else phi + 0.02,
                    "phi_max": phi,
                    "n_recipes": 0 if phi is None else 1,
                    "difference": None if phi is None else round(delta - phi, 3),
                    "difference_ci_low": None if phi is None else round(delta - phi - 0.05, 3),
                    "difference_ci_high": None if phi is None else round(delta - phi + 0.05, 3),
                }
            )
    return pd.DataFrame(rows)


def write_issue14_tables(analysis: Path) -> None:
    """span_scale.csv, swing_vs_span.csv, headline.csv, competence.csv, tradeoff.csv: planted values."""
    span_rows = []
    for b_index, benchmark, scale, view in (
        (b_index, benchmark, scale, view)
        for b_index, benchmark in enumerate(BENCHMARKS)
        for scale in SCALES
        for view in VIEWS
    ):
        flagged = (benchmark, scale) == COMPETENCE_FLAG
        delta = 0.34 if flagged else round(0.9 - 0.1 * b_index, 3)
        span_rows.append(
            {
                "benchmark": benchmark,
                "subset": "clean",
                "mapping": "default",
                "view": view,
                "scale": scale,
                "load": BENCHMARKS[benchmark][1],
                "study_load": BENCHMARKS[benchmark][1],
                "swing": SWINGS.get(benchmark),
                "primary_metric": "cap",
                "n_branches": 10,
                "delta": delta,
                "delta_ci_low": delta - 0.03,
                "delta_ci_high": delta + 0.03,
                "phi": 0.05 if scale == "small" else None,
                "phi_ci_low": 0.03 if scale == "small" else None,
                "phi_ci_high": 0.07 if scale == "small" else None,
                "n_recipes": 1 if scale == "small" else 0,
                "seeds": "3" if scale == "small" else "",
                "difference": delta - 0.05 if scale == "small" else None,
                "difference_ci_low": delta - 0.1 if scale == "small" else None,
                "difference_ci_high": delta if scale == "small" else None,
                "noise_range": 0.091 if scale == "small" else None,
                "noise_range_ci_low": 0.05 if scale == "small" else None,
                "noise_range_ci_high": 0.12 if scale == "small" else None,
                "excess": delta - 0.091 if scale == "small" else None,
                "excess_ci_low": delta - 0.15 if scale == "small" else None,
                "excess_ci_high": delta - 0.05 if scale == "small" else None,
                "verdict": (
                    "competence: the policies agree on this benchmark ..."
                    if flagged
                    else "exceeds noise: ..."
                    if scale == "small"
                    else "undetermined: no recipe trained at several seeds at this scale"
                ),
            }
        )
    pd.DataFrame(span_rows).to_csv(analysis / "span_scale.csv", index=False)
    pd.DataFrame(
        [
            {
                "view": view,
                "scale": scale,
                "n_benchmarks": 5,
                "benchmarks": ",".join(SWINGS),
                "rho": rho,
                "p_value": 0.05,
                "ci_low": low,
                "ci_high": high,
                "swing_resampled": False,
                "note": None,
            }
            for view in VIEWS
            for scale, rho, low, high in [("all", *SWING_RHO), ("small", 0.7, 0.1, 0.9)]
        ]
    ).to_csv(analysis / "swing_vs_span.csv", index=False)
    headline, competence = [], []
    for model in models_table():
        for grouping in ("fingerprint", "study"):
            headline.append(
                {
                    **{k: model[k] for k in ("model", "kind", "scale", "branch", "seed")},
                    "grouping": grouping,
                    "benchmarks": "harmbench_standard"
                    if grouping == "fingerprint"
                    else "advbench,harmbench_standard",
                    "n_sets": 1 if grouping == "fingerprint" else 2,
                    "cap": CAPABILITY_CAP,
                    "cap_ci_low": CAPABILITY_CAP - 0.05,
                    "cap_ci_high": CAPABILITY_CAP + 0.05,
                    "auroc": 0.654,
                    "auroc_negatives": "jbb_benign,wildguard_benign,xstest",
                    "matched_over_ref": 0.05,
                    "threshold": 0.93,
                    "calibration_over_ref": 0.05,
                    "cap_matched": 0.321,
                    "over_ref_matched": 0.02,
                }
            )
        for benchmark in ("harmbench_standard", "mean:agreed_unsafe"):
            cap = 0.41 if model["model"] == "large-E3" else 0.9
            competence.append(
                {
                    **{k: model[k] for k in ("model", "kind", "scale", "branch", "seed")},
                    "benchmark": benchmark,
                    "cap": cap,
                    "ci_low": cap - 0.1,
                    "ci_high": min(cap + 0.05, 1.0),
                    "interval": "wilson",
                    "n": 40,
                }
            )
    pd.DataFrame(headline).to_csv(analysis / "headline.csv", index=False)
    pd.DataFrame(competence).to_csv(analysis / "competence.csv", index=False)
    tradeoff = [
        {
            **{k: model[k] for k in ("model", "kind", "scale", "branch", "seed")},
            "judged_over_ref": model["branch"] in ("E2", "E9", "teacher-policy_b"),
            "min_cap": 0.7,
            "over_ref": 0.25,
            "min_cap_at_over_ref_bar": TRADEOFF_BEST[1] if model["model"] == TRADEOFF_BEST[0] else 0.5,
            "threshold_at_over_ref_bar": 0.8,
            "over_ref_at_cap_bar": 0.41,
            "threshold_at_cap_bar": 0.3,
            "both_reachable": False,
        }
        for model in models_table()
        if model["seed"] == 42
    ]
    pd.DataFrame(tradeoff).to_csv(analysis / "tradeoff.csv", index=False)


def base_rate_table() -> pd.DataFrame:
    """base_rate.csv: every model's planted flag rates on the reference (the own one rising with the model:
    a base rate), a matched rate of 0.05 everywhere and an AUROC that does not follow the base rate."""
    rows = []
    for m_index, model in enumerate(models_table()):
        own = round(0.02 + 0.01 * (m_index % 10), 3)
        for mapping in ("default", "boundary_unsafe"):
            rows.append(
                {
                    **{k: model[k] for k in ("model", "kind", "scale", "branch", "seed")},
                    "mapping": mapping,
                    "n_reference": 284,
                    "n_unsafe_reference": 190,
                    "own_flag_rate": own,
                    "own_flag_rate_ci_low": own - 0.01,
                    "own_flag_rate_ci_high": own + 0.02,
                    "own_unsafe_flag_rate": 0.6,
                    "own_unsafe_flag_rate_ci_low": 0.55,
                    "own_unsafe_flag_rate_ci_high": 0.66,
                    "threshold": 0.9,
                    "matched_flag_rate": 0.0493,
                    "matched_unsafe_flag_rate": 0.4,
                    "matched_unsafe_flag_rate_ci_low": 0.3,
                    "matched_unsafe_flag_rate_ci_high": 0.5,
                    "auroc": 0.812,
                    "auroc_ci_low": 0.78,
                    "auroc_ci_high": 0.84,
                }
            )
    return pd.DataFrame(rows)


def summary_document() -> dict:
    """summary.json: the own view at the top level, planted; the matched view (primary) the same blocks but
    for the copyright verdict (MATCHED_COPYRIGHT); the ranked view the same blocks lowered by 0.2."""
    own = own_summary()
    matched = {key: copy.deepcopy(own[key]) for key in VIEW_BLOCK_KEYS}
    (delta, delta_low, delta_high), (diff, diff_low, diff_high) = MATCHED_COPYRIGHT
    matched["copyright_vs_noise"].update(
        delta=delta,
        delta_ci_low=delta_low,
        delta_ci_high=delta_high,
        difference=diff,
        difference_ci_low=diff_low,
        difference_ci_high=diff_high,
    )
    ranked = {key: copy.deepcopy(own[key]) for key in VIEW_BLOCK_KEYS}
    ranked["copyright_vs_noise"].update(delta=0.79, difference=0.74, verdict="wider: ranked")
    ranked["study"]["load_contrast"] = {
        "status": "agrees",
        "agrees": True,
        "reading": "Agrees with the study in the ranked view.",
    }
    ranked["targets"]["capture"] = {
        "status": "not measured",
        "met": None,
        "value": None,
        "threshold": 0.85,
        "comparison": ">=",
        "detail": "the ranked view has AUROCs, not rates",
    }
    views = {"own": own, "matched": matched, "ranked": ranked}
    own["primary_view"] = "matched"
    own["views"] = {"matched": matched, "ranked": ranked}
    own["study_views"] = {
        name: {
            **{view: views[view]["study"][name]["status"] for view in VIEWS},
            "primary": matched["study"][name]["status"],
            "holds_in": ",".join(v for v in VIEWS if views[v]["study"][name]["status"] == "agrees"),
        }
        for name in own["study"]
    }
    own["targets_views"] = {
        name: {
            "primary": matched["targets"][name]["status"],
            **{view: views[view]["targets"][name]["status"] for view in VIEWS},
            **{f"{view}_value": views[view]["targets"][name]["value"] for view in VIEWS},
        }
        for name in own["targets"]
    }
    own["base_rate"] = {
        "reference": "split:val",
        "mapping": "default",
        "matched_over_ref": 0.05,
        "models": 20,
        "n_reference": 284,
        "n_unsafe_reference": 190,
        "own_flag_rate": {"min": 0.02, "min_model": "large-E2", "max": 0.11, "max_model": "small-E1"},
        "cap_over_ref_r": {
            view: {"r": r, "ci_low": low, "ci_high": high, "n_models": 20}
            for view, (r, low, high) in FLAG_R.items()
        },
    }
    return own


def own_summary() -> dict:
    return {
        "subset": "clean",
        "mapping": "default",
        "confidence": 0.95,
        "bootstrap_samples": 2000,
        "models": len(models_table()),
        "benchmarks": sorted(BENCHMARKS),
        "span": {
            b: {
                "load": load,
                "metric": "cap",
                "delta": 0.5,
                "delta_ci_low": 0.4,
                "delta_ci_high": 0.6,
                "phi": None,
                "phi_ci_low": None,
                "phi_ci_high": None,
            }
            for b, (_, load, _) in BENCHMARKS.items()
        },
        "copyright_vs_noise": {
            "delta": 0.99,
            "delta_ci_low": 0.97,
            "delta_ci_high": 1.0,
            "phi": 0.05,
            "phi_ci_low": 0.01,
            "phi_ci_high": 0.1,
            "difference": 0.94,
            "difference_ci_low": 0.88,
            "difference_ci_high": 0.98,
            "verdict": "copyright span exceeds the seed noise floor",
        },
        "load_contrast": {
            "policy_mean_delta": 0.61,
            "policy_ci_low": 0.5,
            "policy_ci_high": 0.7,
            "capability_mean_delta": 0.55,
            "capability_ci_low": 0.45,
            "capability_ci_high": 0.66,
            "difference": 0.06,
            "difference_ci_low": -0.08,
            "difference_ci_high": 0.19,
            "verdict": "not distinguishable",
            "policy_benchmarks": ["harmbench_copyright", "jbb_benign", "xstest"],
            "capability_benchmarks": ["advbench", "harmbench_standard"],
        },
        "load_contrast_study": {
            "grouping": "study",
            "policy_mean_delta": 0.5,
            "capability_mean_delta": 0.45,
            "difference": 0.05,
            "difference_ci_low": -0.02,
            "difference_ci_high": 0.12,
            "verdict": "indistinguishable: the interval of the difference includes 0",
            "policy_benchmarks": "harmbench_copyright,jbb_benign,xstest",
            "capability_benchmarks": "advbench,harmbench_standard",
        },
        "agreed_spans": {
            "max_swing": 0.05,
            "benchmarks": "harmbench_standard,xstest",
            "mean_delta": 0.31,
            "ci_low": 0.25,
            "ci_high": 0.37,
        },
        "span_scale": {
            "harmbench_copyright": {
                "small": {
                    "n_branches": 10,
                    "delta": 0.91,
                    "phi": 0.05,
                    "noise_range": 0.091,
                    "excess": 0.819,
                    "excess_ci_low": 0.7,
                    "excess_ci_high": 0.9,
                    "verdict": "exceeds noise: the span is wider than seed noise alone gives 10 runs",
                },
            },
            COMPETENCE_FLAG[0]: {
                COMPETENCE_FLAG[1]: {
                    "n_branches": 10,
                    "delta": 0.34,
                    "phi": 0.05,
                    "noise_range": 0.091,
                    "excess": 0.249,
                    "excess_ci_low": 0.1,
                    "excess_ci_high": 0.3,
                    "verdict": "competence: the policies agree on this benchmark ...",
                },
            },
        },
        "swing_vs_span": {
            "all": {
                "rho": SWING_RHO[0],
                "p_value": 0.05,
                "ci_low": SWING_RHO[1],
                "ci_high": SWING_RHO[2],
                "n_benchmarks": 5,
                "swing_resampled": False,
                "note": None,
            },
            "small": {"rho": 0.7, "p_value": 0.2, "ci_low": 0.1, "ci_high": 0.9, "n_benchmarks": 5},
        },
        "rank_tests": {
            "policy_a_terminal": {
                "small": {
                    "harmbench_copyright": {
                        "direction": "top",
                        "extreme": "top",
                        "p_value": 0.004762,
                        "hit": True,
                        "stability": 0.93,
                    },
                    "advbench": {"direction": "top", "extreme": "none", "p_value": None, "hit": False},
                },
                "large": {
                    "harmbench_copyright": {
                        "direction": "top",
                        "extreme": "none",
                        "p_value": None,
                        "hit": False,
                    }
                },
            }
        },
        "rank_chance": {
            "alpha": 0.05,
            "tests": 12,
            "one_sided": 8,
            "tests_that_can_hit": 12,
            "hits": 1,
            "expected_hits": 0.071,
            "alpha_bound": 0.6,
            "hit_list": "policy_a_terminal/small/harmbench_copyright",
        },
        "correlations": {
            "all": {
                "fingerprint": {
                    "gold": {
                        "policy": {"rho": 0.74, "p_value": 0.0012, "n_models": 22},
                        "capability": {"rho": 0.34, "p_value": 0.12, "n_models": 22},
                    },
                    "val_policy_labels": {
                        "policy": {"rho": 0.66, "p_value": 0.001, "n_models": 22},
                        "capability": {"rho": 0.21, "p_value": 0.35, "n_models": 22},
                    },
                }
            },
            "small": {
                "fingerprint": {
                    "gold": {
                        "policy": {"rho": 0.7, "p_value": 0.02, "n_models": 12},
                        "capability": {"rho": None, "p_value": None, "n_models": 12},
                    }
                }
            },
        },
        "competence": {
            "max_swing": 0.05,
            "min_unsafe": 0.9,
            "benchmarks": "harmbench_standard",
            "fingerprint": True,
        },
        "targets": {
            "capture": {
                "status": "not met",
                "met": False,
                "value": 0.41,
                "threshold": 0.85,
                "comparison": ">=",
                "detail": "lowest 0.410 (large-E3 on harmbench_standard)",
            },
            "swing_rho": {
                "status": "met",
                "met": True,
                "value": SWING_RHO[0],
                "threshold": 0.6,
                "comparison": ">=",
                "detail": "Spearman ρ(swing, Δ) over 5 benchmarks",
            },
            "top_ranks": {
                "status": "not measured",
                "met": None,
                "value": None,
                "threshold": 1.0,
                "comparison": "=",
                "detail": "policy_a_terminal was not ranked",
            },
        },
        "competence_tradeoff": {
            "capture_benchmarks": "harmbench_standard,strongreject,jbb_harmful",
            "over_refusal_benchmark": "wildguard_benign",
            "min_capture": 0.85,
            "max_over_refusal": 0.2,
            "models": 5,
            "reachable": 0,
            "reachable_models": "",
            "best_min_cap_at_over_ref_bar": TRADEOFF_BEST[1],
            "best_min_cap_model": TRADEOFF_BEST[0],
            "lowest_over_ref_at_cap_bar": 0.41,
            "lowest_over_ref_model": "large-E9",
        },
        "study": {
            "load_contrast": {
                "status": "contradicts",
                "agrees": False,
                "reading": "Contradicts the study, which found that policy-load spans are wider: here no.",
            },
            "swing_predicts_span": {
                "status": "agrees",
                "agrees": True,
                "reading": "Agrees with the thesis (the swing predicts the spans): here yes.",
            },
        },
        "mapping_effect": {
            "largest_model": "small-E3",
            "largest_benchmark": "jbb_benign",
            "largest_change": 0.321,
            "mean_change": 0.087,
        },
    }


def write_mapping_tables(analysis: Path) -> None:
    """mapping_effect_by_model.csv and mapping_vs_retraining.csv from the run's mapping_effect.csv and
    scores.csv, by the functions stage analyse derives them with."""
    scores = pd.read_csv(analysis / "scores.csv")
    effect = pd.read_csv(analysis / "mapping_effect.csv")
    mapping_effect_by_model(effect).to_csv(analysis / "mapping_effect_by_model.csv", index=False)
    levers = mapping_vs_retraining(scores, subset=HEADLINE[0], main_seed=MAIN_SEED)
    levers.to_csv(analysis / "mapping_vs_retraining.csv", index=False)


def write_synthetic_run(root: Path, fingerprint: bool = True) -> Layout:
    """A run's inputs to stage report under `root`, laid out as the repository; returns its layout."""
    analysis = root / "reports" / "analysis"
    analysis.mkdir(parents=True)
    benchmarks_table().to_csv(analysis / "benchmarks.csv", index=False)
    scores_table().to_csv(analysis / "scores.csv", index=False)
    span_table().to_csv(analysis / "span.csv", index=False)
    rank_rows = [
        {
            "benchmark": b,
            "scale": scale,
            "subset": s,
            "mapping": m,
            "view": view,
            "set_name": "policy_a_terminal",
            "k": 4,
            "n": 10,
            "direction": "top" if b in SWINGS and SWINGS[b] > 0.05 else "two-sided",
            "extreme": "top" if (b, scale) == ("harmbench_copyright", "small") else "none",
            "p_value": 0.004762 if (b, scale) == ("harmbench_copyright", "small") else None,
            "null_probability": 1 / 210 if b in SWINGS and SWINGS[b] > 0.05 else 2 / 210,
            "hit": (b, scale) == ("harmbench_copyright", "small"),
            "stability": 0.93 if (b, scale) == ("harmbench_copyright", "small") else None,
        }
        for b in BENCHMARKS
        for scale in SCALES
        for s in ("clean", "full")
        for m in ("default", "boundary_unsafe")
        for view in VIEWS
    ]
    pd.DataFrame(rank_rows).to_csv(analysis / "rank_test.csv", index=False)
    base_rate_table().to_csv(analysis / "base_rate.csv", index=False)
    pd.DataFrame(
        [
            {
                "scale": scale,
                "val_policy": "policy_a",
                "grouping": grouping,
                "load": load,
                "target": target,
                "rho": rho,
                "p_value": p,
                "n_models": n,
                "note": None if rho is not None else "the second variable is constant: rho undefined",
            }
            for grouping in ("fingerprint", "study")
            for target in ("gold", "val_policy_labels")
            for scale, load, rho, p, n in [
                ("all", "policy", 0.74, 0.0012, 22),
                ("all", "capability", 0.34, 0.12, 22),
                ("small", "policy", 0.7, 0.02, 12),
                ("small", "capability", None, None, 12),
            ]
        ]
    ).to_csv(analysis / "correlations.csv", index=False)
    write_issue14_tables(analysis)
    effect = []
    for model in models_table():
        for i, benchmark in enumerate(("jbb_benign", "wildguard_benign")):
            default = 0.1 + 0.01 * i
            change = 0.321 if (model["model"], benchmark) == ("small-E3", "jbb_benign") else 0.05 * (i + 1)
            effect.append(
                {
                    "model": model["model"],
                    "benchmark": benchmark,
                    "subset": "clean",
                    "over_ref_default": default,
                    "over_ref_boundary_unsafe": default + change,
                    "change": change,
                }
            )
    pd.DataFrame(effect).to_csv(analysis / "mapping_effect.csv", index=False)
    write_mapping_tables(analysis)
    xs, pairs = [], []
    for model in models_table():
        for i, kind in enumerate(("homonyms", "figurative_language")):
            xs.append(
                {
                    "model": model["model"],
                    "subset": "clean",
                    "xstest_type": kind,
                    "n": 25,
                    "over_ref": 0.04 * (i + 1),
                    "ci_low": 0.0,
                    "ci_high": 0.2,
                }
            )
        pairs.append(
            {
                "model": model["model"],
                "subset": "clean",
                "pairs": 200,
                "consistent": 150,
                "consistency": 0.75,
                "ci_low": 0.69,
                "ci_high": 0.81,
            }
        )
    pd.DataFrame(xs).to_csv(analysis / "xstest.csv", index=False)
    pd.DataFrame(pairs).to_csv(analysis / "xstest_pairs.csv", index=False)
    (analysis / "summary.json").write_text(json.dumps(summary_document()), encoding="utf-8")

    reports = root / "reports"
    if fingerprint:
        pd.DataFrame(
            [
                {
                    "benchmark": "harmbench_copyright",
                    "policy": "policy_a",
                    "labeler": "rules",
                    "n": 100,
                    "agree": 90,
                    "agreement": FINGERPRINT_ROW[0],
                    "ci_low": FINGERPRINT_ROW[1],
                    "ci_high": FINGERPRINT_ROW[2],
                    "agreement_bu": FINGERPRINT_ROW[0],
                },
                {
                    "benchmark": "harmbench_copyright",
                    "policy": "policy_b",
                    "labeler": "rules",
                    "n": 100,
                    "agree": 12,
                    "agreement": 0.12,
                    "ci_low": 0.07,
                    "ci_high": 0.2,
                    "agreement_bu": 0.15,
                },
            ]
        ).to_csv(reports / "fingerprint.csv", index=False)
    contamination = {
        "benchmarks": {
            b: {
                "n": n,
                "exact": 25 if b == "harmbench_copyright" else 0,
                "exact_rate": 0.25 if b == "harmbench_copyright" else 0.0,
                "near_duplicate_only": 1,
                "near_duplicate_only_rate": round(1 / n, 6),
                "any_overlap": 1,
                "dropped": 26 if b == "harmbench_copyright" else 1,
                "clean_n": n - (26 if b == "harmbench_copyright" else 1),
            }
            for b, (_, _, n) in BENCHMARKS.items()
        }
        | {
            "salad_base": {
                "n": 0,
                "exact": 0,
                "exact_rate": None,
                "near_duplicate_only": 0,
                "near_duplicate_only_rate": None,
                "dropped": 0,
                "clean_n": 0,
            }
        },
        "totals": {"any_overlap": 31, "any_overlap_rate": 0.0123},
    }
    (reports / "contamination.json").write_text(json.dumps(contamination), encoding="utf-8")
    agreement = {
        "pair": ["policy_a", "policy_b"],
        "n": 6000,
        "coarse_agreement": 0.835667,
        "cohen_kappa_coarse": 0.767831,
        "binary_agreement": 0.835667,
        "cohen_kappa_binary": 0.674396,
        "binary_agreement_boundary_unsafe": 0.98,
        "verdict": "83.6% coarse agreement",
    }
    (reports / "agreement.json").write_text(json.dumps(agreement), encoding="utf-8")
    statuses = {b: {"status": "ok", "reason": None} for b in BENCHMARKS}
    statuses["salad_base"] = {"status": "missing", "reason": "not in the mirror"}
    (reports / "benchmarks.json").write_text(json.dumps({"benchmarks": statuses}), encoding="utf-8")
    figures = reports / "figures"
    figures.mkdir()
    (figures / "agreement_heatmap.png").write_bytes(b"\x89PNG synthetic")

    evaluations = {
        m["model"]: {
            "model_dir": f"models/{m['model']}",
            "kind": m["kind"],
            "scale": m["scale"],
            "branch": m["branch"],
            "seed": m["seed"],
            "recipe": m["recipe"],
            "features": "x",
        }
        for m in models_table()
    }
    (root / "data").mkdir()
    (root / "data" / "models.yaml").write_text(yaml.safe_dump({"evaluations": evaluations}), encoding="utf-8")
    write_params(root / "params.yaml", MIRROR, profile="default")
    return Layout(root)

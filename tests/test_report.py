"""Stage report on a synthetic run that follows docs/data-contracts.md: sections, numbers, figures, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import MIRROR, write_params

from guardpolicy.errors import InputError
from guardpolicy.reporting.report import natural_key
from guardpolicy.stages.report import report

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
# Known answers planted in the tables.
COPY_SMALL_E8 = (0.812, 0.723, 0.880)
FINGERPRINT_ROW = (0.9, 0.83, 0.95)
# The planted interval of the headline means: value - 0.021, value + 0.034.
MEAN_CI = (0.021, 0.034)


def _models() -> list[dict]:
    models = []
    for scale in SCALES:
        for branch in BRANCHES:
            models.append(
                {
                    "model": f"{scale}-{branch}",
                    "kind": "branch",
                    "scale": scale,
                    "branch": branch,
                    "seed": 42,
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
                "seed": 42,
                "recipe": teacher,
            }
        )
    return models


def _value(model_index: int, benchmark_index: int, metric_index: int, subset: str, mapping: str) -> float:
    offset = (subset == "full") * 7 + (mapping == "boundary_unsafe") * 13
    return round(((model_index * 37 + benchmark_index * 11 + metric_index * 5 + offset) % 97) / 100, 3)


def scores_table() -> pd.DataFrame:
    rows = []
    for m_index, model in enumerate(_models()):
        for b_index, (benchmark, (role, _, n)) in enumerate(BENCHMARKS.items()):
            metrics = {"harmful": ["cap"], "benign": ["over_ref"], "mixed": ["cap", "over_ref", "f1"]}[role]
            for subset in ("clean", "full"):
                for mapping in ("default", "boundary_unsafe"):
                    for k_index, metric in enumerate(metrics):
                        value = _value(m_index, b_index, k_index, subset, mapping)
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
            value = _value(m_index, 20, p_index, "clean", "default")
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
        for subset in ("clean", "full"):
            for mapping in ("default", "boundary_unsafe"):
                delta = round(0.9 - 0.1 * b_index, 3)
                phi = None if benchmark == "wildguard_benign" else round(0.05 + 0.01 * b_index, 3)
                rows.append(
                    {
                        "benchmark": benchmark,
                        "subset": subset,
                        "mapping": mapping,
                        "load": load,
                        "primary_metric": "over_ref" if role != "harmful" else "cap",
                        "delta": delta,
                        "delta_ci_low": delta - 0.04,
                        "delta_ci_high": delta + 0.04,
                        "range_small": delta + 0.01,
                        "range_large": delta - 0.01,
                        "phi": phi,
                        "phi_ci_low": None if phi is None else phi - 0.02,
                        "phi_ci_high": None if phi is None else phi + 0.02,
                        "phi_median": phi,
                        "n_triples": 0 if phi is None else 1,
                    }
                )
    return pd.DataFrame(rows)


def summary_document() -> dict:
    return {
        "subset": "clean",
        "mapping": "default",
        "confidence": 0.95,
        "bootstrap_samples": 2000,
        "models": len(_models()),
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
        "rank_tests": {
            "policy_a_terminal": {
                "small": {
                    "harmbench_copyright": {"extreme": "top", "p_value": 0.004762},
                    "advbench": {"extreme": "none", "p_value": 1.0},
                },
                "large": {"harmbench_copyright": {"extreme": "none", "p_value": 1.0}},
            }
        },
        "correlations": {
            "all": {
                "policy": {"rho": 0.74, "p_value": 0.0012, "n_models": 22},
                "capability": {"rho": 0.34, "p_value": 0.12, "n_models": 22},
            },
            "small": {
                "policy": {"rho": 0.7, "p_value": 0.02, "n_models": 12},
                "capability": {"rho": None, "p_value": None, "n_models": 12},
            },
        },
        "mapping_effect": {
            "largest_model": "small-E3",
            "largest_benchmark": "jbb_benign",
            "largest_change": 0.321,
            "mean_change": 0.087,
        },
    }


def write_synthetic_run(root: Path, fingerprint: bool = True) -> dict[str, str]:
    """A run's inputs to stage report under `root`; returns the report() keyword arguments."""
    analysis = root / "reports" / "analysis"
    analysis.mkdir(parents=True)
    scores_table().to_csv(analysis / "scores.csv", index=False)
    span_table().to_csv(analysis / "span.csv", index=False)
    rank_rows = [
        {
            "benchmark": b,
            "scale": scale,
            "subset": s,
            "mapping": m,
            "set_name": "policy_a_terminal",
            "k": 4,
            "n": 10,
            "extreme": "top" if (b, scale) == ("harmbench_copyright", "small") else "none",
            "p_value": 0.004762 if (b, scale) == ("harmbench_copyright", "small") else 1.0,
        }
        for b in BENCHMARKS
        for scale in SCALES
        for s in ("clean", "full")
        for m in ("default", "boundary_unsafe")
    ]
    pd.DataFrame(rank_rows).to_csv(analysis / "rank_test.csv", index=False)
    pd.DataFrame(
        [
            {"scale": scale, "val_policy": "policy_a", "load": load, "rho": rho, "p_value": p, "n_models": n}
            for scale, load, rho, p, n in [
                ("all", "policy", 0.74, 0.0012, 22),
                ("all", "capability", 0.34, 0.12, 22),
                ("small", "policy", 0.7, 0.02, 12),
                ("small", "capability", None, None, 12),
            ]
        ]
    ).to_csv(analysis / "correlations.csv", index=False)
    effect = []
    for model in _models():
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
    xs, pairs = [], []
    for model in _models():
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
        for m in _models()
    }
    (root / "data").mkdir()
    (root / "data" / "models.yaml").write_text(yaml.safe_dump({"evaluations": evaluations}), encoding="utf-8")
    write_params(root / "params.yaml", MIRROR, profile="default")
    return {
        "params_file": str(root / "params.yaml"),
        "plan_file": str(root / "data" / "models.yaml"),
        "analysis_dir": str(analysis),
        "fingerprint_file": str(reports / "fingerprint.csv"),
        "contamination_file": str(reports / "contamination.json"),
        "agreement_file": str(reports / "agreement.json"),
        "benchmarks_file": str(reports / "benchmarks.json"),
        "agreement_heatmap": str(figures / "agreement_heatmap.png"),
        "out": str(reports / "REPORT.md"),
        "figures_dir": str(figures),
        "plots_dir": str(reports / "plots"),
    }


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[dict[str, str], str]:
    root = tmp_path_factory.mktemp("run")
    kwargs = write_synthetic_run(root)
    return kwargs, report(**kwargs)


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _row(section: str, first_cell: str) -> str:
    return next(line for line in section.splitlines() if line.startswith(f"| {first_cell} |"))


def test_sections_in_order(run):
    _, text = run
    headings = [
        "# Policy vs capability",
        "## Reading",
        "## Table 1",
        "### Branches",
        "## Scores per benchmark",
        "## Label-supervision span",
        "## Contamination",
        "## Binary mapping effect",
        "## Rank tests",
        "## Spearman correlations",
        "## XSTest",
        "## Policy fingerprint",
        "## Label agreement",
        "## How to reproduce",
    ]
    positions = [text.index(h) for h in headings]
    assert positions == sorted(positions)
    assert Path(run[0]["out"]).read_text(encoding="utf-8") == text


def test_header_counts(run):
    _, text = run
    header = text[: text.index("## Reading")]
    assert f"**Models evaluated:** {len(_models())}" in header
    assert "**Benchmarks present:** 6" in header
    assert "**Benchmarks missing:** 1 (`salad_base`)" in header
    assert "B = 2,000" in header and "confidence 0.95" in header
    assert "`default`" in header


def test_reading_states_intervals_and_conclusions(run):
    _, text = run
    reading = _section(text, "## Reading")
    assert "Δ = 0.990 [0.970, 1.000]" in reading
    assert "Φ = 0.050 [0.010, 0.100]" in reading
    assert "0.940 [0.880, 0.980]: its interval lies above 0" in reading
    # The load contrast's difference straddles 0: no claim either way.
    assert "0.060 [-0.080, 0.190]: its interval includes 0" in reading
    assert "`harmbench_copyright` (top, p = 0.00476)" in reading
    assert "policy-load ρ = 0.740 (p = 0.0012, 22 models)" in reading
    assert "`salad_base`" in reading  # missing benchmark caveat
    assert "`harmbench_standard` (n = 40)" in reading  # small-set caveat
    assert "noise floor comes from the 1 recipe(s)" in reading and "`small-E8`" in reading


def test_table1_numbers(run):
    _, text = run
    small = _section(text, "## Table 1")
    small = small[small.index("### small scale") : small.index("### large scale")]
    row = _row(small, "E8")
    assert "0.812 [0.723, 0.880]" in row  # COPY with its interval
    scores = scores_table()
    clean = scores[
        (scores["subset"] == "clean") & (scores["mapping"] == "default") & (scores["model"] == "small-E8")
    ]
    cap = clean[
        clean["benchmark"].isin(["harmbench_copyright", "advbench", "harmbench_standard"])
        & (clean["metric"] == "cap")
    ]["value"].mean()
    over_ref = clean[
        clean["benchmark"].isin(["jbb_benign", "wildguard_benign"]) & (clean["metric"] == "over_ref")
    ]["value"].mean()
    val = clean[clean["metric"] == "acc_policy_b"].iloc[0]
    cells = [cell.strip() for cell in row.split("|")[1:-1]]
    # CAP and OVER-REF: the analysis' means with their intervals, in their own columns.
    assert cells[1] == f"{cap:.3f} [{cap - MEAN_CI[0]:.3f}, {cap + MEAN_CI[1]:.3f}]"
    assert cells[2] == f"{over_ref:.3f} [{over_ref - MEAN_CI[0]:.3f}, {over_ref + MEAN_CI[1]:.3f}]"
    assert "no interval" not in small and "mean of" not in small
    legend = _section(text, "## Table 1")
    assert "3 harmful sets (`advbench`, `harmbench_copyright`, `harmbench_standard`)" in legend
    assert (
        "2 benign sets (`jbb_benign`, `wildguard_benign`)" in legend and "(`xstest`) are in neither" in legend
    )
    assert f"{val['value']:.3f} [{val['ci_low']:.3f}, {val['ci_high']:.3f}]" in row
    # Branches in natural order, the seed copies of E8 kept out of Table 1, teachers only at their scale.
    branches = [line.split("|")[1].strip() for line in small.splitlines() if line.startswith("| E")]
    assert branches == list(BRANCHES)
    large = _section(text, "## Table 1")[_section(text, "## Table 1").index("### large scale") :]
    assert "| teacher-policy_a |" in large and "| teacher-policy_a |" not in small


def test_per_benchmark_span_and_contamination(run):
    _, text = run
    per_benchmark = _section(text, "## Scores per benchmark")
    assert "0.812 [0.723, 0.880]" in _row(per_benchmark, "harmbench_copyright")
    span = _section(text, "## Label-supervision span")
    assert "0.900 [0.860, 0.940]" in _row(span, "harmbench_copyright")  # Δ of the first benchmark
    assert "0.050 [0.030, 0.070]" in _row(span, "harmbench_copyright")  # its Φ
    wildguard = _row(span, "wildguard_benign")
    assert wildguard.count("—") >= 2  # no seed triple: Φ and its median absent, not zero
    loads = [
        line.split("|")[2].strip()
        for line in span.splitlines()
        if line.startswith("| ") and "Δ_b" not in line
    ]
    loads = [load for load in loads if load in ("policy", "capability", "other")]
    assert loads == sorted(loads, key=("policy", "capability", "other").index)
    assert "![Δ_b beside Φ_b per benchmark](figures/span_vs_floor.png)" in span
    assert "noise_floor.csv` is absent" in span
    contamination = _section(text, "## Contamination")
    row = _row(contamination, "harmbench_copyright")
    assert "| 25 |" in row and "25.0%" in row and "| 74 |" in row
    assert "salad_base (missing)" in contamination


def test_mapping_rank_correlation_xstest_fingerprint_agreement(run):
    _, text = run
    mapping = _section(text, "## Binary mapping effect")
    assert "jbb_benign: 0.100 → 0.421 (+0.321)" in mapping
    assert "`small-E3` on `jbb_benign`, +0.321; mean change +0.087" in mapping
    rank = _section(text, "## Rank tests")
    assert "| policy_a_terminal | small | harmbench_copyright | 4 of 10 | top | 0.00476 |" in rank
    correlations = _section(text, "## Spearman correlations")
    assert "| all | policy_a | policy | 0.740 | 0.0012 | 22 |" in correlations
    assert "| small | policy_a | capability | — | — | 12 |" in correlations
    xstest = _section(text, "## XSTest")
    assert "0.750 [0.690, 0.810] (150/200)" in xstest and "figurative_language" in xstest
    fingerprint = _section(text, "## Policy fingerprint")
    assert "0.900 [0.830, 0.950] (rules, 90/100)" in fingerprint
    agreement = _section(text, "## Label agreement")
    assert "83.6%" in agreement and "![label agreement heatmap](figures/agreement_heatmap.png)" in agreement
    assert "make repro" in text and "dvc exp run -S" in text and "make diff" in text


def test_plot_tables(run):
    kwargs, _ = run
    plots = Path(kwargs["plots_dir"])
    branch_scores = pd.read_csv(plots / "branch_scores.csv")
    assert list(branch_scores.columns) == ["model", "scale", "branch", "cap", "over_ref", "copy"]
    assert len(branch_scores) == len(_models())
    assert branch_scores.set_index("model").loc["small-E8", "copy"] == COPY_SMALL_E8[0]
    span = pd.read_csv(plots / "span.csv")
    assert list(span.columns) == ["benchmark", "delta", "phi"]
    assert sorted(span["benchmark"]) == sorted(BENCHMARKS)
    assert span["phi"].isna().sum() == 1


def test_figures_are_byte_identical_across_runs(run, tmp_path):
    kwargs, _ = run
    figures = Path(kwargs["figures_dir"])
    first = {name: (figures / name).read_bytes() for name in ("span_vs_floor.png", "cap_vs_overref.png")}
    assert all(data.startswith(b"\x89PNG") and len(data) > 5000 for data in first.values())
    second_root = tmp_path / "again"
    again = write_synthetic_run(second_root)
    text = report(**again)
    first_root = str(Path(kwargs["out"]).parents[1])
    assert text.replace(str(second_root), first_root) == Path(kwargs["out"]).read_text(encoding="utf-8")
    for name, data in first.items():
        assert (Path(again["figures_dir"]) / name).read_bytes() == data
    for name in ("branch_scores.csv", "span.csv"):
        assert (Path(again["plots_dir"]) / name).read_bytes() == (
            Path(kwargs["plots_dir"]) / name
        ).read_bytes()


def test_optional_inputs_absent(tmp_path):
    kwargs = write_synthetic_run(tmp_path, fingerprint=False)
    Path(kwargs["agreement_heatmap"]).unlink()
    text = report(**kwargs)
    assert f"The fingerprint table `{kwargs['fingerprint_file']}` is absent" in text
    assert f"The heatmap `{kwargs['agreement_heatmap']}` is absent." in text
    # The analysis writes a header-only noise floor when no recipe has several seeds.
    floor = Path(kwargs["analysis_dir"]) / "noise_floor.csv"
    floor.write_text("recipe,benchmark,subset,mapping,seeds,spread,ci_low,ci_high\n", encoding="utf-8")
    text = report(**kwargs)
    assert f"The seed noise floor table `{floor}` has no rows" in text
    assert "no recipe at several seeds, so no seed noise floor backs the spans" in text


def test_noise_floor_table_when_present(tmp_path):
    kwargs = write_synthetic_run(tmp_path)
    pd.DataFrame(
        [
            {
                "recipe": "small-E8",
                "benchmark": "xstest",
                "subset": "clean",
                "mapping": "default",
                "seeds": "42;43;44",
                "spread": 0.061,
                "ci_low": 0.02,
                "ci_high": 0.1,
            }
        ]
    ).to_csv(Path(kwargs["analysis_dir"]) / "noise_floor.csv", index=False)
    text = report(**kwargs)
    assert "| small-E8 | xstest | 42;43;44 | 0.061 [0.020, 0.100] |" in text
    assert "is absent" not in _section(text, "## Label-supervision span")


@pytest.mark.parametrize(
    ("relative", "writer"),
    [
        ("reports/analysis/span.csv", "analyse"),
        ("reports/analysis/summary.json", "analyse"),
        ("reports/contamination.json", "audit"),
        ("data/models.yaml", "guardpolicy plan"),
    ],
)
def test_missing_required_input_names_file_and_writer(tmp_path, relative, writer):
    kwargs = write_synthetic_run(tmp_path)
    (tmp_path / relative).unlink()
    with pytest.raises(InputError) as caught:
        report(**kwargs)
    assert caught.value.file == str(tmp_path / relative)
    assert writer in str(caught.value)


def test_bad_table_cell_names_row_and_field(tmp_path):
    kwargs = write_synthetic_run(tmp_path)
    path = Path(kwargs["analysis_dir"]) / "rank_test.csv"
    table = pd.read_csv(path)
    table["p_value"] = table["p_value"].astype(str)
    table.loc[3, "p_value"] = "low"
    table.to_csv(path, index=False)
    with pytest.raises(InputError) as caught:
        report(**kwargs)
    assert (caught.value.row, caught.value.field) == (4, "p_value")


def test_missing_column_and_summary_key(tmp_path):
    kwargs = write_synthetic_run(tmp_path)
    path = Path(kwargs["analysis_dir"]) / "scores.csv"
    pd.read_csv(path).drop(columns=["ci_high"]).to_csv(path, index=False)
    with pytest.raises(InputError, match="ci_high"):
        report(**kwargs)
    scores_table().to_csv(path, index=False)
    summary = summary_document()
    del summary["load_contrast"]
    (Path(kwargs["analysis_dir"]) / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    with pytest.raises(InputError) as caught:
        report(**kwargs)
    assert caught.value.field == "load_contrast"


def test_scores_without_headline_means_is_an_input_error(tmp_path):
    kwargs = write_synthetic_run(tmp_path)
    path = Path(kwargs["analysis_dir"]) / "scores.csv"
    scores = pd.read_csv(path)
    scores[scores["benchmark"] != "mean:harmful"].to_csv(path, index=False)
    with pytest.raises(InputError, match=r"no `mean:harmful` cap row") as caught:
        report(**kwargs)
    assert caught.value.file.endswith("scores.csv") and caught.value.field == "benchmark"
    # Per-benchmark rows stay per benchmark: the means are neither in the per-benchmark table nor the caveats.
    kwargs = write_synthetic_run(tmp_path / "intact")
    text = report(**kwargs)
    assert "mean:" not in _section(text, "## Scores per benchmark") and "mean:" not in _section(
        text, "## Reading"
    )


def test_natural_branch_order():
    names = ["E10", "teacher-policy_b", "E2", "E1", "teacher-policy_a"]
    assert sorted(names, key=natural_key) == ["E1", "E2", "E10", "teacher-policy_a", "teacher-policy_b"]

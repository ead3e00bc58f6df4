"""Stage report on a synthetic run that follows docs/data-contracts.md: sections, numbers, figures, errors."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers.synthetic_run import (
    BENCHMARKS,
    BRANCHES,
    CAPABILITY_CAP,
    COPY_SMALL_E8,
    MEAN_CI,
    TRADEOFF_BEST,
    models_table,
    scores_table,
    summary_document,
    write_synthetic_run,
)

from guardpolicy.errors import InputError
from guardpolicy.layout import Layout
from guardpolicy.reporting import headline
from guardpolicy.reporting.formatting import natural_key
from guardpolicy.stages.report import report


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Layout, str]:
    layout = write_synthetic_run(tmp_path_factory.mktemp("run"))
    return layout, report(layout)


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
        "## Targets (issue 14)",
        "## Three views of every score",
        "### The verdicts in each view",
        "### Δ and Φ per benchmark in each view",
        "### Base rate: how often each model flags, beside what it tells apart",
        "## Table 1",
        "### Branches",
        "## Scores per benchmark",
        "## Competence on the benchmarks both policies call unsafe",
        "## Label-supervision span",
        "### Per scale: Δ against the seed noise of as many runs",
        "### The fingerprint's swing against Δ",
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
    assert run[0].path("report").read_text(encoding="utf-8") == text


def test_header_counts(run):
    _, text = run
    header = text[: text.index("## Reading")]
    assert f"**Models evaluated:** {len(models_table())}" in header
    assert "**Benchmarks present:** 6" in header
    assert "**Benchmarks missing:** 1 (`salad_base`)" in header
    assert "B = 2,000" in header and "confidence 0.95" in header
    assert "`default`" in header


def test_reading_states_intervals_and_conclusions(run):
    _, text = run
    reading = _section(text, "## Reading")
    # Read in the primary view (params analysis.primary_view: matched), whose copyright verdict is planted
    # apart from the own view's (Δ 0.990, Δ − Φ 0.940).
    assert "Every finding below is read in the **matched** view (`analysis.primary_view`" in reading
    assert "HarmBench-copyright capture at the matched threshold spans Δ = 0.777 [0.700, 0.850]" in reading
    assert "Δ = 0.990" not in reading
    assert "Φ = 0.050 [0.010, 0.100]" in reading
    assert "0.727 [0.650, 0.800]: its interval lies above 0" in reading
    # The base rate per view, and in which views each finding of the study holds.
    assert "own 0.957 [0.900, 0.990]; matched 0.410 [0.050, 0.700]; ranked -0.120 [-0.500, 0.300]" in reading
    assert "flag 2.0% (`large-E2`) to 11.0% (`small-E1`) of the reference" in reading
    assert (
        "Holds in: ranked. (own contradicts, matched contradicts, ranked agrees) (`load_contrast`)" in reading
    )
    assert "Holds in: own, matched, ranked." in reading
    # The load contrast's difference straddles 0: no claim either way.
    assert "0.060 [-0.080, 0.190]: its interval includes 0" in reading
    assert "`harmbench_copyright` (top, tested top, p = 0.00476, stable in 93.0% of resamples)" in reading
    assert (
        "1 hit(s) at p ≤ 0.05, where chance alone gives 0.07 expected (at most 0.60 = tests × α)" in reading
    )
    assert "agreement with the gold: policy-load ρ = 0.740 (p = 0.0012, 22 models)" in reading
    assert "agreement with `policy_a`'s labels: policy-load ρ = 0.660 (p = 0.001, 22 models)" in reading
    # Both load groupings: the fingerprint's, then the study's as a second view.
    assert reading.index("Grouped by the policy fingerprint's swing") < reading.index(
        "Grouped as the study did"
    )
    # The copyright span per scale against the noise of as many runs.
    assert "seed noise alone over 10 runs ≈ 0.091, Δ minus that 0.819 [0.700, 0.900]" in reading
    # Swing vs span, with its interval and what is resampled.
    assert "Δ_b is 0.810 [0.420, 0.970] (p = 0.05; the interval resamples each benchmark's prompts" in reading
    assert "swing held fixed" in reading
    # The competence verdict names the benchmark the policies agree on whose span exceeds the noise.
    assert "could be competence rather than policy: `harmbench_standard` at the small scale" in reading
    # Contradictions of the study are said in words.
    assert "- **Contradicts the study, which found that policy-load spans are wider: here no.**" in reading
    assert "- Agrees with the thesis" in reading
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
    # The headline CAP over the capability-load sets only, AUROC and CAP at the matched over-refusal.
    low, high = CAPABILITY_CAP - 0.05, CAPABILITY_CAP + 0.05
    assert cells[1:4] == [f"{CAPABILITY_CAP:.3f} [{low:.3f}, {high:.3f}]", "0.654", "0.321"]
    # CAP over all harmful sets and OVER-REF: the analysis' means with their intervals, in their own columns.
    assert cells[4] == f"{cap:.3f} [{cap - MEAN_CI[0]:.3f}, {cap + MEAN_CI[1]:.3f}]"
    assert cells[5] == f"{over_ref:.3f} [{over_ref - MEAN_CI[0]:.3f}, {over_ref + MEAN_CI[1]:.3f}]"
    assert "no interval" not in small and "mean of" not in small
    legend = _section(text, "## Table 1")
    assert "capability-load harmful sets only (fingerprint grouping: `harmbench_standard`)" in legend
    assert "all 3 harmful sets (`advbench`, `harmbench_copyright`, `harmbench_standard`)" in legend
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
    # The primary (matched) view: the own Δ 0.900 lowered by the planted 0.1.
    assert "0.800 [0.760, 0.840]" in _row(span, "harmbench_copyright")  # Δ of the first benchmark
    assert "0.050 [0.030, 0.070]" in _row(span, "harmbench_copyright")  # its Φ
    assert "| harmbench_copyright | policy | policy | 1.000 | cap |" in span  # load, study load, swing
    # Every view side by side: Δ and Φ of copyright in the own, matched and ranked views.
    views = _section(text, "## Three views of every score")
    assert _row(views, "harmbench_copyright") == (
        "| harmbench_copyright | policy | 1.000 | 0.900 [0.860, 0.940] | 0.050 | 0.800 [0.760, 0.840] "
        "| 0.050 | 0.700 [0.660, 0.740] | 0.050 |"
    )
    assert "| copyright Δ − Φ | 0.940 [0.880, 0.980] — copyright span exceeds the seed noise floor |" in views
    assert "![Δ_b and Φ_b per benchmark in each view](figures/spans_by_view.png)" in views
    assert (
        "| small-E1 | 0.020 [0.010, 0.040] | 0.600 [0.550, 0.660] | 0.900 | 0.400 [0.300, 0.500] |" in views
    )
    wildguard = _row(span, "wildguard_benign")
    assert wildguard.count("—") >= 3  # no swing, no seed recipe: Φ and its max absent, not zero
    per_scale = _row(span[span.index("### Per scale") :], "harmbench_standard")
    assert per_scale.endswith("| 0.249 [0.190, 0.290] | competence |")
    assert "| all | 5 | 0.810 [0.420, 0.970] | 0.05 |" in span
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
    assert (
        "| policy_a_terminal | small | harmbench_copyright | 4 of 10 | top | top | 0.00476 | 0.00476 | yes "
        "| 93.0% |" in rank
    )
    assert (
        "| policy_a_terminal | large | xstest | 4 of 10 | two-sided | none | — | 0.00952 | no | — |" in rank
    )
    assert "Hits expected by chance over the 12 tests: 0.07" in rank
    correlations = _section(text, "## Spearman correlations")
    assert "| all | fingerprint | gold | policy | 0.740 | 0.0012 | 22 | — |" in correlations
    assert "| all | study | val_policy_labels | capability | 0.340 | 0.12 | 22 | — |" in correlations
    assert (
        "| small | fingerprint | gold | capability | — | — | 12 | the second variable is constant"
        in correlations
    )
    xstest = _section(text, "## XSTest")
    assert "0.750 [0.690, 0.810] (150/200)" in xstest and "figurative_language" in xstest
    fingerprint = _section(text, "## Policy fingerprint")
    assert "0.900 [0.830, 0.950] (rules, 90/100)" in fingerprint
    agreement = _section(text, "## Label agreement")
    assert "83.6%" in agreement and "![label agreement heatmap](figures/agreement_heatmap.png)" in agreement
    assert "make repro" in text and "dvc exp run -S" in text and "make diff" in text


def test_plot_tables(run):
    layout, _ = run
    plots = layout.path("plot_table", plot="span").parent
    branch_scores = pd.read_csv(plots / "branch_scores.csv")
    assert list(branch_scores.columns) == ["model", "scale", "branch", "cap", "over_ref", "copy"]
    assert len(branch_scores) == len(models_table())
    assert branch_scores.set_index("model").loc["small-E8", "copy"] == COPY_SMALL_E8[0]
    span = pd.read_csv(plots / "span.csv")
    assert list(span.columns) == ["benchmark", "delta", "phi"]
    assert sorted(span["benchmark"]) == sorted(BENCHMARKS)
    assert span["phi"].isna().sum() == 1


def test_figures_are_byte_identical_across_runs(run, tmp_path):
    layout, _ = run
    figures = layout.path("figure", figure="x").parent
    names = ("span_vs_floor.png", "cap_vs_overref.png", "spans_by_view.png")
    first = {name: (figures / name).read_bytes() for name in names}
    assert all(data.startswith(b"\x89PNG") and len(data) > 5000 for data in first.values())
    second_root = tmp_path / "again"
    again = write_synthetic_run(second_root)
    text = report(again)
    # Byte-identical, with no trace of where it was built.
    assert text == layout.path("report").read_text(encoding="utf-8") and str(second_root) not in text
    for name, data in first.items():
        assert (again.path("figure", figure="x").parent / name).read_bytes() == data
    for name in ("branch_scores.csv", "span.csv"):
        assert (again.path("plot_table", plot="span").parent / name).read_bytes() == (
            layout.path("plot_table", plot="span").parent / name
        ).read_bytes()


def test_optional_inputs_absent(tmp_path):
    layout = write_synthetic_run(tmp_path, fingerprint=False)
    layout.path("figure", figure="agreement_heatmap").unlink()
    text = report(layout)
    assert "The fingerprint table `reports/fingerprint.csv` is absent" in text
    assert "The heatmap `reports/figures/agreement_heatmap.png` is absent." in text
    # The analysis writes a header-only noise floor when no recipe has several seeds.
    floor = layout.path("summary").parent / "noise_floor.csv"
    floor.write_text(
        "recipe,scale,benchmark,subset,mapping,view,seeds,spread,ci_low,ci_high\n", encoding="utf-8"
    )
    text = report(layout)
    assert "The seed noise floor table `reports/analysis/noise_floor.csv` has no rows" in text
    assert "no recipe at several seeds, so no seed noise floor backs the spans" in text


def test_noise_floor_table_when_present(tmp_path):
    layout = write_synthetic_run(tmp_path)
    pd.DataFrame(
        [
            {
                "recipe": "small-E8",
                "scale": "small",
                "benchmark": "xstest",
                "subset": "clean",
                "mapping": "default",
                "view": view,
                "seeds": "42;43;44",
                "spread": 0.061,
                "ci_low": 0.02,
                "ci_high": 0.1,
            }
            for view in ("own", "matched", "ranked")
        ]
    ).to_csv(layout.path("summary").parent / "noise_floor.csv", index=False)
    text = report(layout)
    assert "| small-E8 | small | xstest | 42;43;44 | 0.061 [0.020, 0.100] |" in text
    assert "is absent" not in _section(text, "## Label-supervision span")


def test_targets_and_competence_sections(run):
    _, text = run
    targets = _section(text, "## Targets (issue 14)")
    assert "1 of 3 targets met in the matched view" in targets
    assert (
        "| capture | not met | 0.410 | >= 0.85 | not met (0.410) | not measured (—) | lowest 0.410 "
        "(large-E3 on harmbench_standard) |" in targets
    )
    assert (
        "| top_ranks | not measured | — | = 1.00 | not measured (—) | not measured (—) | "
        "policy_a_terminal was not ranked |" in targets
    )
    competence = _section(text, "## Competence on the benchmarks both policies call unsafe")
    rows = [line for line in competence.splitlines() if line.startswith("| ") and "kind" not in line]
    # Teachers first, then the branches by scale (params order) and natural branch order, seeds kept.
    assert rows[0].startswith("| teacher | large | teacher-policy_a | 42 |")
    assert rows[2].startswith("| branch | small | E1 | 42 |")
    assert "| branch | small | E8 | 43 |" in competence
    assert _row(competence, "branch | large | E3 | 42").endswith(
        "| 0.410 [0.310, 0.460] | 0.410 [0.310, 0.460] |"
    )
    assert (
        "**Verdict (matched view): competence, not policy.**" in competence
        and "`harmbench_standard` at the small scale" in competence
    )


def test_competence_tradeoff_prints_the_analysis_numbers(tmp_path):
    layout = write_synthetic_run(tmp_path)
    text = report(layout)
    section = _section(text, "### Can one threshold meet both competence bars?")
    model, best = TRADEOFF_BEST
    assert f"The best worst-set capture that over-refusal ≤ 0.20 allows is {best:.3f} ({model})" in section
    assert "needs over-refusal ≥ 0.410 (large-E9)" in section
    assert "**Verdict: the two competence targets cannot hold together for these models.**" in section
    # One row per teacher and main-seed branch, the judged ones marked.
    rows = [
        line for line in section.splitlines() if line.startswith("| branch ") or line.startswith("| teacher ")
    ]
    assert len(rows) == 2 * len(BRANCHES) + 2
    assert "| branch | small | E2 | yes | 0.700 | 0.250 | 0.654 | 0.410 | no |" in section
    assert "`capture` and `over_refusal` cannot hold together here" in _section(text, "## Targets")
    # A model that meets both bars: no verdict, and the note under the targets goes.
    summary = summary_document()
    summary["competence_tradeoff"].update(reachable=1, reachable_models="teacher-policy_b")
    (layout.path("summary").parent / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    text = report(layout)
    assert "cannot hold together" not in text
    assert "1 has a threshold meeting both bars (teacher-policy_b)" in text


def test_competence_section_without_a_fingerprint(tmp_path):
    layout = write_synthetic_run(tmp_path)
    path = layout.path("summary").parent / "competence.csv"
    pd.read_csv(path).iloc[0:0].to_csv(path, index=False)
    summary = summary_document()
    summary["competence"]["fingerprint"] = False
    (layout.path("summary").parent / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    text = report(layout)
    assert "Not reported: no fingerprint was given." in _section(text, "## Competence")
    assert "No fingerprint was given, so which benchmarks the policies agree on is unknown." in text


@pytest.mark.parametrize(
    ("relative", "writer"),
    [
        ("reports/analysis/span.csv", "analyse"),
        ("reports/analysis/span_scale.csv", "analyse"),
        ("reports/analysis/competence.csv", "analyse"),
        ("reports/analysis/tradeoff.csv", "analyse"),
        ("reports/analysis/mapping_effect_by_model.csv", "analyse"),
        ("reports/analysis/mapping_vs_retraining.csv", "analyse"),
        ("reports/analysis/summary.json", "analyse"),
        ("reports/contamination.json", "audit"),
        ("data/models.yaml", "guardpolicy plan"),
    ],
)
def test_missing_required_input_names_file_and_writer(tmp_path, relative, writer):
    layout = write_synthetic_run(tmp_path)
    (tmp_path / relative).unlink()
    with pytest.raises(InputError) as caught:
        report(layout)
    assert caught.value.file == str(tmp_path / relative)
    assert writer in str(caught.value)


def test_bad_table_cell_names_row_and_field(tmp_path):
    layout = write_synthetic_run(tmp_path)
    path = layout.path("summary").parent / "rank_test.csv"
    table = pd.read_csv(path)
    table["p_value"] = table["p_value"].astype(str)
    table.loc[3, "p_value"] = "low"
    table.to_csv(path, index=False)
    with pytest.raises(InputError) as caught:
        report(layout)
    assert (caught.value.row, caught.value.field) == (4, "p_value")


def test_missing_column_and_summary_key(tmp_path):
    layout = write_synthetic_run(tmp_path)
    path = layout.path("summary").parent / "scores.csv"
    pd.read_csv(path).drop(columns=["ci_high"]).to_csv(path, index=False)
    with pytest.raises(InputError, match="ci_high"):
        report(layout)
    scores_table().to_csv(path, index=False)
    summary = summary_document()
    del summary["load_contrast"]
    (layout.path("summary").parent / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    with pytest.raises(InputError) as caught:
        report(layout)
    assert caught.value.field == "load_contrast"


def test_scores_without_headline_means_is_an_input_error(tmp_path):
    layout = write_synthetic_run(tmp_path)
    path = layout.path("summary").parent / "scores.csv"
    scores = pd.read_csv(path)
    scores[scores["benchmark"] != "mean:harmful"].to_csv(path, index=False)
    with pytest.raises(InputError, match=r"no `mean:harmful` cap row") as caught:
        report(layout)
    assert caught.value.file.endswith("scores.csv") and caught.value.field == "benchmark"
    # Per-benchmark rows stay per benchmark: the means are neither in the per-benchmark table nor the caveats.
    layout = write_synthetic_run(tmp_path / "intact")
    text = report(layout)
    assert "mean:" not in _section(text, "## Scores per benchmark") and "mean:" not in _section(
        text, "## Reading"
    )


def test_mapping_effect_prints_the_analysis_summary_per_model(tmp_path):
    """The per-model mean and largest change are mapping_effect_by_model.csv's, not recomputed from
    mapping_effect.csv: a value planted in the summary table is what the report prints."""
    layout = write_synthetic_run(tmp_path)
    path = layout.path("analysis_table", table="mapping_effect_by_model")
    table = pd.read_csv(path)
    row = (table["model"] == "small-E5") & (table["subset"] == "clean")
    table.loc[row, ["mean_change", "largest_benchmark", "largest_change"]] = [0.777, "planted", -0.5]
    table.to_csv(path, index=False)
    section = _section(report(layout), "## Binary mapping effect")
    assert "| small | small-E5 | +0.777 | planted: 0.110 → 0.210 (-0.500) |" in section
    # The other models keep what the analysis derived from mapping_effect.csv.
    assert "| small | small-E3 | +0.211 | jbb_benign: 0.100 → 0.421 (+0.321) |" in section


def test_table1_rows_are_picked_once_per_mapping(monkeypatch, tmp_path):
    """Table 1's rows are picked from scores.csv once for the figures, the plot tables and every section;
    with no guard scored only the headline mapping is needed."""
    calls = []
    pick = headline.branch_headline

    def counted(scores, benchmarks, **kwargs):
        calls.append(kwargs["mapping"])
        return pick(scores, benchmarks, **kwargs)

    monkeypatch.setattr(headline, "branch_headline", counted)
    report(write_synthetic_run(tmp_path))
    assert calls == ["default"]


def test_natural_branch_order():
    names = ["E10", "teacher-policy_b", "E2", "E1", "teacher-policy_a"]
    assert sorted(names, key=natural_key) == ["E1", "E2", "E10", "teacher-policy_a", "teacher-policy_b"]


def test_competence_verdict_without_any_noise_floor(tmp_path):
    layout = write_synthetic_run(tmp_path)
    path = layout.path("summary").parent / "span_scale.csv"
    table = pd.read_csv(path)
    table["verdict"] = "undetermined: no recipe trained at several seeds at this scale"
    table.to_csv(path, index=False)
    competence = _section(report(layout), "## Competence")
    assert "**Verdict.** None: no scale has both two branches and a seed noise floor" in competence
    assert "competence, not policy." not in competence

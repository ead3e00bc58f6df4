"""Stage report: the run's answer as reports/REPORT.md, with its figures and the DVC plot tables.

Reads reports/analysis/{scores,span,rank_test,correlations,mapping_effect,xstest,xstest_pairs}.csv and
summary.json (stage `analyse`; noise_floor.csv optional), reports/fingerprint.csv (stage `fingerprint`,
optional), reports/contamination.json (`audit`), reports/agreement.json (`agreement`; its heatmap
reports/figures/agreement_heatmap.png is linked), reports/benchmarks.json (`benchmarks_report`),
data/models.yaml (`evaluations`) and params.yaml (profile, policies, scales, branches, teachers, analysis).
Writes reports/REPORT.md, reports/figures/{span_vs_floor,cap_vs_overref}.png and
reports/plots/{branch_scores,span}.csv.

    python pipelines/report.py
"""

from __future__ import annotations

import fire

from guardpolicy.runner import guarded, stage_imports

with stage_imports():
    from guardpolicy.stages.report import report


def main(
    params_file: str = "params.yaml",
    plan_file: str = "data/models.yaml",
    analysis_dir: str = "reports/analysis",
    out: str = "reports/REPORT.md",
    figures_dir: str = "reports/figures",
    plots_dir: str = "reports/plots",
) -> None:
    report(
        params_file=params_file,
        plan_file=plan_file,
        analysis_dir=analysis_dir,
        out=out,
        figures_dir=figures_dir,
        plots_dir=plots_dir,
    )


if __name__ == "__main__":
    fire.Fire(guarded(main))

"""The `guardpolicy` command (python-fire). Each sub-command is an operation a DVC stage calls.

    guardpolicy fetch harmbench_standard      # one fetch@ stage by hand
    guardpolicy benchmarks-report
    guardpolicy validate-benchmarks
    guardpolicy pool                          # build the prompt pool
    guardpolicy label policy_a                # one label@<policy> stage by hand
    guardpolicy agreement
    guardpolicy validate-labels
    guardpolicy audit                         # contamination, clean benchmarks, splits
    guardpolicy validate-splits
    guardpolicy plan                          # validate params `branches`, write data/models.yaml
    guardpolicy bench-train --samples 512     # training samples/s: our loop vs transformers.Trainer
    guardpolicy bench-eval --samples 512      # inference samples/s: ours vs transformers.pipeline
    guardpolicy evaluate small-E2             # one evaluate@ stage by hand (features small-E2 likewise)
    guardpolicy fingerprint                   # benchmarks labelled by each policy vs their own gold
    guardpolicy analyse                       # spans, noise floor, rank tests, correlations, intervals
    guardpolicy report                        # reports/REPORT.md and figures
    guardpolicy baseline qwen3guard_0_6b      # one baseline@<guard> stage by hand (open guard predictions)
    guardpolicy guard-card qwen3guard_0_6b    # its card, reports/guards/<guard>.md
    guardpolicy diff --rev main               # Markdown: metrics + params diff vs a revision or experiment
    guardpolicy taxonomy                      # the validated label space
    guardpolicy params                        # the active profile, validated
    guardpolicy registry                      # the benchmark registry, validated

Errors in inputs or configuration print one line naming file, row and field, and exit with status 2
(a failed validation exits with 1).
"""

from __future__ import annotations

import dataclasses
import json

import fire

from guardpolicy.config import load_params
from guardpolicy.data.registry import load_registry
from guardpolicy.evaluation.bench import bench_eval
from guardpolicy.reporting.diff import diff
from guardpolicy.runner import guarded
from guardpolicy.stages import agreement as agreement_stage
from guardpolicy.stages import analyse as analyse_stage
from guardpolicy.stages import audit as audit_stage
from guardpolicy.stages import baselines as baseline_stage
from guardpolicy.stages import benchmarks as benchmark_stages
from guardpolicy.stages import evaluate as evaluate_stage
from guardpolicy.stages import fingerprint as fingerprint_stage
from guardpolicy.stages import guard_card as guard_card_stage
from guardpolicy.stages import labels as label_stage
from guardpolicy.stages import pool as pool_stage
from guardpolicy.stages import report as report_stage
from guardpolicy.stages import validate as validate_stages
from guardpolicy.taxonomy import TAXONOMY_FILE, load_taxonomy
from guardpolicy.training.bench import bench_train
from guardpolicy.training.branches import write_plan


def show_params(params_file: str = "params.yaml") -> str:
    """Print the validated params with the active profile resolved."""
    params = load_params(params_file)
    return json.dumps(
        {
            "profile": params.profile,
            "active": dataclasses.asdict(params.active),
            "data": dataclasses.asdict(params.data),
        },
        indent=2,
    )


def show_registry(registry_file: str = benchmark_stages.REGISTRY_FILE) -> str:
    """List the validated benchmark registry: name, expected rows, label kind, sources."""
    registry = load_registry(registry_file)
    lines = [
        f"{name:22s} {spec.expected_rows:>6d}  {spec.label.kind:10s}  "
        + " | ".join(s.name for s in spec.sources)
        for name, spec in registry.items()
    ]
    return "\n".join(lines)


def show_taxonomy(taxonomy_file: str = TAXONOMY_FILE) -> str:
    """Print the validated label space: coarse classes, the 24 pillars and the fact vocabulary."""
    taxonomy = load_taxonomy(taxonomy_file)
    lines = ["coarse classes (unsafe: " + ", ".join(taxonomy.unsafe_classes) + ")"]
    lines += [f"  {name:14s} {text}" for name, text in taxonomy.coarse_definitions.items()]
    lines.append(f"pillars ({len(taxonomy.pillars)})")
    lines += [f"  {name:20s} {text}" for name, text in taxonomy.pillars.items()]
    lines.append("facts")
    lines += [f"  {name:22s} {text}" for name, text in taxonomy.facts.items()]
    return "\n".join(lines)


COMMANDS = {
    "fetch": guarded(benchmark_stages.fetch),
    "benchmarks-report": guarded(benchmark_stages.report),
    "validate-benchmarks": guarded(benchmark_stages.validate),
    "pool": guarded(pool_stage.build),
    "label": guarded(label_stage.label),
    "agreement": guarded(agreement_stage.agreement),
    "validate-labels": guarded(validate_stages.validate_labels),
    "audit": guarded(audit_stage.audit),
    "validate-splits": guarded(validate_stages.validate_splits),
    "plan": guarded(write_plan),
    "bench-train": guarded(bench_train),
    "bench-eval": guarded(bench_eval),
    "features": guarded(evaluate_stage.features),
    "evaluate": guarded(evaluate_stage.evaluate),
    "fingerprint": guarded(fingerprint_stage.fingerprint),
    "analyse": guarded(analyse_stage.analyse),
    "report": guarded(report_stage.report),
    "baseline": guarded(baseline_stage.baseline),
    "guard-card": guarded(guard_card_stage.write_guard_card),
    "diff": guarded(diff),
    "taxonomy": guarded(show_taxonomy),
    "params": guarded(show_params),
    "registry": guarded(show_registry),
}


def main() -> None:
    fire.Fire(COMMANDS, name="guardpolicy")


if __name__ == "__main__":
    main()

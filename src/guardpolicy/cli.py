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
    guardpolicy bench-dag --scope reduced     # time the smoke dvc repro of `make test` (full: make test-e2e)
    guardpolicy gpu-check --steps 300         # ModernBERT-base training throughput on a GPU (docs/gpu.md)
    guardpolicy code-deps [--write]           # dvc.yaml's code deps against each stage's imports
    guardpolicy contracts [--write-docs]      # docs/data-contracts.md's column tables against the contracts
    guardpolicy evaluate small-E2             # one evaluate@ stage by hand (features small-E2 likewise)
    guardpolicy export teacher-policy_a out/  # a checkpoint as a plain transformers classifier folder
    guardpolicy fingerprint                   # benchmarks labelled by each policy vs their own gold
    guardpolicy analyse                       # spans, noise floor, rank tests, correlations, intervals
    guardpolicy report                        # reports/REPORT.md and figures
    guardpolicy baseline qwen3guard_0_6b      # one baseline@<guard> stage by hand (open guard predictions)
    guardpolicy guard-card qwen3guard_0_6b    # its card, reports/guards/<guard>.md
    guardpolicy score --model ./my-guard      # one guard on the benchmarks, no study: reports/score/<guard>/
    guardpolicy bench-score --prompts 500     # wall time of scoring a random ~86M-parameter classifier
    guardpolicy bench-llm                     # LLM client requests/s at 1..256 in flight, kill-and-resume
    guardpolicy live-llm-check --serve-cmd .. # committee + a baseline against a real server (make llm-check)
    guardpolicy diff --rev main               # Markdown: metrics + params diff vs a revision or experiment
    guardpolicy taxonomy                      # the validated label space
    guardpolicy params                        # the active profile, validated
    guardpolicy registry                      # the benchmark registry, validated

Errors in inputs or configuration print one line naming file, row and field, and exit with status 2
(a failed validation exits with 1).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
from collections.abc import Callable
from typing import Any

import fire

# config and taxonomy are light (yaml, dataclasses); the stage modules are imported per command below.
from guardpolicy.config.core import PARAMS_FILE
from guardpolicy.config.params import load_params
from guardpolicy.runner import guarded, with_layout
from guardpolicy.taxonomy import TAXONOMY_FILE, load_taxonomy


def show_params(params_file: str = PARAMS_FILE) -> str:
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


def show_registry(registry_file: str | None = None) -> str:
    """List the validated benchmark registry (default: the one the fetch stages read): name, expected rows,
    label kind, sources."""
    from guardpolicy.data.registry import load_registry
    from guardpolicy.layout import Layout

    registry = load_registry(registry_file or Layout.discover().path("benchmark_registry"))
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


# Command -> "module:function". Only the module of the command that runs is imported: the stage modules pull
# in torch, transformers and Great Expectations (~10 s of imports on a loaded 2-core machine), which
# `guardpolicy params` or `guardpolicy plan` never need.
COMMANDS = {
    "fetch": "guardpolicy.stages.fetch:fetch",
    "benchmarks-report": "guardpolicy.stages.benchmarks_report:report",
    "validate-benchmarks": "guardpolicy.stages.validate_benchmarks:validate",
    "pool": "guardpolicy.stages.pool:build",
    "label": "guardpolicy.stages.labels:label",
    "agreement": "guardpolicy.stages.agreement:agreement",
    "validate-labels": "guardpolicy.stages.validate_labels:validate_labels",
    "audit": "guardpolicy.stages.audit:audit",
    "validate-splits": "guardpolicy.stages.validate_splits:validate_splits",
    "plan": "guardpolicy.training.branches:write_plan",
    "bench-train": "guardpolicy.devtools.bench:bench_train",
    "bench-eval": "guardpolicy.evaluation.bench:bench_eval",
    "bench-dag": "guardpolicy.devtools.bench:bench_dag",
    "gpu-check": "guardpolicy.devtools.gpu_check:gpu_check",
    "tune": "guardpolicy.devtools.tune:tune",
    "code-deps": "guardpolicy.devtools.codedeps:code_deps",
    "contracts": "guardpolicy.contracts.docs:contracts",
    "features": "guardpolicy.stages.features:features",
    "evaluate": "guardpolicy.stages.evaluate:evaluate",
    "export": "guardpolicy.stages.export:export",
    "fingerprint": "guardpolicy.stages.fingerprint:fingerprint",
    "analyse": "guardpolicy.stages.analyse:analyse",
    "report": "guardpolicy.stages.report:report",
    "baseline": "guardpolicy.stages.baselines:baseline",
    "guard-card": "guardpolicy.stages.guard_card:write_guard_card",
    "score": "guardpolicy.stages.score:score",
    "bench-score": "guardpolicy.devtools.bench_score:bench_score",
    "bench-llm": "guardpolicy.devtools.bench_llm:bench_llm",
    "live-llm-check": "guardpolicy.devtools.live_llm:live_llm_check",
    "diff": "guardpolicy.reporting.diff:diff",
    "taxonomy": "guardpolicy.cli:show_taxonomy",
    "params": "guardpolicy.cli:show_params",
    "registry": "guardpolicy.cli:show_registry",
}


def resolve(command: str) -> Callable[..., Any]:
    """The operation behind one command, imported on demand and wrapped for the command line (a stage that
    takes the layout gets the repository's, as under DVC)."""
    module, _, function = COMMANDS[command].partition(":")
    return guarded(with_layout(getattr(importlib.import_module(module), function)))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    # A known command loads its own module only; anything else (no command, --help, a typo) shows all of
    # them, which needs every module.
    names = [command] if command in COMMANDS else list(COMMANDS)
    fire.Fire({name: resolve(name) for name in names}, command=argv, name="guardpolicy")


if __name__ == "__main__":
    main()

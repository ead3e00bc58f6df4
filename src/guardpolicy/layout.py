"""Where every artifact of the repository lives: each path defined once, relative to the repository root.

`ARTIFACTS` is the table (name -> template, with `{fields}` for the per-benchmark / per-model parts); a
`Layout` turns a name into a path under its root. The root comes from the repository, not from the
process's working directory: DVC sets ``DVC_ROOT`` for every stage command, and outside DVC the nearest
folder upwards holding both ``dvc.yaml`` and ``params.yaml`` is the root. A test checks the table against
every path dvc.yaml declares, in both directions, so the DAG and the code cannot drift apart.

Experiments DVC runs outside the workspace (``dvc exp run --queue`` then ``dvc queue start`` or
``dvc exp run --run-all``, and ``dvc exp run --temp``) run each stage in a git copy of the repository under
``<workspace>/.dvc/tmp/exps/`` (``Repo.tmp_dir`` + ``EXEC_TMP_DIR`` in DVC 3), with the stage's wdir inside
that copy as the working directory — but with ``DVC_ROOT`` overridden to the *workspace's* root
(dvc/repo/experiments/queue/base.py, ``_stash_exp``: "point to the parent DVC repo root"). So under DVC the
root is the copy when the working directory lies inside ``DVC_ROOT/.dvc/tmp/exps/`` (outputs must land in the
copy, or DVC finds them missing and the workspace gets overwritten), and ``DVC_ROOT`` is then the
`Layout.workspace`: a path in params that leaves the repository (``data.mirror_dir: ../shared/benchmarks``)
is resolved against it, where it exists, not against the copy, where it never does.
"""

from __future__ import annotations

import os
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from guardpolicy.errors import ConfigError

ROOT_ENV = "DVC_ROOT"  # set by DVC for every stage command (dvc/env.py)
ROOT_MARKERS = ("dvc.yaml", "params.yaml")
# Where DVC makes the copies its queued and --temp experiments run in, relative to the workspace root:
# Repo.tmp_dir (".dvc/tmp") joined with dvc.repo.experiments.utils.EXEC_TMP_DIR ("exps"). The celery queue
# puts a copy directly below it, `--temp` below its "standalone" folder; both are inside.
EXPERIMENT_COPIES = Path(".dvc") / "tmp" / "exps"


@dataclass(frozen=True)
class Artifact:
    template: str  # relative to the root; `{field}` parts name one benchmark, policy, model, ...
    description: str
    dvc: bool = True  # declared in dvc.yaml (False: caches, tools' outputs, inputs no stage declares)


ARTIFACTS: Mapping[str, Artifact] = {
    # Inputs versioned in git.
    "params": Artifact(
        "params.yaml", "the study's parameters (stages declare its keys, not the file)", dvc=False
    ),
    "taxonomy": Artifact("data/taxonomy.yaml", "coarse classes, the 24 pillars and the fact vocabulary"),
    "benchmark_registry": Artifact("data/benchmarks.yaml", "every benchmark: sources, pinned hashes, labels"),
    "benchmark_facts": Artifact(
        "data/benchmark_facts.yaml", "facts each policy's labeler reads per benchmark"
    ),
    "pool_config": Artifact("data/pool.yaml", "the prompt pool's sources and generated cells"),
    "user_data": Artifact("data/user", "the user's own pool files (kind: user in data/pool.yaml)"),
    "user_benchmarks": Artifact(
        "data/user_benchmarks",
        "the user's own benchmark datasets (save_to_disk folders, data/benchmarks.yaml)",
    ),
    "policies": Artifact("data/policies", "the policies' constitutions"),
    "plan": Artifact(
        "data/models.yaml", "the model plan: every trained and evaluated model (guardpolicy plan)"
    ),
    "baseline_registry": Artifact("data/baselines.yaml", "open guards: hub ids, pinned revisions, adapters"),
    "tune_study": Artifact("data/tune.yaml", "the lever study behind the default profile", dvc=False),
    # Benchmarks.
    "benchmarks": Artifact("data/benchmarks", "every fetched benchmark"),
    "benchmark": Artifact("data/benchmarks/{benchmark}.parquet", "one benchmark, normalised"),
    "benchmark_meta": Artifact("data/benchmarks/{benchmark}.meta.json", "its provenance and status"),
    "benchmarks_report": Artifact("reports/benchmarks.json", "every fetch's provenance (metric)"),
    "benchmarks_markdown": Artifact("reports/benchmarks.md", "the same, as a table"),
    "benchmarks_validation": Artifact("reports/validation/benchmarks.json", "the GX benchmark suite"),
    # Pool, labels, agreement, audit, splits.
    "pool": Artifact("data/pool/pool.parquet", "the prompt pool"),
    "pool_report": Artifact("reports/pool.json", "its sources, sizes and cells (metric)"),
    "labels": Artifact("data/labels", "every policy's labels of the pool"),
    "policy_labels": Artifact("data/labels/{policy}.parquet", "one policy's labels of the pool"),
    "label_report": Artifact("reports/labels/{policy}.json", "its class counts and labeler facts"),
    "agreement": Artifact("reports/agreement.json", "agreement between the policies (metric)"),
    "agreement_markdown": Artifact("reports/agreement.md", "the same, in words"),
    "labels_validation": Artifact("reports/validation/labels.json", "the pool and label suites"),
    "contamination": Artifact("reports/contamination.json", "the audit: pool vs benchmark overlap (metric)"),
    "contamination_markdown": Artifact("reports/contamination.md", "the same, as tables"),
    "splits": Artifact("data/splits", "train / calib / val / test splits of the pool"),
    "split": Artifact("data/splits/{split}.parquet", "one split's pool ids"),
    "clean_benchmarks": Artifact("data/benchmarks_clean", "every benchmark minus prompts seen in training"),
    "clean_benchmark": Artifact("data/benchmarks_clean/{benchmark}.parquet", "one benchmark, decontaminated"),
    "splits_validation": Artifact("reports/validation/splits.json", "the split and decontamination suites"),
    # Models.
    "prefixes": Artifact("data/prefix/{scale}", "a scale's frozen prefix states over every prompt"),
    "models": Artifact("models", "every checkpoint folder", dvc=False),
    # Model names (training.names): <scale>-pretrained, teacher-<policy>, <scale>-<branch>[-s<seed>].
    "model": Artifact("models/{model}", "one checkpoint: weights, tokenizer, model card"),
    "teacher_outputs": Artifact("data/teacher_outputs", "every teacher's cached logits"),
    "teacher_logits": Artifact("data/teacher_outputs/{policy}.parquet", "one teacher's logits"),
    "training_logs": Artifact("reports/training/{model}", "a run's dvclive logs"),
    "features": Artifact("data/features/{model}.npz", "a head-only model's cached backbone features"),
    "export": Artifact(
        "exports/{model}", "a checkpoint as a plain transformers sequence classifier, with its model card"
    ),
    # Evaluation, fingerprint, analysis, report.
    "evaluations": Artifact("reports/eval", "every evaluated model's predictions"),
    "predictions": Artifact("reports/eval/{model}/predictions.parquet", "one model's predictions"),
    "eval_metrics": Artifact("reports/eval/{model}/metrics.json", "its metrics (metric)"),
    "fingerprint": Artifact("reports/fingerprint.csv", "each benchmark under each policy vs its gold"),
    "fingerprint_json": Artifact(
        "reports/fingerprint.json", "swing and unsafe shares per benchmark (metric)"
    ),
    "fingerprint_labels": Artifact("reports/fingerprint_labels.parquet", "every benchmark prompt per policy"),
    "analysis_table": Artifact("reports/analysis/{table}.csv", "one table of the analysis"),
    "summary": Artifact("reports/analysis/summary.json", "the analysis' answers (metric)"),
    "report": Artifact("reports/REPORT.md", "the report"),
    "figure": Artifact("reports/figures/{figure}.png", "a figure of the report"),
    "plot_table": Artifact("reports/plots/{plot}.csv", "a tidy table for dvc plots"),
    # Timing.
    "stage_timings": Artifact("reports/timings", "every stage's timing record"),
    "stage_timing": Artifact("reports/timings/{stage}.json", "one stage's seconds and samples"),
    "timings": Artifact("reports/timings.json", "every stage's seconds and the machine's speed (metric)"),
    # Open guard baselines (pipelines/baselines/dvc.yaml).
    "baselines": Artifact("reports/baselines", "every open guard's predictions"),
    "baseline_predictions": Artifact("reports/baselines/{guard}/predictions.parquet", "one guard's answers"),
    "baseline_metrics": Artifact("reports/baselines/{guard}/metrics.json", "its metrics (metric)"),
    "guard_card": Artifact("reports/guards/{guard}.md", "the guard's card"),
    "guard_card_json": Artifact("reports/guards/{guard}.json", "the card's numbers"),
    # One guard scored without the study (`guardpolicy score`, pipelines/score/dvc.yaml).
    "score_dir": Artifact("reports/score/{guard}", "one scored guard's folder", dvc=False),
    "score_predictions": Artifact("reports/score/{guard}/predictions.parquet", "its answers"),
    "score_metrics": Artifact("reports/score/{guard}/metrics.json", "its metrics and fingerprint (metric)"),
    "score_table": Artifact("reports/score/{guard}/{table}.csv", "one of its tables"),
    "score_card": Artifact("reports/score/{guard}/card.md", "its card"),
    "score_figure": Artifact("reports/score/{guard}/fingerprint.png", "its policy fingerprint"),
    # The pipeline definitions (DVC's, read by the dependency checks; not artifacts of a stage).
    "pipeline": Artifact("dvc.yaml", "the DAG", dvc=False),
    "baselines_pipeline": Artifact("pipelines/baselines/dvc.yaml", "the optional open-guard DAG", dvc=False),
    "score_pipeline": Artifact("pipelines/score/dvc.yaml", "the optional one-guard scoring DAG", dvc=False),
    # Caches and tools: never DVC outputs (DVC deletes outputs before a rerun; caches must survive it).
    "train_work": Artifact(".cache/train/{model}", "a run's resumable training state", dvc=False),
    "committee_cache": Artifact(".cache/committee", "LLM judges' answers", dvc=False),
    "baseline_cache": Artifact(".cache/baselines", "open guards' raw outputs", dvc=False),
    "tune_work": Artifact(".cache/tune", "the tune study's runs", dvc=False),
    "tune_reports": Artifact("reports/tune", "the tune study's tables", dvc=False),
    # Measured speeds (`make bench`, `make llm-check`, `make gpu-check`): written by hand-run commands.
    "bench_llm": Artifact("reports/bench/llm.json", "LLM client requests/s, kill and resume", dvc=False),
    "bench_llm_live": Artifact(
        "reports/bench/llm_live.json", "the committee against a real server", dvc=False
    ),
    "bench_gpu_check": Artifact("reports/bench/gpu_check.json", "one branch's samples/s on a GPU", dvc=False),
}


def relative_path(name: str, **values: str) -> str:
    """Artifact `name`'s path relative to the root, e.g. for a params default or a message; `Layout.path`
    gives the path to read or write."""
    return Layout(Path(".")).relative(name, **values)


def fields(template: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


def template_pattern(template: str) -> re.Pattern[str]:
    """A regex matching the template's paths, each `{field}` one path segment or part of one."""
    parts = re.split(r"\{[^}]+\}", template)
    return re.compile("^" + "[^/]+".join(re.escape(p) for p in parts) + "$")


def _marked_root(here: Path, stop: Path | None = None) -> Path | None:
    """The nearest folder at or above `here` (not above `stop`) holding every root marker, or None."""
    for folder in (here, *here.parents):
        if all((folder / marker).is_file() for marker in ROOT_MARKERS):
            return folder
        if folder == stop:
            break
    return None


def experiment_workspace(
    start: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> Path | None:
    """The user's workspace root when `start` (default: the working directory) is inside the copy of a DVC
    experiment run outside the workspace (queued or --temp): ``DVC_ROOT``, which DVC sets to the workspace for
    those runs, holding `start` under its ``.dvc/tmp/exps/``. None otherwise (a plain ``dvc repro`` or
    workspace ``dvc exp run``, or no DVC at all)."""
    env = os.environ if environ is None else environ
    if not env.get(ROOT_ENV):
        return None
    workspace = Path(env[ROOT_ENV]).resolve()
    here = Path(start if start is not None else Path.cwd()).resolve()
    return workspace if here.is_relative_to(workspace / EXPERIMENT_COPIES) else None


def find_root(start: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """The repository root: under DVC ``DVC_ROOT`` — unless `start` (default: the working directory) lies in
    an experiment's copy under ``DVC_ROOT/.dvc/tmp/exps/``, whose own root it then is — else the nearest
    folder at or above `start` holding dvc.yaml and params.yaml."""
    env = os.environ if environ is None else environ
    here = Path(start if start is not None else Path.cwd()).resolve()
    workspace = experiment_workspace(here, env)
    if workspace is not None:
        copy = _marked_root(here, stop=workspace / EXPERIMENT_COPIES)
        if copy is None:
            raise ConfigError(
                f"{here}: inside DVC's experiment folder {workspace / EXPERIMENT_COPIES} ({ROOT_ENV}="
                f"{env[ROOT_ENV]}) but no folder at or above it there holds {' and '.join(ROOT_MARKERS)}"
            )
        return copy
    if env.get(ROOT_ENV):
        return Path(env[ROOT_ENV]).resolve()
    root = _marked_root(here)
    if root is None:
        raise ConfigError(
            f"{here}: not inside a guardpolicy repository (no folder at or above it holds "
            f"{' and '.join(ROOT_MARKERS)}); run from the repository or set {ROOT_ENV}"
        )
    return root


def leaves_root(named: str | Path) -> bool:
    """Whether a relative path in params (e.g. ``../shared/benchmarks``) points outside the repository."""
    parts = Path(os.path.normpath(named)).parts
    return bool(parts) and parts[0] == os.pardir


@dataclass(frozen=True)
class Layout:
    """Every artifact path under one repository root. `workspace` is the user's workspace root when `root` is
    a DVC experiment's copy of it (see the module docstring); None when the root is the workspace itself."""

    root: Path
    workspace: Path | None = None

    @classmethod
    def discover(cls, start: str | Path | None = None) -> Layout:
        workspace = experiment_workspace(start)
        return cls(find_root(start), workspace)

    def path(self, name: str, **values: str) -> Path:
        """The path of artifact `name`, its `{fields}` filled from `values` (each exactly once)."""
        if name not in ARTIFACTS:
            raise KeyError(f"unknown artifact {name!r}; known: {sorted(ARTIFACTS)}")
        template = ARTIFACTS[name].template
        wanted = set(fields(template))
        if set(values) != wanted:
            raise TypeError(f"artifact {name!r} ({template}) takes {sorted(wanted)}, got {sorted(values)}")
        for field, value in values.items():
            if not value or "/" in value or value in (".", ".."):
                raise ValueError(f"artifact {name!r}: {field} {value!r} is not one path segment")
        return self.root / template.format(**values)

    def relative(self, name: str, **values: str) -> str:
        return self.path(name, **values).relative_to(self.root).as_posix()

    def resolve(self, named: str | Path) -> Path:
        """A path that params or a registry names (relative to the root, e.g. the benchmark mirror
        ``../shared/benchmarks`` or a policy file), usable from the working directory: as written when that
        is the root (as under DVC: messages and reports then name it as params does, the same on every
        machine), else under the root. In a DVC experiment's copy a path leaving the repository is taken
        from the user's workspace (`workspace`), where the files beside the repository are: beside the copy,
        deep inside .dvc/tmp/exps/, there is nothing."""
        path = Path(named)
        if path.is_absolute():
            return path
        if self.workspace is not None and leaves_root(path):
            return Path(os.path.normpath(self.workspace / path))
        if Path.cwd().resolve() == self.root.resolve():
            return path
        return self.root / path

    def describe(self, named: str | Path) -> str:
        """Where `resolve(named)` looks, in words for an error message: the resolved path, and for a DVC
        experiment's copy that it was taken from the workspace."""
        resolved = self.resolve(named)
        shown = Path(os.path.normpath(resolved if resolved.is_absolute() else self.root / resolved))
        if self.workspace is not None and leaves_root(named):
            return (
                f"{shown} (resolved against the workspace {self.workspace}, which {ROOT_ENV} names: this run "
                f"is a DVC experiment in the copy {self.root})"
            )
        return str(shown)

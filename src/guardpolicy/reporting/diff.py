"""`guardpolicy diff`: what an experiment changed, as Markdown for a review (a PR comment, `make diff`).

The workspace is compared against a git revision or a DVC experiment name with `dvc metrics diff --json` and
`dvc params diff --json`; the rendering functions are pure (those two JSON documents in, Markdown out):
the headline answers that moved (summary.json's copyright-vs-noise and load contrast, Δ per benchmark, each in
every view of the scores; where each study finding holds; the base rate's CAP/OVER-REF correlation; every
model's headline copy / cap / over_ref / val) sorted by how far they moved, the params that changed, and the
full metrics diff folded into a <details> block.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardpolicy.errors import GuardpolicyError
from guardpolicy.io import write_text

log = logging.getLogger(__name__)

# The CLI sub-command name (`guardpolicy diff`); the PR workflow calls it.
DIFF_COMMAND = "diff"
SUMMARY_FILE = re.compile(r"(^|/)analysis/summary\.json$")
MODEL_METRICS_FILE = re.compile(r"(^|/)eval/(?P<model>[^/]+)/metrics\.json$")
# The headline answers in every view (the top level is the own view, `views.<view>.` the matched and ranked
# ones), which views each study finding holds in, and the base rate's CAP/OVER-REF correlation per view.
SUMMARY_HEADLINE = re.compile(
    r"^((views\.[^.]+\.)?(copyright_vs_noise\.[^.]+|load_contrast\.[^.]+|span\.[^.]+\.delta)"
    r"|study_views\.[^.]+\.holds_in|base_rate\.cap_over_ref_r\.[^.]+\.r)$"
)
MODEL_HEADLINE = re.compile(r"^headline\.(copy|cap|over_ref|val_.+)$")
DVC_TIMEOUT_S = 600
# More changed params than this are folded into a <details> block.
PARAMS_SHOWN = 25


class DiffError(GuardpolicyError):
    """dvc could not produce the diff (unknown revision, not a DVC repository, dvc missing)."""


@dataclass(frozen=True)
class Change:
    """One metric or param: where it lives, its name, and its value at the revision and now."""

    file: str
    name: str
    old: Any
    new: Any

    @property
    def numeric(self) -> bool:
        return _is_number(self.old) and _is_number(self.new)

    @property
    def change(self) -> float | None:
        return float(self.new) - float(self.old) if self.numeric else None

    @property
    def changed(self) -> bool:
        if self.numeric:
            return float(self.new) != float(self.old)
        return self.old != self.new


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def flatten(diff: dict[str, dict[str, dict[str, Any]]]) -> list[Change]:
    """`dvc metrics|params diff --json` ({file: {dotted name: {old, new[, diff]}}}) as sorted Changes."""
    changes = []
    for file, entries in diff.items():
        if not isinstance(entries, dict):
            continue
        for name, entry in entries.items():
            if isinstance(entry, dict) and ("old" in entry or "new" in entry):
                changes.append(Change(file, name, entry.get("old"), entry.get("new")))
    return sorted(changes, key=lambda c: (c.file, c.name))


def headline_changes(metrics_diff: dict[str, Any]) -> list[tuple[str, Change]]:
    """(label, change) for the headline metrics that moved: qualitative ones first, then by |change|."""
    picked = []
    for c in flatten(metrics_diff):
        if not c.changed:
            continue
        if SUMMARY_FILE.search(c.file) and SUMMARY_HEADLINE.match(c.name):
            picked.append((c.name, c))
            continue
        match = MODEL_METRICS_FILE.search(c.file)
        if match and MODEL_HEADLINE.match(c.name):
            picked.append((f"{match['model']} {c.name[len('headline.') :]}", c))

    def order(item: tuple[str, Change]) -> tuple:
        label, c = item
        # A verdict that flipped, or a value that appeared / vanished, says more than any size of move.
        return (0, 0.0, label) if c.change is None else (1, -abs(c.change), label)

    return sorted(picked, key=order)


def _value(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.4g}" if value != 0 and abs(value) < 1e-3 else f"{value:.3f}"
    if isinstance(value, list | dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _change(c: Change) -> str:
    if c.change is not None:
        delta = c.change
        return f"{delta:+.4g}" if delta != 0 and abs(delta) < 1e-3 else f"{delta:+.3f}"
    if c.old is None:
        return "added"
    if c.new is None:
        return "removed"
    return "changed"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(str(cell)) for cell in row) + " |" for row in rows]
    return lines


def render_headline(metrics_diff: dict[str, Any]) -> list[str]:
    rows = [
        [f"`{label}`", _value(c.old), _value(c.new), _change(c)]
        for label, c in headline_changes(metrics_diff)
    ]
    if not rows:
        return ["### Headline", "", "No headline metric changed.", ""]
    return ["### Headline", "", *_table(["metric", "old", "new", "change"], rows), ""]


def render_params(params_diff: dict[str, Any]) -> list[str]:
    rows = [
        [f"`{c.file}`", f"`{c.name}`", _value(c.old), _value(c.new)]
        for c in flatten(params_diff)
        if c.changed
    ]
    if not rows:
        return ["### Params", "", "No param changed.", ""]
    table = _table(["file", "param", "old", "new"], rows)
    if len(rows) <= PARAMS_SHOWN:
        return ["### Params", "", *table, ""]
    # A regenerated plan (data/models.yaml is a params file too) changes dozens of keys at once: fold them.
    per_file = Counter(row[0] for row in rows)
    counts = ", ".join(f"{file}: {n}" for file, n in sorted(per_file.items()))
    return [
        "### Params",
        "",
        f"<details><summary>{len(rows)} params changed ({counts})</summary>",
        "",
        *table,
        "",
        "</details>",
        "",
    ]


def render_all_metrics(metrics_diff: dict[str, Any], all_metrics: bool = False) -> list[str]:
    changes = [c for c in flatten(metrics_diff) if all_metrics or c.changed]
    what = "All metrics" if all_metrics else "All changed metrics"
    if not changes:
        return [f"<details><summary>{what} (0)</summary>", "", "No metric changed.", "", "</details>", ""]
    rows = [
        [f"`{c.file}`", f"`{c.name}`", _value(c.old), _value(c.new), _change(c) if c.changed else "="]
        for c in changes
    ]
    return [
        f"<details><summary>{what} ({len(changes)})</summary>",
        "",
        *_table(["file", "metric", "old", "new", "change"], rows),
        "",
        "</details>",
        "",
    ]


def render_diff(
    metrics_diff: dict[str, Any], params_diff: dict[str, Any], rev: str, all_metrics: bool = False
) -> str:
    """The Markdown comparing the workspace (new) against `rev` (old)."""
    lines = [
        f"## guardpolicy: workspace vs `{rev}`",
        "",
        "Old is the value at the revision, new the workspace's; change is new − old.",
        "",
        *render_headline(metrics_diff),
        *render_params(params_diff),
        *render_all_metrics(metrics_diff, all_metrics),
    ]
    return "\n".join(lines).rstrip("\n") + "\n"


def run_dvc(arguments: list[str], repo_dir: str | Path) -> dict[str, Any]:
    """`dvc <arguments>` in `repo_dir` (the dvc of this Python environment), its stdout parsed as JSON."""
    command = [sys.executable, "-m", "dvc", *arguments]
    shown = "dvc " + " ".join(arguments)
    try:
        completed = subprocess.run(
            command, cwd=repo_dir, capture_output=True, text=True, timeout=DVC_TIMEOUT_S, check=False
        )
    except FileNotFoundError as exc:
        raise DiffError(f"`{shown}`: cannot run dvc ({exc})") from exc
    except subprocess.TimeoutExpired as exc:
        raise DiffError(f"`{shown}` did not finish within {DVC_TIMEOUT_S} s") from exc
    if completed.returncode != 0:
        message = (completed.stderr or completed.stdout).strip().splitlines()
        reason = message[-1] if message else "no message"
        raise DiffError(f"`{shown}` failed in {repo_dir} (exit {completed.returncode}): {reason}")
    try:
        return json.loads(completed.stdout or "{}")
    except json.JSONDecodeError as exc:
        raise DiffError(f"`{shown}` printed no JSON: {completed.stdout[:200]!r}") from exc


def repo_root(start: str | Path = ".") -> Path:
    """The git work tree holding `start` (dvc diffs resolve revisions there)."""
    try:
        completed = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=start, capture_output=True, text=True, check=False
        )
    except FileNotFoundError as exc:
        raise DiffError(f"cannot run git to find the repository root ({exc})") from exc
    if completed.returncode != 0:
        raise DiffError(f"{Path(start).resolve()} is not inside a git repository: {completed.stderr.strip()}")
    return Path(completed.stdout.strip())


def diff(
    rev: str = "HEAD", out: str | None = None, all_metrics: bool = False, repo_dir: str | None = None
) -> str:
    """Markdown of the metrics and params changed between `rev` (a git revision or DVC experiment) and now.

    Written atomically to `out` when given (and its path returned), else the text is returned.
    """
    root = Path(repo_dir) if repo_dir else repo_root()
    metrics_arguments = ["metrics", "diff", "--json", *(["--all"] if all_metrics else []), rev]
    log.info("diff: workspace vs %s in %s", rev, root)
    metrics_diff = run_dvc(metrics_arguments, root)
    params_diff = run_dvc(["params", "diff", "--json", rev], root)
    text = render_diff(metrics_diff, params_diff, rev, all_metrics=all_metrics)
    log.info(
        "diff: %d metric(s) and %d param(s) changed",
        sum(c.changed for c in flatten(metrics_diff)),
        sum(c.changed for c in flatten(params_diff)),
    )
    if out:
        write_text(out, text)
        log.info("diff: wrote %s", out)
        return out
    return text

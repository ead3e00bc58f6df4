"""Smoke-sized studies in a throw-away git repository: the checkout copied as a fresh clone would hold it,
params set to the `smoke` profile (offline: the benchmark mirror, never a download), optionally reduced to the
smallest study that still runs every kind of stage once.

One definition for the two users: the end-to-end tests (tests/e2e) and `guardpolicy bench-dag`, which times
the same runs, so a figure in reports/bench/ is the run the tests exercise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from guardpolicy.errors import ConfigError
from guardpolicy.layout import Layout, relative_path

BIN = Path(sys.executable).parent
DVC = str(BIN / "dvc")
GUARDPOLICY = str(BIN / "guardpolicy")
GIT_IDENTITY = ["-c", "user.name=guardpolicy-smoke", "-c", "user.email=smoke@example.invalid"]
# A safety net so a hung subprocess fails instead of blocking a CI run for hours; never a speed target. The
# whole smoke DAG's first `dvc repro` took 1,088 s in CI; machines differ by up to 1.5x and a loaded one by
# more (1,800 s was exceeded on a machine shared with other jobs), so the net sits well above any real run.
SUBPROCESS_TIMEOUT_S = 3600

# The reduced study's benchmarks: a harmful and a benign set of each kind of source (a raw file, a derived
# split, XSTest's contrast pairs), HarmBench-copyright for the span, and one the mirror lacks (recorded as
# missing, never dropped).
REDUCED_BENCHMARKS = (
    "harmbench_standard",
    "harmbench_copyright",
    "jbb_harmful",
    "jbb_benign",
    "xstest",
    "orbench_hard",
)
# validate_benchmarks' minimum for the reduced study: all but orbench_hard, which the mirror lacks.
REDUCED_MIN_PRESENT = len(REDUCED_BENCHMARKS) - 1
SCOPES = ("reduced", "full")


def checkout_root(start: Path | None = None) -> Path:
    """The git checkout holding `start` (default: this package's source folder, an editable install)."""
    start = start or Path(__file__).resolve().parent
    result = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], cwd=start, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise ConfigError(f"{start}: not inside a git checkout of guardpolicy ({result.stderr.strip()})")
    return Path(result.stdout.strip())


def stage_env() -> dict[str, str]:
    """The environment DVC and the stage scripts run in: this venv's executables first, no analytics."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "DVC_NO_ANALYTICS": "1"}
    env["GX_ANALYTICS_ENABLED"] = "false"
    env.pop("DVC_SITE_CACHE_DIR", None)
    return env


def run(args: list[str], cwd: Path, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    """Run a command; with `check`, a failure raises with the command and the tail of its output."""
    result = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S
    )
    if check and result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} (in {cwd}) exited {result.returncode}:\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result


def ran_stages(result: subprocess.CompletedProcess) -> set[str]:
    """Stage names DVC ran (a sub-pipeline stage prints as `<dvc.yaml path>:<name>`; the name is kept)."""
    return {
        line.split("'")[1].rsplit(":", 1)[-1]
        for line in (result.stdout + result.stderr).splitlines()
        if line.startswith("Running stage '")
    }


# What a fresh user's first run starts without: DVC's lock, the committed reports and the tests.
LOCK_FILE = "dvc.lock"
LEFT_OUT = (f"{Path(relative_path('report')).parent.as_posix()}/", "tests/")


def copy_checkout(source: Path, destination: Path) -> None:
    """Tracked and untracked-but-not-ignored files: what a clone plus the working change would hold.

    dvc.lock, committed reports and the tests are left out so the run starts from nothing, like a fresh user's
    first run (reports/baselines/README.md stays: the folder is a dependency of stage analyse).
    """
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=source,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for relative in filter(None, listed.split("\0")):
        if relative == LOCK_FILE or (
            relative.startswith(LEFT_OUT) and relative != f"{relative_path('baselines')}/README.md"
        ):
            continue
        if (source / relative).is_file():
            target = destination / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / relative, target)


def smoke_params(source: Path, mirror_dir: Path) -> dict[str, Any]:
    """The checkout's params.yaml on the smoke profile, reading the benchmark mirror, never downloading."""
    params = yaml.safe_load(Layout(source).path("params").read_text(encoding="utf-8"))
    params["profile"] = "smoke"
    params["data"] = {
        **params.get("data", {}),
        "mirror_dir": str(mirror_dir),
        "allow_download": False,
        "download_timeout_s": 5,
    }
    return params


def reduce_study(params: dict[str, Any]) -> dict[str, Any]:
    """The smallest study that still runs every kind of stage once (the `make test` end-to-end run).

    One scale, one teacher and one branch per injection path: E2 a pure hard-label mix (its teacher dropped),
    E8 the study's pure distillation (policy-B hard labels, the policy-A teacher), E1 head-only on E2's frozen
    backbone (so features@small-E2 runs too). No noise-floor seeds: the whole DAG (make test-e2e) has them.
    """
    params = yaml.safe_load(yaml.safe_dump(params))  # a deep copy
    params["scales"] = {"small": "small_encoder"}
    params["teachers"] = {"policy_a": {"scale": "small", "train_set": "train", "trainable": "full"}}
    branches = params["branches"]
    mix = {key: value for key, value in branches["E2"].items() if key not in ("teacher", "alpha")}
    mix["description"] = "Data mix, 10 % policy A / 90 % policy B hard labels, no teacher."
    params["branches"] = {"E2": mix, "E8": branches["E8"], "E1": branches["E1"]}
    params["noise_floor"] = {"branches": [], "seeds": [], "scales": []}
    params["analysis"]["rank_sets"] = {"policy_a_terminal": ["E1", "E8"]}
    return params


def keep_benchmarks(work: Path, params: dict[str, Any], names: tuple[str, ...]) -> None:
    """Trim the copied registry to `names` (fewer fetch@ stages), with the benchmark facts and the analysis's
    load groups, which must name registry benchmarks only."""
    for name in ("benchmark_registry", "benchmark_facts"):
        path = Layout(work).path(name)
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        unknown = set(names) - set(document["benchmarks"])
        if unknown:
            raise ConfigError(f"{path}: benchmarks {sorted(unknown)} are not in it")
        document["benchmarks"] = {n: e for n, e in document["benchmarks"].items() if n in names}
        path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    load = params["analysis"]["load"]
    for group in ("policy", "capability"):
        load[group] = [n for n in load[group] if n in names]


def commit(work: Path, env: dict[str, str], message: str) -> None:
    if not (work / ".git").is_dir():
        run(["git", "init", "-q"], work, env)
    run(["git", *GIT_IDENTITY, "add", "-A"], work, env)
    run(["git", *GIT_IDENTITY, "commit", "-qm", message, "--allow-empty"], work, env)


def init_workspace(
    work: Path, scope: str, env: dict[str, str], source: Path | None = None, mirror_dir: Path | None = None
) -> dict[str, Any]:
    """A fresh git repository at `work` holding the checkout with smoke params (`scope`: reduced or full),
    its model plan written and everything committed; returns the params written."""
    if scope not in SCOPES:
        raise ConfigError(f"scope: {scope!r} is not one of {list(SCOPES)}")
    source = source or checkout_root()
    mirror_dir = mirror_dir or (source / ".." / "shared" / "benchmarks").resolve()
    work.mkdir(parents=True, exist_ok=True)
    copy_checkout(source, work)
    params = smoke_params(source, mirror_dir)
    if scope == "reduced":
        params = reduce_study(params)
        keep_benchmarks(work, params, REDUCED_BENCHMARKS)
        params["data"]["min_present_benchmarks"] = REDUCED_MIN_PRESENT
    Layout(work).path("params").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    run([GUARDPOLICY, "plan"], work, env)
    commit(work, env, f"smoke study ({scope})")
    return params

"""Tiny DVC repositories (a few lines of Python per stage, no guardpolicy study) for checking DVC's own
mechanics in seconds: remotes, clones and pulls, experiments run in DVC's copies."""

from __future__ import annotations

import textwrap
from pathlib import Path

import yaml

from helpers.dvc_repo import DVC, commit, run

# Two stages, each output cached by DVC: `numbers` writes `n` numbers (params.yaml), `total` adds them up
# into a cached output and a git-tracked metric.
TWO_STAGES = {
    "numbers.py": """
        import yaml
        n = yaml.safe_load(open("params.yaml"))["n"]
        open("data/numbers.txt", "w").write("".join(f"{i}\\n" for i in range(n)))
    """,
    "total.py": """
        import json
        total = sum(int(line) for line in open("data/numbers.txt"))
        open("data/total.txt", "w").write(f"{total}\\n")
        json.dump({"total": total}, open("total.json", "w"))
    """,
}
TWO_STAGES_PIPELINE = {
    "stages": {
        "numbers": {
            "cmd": "python numbers.py",
            "deps": ["numbers.py"],
            "params": ["n"],
            "outs": ["data/numbers.txt"],
        },
        "total": {
            "cmd": "python total.py",
            "deps": ["total.py", "data/numbers.txt"],
            "outs": ["data/total.txt"],
            "metrics": [{"total.json": {"cache": False}}],
        },
    }
}


def tiny_repository(
    work: Path, env: dict[str, str], scripts: dict[str, str], pipeline: dict, params: dict
) -> Path:
    """A git + DVC repository at `work` holding `scripts` (name -> source), dvc.yaml and params.yaml,
    committed before any run."""
    (work / "data").mkdir(parents=True)
    run(["git", "init", "-q"], work, env)
    run([DVC, "init", "-q"], work, env)
    run([DVC, "config", "core.analytics", "false"], work, env)
    for name, source in scripts.items():
        (work / name).write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    (work / "dvc.yaml").write_text(yaml.safe_dump(pipeline, sort_keys=False), encoding="utf-8")
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    (work / "data" / ".gitkeep").write_text("", encoding="utf-8")
    commit(work, env, "a tiny pipeline")
    return work

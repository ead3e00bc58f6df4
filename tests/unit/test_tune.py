"""The lever study's pure parts (guardpolicy.devtools.tune): the study file is checked, a setting changes one
lever of the base, and the choice rule reads only the pool's held-out AUROC within the time budget."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from guardpolicy.devtools.tune import (
    RUN_COLUMNS,
    _listed,
    load_study,
    resolve_setting,
    summarise,
    table_markdown,
)
from guardpolicy.errors import InputError

STUDY = {
    "max_train_seconds": 60,
    "base": {"encoder": {"name": "pypi:x", "frozen_layers": 5}, "max_length": 128, "epochs": 2},
    "settings": {
        "base": {},
        "top2": {"description": "two layers", "encoder": {"frozen_layers": 4}},
        "short": {"max_length": 64},
    },
}


def test_the_committed_study_file_is_valid() -> None:
    study = load_study("data/tune.yaml")
    assert "base" in study["settings"] and study["max_train_seconds"] > 0


def test_unknown_keys_are_refused_with_their_place(tmp_path) -> None:
    bad = {**STUDY, "settings": {**STUDY["settings"], "x": {"epoch": 3}}}
    path = tmp_path / "tune.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(InputError, match=r"settings\.x: unknown key\(s\) \['epoch'\]"):
        load_study(path)
    path.write_text(yaml.safe_dump({**STUDY, "seed": [1]}))
    with pytest.raises(InputError, match=r"unknown key\(s\) \['seed'\]"):
        load_study(path)


def test_a_setting_changes_only_its_lever() -> None:
    top2 = resolve_setting(STUDY, "top2")
    assert top2["encoder"] == {"name": "pypi:x", "frozen_layers": 4}
    assert top2["max_length"] == 128 and top2["epochs"] == 2
    assert resolve_setting(STUDY, "short")["encoder"] == STUDY["base"]["encoder"]
    assert STUDY["base"]["encoder"]["frozen_layers"] == 5  # the base is not modified


def test_the_rule_picks_the_best_held_out_auroc_within_the_budget() -> None:
    rows = []
    for setting, heldout, seconds, bench in (
        ("base", 0.90, 50, 0.5),
        ("slow", 0.95, 90, 0.9),
        ("weak", 0.85, 20, 0.99),
    ):
        for policy in ("a", "b"):
            for seed, delta in ((1, 0.0), (2, 0.02)):
                rows.append(
                    {
                        "setting": setting,
                        "policy": policy,
                        "seed": seed,
                        "heldout_auroc": heldout + delta,
                        "train_seconds": seconds,
                        "bench_capture_agreed": bench,
                    }
                )
    runs = pd.DataFrame(rows).reindex(columns=list(RUN_COLUMNS))
    table = summarise(runs, {"max_train_seconds": 60}, {"base": 12.0})
    chosen = table.loc[table["chosen"], "setting"].tolist()
    # "slow" is better but over budget; "weak" has the best benchmark column, which the rule never reads.
    assert chosen == ["base"]
    assert table.set_index("setting").loc["base", "heldout_auroc_seed_spread"] == pytest.approx(0.02)
    assert table.set_index("setting").loc["base", "prefix_seconds"] == 12.0
    assert "| base |" in table_markdown(table, {"settings": {"base": {}, "slow": {}, "weak": {}}})


def test_command_line_lists() -> None:
    assert _listed("base,len64") == ["base", "len64"]
    assert _listed(("base", "len64")) == ["base", "len64"]
    assert _listed(42) == ["42"]

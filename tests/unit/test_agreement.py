"""Agreement between two policies: known answers on a toy pool, Cohen's kappa, id checks, stage outputs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.benchmarks import write_params
from helpers.paths import REPO_ROOT
from sklearn.metrics import cohen_kappa_score

from guardpolicy.analysis.agreement import agreement_report, cohen_kappa, confusion_matrix
from guardpolicy.errors import ConfigError, InputError
from guardpolicy.layout import Layout
from guardpolicy.stages.agreement import agreement
from guardpolicy.taxonomy import load_taxonomy

TAXONOMY = load_taxonomy(REPO_ROOT / "data" / "taxonomy.yaml")
G, B, H, C = TAXONOMY.coarse_classes  # GENERIC_SAFE, BOUNDARY_SAFE, HARMFUL, COMPOUND
# Ten prompts; four disagreements: B->G (s1), B->H, H->C, C->B (s2).
FIRST = [G, G, B, B, B, H, H, C, C, G]
SECOND = [G, G, G, B, H, H, C, C, B, G]
SOURCES = ["s1"] * 4 + ["s2"] * 6
IDS = [f"p_{i:016x}" for i in range(10)]


def toy_pool() -> pd.DataFrame:
    return pd.DataFrame({"id": IDS, "source": SOURCES})


def toy_labels(coarse: list[str], policy: str) -> pd.DataFrame:
    # Shuffled rows: the analysis must align by id, not by position.
    frame = pd.DataFrame({"id": IDS, "coarse": coarse, "policy": policy})
    return frame.iloc[::-1].reset_index(drop=True)


def toy_report() -> dict:
    return agreement_report(
        toy_labels(FIRST, "policy_a"),
        toy_labels(SECOND, "policy_b"),
        toy_pool(),
        TAXONOMY,
        names=("policy_a", "policy_b"),
    )


def test_agreement_rates_and_kappa() -> None:
    report = toy_report()
    assert report["n"] == 10
    assert report["disagreements"] == 4
    assert report["coarse_agreement"] == pytest.approx(0.6)
    # Default mapping: rows 5 (B->H) and 9 (C->B) cross the safe/unsafe line.
    assert report["binary_agreement"] == pytest.approx(0.8)
    # BOUNDARY_SAFE unsafe too: only row 3 (B->G) crosses it.
    assert report["binary_agreement_boundary_unsafe"] == pytest.approx(0.9)
    # p_o = 0.6, p_e = (3*4 + 3*2 + 2*2 + 2*2) / 100 = 0.26.
    assert report["cohen_kappa_coarse"] == pytest.approx((0.6 - 0.26) / 0.74, abs=1e-6)
    assert report["cohen_kappa_coarse"] == pytest.approx(cohen_kappa_score(FIRST, SECOND), abs=1e-6)
    unsafe = set(TAXONOMY.unsafe_classes)
    first_binary = [c in unsafe for c in FIRST]
    second_binary = [c in unsafe for c in SECOND]
    assert report["cohen_kappa_binary"] == pytest.approx(
        cohen_kappa_score(first_binary, second_binary), abs=1e-6
    )
    wide = unsafe | {B}
    assert report["cohen_kappa_binary_boundary_unsafe"] == pytest.approx(
        cohen_kappa_score([c in wide for c in FIRST], [c in wide for c in SECOND]), abs=1e-6
    )


def test_confusion_counts_and_row_shares() -> None:
    report = toy_report()
    assert report["classes"] == [G, B, H, C]
    expected = {
        G: {G: 3, B: 0, H: 0, C: 0},
        B: {G: 1, B: 1, H: 1, C: 0},
        H: {G: 0, B: 0, H: 1, C: 1},
        C: {G: 0, B: 1, H: 0, C: 1},
    }
    assert report["confusion"] == expected
    assert report["confusion_row_normalised"][B][G] == pytest.approx(1 / 3, abs=1e-6)
    assert report["confusion_row_normalised"][C] == {G: 0.0, B: 0.5, H: 0.0, C: 0.5}
    assert report["class_counts"]["policy_a"] == {G: 3, B: 3, H: 2, C: 2}
    assert report["class_counts"]["policy_b"] == {G: 4, B: 2, H: 2, C: 2}


def test_disagreement_per_class_source_and_cell() -> None:
    report = toy_report()
    assert report["per_class"][B] == {"n": 4, "disagreements": 3, "share_of_disagreements": 0.75}
    assert report["per_class"][G] == {"n": 4, "disagreements": 1, "share_of_disagreements": 0.25}
    assert report["per_class"][H] == {"n": 3, "disagreements": 2, "share_of_disagreements": 0.5}
    assert report["per_class"][C] == {"n": 3, "disagreements": 2, "share_of_disagreements": 0.5}
    assert report["per_source"] == {
        "s1": {"n": 4, "agreement": 0.75, "disagreements": 1, "share_of_disagreements": 0.25},
        "s2": {"n": 6, "agreement": 0.5, "disagreements": 3, "share_of_disagreements": 0.75},
    }
    cells = [(c["first"], c["second"], c["count"]) for c in report["top_disagreements"]]
    # All four cells hold one item; ties come in taxonomy order (row, then column).
    assert cells == [(B, G, 1), (B, H, 1), (H, C, 1), (C, B, 1)]
    assert all(c["share_of_disagreements"] == 0.25 for c in report["top_disagreements"])
    verdict = report["verdict"]
    assert verdict.startswith("60.0% coarse agreement over 10 prompts")
    assert "75% of the 4 disagreements involve BOUNDARY_SAFE and 50% HARMFUL" in verdict
    json.dumps(report, allow_nan=False)


def test_verdict_names_the_dominant_class() -> None:
    first = [G] * 6 + [C] * 4
    second = [G] * 6 + [H, H, H, C]
    report = agreement_report(
        toy_labels(first, "a"), toy_labels(second, "b"), toy_pool(), TAXONOMY, names=("a", "b")
    )
    assert report["coarse_agreement"] == pytest.approx(0.7)
    assert report["binary_agreement"] == 1.0
    assert report["top_disagreements"] == [
        {"first": C, "second": H, "count": 3, "share_of_disagreements": 1.0}
    ]
    assert "100% of the 3 disagreements involve HARMFUL and 100% COMPOUND" in report["verdict"]
    assert "a COMPOUND -> b HARMFUL" in report["verdict"]


def test_full_agreement() -> None:
    report = agreement_report(
        toy_labels(FIRST, "a"), toy_labels(FIRST, "b"), toy_pool(), TAXONOMY, names=("a", "b")
    )
    assert report["coarse_agreement"] == 1.0 and report["cohen_kappa_coarse"] == pytest.approx(1.0)
    assert report["top_disagreements"] == []
    assert report["verdict"] == "100.0% coarse agreement over 10 prompts; the two policies never disagree."


def test_cohen_kappa_textbook_example() -> None:
    table = np.array([[20, 5], [10, 15]])
    assert cohen_kappa(table) == pytest.approx(0.4)
    # The same table as 50 rated items, through sklearn.
    rater_one = [0] * 25 + [1] * 25
    rater_two = [0] * 20 + [1] * 5 + [0] * 10 + [1] * 15
    assert cohen_kappa_score(rater_one, rater_two) == pytest.approx(0.4)
    counts = confusion_matrix(pd.Series(rater_one), pd.Series(rater_two), (0, 1))
    assert counts.tolist() == table.tolist()
    # Both raters used one and the same class only: chance agreement is 1 and kappa undefined.
    assert cohen_kappa(np.array([[7, 0], [0, 0]])) is None


def test_ids_must_match_the_pool() -> None:
    second = toy_labels(SECOND, "policy_b")
    second.loc[0, "id"] = "p_ffffffffffffffff"
    with pytest.raises(InputError) as raised:
        agreement_report(
            toy_labels(FIRST, "policy_a"),
            second,
            toy_pool(),
            TAXONOMY,
            names=("policy_a", "policy_b"),
            files=("labels/policy_a.parquet", "labels/policy_b.parquet", "pool/pool.parquet"),
        )
    message = str(raised.value)
    assert message.startswith("labels/policy_b.parquet")
    assert "pool/pool.parquet" in message
    assert "p_ffffffffffffffff" in message and IDS[9] in message


def test_duplicate_id_and_unknown_class() -> None:
    first = toy_labels(FIRST, "policy_a")
    first.loc[1, "id"] = first.loc[0, "id"]
    with pytest.raises(InputError, match=r"a, row 2, field 'id': duplicate id"):
        agreement_report(first, toy_labels(SECOND, "b"), toy_pool(), TAXONOMY, names=("a", "b"))
    second = toy_labels(SECOND, "policy_b")
    second.loc[3, "coarse"] = "UNSAFE"
    with pytest.raises(InputError, match=r"b, row 4, field 'coarse': 'UNSAFE' is not a coarse class"):
        agreement_report(toy_labels(FIRST, "a"), second, toy_pool(), TAXONOMY, names=("a", "b"))


def _stage_inputs(root: Path) -> Layout:
    """A repository-shaped folder with params, taxonomy, the toy pool and both policies' labels."""
    layout = Layout(root)
    root.mkdir(parents=True, exist_ok=True)
    write_params(layout.path("params"), mirror_dir=root / "mirror")
    layout.path("taxonomy").parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO_ROOT / "data" / "taxonomy.yaml", layout.path("taxonomy"))
    layout.path("pool").parent.mkdir(parents=True)
    toy_pool().assign(prompt=[f"prompt {i}" for i in range(10)]).to_parquet(layout.path("pool"), index=False)
    layout.path("labels").mkdir(parents=True)
    toy_labels(FIRST, "policy_a").to_parquet(layout.path("policy_labels", policy="policy_a"), index=False)
    toy_labels(SECOND, "policy_b").to_parquet(layout.path("policy_labels", policy="policy_b"), index=False)
    return layout


def _outputs(layout: Layout) -> dict[str, Path]:
    return {
        "json_out": layout.path("agreement"),
        "markdown_out": layout.path("agreement_markdown"),
        "figure_out": layout.path("figure", figure="agreement_heatmap"),
    }


def test_stage_writes_deterministic_outputs(tmp_path: Path) -> None:
    runs = []
    for run in ("one", "two"):
        layout = _stage_inputs(tmp_path / run)
        summary = agreement(layout)
        assert summary["coarse_agreement"] == pytest.approx(0.6)
        runs.append({key: path.read_bytes() for key, path in _outputs(layout).items()})
    assert runs[0] == runs[1]
    png = runs[0]["figure_out"]
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000
    assert b"Software" not in png
    metric = json.loads(runs[0]["json_out"])
    assert metric["pair"] == ["policy_a", "policy_b"]
    assert metric["binary_agreement"] == pytest.approx(0.8)
    markdown = runs[0]["markdown_out"].decode("utf-8")
    assert metric["verdict"] in markdown
    assert "| BOUNDARY_SAFE | 1 (33%) | 1 (33%) | 1 (33%) | 0 (0%) | 3 |" in markdown


def test_stage_rejects_missing_labels_and_unknown_policy(tmp_path: Path) -> None:
    layout = _stage_inputs(tmp_path)
    layout.path("policy_labels", policy="policy_b").unlink()
    with pytest.raises(
        InputError, match=r"policy_b\.parquet: file not found; run `dvc repro label@policy_b`"
    ):
        agreement(layout)
    params = layout.path("params")
    params.write_text(
        params.read_text(encoding="utf-8").replace("- policy_b\n", "- policy_z\n", 1), encoding="utf-8"
    )
    with pytest.raises(ConfigError, match=r"agreement\.pair\[1\]: 'policy_z'"):
        agreement(layout)
    assert not layout.path("agreement").exists() and not layout.path("agreement_markdown").exists()


def test_share_of_disagreements_in_boundary_or_compound() -> None:
    # Disagreements: B->G, B->H, H->C, C->B all touch BOUNDARY_SAFE or COMPOUND; an added H->G does not.
    report = toy_report()
    assert report["disagreements_in_boundary_or_compound"] == pytest.approx(1.0)
    assert "100% involve BOUNDARY_SAFE or COMPOUND" in report["verdict"]
    first, second = [*FIRST[:9], H], [*SECOND[:9], G]
    mixed = agreement_report(
        toy_labels(first, "policy_a"),
        toy_labels(second, "policy_b"),
        toy_pool(),
        TAXONOMY,
        names=("policy_a", "policy_b"),
    )
    assert mixed["disagreements"] == 5
    assert mixed["disagreements_in_boundary_or_compound"] == pytest.approx(0.8)

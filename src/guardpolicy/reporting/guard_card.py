"""A guard card per open guard baseline: what ran (hub id, pinned revision, backend, decoding, failure
policy), how its answers parsed, its scores relaxed and strict, its mapping effect, and where our models
stand at its over-refusal — the disclosures our own model cards make, for the guards we compare against.

Pure: the analysis tables and the run facts in, (Markdown, JSON-ready dict) out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from guardpolicy.analysis.baselines import BASELINE_KIND, HEADLINE_ROWS, guard_headline, guard_model_name
from guardpolicy.analysis.jsonready import clean_tree
from guardpolicy.analysis.scores import MEAN_HARMFUL
from guardpolicy.layout import relative_path
from guardpolicy.reporting.formatting import MISSING, fmt, fmt_ci, fmt_count, fmt_signed, markdown_table


def headline_table(headline: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """CAP / OVER-REF / COPY with intervals per guard mapping (relaxed, strict), as `guard_headline` gives
    them: the table both a guard card and a score card open with."""
    return markdown_table(
        ["mapping", "CAP", "OVER-REF", "COPY"],
        [
            [
                guard_mapping,
                *(
                    fmt_ci(values.get(name), values.get(f"{name}_ci_low"), values.get(f"{name}_ci_high"))
                    for name, _, _ in HEADLINE_ROWS
                ),
            ]
            for guard_mapping, values in headline.items()
        ],
    )


def _best_at_guard_point(calibration: pd.DataFrame, model: str, main_seed: int) -> dict[str, Any]:
    """Per guard mapping and scale: our main-seed model with the top mean CAP at the guard's over-refusal."""
    chosen = calibration[(calibration["guard"] == model) & (calibration["benchmark"] == MEAN_HARMFUL)]
    out: dict[str, Any] = {}
    for guard_mapping, rows in chosen.groupby("guard_mapping", sort=True):
        guard_row = rows[rows["model"] == model]
        ours = rows[(rows["kind"] != BASELINE_KIND) & (rows["seed"] == main_seed)].dropna(subset=["value"])
        entry: dict[str, Any] = {"guard_cap": guard_row["value"].iloc[0] if len(guard_row) else None}
        for scale, group in ours.groupby("scale", sort=True):
            best = group.sort_values(["value", "model"], ascending=[False, True]).iloc[0]
            entry[str(scale)] = {"model": best["model"], "cap": best["value"], "threshold": best["threshold"]}
        out[str(guard_mapping)] = entry
    return out


def guard_card(
    guard: str,
    facts: Mapping[str, Any],
    *,
    scores: pd.DataFrame,
    parse: pd.DataFrame,
    parse_totals: Mapping[str, Any],
    mapping_effect: pd.DataFrame,
    mapping_effect_by_model: pd.DataFrame,
    calibration: pd.DataFrame,
    subset: str,
    main_seed: int,
    report_file: str,
    report_sha256: str,
) -> tuple[str, dict[str, Any]]:
    """The card of one guard as Markdown and its JSON twin.

    `facts`: the registry entry and run settings (model_id, revision, family, license, hardware_note, source,
    backend, model, dtype, batch_size, failure_policy, max_new_tokens, top_logprobs); `parse_totals`: the
    guard's entry of summary.json `baselines` (its parse counts over every dataset). Raises ValueError when
    the analysis holds no rows for the guard (the analysis predates the guard's run).
    """
    model = guard_model_name(guard)
    if not (scores["model"] == model).any():
        raise ValueError(f"the analysis has no rows for model {model!r}: rerun `dvc repro analyse`")
    headline = guard_headline(scores, model, subset)
    counts = parse[parse["model"] == model].sort_values("dataset")
    effect = mapping_effect[(mapping_effect["model"] == model) & (mapping_effect["subset"] == subset)]
    mean_effect = mapping_effect_by_model[
        (mapping_effect_by_model["model"] == model) & (mapping_effect_by_model["subset"] == subset)
    ]
    best = _best_at_guard_point(calibration[calibration["subset"] == subset], model, main_seed)
    payload = clean_tree(
        {
            "guard": guard,
            "model": model,
            **{key: facts.get(key) for key in sorted(facts)},
            "subset": subset,
            "scores": headline,
            "parse": {
                "items": parse_totals.get("parse_items"),
                "ok": parse_totals.get("parse_ok"),
                "partial": parse_totals.get("parse_partial"),
                "failed": parse_totals.get("parse_failed"),
                "no_decision": parse_totals.get("no_decision"),
            },
            "mapping_effect_mean": mean_effect["mean_change"].iloc[0] if len(mean_effect) else None,
            "best_of_ours_at_guard_over_refusal": best,
            "report": {"file": report_file, "sha256": report_sha256},
        }
    )
    revision = facts.get("revision") or "not pinned"
    lines = [
        f"# Guard card — `{guard}`",
        "",
        f"Open guard baseline `{model}`, scored by stage `baseline@{guard}` (pipelines/baselines/dvc.yaml) "
        f"on the same items as our models. Accompanies `{report_file}` (sha256 `{report_sha256[:16]}`), "
        'section "Table 2".',
        "",
        *markdown_table(
            ["", ""],
            [
                ["hub id", f"`{facts.get('model_id', MISSING)}`"],
                ["revision", f"`{revision}`"],
                ["family (adapter)", str(facts.get("family", MISSING))],
                ["license", str(facts.get("license") or MISSING)],
                ["hardware", str(facts.get("hardware_note") or MISSING)],
                ["backend", f"{facts.get('backend', MISSING)} — `{facts.get('model', MISSING)}`"],
                [
                    "decoding",
                    f"greedy, max_new_tokens {facts.get('max_new_tokens', MISSING)}, "
                    f"top_logprobs {facts.get('top_logprobs', MISSING)}, "
                    f"dtype {facts.get('dtype', MISSING)}, batch {facts.get('batch_size', MISSING)}",
                ],
                ["unparsable answers count as", str(facts.get("failure_policy", MISSING))],
                ["formats and revision read from", " ".join(str(facts.get("source") or MISSING).split())],
            ],
            "ll",
        ),
        "",
        f"## Scores (subset `{subset}`)",
        "",
        "*relaxed*: the middle label (Qwen3Guard's Controversial) counts as safe; *strict*: as unsafe.",
        "",
        *headline_table(headline),
        "",
        "Mapping effect (strict − relaxed over-refusal), per benchmark with safe prompts: "
        + (
            ", ".join(f"{r.benchmark} {fmt_signed(r.change)}" for r in effect.itertuples(index=False))
            if len(effect)
            else MISSING
        )
        + ".",
        "",
        "## Parsing",
        "",
        *markdown_table(
            ["dataset", "items", "ok", "partial", "failed", "no decision"],
            [
                [r.dataset, *(fmt_count(v) for v in (r.n, r.ok, r.partial, r.failed, r.no_decision))]
                for r in counts.itertuples(index=False)
            ],
            empty="No parse counts (the guard's predictions carry no parse status).",
        ),
        "",
        "## Our models at this guard's over-refusal",
        "",
        "Per scale, our best mean CAP (seed "
        f"{main_seed}) at the threshold matched to the guard's over-refusal on the calibration split "
        f"({relative_path('analysis_table', table='calibration')}):",
        "",
        *markdown_table(
            ["mapping", "guard CAP", "best of ours (per scale)"],
            [
                [
                    guard_mapping,
                    fmt(entry.get("guard_cap")),
                    "; ".join(
                        f"{scale}: {e['model']} {fmt(e['cap'])} (t = {fmt(e['threshold'])})"
                        for scale, e in sorted(entry.items())
                        if isinstance(e, Mapping)
                    )
                    or MISSING,
                ]
                for guard_mapping, entry in best.items()
            ],
            "lrl",
            empty="No calibrated comparison rows for this guard.",
        ),
        "",
    ]
    return "\n".join(lines), payload

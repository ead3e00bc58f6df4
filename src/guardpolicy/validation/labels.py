"""The label suite (`data/labels/<policy>.parquet`) and the agreement band suite (`reports/agreement.json`).

Labels, critical: exactly the pool's ids (no duplicates, none missing, none extra), coarse in the 4 classes,
all 24 `pillar_<name>` columns present and boolean, spans inside the prompt (prompt length joined from the
pool), and the `policy` column naming the file's policy. Not critical: rows in pool order.
Agreement, critical: the coarse and binary agreement of params `agreement.pair` lie inside
`agreement.coarse_band` / `agreement.binary_band`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from guardpolicy.config.agreement import AgreementConfig
from guardpolicy.contracts import POLICY_LABELS
from guardpolicy.taxonomy import Taxonomy
from guardpolicy.validation.gx import EXAMPLES, Check, SuiteResult, run_checks
from guardpolicy.validation.pool import span_checks, with_span_columns

LABELERS = ("rules", "import", "committee")
POLICY_VERSION_PATTERN = r"^.+\+[0-9a-f]{12}$"


def label_columns(taxonomy: Taxonomy) -> list[str]:
    """The contract's columns of a label file, pillar flags in taxonomy order."""
    return POLICY_LABELS.names(pillar=taxonomy.pillar_names)


def labels_frame(labels: pd.DataFrame, pool: pd.DataFrame) -> pd.DataFrame:
    """The labels plus derived columns: id known to the pool, id at its pool row, and the span columns."""
    frame = labels.reset_index(drop=True).copy()
    if "id" not in frame.columns:
        return frame
    pool_ids = pool["id"].reset_index(drop=True)
    frame["id_in_pool"] = frame["id"].isin(set(pool_ids)).to_numpy()
    aligned = pool_ids.reindex(frame.index)
    frame["id_at_pool_row"] = (frame["id"] == aligned).fillna(False).astype(bool).to_numpy()
    if {"span_start", "span_end"} <= set(frame.columns) and "prompt" in pool.columns:
        prompt_length = pool.set_index("id")["prompt"].str.len()
        frame = with_span_columns(frame, frame["id"].map(prompt_length))
    return frame


def labels_checks(frame: pd.DataFrame, pool: pd.DataFrame, policy: str, taxonomy: Taxonomy) -> list[Check]:
    """Checks for a `labels_frame` of `policy`; a missing column is reported once, by the column-set check."""
    import great_expectations as gx

    e = gx.expectations
    present = set(frame.columns)
    checks = [
        Check(
            e.ExpectTableColumnsToMatchSet(column_set=label_columns(taxonomy), exact_match=False),
            description="the label contract's columns are present (incl. all 24 pillar_<name> flags)",
        )
    ]
    if "id" in present:
        absent = sorted(set(pool["id"]) - set(frame["id"]))
        count_note = f"; pool ids without a label: {len(absent)}, e.g. {absent[:EXAMPLES]}" if absent else ""
        checks += [
            Check(e.ExpectColumnValuesToNotBeNull(column="id"), description="every row has an id"),
            Check(e.ExpectColumnValuesToBeUnique(column="id"), description="one label per id"),
            Check(
                e.ExpectColumnValuesToBeInSet(column="id_in_pool", value_set=[True]),
                description="every id is a pool id",
            ),
            Check(
                e.ExpectTableRowCountToEqual(value=len(pool)),
                description=f"one row per pool id ({len(pool)} rows){count_note}",
            ),
            Check(
                e.ExpectColumnValuesToBeInSet(column="id_at_pool_row", value_set=[True]),
                critical=False,
                description="rows are in pool order",
            ),
        ]
    if "coarse" in present:
        checks.append(
            Check(
                e.ExpectColumnValuesToBeInSet(column="coarse", value_set=list(taxonomy.coarse_classes)),
                description=f"coarse is one of {list(taxonomy.coarse_classes)}",
            )
        )
        checks.append(
            Check(e.ExpectColumnValuesToNotBeNull(column="coarse"), description="every row has a class")
        )
    for column in taxonomy.pillar_columns:
        if column in present:
            checks.append(
                Check(
                    e.ExpectColumnValuesToBeOfType(column=column, type_="bool"),
                    description="pillar flags are non-null booleans",
                )
            )
    if "policy" in present:
        checks.append(
            Check(
                e.ExpectColumnValuesToBeInSet(column="policy", value_set=[policy]),
                description=f"the policy column names this file's policy {policy!r}",
            )
        )
        checks.append(
            Check(e.ExpectColumnValuesToNotBeNull(column="policy"), description="every row names its policy")
        )
    if "labeler" in present:
        checks.append(
            Check(
                e.ExpectColumnValuesToBeInSet(column="labeler", value_set=list(LABELERS)),
                description=f"labeler is one of {list(LABELERS)}",
            )
        )
    if "policy_version" in present:
        checks.append(
            Check(
                e.ExpectColumnValuesToMatchRegex(column="policy_version", regex=POLICY_VERSION_PATTERN),
                description="policy_version is <version>+<12 hex>",
            )
        )
    if "span_both_or_neither" in present:
        checks += span_checks()
    return checks


def validate_labels(labels: pd.DataFrame, pool: pd.DataFrame, policy: str, taxonomy: Taxonomy) -> SuiteResult:
    """The label suite for `policy`'s labels of `pool` (which needs `id` and `prompt`)."""
    frame = labels_frame(labels, pool)
    return run_checks(f"labels/{policy}", frame, labels_checks(frame, pool, policy, taxonomy))


def agreement_frame(report: dict[str, Any]) -> pd.DataFrame:
    """The agreement metric as a one-row frame (missing numbers become nulls, which the suite rejects)."""
    pair = report.get("pair") or []
    return pd.DataFrame(
        {
            "id": ["agreement"],
            "pair": [" vs ".join(str(p) for p in pair)],
            "coarse_agreement": [report.get("coarse_agreement")],
            "binary_agreement": [report.get("binary_agreement")],
        }
    ).astype({"coarse_agreement": "float64", "binary_agreement": "float64"})


def validate_agreement(report: dict[str, Any], config: AgreementConfig) -> SuiteResult:
    """The agreement of `config.pair` must lie inside the configured bands."""
    import great_expectations as gx

    e = gx.expectations
    (coarse_low, coarse_high), (binary_low, binary_high) = config.coarse_band, config.binary_band
    coarse, binary = report.get("coarse_agreement"), report.get("binary_agreement")
    checks = [
        Check(
            e.ExpectColumnValuesToBeInSet(column="pair", value_set=[" vs ".join(config.pair)]),
            description="the report compares params agreement.pair (a stale report does not)",
        ),
        Check(
            e.ExpectColumnValuesToNotBeNull(column="coarse_agreement"),
            description="the report has coarse_agreement",
        ),
        Check(
            e.ExpectColumnValuesToBeBetween(
                column="coarse_agreement", min_value=coarse_low, max_value=coarse_high
            ),
            description=f"coarse agreement {coarse} must lie inside params agreement.coarse_band "
            f"[{coarse_low}, {coarse_high}]",
        ),
        Check(
            e.ExpectColumnValuesToNotBeNull(column="binary_agreement"),
            description="the report has binary_agreement",
        ),
        Check(
            e.ExpectColumnValuesToBeBetween(
                column="binary_agreement", min_value=binary_low, max_value=binary_high
            ),
            description=f"binary agreement {binary} must lie inside params agreement.binary_band "
            f"[{binary_low}, {binary_high}]",
        ),
    ]
    return run_checks("agreement", agreement_frame(report), checks)

"""The split suites (`data/splits/*.parquet`) and the decontaminated benchmark suites (`benchmarks_clean/`).

Critical: every split file and clean benchmark file present with the contract's columns; split values match
their file; ids disjoint across splits and together exactly the pool's ids; no prompt in two splits after
`normalise_text` (exact leakage: the same prompt, re-cased or re-punctuated, under two ids); each clean
benchmark has unique ids, is a subset of its original (same ids and prompts, same columns) and shares no
prompt with the train split after `normalise_text` with params `audit.normalise`. Not critical: split sizes
near their fractions.
"""

from __future__ import annotations

import pandas as pd

from guardpolicy.audit.normalise import normalise_text
from guardpolicy.config.audit import NormaliseConfig, SplitConfig
from guardpolicy.contracts import SPLIT
from guardpolicy.layout import relative_path
from guardpolicy.taxonomy import Taxonomy
from guardpolicy.validation.gx import EXAMPLES, Check, SuiteResult, run_checks

SPLIT_NAMES = ("train", "val", "calib")
# How far (absolute share of the pool) a split may drift from its fraction before the report flags it.
SHARE_TOLERANCE = 0.05
CLEAN_DERIVED = ("id_in_original", "prompt_matches_original", "in_train_after_normalise")


def split_columns(policies: list[str] | tuple[str, ...]) -> list[str]:
    """The contract's columns of a split file (`guardpolicy.contracts.SPLIT`)."""
    return SPLIT.names(policy=policies)


def split_fractions(config: SplitConfig) -> dict[str, float]:
    return {name: getattr(config, name) for name in SPLIT_NAMES}


def files_frame(
    splits: dict[str, pd.DataFrame | None],
    clean: dict[str, pd.DataFrame | None],
    policies: list[str] | tuple[str, ...],
    fractions: dict[str, float],
    pool_size: int,
) -> pd.DataFrame:
    """One row per expected file (id `splits/<name>` or `benchmarks_clean/<name>`): present, missing columns,
    and for a split how far its share of the pool is from its configured fraction."""
    required = split_columns(policies)
    rows = []
    for name, frame in splits.items():
        missing = [] if frame is None else [c for c in required if c not in frame.columns]
        share = None if frame is None or pool_size == 0 else len(frame) / pool_size
        rows.append(
            {
                "id": f"splits/{name}",
                "present": frame is not None,
                "missing_columns": ", ".join(missing) if missing else None,
                "share_deviation": None if share is None else abs(share - fractions[name]),
            }
        )
    for name, frame in clean.items():
        rows.append(
            {
                "id": f"benchmarks_clean/{name}",
                "present": frame is not None,
                "missing_columns": None,
                "share_deviation": None,
            }
        )
    return pd.DataFrame(rows, columns=["id", "present", "missing_columns", "share_deviation"]).astype(
        {"present": bool, "missing_columns": object, "share_deviation": "float64"}
    )


def validate_files(frame: pd.DataFrame) -> SuiteResult:
    import great_expectations as gx

    e = gx.expectations
    checks = [
        Check(
            e.ExpectColumnValuesToBeInSet(column="present", value_set=[True]),
            description="every split file and every clean benchmark file is present",
        ),
        Check(
            e.ExpectColumnValuesToBeNull(column="missing_columns"),
            description="split files have the contract's columns: id, split, group, source, coarse_<policy>",
        ),
        Check(
            e.ExpectColumnValuesToBeBetween(
                column="share_deviation", min_value=0.0, max_value=SHARE_TOLERANCE
            ),
            critical=False,
            description=f"split shares within {SHARE_TOLERANCE:.0%} of their audit.splits fraction",
        ),
    ]
    return run_checks("files", frame, checks)


def splits_frame(
    splits: dict[str, pd.DataFrame | None], pool: pd.DataFrame, normalise: NormaliseConfig | None = None
) -> pd.DataFrame:
    """All present splits stacked (column `split_file`), plus: split value matches the file, id is a pool id,
    source matches the pool's, and (when the pool has prompts) `prompt_in_other_split`: the row's normalised
    prompt also occurs in another split file."""
    # A split without an id column cannot be matched to the pool; the files suite already names it.
    present = [
        frame.assign(split_file=name)
        for name, frame in splits.items()
        if frame is not None and "id" in frame.columns
    ]
    frame = pd.concat(present, ignore_index=True) if present else pd.DataFrame({"id": [], "split_file": []})
    frame["id_in_pool"] = frame["id"].isin(set(pool["id"])).to_numpy()
    if "split" in frame.columns:
        frame["split_matches_file"] = (frame["split"] == frame["split_file"]).fillna(False).astype(bool)
    if "source" in frame.columns and "source" in pool.columns:
        pool_source = frame["id"].map(pool.set_index("id")["source"])
        # Null where the id is not a pool id: that row already fails `id_in_pool`.
        frame["source_matches_pool"] = (
            (frame["source"] == pool_source).astype(object).where(pool_source.notna(), None)
        )
    if "prompt" in pool.columns:
        prompts = frame["id"].map(pool.drop_duplicates("id").set_index("id")["prompt"])
        keys = normalised_keys(prompts, normalise or NormaliseConfig())
        splits_per_key = frame.assign(key=keys).dropna(subset=["key"]).groupby("key")["split_file"].nunique()
        # A prompt that normalises to nothing (or an id missing from the pool) has no key and is not a copy.
        frame["prompt_in_other_split"] = (keys.map(splits_per_key) > 1).fillna(False).astype(bool).to_numpy()
    return frame


def splits_checks(
    frame: pd.DataFrame, pool: pd.DataFrame, policies: list[str] | tuple[str, ...], taxonomy: Taxonomy
) -> list[Check]:
    import great_expectations as gx

    e = gx.expectations
    absent = sorted(set(pool["id"]) - set(frame["id"]))
    absent_note = f"; pool ids in no split: {len(absent)}, e.g. {absent[:EXAMPLES]}" if absent else ""
    checks = [
        Check(e.ExpectColumnValuesToNotBeNull(column="id"), description="every split row has an id"),
        Check(
            e.ExpectColumnValuesToBeUnique(column="id"),
            description="ids are disjoint across train/val/calib (and unique within each)",
        ),
        Check(
            e.ExpectColumnValuesToBeInSet(column="id_in_pool", value_set=[True]),
            description="every split id is a pool id",
        ),
        Check(
            e.ExpectTableRowCountToEqual(value=len(pool)),
            description=f"the splits together hold exactly the pool ({len(pool)} ids){absent_note}",
        ),
    ]
    if "split_matches_file" in frame.columns:
        checks.append(
            Check(
                e.ExpectColumnValuesToBeInSet(column="split_matches_file", value_set=[True]),
                description="the split column names the file's split",
            )
        )
    if "prompt_in_other_split" in frame.columns:
        checks.append(
            Check(
                e.ExpectColumnValuesToBeInSet(column="prompt_in_other_split", value_set=[False]),
                description="no prompt occurs in two splits after normalise_text (params audit.normalise)",
            )
        )
    if "source_matches_pool" in frame.columns:
        checks.append(
            Check(
                e.ExpectColumnValuesToBeInSet(column="source_matches_pool", value_set=[True]),
                description="source equals the pool's source",
            )
        )
    for policy in policies:
        column = SPLIT.family("policy").column(policy)
        if column in frame.columns:
            checks.append(
                Check(
                    e.ExpectColumnValuesToBeInSet(column=column, value_set=list(taxonomy.coarse_classes)),
                    description=f"{column} is a coarse class",
                )
            )
            checks.append(
                Check(e.ExpectColumnValuesToNotBeNull(column=column), description=f"{column} is set")
            )
    return checks


def validate_splits(
    splits: dict[str, pd.DataFrame | None],
    pool: pd.DataFrame,
    policies: list[str] | tuple[str, ...],
    taxonomy: Taxonomy,
    normalise: NormaliseConfig | None = None,
) -> SuiteResult:
    """`splits`: split name -> its frame, None when its file is absent; `pool` needs `id` and `source`, and
    `prompt` for the exact-leakage check, which normalises with `normalise` (params `audit.normalise`; the
    defaults when None)."""
    frame = splits_frame(splits, pool, normalise)
    return run_checks("splits", frame, splits_checks(frame, pool, policies, taxonomy))


def normalised_keys(prompts: pd.Series, config: NormaliseConfig) -> pd.Series:
    """`normalise_text` of each prompt; a prompt that normalises to nothing has no key (None) and matches
    nothing, since "???" and "!!!" are not copies of each other."""
    keys = prompts.fillna("").astype(str).map(lambda text: normalise_text(text, config))
    return keys.where(keys != "", None).astype(object)


def train_prompt_keys(train: pd.DataFrame, pool: pd.DataFrame, config: NormaliseConfig) -> set[str]:
    """Normalised prompts of the train split (prompts joined from the pool by id)."""
    prompts = pool.loc[pool["id"].isin(set(train["id"])), "prompt"]
    return {key for key in normalised_keys(prompts, config) if key is not None}


def clean_benchmark_frame(
    clean: pd.DataFrame, original: pd.DataFrame, train_keys: set[str], config: NormaliseConfig
) -> pd.DataFrame:
    """The clean copy plus: id in the original, prompt unchanged from the original, prompt in train."""
    frame = clean.reset_index(drop=True).copy()
    if not {"id", "prompt"} <= set(frame.columns) or not {"id", "prompt"} <= set(original.columns):
        return frame  # the column-list check reports it; nothing else can be matched
    original_prompt = frame["id"].map(original.drop_duplicates("id").set_index("id")["prompt"])
    frame["id_in_original"] = frame["id"].isin(set(original["id"])).to_numpy()
    # Null for an id the original lacks: that row already fails `id_in_original`.
    frame["prompt_matches_original"] = (
        (frame["prompt"] == original_prompt).astype(object).where(original_prompt.notna(), None)
    )
    frame["in_train_after_normalise"] = normalised_keys(frame["prompt"], config).isin(train_keys).to_numpy()
    return frame


def validate_clean_benchmark(
    name: str,
    clean: pd.DataFrame,
    original: pd.DataFrame,
    train_keys: set[str],
    config: NormaliseConfig,
) -> SuiteResult:
    """One decontaminated benchmark against its original and the train split's normalised prompts."""
    import great_expectations as gx

    e = gx.expectations
    frame = clean_benchmark_frame(clean, original, train_keys, config)
    checks = [
        Check(
            e.ExpectTableColumnsToMatchOrderedList(column_list=[*original.columns, *CLEAN_DERIVED]),
            description="the clean copy has the original benchmark's columns",
        )
    ]
    if CLEAN_DERIVED[0] not in frame.columns:
        return run_checks(f"benchmarks_clean/{name}", frame, checks)
    checks += [
        Check(e.ExpectColumnValuesToNotBeNull(column="id"), description="every row has an id"),
        Check(e.ExpectColumnValuesToBeUnique(column="id"), description="ids are unique"),
        Check(
            e.ExpectColumnValuesToBeInSet(column="id_in_original", value_set=[True]),
            description=f"every id is in the original {relative_path('benchmark', benchmark=name)} "
            "(a subset)",
        ),
        Check(
            e.ExpectColumnValuesToBeInSet(column="prompt_matches_original", value_set=[True]),
            description="prompts are unchanged from the original",
        ),
        Check(
            e.ExpectColumnValuesToBeInSet(column="in_train_after_normalise", value_set=[False]),
            description="no prompt equals a train prompt after normalise_text (params audit.normalise)",
        ),
    ]
    return run_checks(f"benchmarks_clean/{name}", frame, checks)

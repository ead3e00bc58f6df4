"""The `examples` frame a teacher or branch trains on, assembled from splits, pool, labels and teacher logits.

Pure: frames in, a frame and a provenance dict out (the stage reads the files and adds their hashes). The
frame has the columns `guardpolicy.training.loop.train` reads (id, prompt, coarse, pillars, span_start,
span_end, teacher_logits, weight) plus two that say where a row's labels came from (label_policy, role).

How a row gets its hard label: for a mix ``{policy_a: 0.1, policy_b: 0.9}`` every row draws a number in
[0, 1) from a hash of (seed, id) and takes the policy whose slice of the cumulative shares (policies in name
order) holds it. The draw does not depend on the shares, so the policy-A rows of a 10 % mix are a subset of a
30 % mix's at the same seed, and a rerun draws the same rows. Anchors are further rows of a split selected by
an anchor set's policy labels, added with that policy's labels (the same prompt may then appear twice, once
per policy); their ids get a ``#<anchor set>`` suffix so ids stay unique.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd

from guardpolicy.contracts import POLICY_LABELS, TEACHER_LOGITS, check_frame, require_columns
from guardpolicy.errors import InputError
from guardpolicy.taxonomy import Taxonomy

log = logging.getLogger(__name__)

# The columns a run learns from (the training loop's input, and its resume fingerprint).
LEARNED_COLUMNS = (
    "id",
    "prompt",
    "coarse",
    "pillars",
    "span_start",
    "span_end",
    "teacher_logits",
    "weight",
)
# Plus provenance: which policy labelled the row, whether it is a mix row or an anchor, and the pool id of
# its prompt (an anchor's `id` carries a suffix; the loop finds a prompt's cached prefix states by this one).
EXAMPLE_COLUMNS = (*LEARNED_COLUMNS, "label_policy", "role", "prompt_id")
MIX_ROLE = "mix"
LOGITS_WIDTH = 4
_EXAMPLE_IDS_SHOWN = 3


@dataclass(frozen=True)
class ExampleSources:
    """The frames a training set is assembled from, and the files they were read from (for error messages).

    `files` keys: ``pool``, ``split:<name>``, ``labels:<policy>``, ``teacher``.
    """

    pool: pd.DataFrame
    splits: Mapping[str, pd.DataFrame]
    labels: Mapping[str, pd.DataFrame]
    teacher_logits: pd.DataFrame | None = None
    files: Mapping[str, str] = field(default_factory=dict)

    def file(self, key: str) -> str:
        return self.files.get(key, key)


class AnchorSelection(Protocol):
    """What selects an anchor set's rows (params `anchor_sets.<name>`, guardpolicy.config.anchor_sets): a
    protocol, so that the teachers, which add no anchors, do not import that section's schema."""

    @property
    def policy(self) -> str: ...
    @property
    def split(self) -> str: ...
    @property
    def rules(self) -> tuple[str, ...]: ...
    @property
    def coarse(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class AnchorRequest:
    """One anchor set a branch adds, with the count already resolved against the pool size."""

    name: str
    config: AnchorSelection
    count: int


def unit_draws(ids: pd.Series, seed: int, salt: str = "") -> np.ndarray:
    """One number in [0, 1) per id from sha256(seed, salt, id): stable across runs, machines and row order."""
    values = [
        int.from_bytes(hashlib.sha256(f"{seed}\x1f{salt}\x1f{i}".encode()).digest()[:8], "big") for i in ids
    ]
    return np.asarray(values, dtype=np.float64) / 2.0**64  # [N]


def choose_policies(ids: pd.Series, hard_labels: Mapping[str, float], seed: int) -> pd.Series:
    """The policy whose hard label each row takes, drawn deterministically by the mix's shares."""
    policies = sorted(hard_labels)
    bounds = np.cumsum([hard_labels[p] for p in policies])
    bounds[-1] = 1.0  # shares sum to 1 up to rounding; the last slice must close the interval
    slot = np.searchsorted(bounds, unit_draws(ids, seed, "hard_labels"), side="right")
    return pd.Series(np.asarray(policies, dtype=object)[slot], index=ids.index, dtype="str")


def resolve_anchor_count(count: int | float, pool_size: int) -> int:
    """An anchor count from params: an integer as is, a fraction (< 1) of the pool rounded."""
    return count if isinstance(count, int) else round(count * pool_size)


def label_targets(labels: pd.DataFrame, taxonomy: Taxonomy, file: str) -> pd.DataFrame:
    """A label file as training targets: id, coarse (class index), pillars (24 floats), span, rule.

    Spans pass through as the label file has them: set for unsafe rows whose harmful part the pool knows,
    null otherwise (the loop leaves null-span rows out of the span loss).
    """
    require_columns(
        POLICY_LABELS, labels, file, ("id", "coarse", *taxonomy.pillar_columns, "span_start", "span_end")
    )
    index = {name: i for i, name in enumerate(taxonomy.coarse_classes)}
    coarse = labels["coarse"].map(index)
    unknown = coarse.isna()
    if unknown.any():
        row = int(np.flatnonzero(unknown.to_numpy())[0])
        raise InputError(
            file,
            f"{labels['coarse'].iloc[row]!r} is not a coarse class of the taxonomy",
            row=row + 1,
            field="coarse",
        )
    pillars = labels[list(taxonomy.pillar_columns)].to_numpy(dtype=np.float32)  # [N, 24]
    span_start = labels["span_start"].astype("Int64")
    span_end = labels["span_end"].astype("Int64")
    return pd.DataFrame(
        {
            "id": labels["id"].astype("str").to_numpy(),
            "coarse": coarse.astype("int64").to_numpy(),
            "pillars": list(pillars.tolist()),
            "span_start": span_start.to_numpy(),
            "span_end": span_end.to_numpy(),
            "rule": labels["rule"].to_numpy() if "rule" in labels.columns else None,
            "coarse_name": labels["coarse"].astype("str").to_numpy(),
        }
    ).astype({"span_start": "Int64", "span_end": "Int64"})


def _require_ids(ids: pd.Series, available: pd.Series, file: str, what: str, hint: str) -> None:
    missing = ids[~ids.isin(available)]
    if len(missing):
        shown = sorted(missing.tolist())[:_EXAMPLE_IDS_SHOWN]
        raise InputError(file, f"{len(missing)} id(s) of {what} are missing, e.g. {shown}{hint}", field="id")


def select_anchors(
    split: pd.DataFrame, targets: pd.DataFrame, request: AnchorRequest, seed: int
) -> tuple[pd.Series, dict[str, Any]]:
    """Ids of `request.count` rows of `split` that its anchor set selects (fewer when fewer qualify).

    The pick ranks qualifying rows by a hash of (seed, set, id), so it is deterministic and a smaller count's
    rows are a subset of a larger count's.
    """
    config = request.config
    by_id = targets.set_index("id").loc[split["id"]]
    qualifies = np.ones(len(by_id), dtype=bool)
    if config.rules:
        qualifies &= by_id["rule"].isin(config.rules).to_numpy()
    if config.coarse:
        qualifies &= by_id["coarse_name"].isin(config.coarse).to_numpy()
    candidates = split["id"][qualifies].reset_index(drop=True)
    ranks = np.argsort(unit_draws(candidates, seed, f"anchors:{request.name}"), kind="stable")
    chosen = candidates.iloc[ranks[: request.count]].sort_values().reset_index(drop=True)
    info = {
        "policy": config.policy,
        "split": config.split,
        "rules": list(config.rules),
        "coarse": list(config.coarse),
        "requested": request.count,
        "available": len(candidates),
        "used": len(chosen),
    }
    if len(chosen) < request.count:
        log.warning(
            "anchor set %s: %d requested, only %d rows of %s qualify",
            request.name,
            request.count,
            len(candidates),
            config.split,
        )
    return chosen, info


def _teacher_lookup(ids: pd.Series, sources: ExampleSources, what: str) -> list[list[float] | None]:
    teacher = sources.teacher_logits
    if teacher is None:
        return [None] * len(ids)
    file = sources.file("teacher")
    check_frame(TEACHER_LOGITS, teacher, file)  # columns, dtypes, and each id once
    _require_ids(ids, teacher["id"], file, what, "; rerun the teacher stage so it covers them")
    position = pd.Series(np.arange(len(teacher)), index=teacher["id"].to_numpy())
    logits = teacher["logits"].to_numpy()
    rows = []
    for row in position.loc[ids.to_numpy()].to_numpy():
        values = logits[row]
        if values is None or len(values) != LOGITS_WIDTH:
            row_id = teacher["id"].iloc[row]
            raise InputError(
                file, f"expected {LOGITS_WIDTH} logits for {row_id!r}", row=int(row) + 1, field="logits"
            )
        rows.append([float(v) for v in values])
    return rows


def _rows(
    ids: pd.Series,
    policies: pd.Series,
    targets: Mapping[str, pd.DataFrame],
    prompts: pd.Series,
    sources: ExampleSources,
    what: str,
    role: str,
) -> pd.DataFrame:
    """Example rows for `ids`, each labelled by its entry in `policies`."""
    parts = [next(iter(targets.values())).iloc[:0].assign(label_policy=pd.Series(dtype="str"))]
    for policy in sorted(set(policies)):
        chosen = ids[(policies == policy).to_numpy()]
        parts.append(targets[policy].set_index("id").loc[chosen].reset_index().assign(label_policy=policy))
    frame = pd.concat(parts, ignore_index=True).sort_values("id", kind="stable").reset_index(drop=True)
    return pd.DataFrame(
        {
            "id": frame["id"] if role == MIX_ROLE else frame["id"] + f"#{role.split(':', 1)[1]}",
            "prompt": prompts.loc[frame["id"]].to_numpy(),
            "coarse": frame["coarse"].astype("int64"),
            "pillars": frame["pillars"],
            "span_start": frame["span_start"].astype("Int64"),
            "span_end": frame["span_end"].astype("Int64"),
            "teacher_logits": pd.Series(_teacher_lookup(frame["id"], sources, what), dtype=object),
            "weight": np.ones(len(frame), dtype=np.float64),
            "label_policy": frame["label_policy"].astype("str"),
            "role": pd.Series([role] * len(frame), dtype="str"),
            "prompt_id": frame["id"].astype("str"),
        }
    )


def build_examples(
    sources: ExampleSources,
    *,
    train_set: str,
    hard_labels: Mapping[str, float],
    seed: int,
    taxonomy: Taxonomy,
    anchors: tuple[AnchorRequest, ...] = (),
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The training examples of one teacher or branch, and what they were made of.

    Returns the frame (sorted by id) and a provenance dict: the configured and realised hard-label mix, the
    anchors (requested / available / used), row counts and whether teacher logits were joined.
    """
    split = sources.splits[train_set]
    split_file = sources.file(f"split:{train_set}")
    prompts = sources.pool.set_index("id")["prompt"]
    needed = {*hard_labels, *(a.config.policy for a in anchors)}
    targets = {}
    for policy in sorted(needed):
        file = sources.file(f"labels:{policy}")
        targets[policy] = label_targets(sources.labels[policy], taxonomy, file)
    ids = split["id"].astype("str").sort_values().reset_index(drop=True)
    _require_ids(ids, prompts.index.to_series(), sources.file("pool"), f"split {split_file}", "")
    for policy in sorted(needed):
        _require_ids(ids, targets[policy]["id"], sources.file(f"labels:{policy}"), f"split {split_file}", "")

    policies = choose_policies(ids, hard_labels, seed)
    parts = [_rows(ids, policies, targets, prompts, sources, f"split {train_set}", MIX_ROLE)]
    realised = policies.value_counts().reindex(sorted(hard_labels), fill_value=0)
    anchor_info: dict[str, Any] = {}
    for request in anchors:
        anchor_split = sources.splits[request.config.split]
        chosen, info = select_anchors(anchor_split, targets[request.config.policy], request, seed)
        anchor_info[request.name] = info
        labelled_by = pd.Series([request.config.policy] * len(chosen), dtype="str")
        what = f"anchor set {request.name}"
        parts.append(_rows(chosen, labelled_by, targets, prompts, sources, what, f"anchor:{request.name}"))

    examples = pd.concat(parts, ignore_index=True).sort_values("id", kind="stable").reset_index(drop=True)
    examples = examples.astype({"span_start": "Int64", "span_end": "Int64"})
    provenance = {
        "train_set": train_set,
        "seed": seed,
        "rows": len(examples),
        "mix_rows": len(ids),
        "anchor_rows": len(examples) - len(ids),
        "hard_labels": {
            "configured": {p: float(hard_labels[p]) for p in sorted(hard_labels)},
            "realised": {p: round(int(n) / max(len(ids), 1), 6) for p, n in realised.items()},
            "rows": {p: int(n) for p, n in realised.items()},
        },
        "anchors": anchor_info,
        "teacher_logits": sources.teacher_logits is not None,
        "coarse_counts": {
            taxonomy.coarse_classes[int(k)]: int(v)
            for k, v in examples["coarse"].value_counts().sort_index().items()
        },
    }
    log.info(
        "examples: %d rows of %s (%s realised), %d anchor rows, teacher logits %s",
        len(ids),
        train_set,
        provenance["hard_labels"]["realised"],
        provenance["anchor_rows"],
        "joined" if sources.teacher_logits is not None else "none",
    )
    return examples, provenance


def validation_examples(sources: ExampleSources, taxonomy: Taxonomy, split: str = "val") -> pd.DataFrame:
    """A split for evaluation: id, prompt and ``coarse_<policy>`` (class index) for each labelled policy."""
    ids = sources.splits[split]["id"].astype("str").sort_values().reset_index(drop=True)
    split_file = sources.file(f"split:{split}")
    prompts = sources.pool.set_index("id")["prompt"]
    _require_ids(ids, prompts.index.to_series(), sources.file("pool"), f"split {split_file}", "")
    frame = pd.DataFrame({"id": ids, "prompt": prompts.loc[ids].to_numpy()})
    for policy in sorted(sources.labels):
        targets = label_targets(sources.labels[policy], taxonomy, sources.file(f"labels:{policy}"))
        _require_ids(ids, targets["id"], sources.file(f"labels:{policy}"), f"split {split_file}", "")
        frame[f"coarse_{policy}"] = targets.set_index("id")["coarse"].loc[ids].to_numpy()
    return frame

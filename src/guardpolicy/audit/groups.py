"""Near-duplicate groups inside the pool, so that a split never separates a prompt from its copies.

Two pool prompts are linked when they are equal after `normalise_text` or their shingle Jaccard reaches
`audit.near_duplicate.threshold` (the same matching, `OverlapIndex`, that the contamination audit and its
leakage check use, applied to the pool against itself). A group is a connected component of these links
(union-find), so a chain of rephrasings A ~ B ~ C is one group even where A and C are not similar themselves:
splitting it anywhere would put a near-duplicate pair on both sides. A group is named by its representative,
the smallest member id, which depends only on the members and not on the row order.

Because the links are exactly the pairs the leakage check looks for (the MinHash LSH candidate test for a pair
depends only on the two signatures, not on what else is indexed), keeping groups whole makes the exact and
near-duplicate leakage between splits zero by construction.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from guardpolicy.audit.overlap import OverlapIndex, PreparedTexts, prepare_texts
from guardpolicy.config.audit import NearDuplicateConfig, NormaliseConfig

log = logging.getLogger(__name__)

GROUP_COLUMN = "group"


def duplicate_groups(prepared: PreparedTexts, near: NearDuplicateConfig) -> pd.Series:
    """The group (representative id) of every prepared text; see the module docstring.

    Returns a str Series named `group`, indexed by id (name `id`) in the order of `prepared.ids`.
    """
    ids = np.asarray(prepared.ids, dtype=object)
    if len(set(prepared.ids)) != len(ids):
        duplicated = sorted(pd.Series(ids)[pd.Series(ids).duplicated()].unique())
        raise ValueError(f"duplicate_groups: duplicate id(s) {duplicated[:5]}")
    pairs = OverlapIndex(prepared, near).query(prepared, label="pool vs pool")
    position_of = {item_id: position for position, item_id in enumerate(prepared.ids)}
    # shape (pairs,) each: the two ends of every link; a text's pair with itself (its own exact match) is
    # harmless to the components.
    first = pairs["query_id"].map(position_of).to_numpy(dtype=np.int64)
    second = pairs["corpus_id"].map(position_of).to_numpy(dtype=np.int64)
    adjacency = coo_matrix((np.ones(len(pairs), dtype=np.int8), (first, second)), shape=(len(ids), len(ids)))
    _count, component = connected_components(adjacency, directed=False)
    representative = pd.Series(ids, dtype="str").groupby(component).transform("min")
    return pd.Series(
        representative.to_numpy(), index=pd.Index(ids, name="id", dtype="str"), name=GROUP_COLUMN, dtype="str"
    )


def near_duplicate_groups(
    ids: Sequence[str], texts: Sequence[str], normalise: NormaliseConfig, near: NearDuplicateConfig
) -> pd.Series:
    """`duplicate_groups` of raw texts: normalised, shingled (and MinHashed) here first."""
    return duplicate_groups(prepare_texts(ids, texts, normalise, near, label="pool"), near)


def group_summary(groups: pd.Series) -> dict:
    """How many groups, how many have more than one member and hold how many prompts, the largest size."""
    sizes = groups.value_counts()
    multi = sizes[sizes > 1]
    return {
        "groups": len(sizes),
        "multi_member_groups": len(multi),
        "prompts_in_multi_member_groups": int(multi.sum()),
        "largest_group": int(sizes.max()) if len(sizes) else 0,
    }

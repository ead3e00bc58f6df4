"""Fleiss' kappa: chance-corrected agreement among several raters assigning items to categories.

Pure numpy. The committee reports it per round among its judges. Items may have different numbers of raters
(a judge without a valid answer drops out for that item); per-item agreement is then averaged over items and
the category shares are taken over all ratings, which is Fleiss (1971) when every item has the same count.
"""

from __future__ import annotations

import numpy as np


def fleiss_kappa(counts: np.ndarray) -> float | None:
    """Fleiss' kappa of a count table; None when it is undefined.

    counts: (n_items, n_categories) non-negative integers, counts[i, j] = raters who put item i in category
    j. Items rated by fewer than two raters carry no agreement information and are skipped. Undefined (None):
    no item with two or more raters, or every rating in one category (chance agreement is 1, so 0/0).
    """
    table = np.asarray(counts, dtype=float)
    if table.ndim != 2 or (table < 0).any():
        raise ValueError(f"counts must be a non-negative (items, categories) table, got shape {table.shape}")
    raters = table.sum(axis=1)  # (n_items,)
    table, raters = table[raters >= 2], raters[raters >= 2]
    if len(table) == 0:
        return None
    # Share of agreeing rater pairs per item, (n_items,).
    item_agreement = ((table * (table - 1)).sum(axis=1)) / (raters * (raters - 1))
    observed = float(item_agreement.mean())
    category_share = table.sum(axis=0) / raters.sum()  # (n_categories,)
    chance = float((category_share**2).sum())
    if np.isclose(chance, 1.0):
        return None
    return (observed - chance) / (1.0 - chance)

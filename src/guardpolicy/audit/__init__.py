"""The contamination audit: text normalisation, exact and near-duplicate overlap, near-duplicate groups,
group-aware splits, contamination."""

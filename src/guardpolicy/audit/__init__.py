"""The contamination audit: text normalisation, exact and near-duplicate overlap, splits, contamination."""

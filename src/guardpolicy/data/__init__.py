"""Public benchmark data: the registry, acquisition (mirror or pinned download), reading and normalisation."""

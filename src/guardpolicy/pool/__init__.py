"""The prompt pool: source registry, loaders, generated cells, merge and sampling (stage `pool`)."""

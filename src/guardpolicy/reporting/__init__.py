"""Human- and DVC-facing reports built from stage outputs."""

"""Great Expectations suites (GX Core 1.x, ephemeral context, defined in code) for every data hand-off."""

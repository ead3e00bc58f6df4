"""Pure analyses over stage outputs (label frames, the pool): DataFrames in, plain dicts out, no I/O."""

"""Stage operations: read params and inputs, call the pure/library code, write outputs atomically.

`pipelines/*.py` (what dvc.yaml runs) and the `guardpolicy` command both call these, so a stage can be run
and debugged by hand exactly as DVC runs it.
"""

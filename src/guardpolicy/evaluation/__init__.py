"""Evaluation: which items are scored, how a guard's outputs become predictions, the metrics, bench-eval.

* `items`: the evaluation items (fetched benchmarks + evaluated splits), assembled from frames;
* `scoring`: batched inference, heads on cached features, and the predictions table;
* `metrics`: the per-model metrics document (the metrics themselves are `guardpolicy.metrics`);
* `bench`: `bench-eval`, our inference path against a transformers pipeline.

The stages that read and write files are in `guardpolicy.stages.evaluate`.
"""

"""Evaluation: which items are scored, how a guard's outputs become predictions, the metrics, bench-eval.

* `items`: the evaluation items (fetched benchmarks + evaluated splits), assembled from frames;
* `inputs`: reading them (and the present benchmarks, a checkpoint, its cached prefix states) from the files;
* `features`: the features file of features@<model>, which head-only models are evaluated on;
* `scoring`: batched inference, heads on cached features, and the predictions table;
* `metrics`: the per-model metrics document (the metrics themselves are `guardpolicy.metrics`);
* `bench`: `bench-eval`, our inference path against a transformers pipeline.

The stages that run them are `guardpolicy.stages.features` and `guardpolicy.stages.evaluate`.
"""

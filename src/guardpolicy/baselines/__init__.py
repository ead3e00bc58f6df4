"""Open generative guard baselines (Qwen3Guard, Granite Guardian, Llama Guard) on the same prompts as ours.

* `base`: the adapter / backend interface and the verdict a parser returns;
* `adapters`: each guard family's prompt and output format, read into a verdict that never raises;
* `mapping`: verdict -> binary decision (strict / relaxed) under a parse-failure policy, and failure counts;
* `backends`: local transformers (causal LM, encoder classifier) and an OpenAI-compatible server (vLLM),
  asking only for the few log-probs the decision needs; `factory` builds a guard's backend from its settings;
* `cache`: raw outputs keyed by model + revision, template hash, decoding and prompt, so a parser, mapping or
  threshold change never reruns a model;
* `registry`: data/baselines.yaml, the guards with pinned revisions and their hardware needs;
* `predictions`, `metrics`: a guard's predictions table (both mappings' decisions) and its metrics document.
"""

from guardpolicy.layout import relative_path

# Where stage baseline@<guard> writes <guard>/predictions.parquet and metrics.json, and the model name its
# predictions carry (`baseline-<guard>`); the analysis reads both.
BASELINES_DIR = relative_path("baselines")
MODEL_PREFIX = "baseline-"

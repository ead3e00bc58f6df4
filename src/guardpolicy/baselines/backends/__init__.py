"""The backends that run an open guard: a local `transformers` causal LM or sequence classifier, or a server.

The generative ones return one `Generation` per prompt, in order: the raw answer text, why generation
stopped, and the log-probabilities of the adapter's few candidate answer tokens at the *decision position*.
That position is the first generated token that is not blank (whitespace or a special token) and for which
`adapter.decision_position(text generated before it)` is true; the text handed to the adapter is exactly
what was generated before that token, so a leading space that the tokenizer glues to the answer word
(Qwen3Guard's "Safety:" + " Unsafe") is *not* in it. No position found (an answer in another format) -> no
log-probabilities; the parser still reads the text.

* `common`: what every backend shares (the probe prompt of template fingerprints, `BackendError`, the
  throughput log line);
* `local`: what the two local backends share: a folder or a pinned hub revision, device and dtype, and
  `LoadPolicy` (safetensors only and none of a model's own code unless the registry entry allows it);
* `causal_lm`: `TransformersBackend`, a local causal LM (the chat-template guards), decoded greedily;
* `classifier`: `SequenceClassifierBackend`, a local encoder classifier (a BERT-style prompt guard);
* `server`: `OpenAIServerBackend`, POST {base_url}/chat/completions (vLLM's server or any compatible one).
"""

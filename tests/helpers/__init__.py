"""Shared test helpers: paths and expected counts, tiny models built from configs, the fake OpenAI-compatible
server, synthetic runs and the temporary DVC repositories of the end-to-end tests. Test modules import from
here (as `helpers`), never from each other."""

"""Typed, strict params: one schema module per params.yaml section, and the machinery they share.

Why a package and not one module: a DVC stage's code deps are the modules its entry script imports
(guardpolicy.devtools.codedeps), so a stage must import only the schema of the sections it reads. Adding a key
to one section's schema then reruns the stages that read that section and no other.

* `core` - strict coercion (`from_mapping`: unknown keys, missing keys and wrong types raise ConfigError
  naming the full key path), YAML loading, and the section loader: ``ParamsFile.read(path).load(SECTION)``
  parses one top-level section of params.yaml, strictly, without reading the others.
* one module per section: `data`, `profiles` (the `profile` selector, `profiles` and the encoder entries of
  `encoders`), `scales`, `pool`, `policies`, `agreement`, `audit`, `training`, `teachers`, `anchor_sets`,
  `branches`, `noise_floor`, `evaluation`, `analysis`, `fingerprint`, `baselines`. Each defines the section's
  dataclasses and its `Section` (key, schema, default).
* `params` - `Params` / `load_params`: the whole file at once, unknown top-level keys included. For whole-file
  consumers only (the command line, `guardpolicy plan`, the stages' preconditions), never for a stage's own
  reads.

This file imports nothing, so importing one section module does not import the others.
"""

"""Checks that refuse to start a stage and never change what it writes.

A stage reads only the params sections its outputs depend on (guardpolicy.config's section loaders), so its
code deps hold only those sections' schemas. What a training or evaluation stage must also be sure of before
it starts is checked here, against params.yaml as a whole:

* `check_training_params`: every section is valid (`load_params`, unknown top-level keys included) and the
  training sections' cross-references hold (guardpolicy.training.branches.validate_branches: every policy,
  teacher, anchor set, scale and init_from a section names exists, no init_from cycle, the main seed is not a
  noise-floor seed), with each rules policy's rule names for the anchor sets when `rules` is set;
* `require_current_plan`: that, and data/models.yaml - the plan the stage reads and depends on - is what
  params plan now (else "run `guardpolicy plan`").

Both raise ConfigError or return nothing: a stage's outputs depend on the plan file and on the params it
declares, never on this module, which is why guardpolicy.devtools.codedeps leaves it (and what only it
imports: the whole-file schema, the plan logic) out of the stages' code deps, as it does guardpolicy.dvcdeps.
"""

from __future__ import annotations

from guardpolicy.config.params import Params, load_params
from guardpolicy.labeling import load_policy
from guardpolicy.layout import Layout
from guardpolicy.taxonomy import load_taxonomy
from guardpolicy.training.branches import check_plan_document, validate_branches


def check_training_params(layout: Layout, *, rules: bool = False) -> Params:
    """params.yaml checked as a whole, training cross-references included (see the module docstring)."""
    params_file = layout.relative("params")
    params = load_params(layout.path("params"))
    taxonomy = load_taxonomy(layout.path("taxonomy"))
    policy_rules = None
    if rules:
        policy_rules = {
            name: {rule.name for rule in load_policy(layout.resolve(policy.file), taxonomy).rules}
            | {"default"}
            for name, policy in params.policies.items()
            if policy.labeler == "rules"
        }
    validate_branches(params, params_file, policy_rules=policy_rules, coarse_classes=taxonomy.coarse_classes)
    return params


def require_current_plan(layout: Layout, *, rules: bool = False) -> None:
    """`check_training_params`, and the committed plan equals what params plan now."""
    params = check_training_params(layout, rules=rules)
    check_plan_document(params, layout.path("plan"), layout.relative("params"))

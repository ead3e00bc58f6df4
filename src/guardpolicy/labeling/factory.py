"""Building the labeler a policy's params ask for, and the labeler config that versions its labels.

`policy_version` hashes the policy file's bytes with the canonical JSON of `labeler_config`, so labels change
version when the constitution or anything that changes what the labeler answers changes. Settings that only
change how the answers are fetched (committee endpoints, key variable, cache folder, timeout, the in-flight
window, `use_n`) are left out: the same judges give the same labels through another URL or from the cache.
"""

from __future__ import annotations

import hashlib
from typing import Any

from guardpolicy.config.policies import PolicyParams
from guardpolicy.labeling.base import Labeler
from guardpolicy.labeling.committee import ROUND_QUESTIONS, CommitteeLabeler, system_prompt
from guardpolicy.labeling.importer import ImportLabeler
from guardpolicy.labeling.policy import Policy, policy_version
from guardpolicy.labeling.rules import RulesLabeler
from guardpolicy.taxonomy import Taxonomy


def labeler_config(params: PolicyParams, policy: Policy, taxonomy: Taxonomy) -> dict[str, Any]:
    """The part of a policy's params (and of the judge prompts) that decides its labels."""
    config: dict[str, Any] = {"labeler": params.labeler}
    if params.labeler == "import" and params.import_from is not None:
        spec = params.import_from
        config["import_from"] = {
            "column": spec.column,
            "mapping": dict(sorted(spec.mapping.items())),
            "pillars_column": spec.pillars_column,
        }
    if params.labeler == "committee" and params.committee is not None:
        spec = params.committee
        prompts = system_prompt(policy, taxonomy) + "".join(
            ROUND_QUESTIONS[r] for r in sorted(ROUND_QUESTIONS)
        )
        config["committee"] = {
            "models": list(spec.models),
            "samples": spec.samples,
            "temperature": spec.temperature,
            "max_tokens": spec.max_tokens,
            "max_retries": spec.max_retries,
            "prompts_sha256": hashlib.sha256(prompts.encode("utf-8")).hexdigest(),
        }
    return config


def make_labeler(
    params: PolicyParams, policy: Policy, taxonomy: Taxonomy, *, backoff_s: float = 1.0
) -> Labeler:
    """The labeler `params.labeler` names, bound to the policy and its version string."""
    version = policy_version(policy, labeler_config(params, policy, taxonomy))
    if params.labeler == "rules":
        return RulesLabeler(policy, taxonomy, version)
    if params.labeler == "import":
        assert params.import_from is not None  # PolicyParams.__post_init__ guarantees it
        return ImportLabeler(policy, taxonomy, version, params.import_from)
    assert params.committee is not None
    return CommitteeLabeler(policy, taxonomy, version, params.committee, backoff_s=backoff_s)

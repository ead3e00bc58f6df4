"""Labelling the prompt pool under a policy: policy files, the three labelers and their shared label frame.

policy = load_policy("data/policies/policy_a.yaml", load_taxonomy())
result = make_labeler(params.policies["policy_a"], policy, taxonomy).label(pool)
result.frame   # the data/labels/<policy>.parquet frame (docs/data-contracts.md, "Labels")
"""

from guardpolicy.labeling.base import Labeler, LabelResult, build_label_frame, label_summary, label_table
from guardpolicy.labeling.factory import labeler_config, make_labeler
from guardpolicy.labeling.policy import Policy, load_policy, parse_policy, policy_version

__all__ = [
    "LabelResult",
    "Labeler",
    "Policy",
    "build_label_frame",
    "label_summary",
    "label_table",
    "labeler_config",
    "load_policy",
    "make_labeler",
    "parse_policy",
    "policy_version",
]

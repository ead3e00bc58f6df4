"""The whole of params.yaml at once: `Params` / `load_params`, for whole-file consumers only.

The command line (`guardpolicy params`, `guardpolicy plan`), the tools under guardpolicy.devtools and the
stages' preconditions (guardpolicy.preconditions, guardpolicy.dvcdeps) check every section, and reject an
unknown top-level key, which a stage's own section loader (``ParamsFile.load``) leaves to them. A stage reads
its sections with the loaders of their modules instead, so its code deps hold only the schemas it reads:
importing this module imports every section's schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from guardpolicy.config.agreement import AGREEMENT, AgreementConfig
from guardpolicy.config.analysis import ANALYSIS, AnalysisConfig
from guardpolicy.config.anchor_sets import ANCHOR_SETS, AnchorSetConfig
from guardpolicy.config.audit import AUDIT, AuditConfig
from guardpolicy.config.baselines import BASELINES, BaselinesConfig
from guardpolicy.config.branches import BRANCHES, BranchConfig
from guardpolicy.config.core import PARAMS_FILE, Section, from_mapping, load_yaml
from guardpolicy.config.data import DATA, DataConfig
from guardpolicy.config.evaluation import EVALUATION, EvaluationConfig
from guardpolicy.config.fingerprint import FINGERPRINT, FingerprintConfig
from guardpolicy.config.noise_floor import NOISE_FLOOR, NoiseFloorConfig
from guardpolicy.config.policies import POLICIES, PolicyParams
from guardpolicy.config.pool import POOL, PoolConfig
from guardpolicy.config.profiles import PROFILE, PROFILES, EncoderKey, ProfileConfig, check_profile
from guardpolicy.config.scales import SCALES
from guardpolicy.config.score import SCORE, ScoreConfig
from guardpolicy.config.teachers import TEACHERS, TeacherConfig
from guardpolicy.config.training import TRAINING, TrainingConfig

# Every top-level section, in params.yaml's order; `Params` has one field per entry (a test checks that
# they agree).
SECTIONS: tuple[Section, ...] = (
    PROFILE,
    DATA,
    PROFILES,
    POOL,
    POLICIES,
    AGREEMENT,
    AUDIT,
    SCALES,
    TRAINING,
    TEACHERS,
    ANCHOR_SETS,
    BRANCHES,
    NOISE_FLOOR,
    EVALUATION,
    ANALYSIS,
    FINGERPRINT,
    BASELINES,
    SCORE,
)


def _default(section: Section) -> dict:
    assert section.default is not None, section.key
    return {"default_factory": section.default}


@dataclass(frozen=True, kw_only=True)
class Params:
    """Every section of params.yaml; a field without a default is a required section."""

    profile: str
    data: DataConfig
    profiles: dict[str, ProfileConfig]
    pool: PoolConfig = field(**_default(POOL))
    policies: dict[str, PolicyParams] = field(**_default(POLICIES))
    agreement: AgreementConfig
    audit: AuditConfig = field(**_default(AUDIT))
    # Model scale -> which profile encoder entry it trains. Cross-references of the training sections are
    # checked by guardpolicy.training.branches (validate_branches), which also orders the branches.
    scales: dict[str, EncoderKey]
    training: TrainingConfig = field(**_default(TRAINING))
    teachers: dict[str, TeacherConfig] = field(**_default(TEACHERS))
    anchor_sets: dict[str, AnchorSetConfig] = field(**_default(ANCHOR_SETS))
    branches: dict[str, BranchConfig] = field(**_default(BRANCHES))
    noise_floor: NoiseFloorConfig
    evaluation: EvaluationConfig = field(**_default(EVALUATION))
    analysis: AnalysisConfig
    fingerprint: FingerprintConfig = field(**_default(FINGERPRINT))
    baselines: BaselinesConfig = field(**_default(BASELINES))
    score: ScoreConfig = field(**_default(SCORE))

    def __post_init__(self) -> None:
        check_profile(self.profile, self.profiles)

    @property
    def active(self) -> ProfileConfig:
        return self.profiles[self.profile]


def load_params(path: str | Path = PARAMS_FILE) -> Params:
    """The whole params file at `path`, every section checked and unknown top-level keys rejected."""
    return from_mapping(Params, load_yaml(path), where=str(path))

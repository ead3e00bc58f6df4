"""params `policies.<name>`: each policy's constitution file and the labeler that applies it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from guardpolicy.config.core import Section
from guardpolicy.errors import ConfigError
from guardpolicy.layout import relative_path


@dataclass(frozen=True)
class ImportLabelerConfig:
    """Take a policy's labels from a column the user's pool file carried (pool column `import_<name>`)."""

    column: str
    # User value -> coarse class; values already spelled as coarse classes need no entry.
    mapping: dict[str, str] = field(default_factory=dict)
    # Optional pool column with `;`-separated pillar names.
    pillars_column: str | None = None


@dataclass(frozen=True)
class JudgeEndpoint:
    """Where one judge model is served when it is not behind the committee's shared `base_url` (e.g. one
    vLLM server per judge model, docs/llm-throughput.md)."""

    base_url: str
    # None: the committee's api_key_env.
    api_key_env: str | None = None

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url must be http(s)://..., got {self.base_url!r}")


@dataclass(frozen=True)
class CommitteeConfig:
    """Several LLM judges behind OpenAI-compatible chat-completions endpoints."""

    base_url: str
    models: tuple[str, ...]
    # Samples per judge and round; the committee's answer is the majority over judges x samples.
    samples: int = 3
    temperature: float = 0.7
    max_tokens: int = 8
    # Name of the environment variable holding the API key (None: send no Authorization header).
    api_key_env: str | None = "OPENAI_API_KEY"
    # Answers are cached here by (model, round, sample, policy, prompt) so a rerun costs nothing.
    cache_dir: str = relative_path("committee_cache")
    timeout_s: float = 60.0
    # Re-asks after an unparseable answer or a transient HTTP error, per call.
    max_retries: int = 2
    # Requests kept in flight at once, over all judges; the window is refilled as each answer arrives. An
    # engine such as vLLM batches whatever is in flight, so this is what sets its throughput (64-256 there;
    # a rate-limited API wants less).
    max_in_flight: int = 16
    # Ask for all `samples` of a judge in one request (`n`): `auto` tries it and falls back to one request per
    # sample for an endpoint that refuses `n` or returns fewer choices; `never` always sends one per sample.
    use_n: Literal["auto", "always", "never"] = "auto"
    # Judge model -> its own endpoint; a judge not named here is asked at `base_url`.
    endpoints: dict[str, JudgeEndpoint] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.models:
            raise ConfigError("committee.models must name at least one judge model")
        if self.samples <= 0 or self.max_retries < 0 or self.max_in_flight <= 0:
            raise ConfigError(
                "committee.samples and max_in_flight must be positive, max_retries non-negative"
            )
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"committee.base_url must be http(s)://..., got {self.base_url!r}")
        if self.use_n not in ("auto", "always", "never"):
            raise ConfigError(f"committee.use_n must be auto, always or never, got {self.use_n!r}")
        unknown = sorted(set(self.endpoints) - set(self.models))
        if unknown:
            raise ConfigError(
                f"committee.endpoints names {unknown}, which are not judges (committee.models: "
                f"{list(self.models)})"
            )

    def endpoint(self, model: str) -> JudgeEndpoint:
        """Where `model` is asked: its own endpoint, else the shared base_url and key."""
        own = self.endpoints.get(model)
        if own is None:
            return JudgeEndpoint(self.base_url, self.api_key_env)
        return JudgeEndpoint(own.base_url, own.api_key_env or self.api_key_env)


@dataclass(frozen=True)
class PolicyParams:
    """One policy: its constitution file and the labeler that applies it to the pool."""

    file: str
    labeler: Literal["rules", "import", "committee"] = "rules"
    import_from: ImportLabelerConfig | None = None
    committee: CommitteeConfig | None = None

    def __post_init__(self) -> None:
        if self.labeler == "import" and self.import_from is None:
            raise ConfigError("labeler 'import' needs an import_from section (column, mapping)")
        if self.labeler == "committee" and self.committee is None:
            raise ConfigError("labeler 'committee' needs a committee section (base_url, models, ...)")


POLICIES: Section[dict[str, PolicyParams]] = Section("policies", dict[str, PolicyParams], dict)

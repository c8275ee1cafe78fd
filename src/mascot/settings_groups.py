"""Groups of settings that several commands share, as dataclasses their settings inherit from.

- `DataSettings`: which contexts (dataset, data file, split, limit, seed, QMSum window);
- `ClientSettings`: how requests are sent (`ClientLimits`, plus the extra body);
- `EndpointSettings`: per-role servers, models, adapters, extra bodies and reasoning modes, as
  flags; `__post_init__` folds them into `roles` (role -> `RoleSettings`), which the library reads;
- `OutputSettings`: the run folder (output dir, resume, overwrite, strict, trace);
- `JudgingSettings`: rubric, scoring, reply length and cache of a judge (Stage 1 and Stage 2);
- `JudgePanelSettings`: the judges, with their judging settings and client.

Each group checks its own values in `check_*` (called from `__post_init__` of the groups and of
the command settings that combine them). Imports nothing heavy: `mascot --help` reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from mascot import vocab
from mascot.errors import MascotError, flag_json_error
from mascot.settings import SettingsObject, fixed, require, setting

THINKING_HELP = "on | off | default: the role's reasoning mode (sent as chat_template_kwargs.enable_thinking)."
_SEVERAL = " Repeat (or separate with commas) for several servers sharing the load."
MODEL_NAME_HELP = (
    "Model id for every role without its own (hub id, local folder, or served id). Default: the embedded SmolLM2-135M-Instruct on the local backend."
)
SPLIT_HELP = "Dataset split (train/valid/test; QMSum: train/val/test). Default: the split a --data-file's name states (valid.jsonl), else test."
SHARED_URL_HELP = "Shared OpenAI-compatible endpoint for Director, Speaker and User." + _SEVERAL
JUDGE_SCORING_HELP = (
    "auto | logprobs | json: score each criterion by the judge's probabilities of the answers 1-5 (logprobs; falls back "
    "to JSON where a server returns none) or by JSON verdicts; auto: logprobs on the local backend, JSON on servers."
)


# ---- parsing flag values: one parser per kind


def split_urls(urls: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """URLs from repeated flags and/or comma-separated lists, without trailing slashes or repeats."""
    if not urls:
        return []
    items = [urls] if isinstance(urls, str) else list(urls)
    found: list[str] = []
    for item in items:
        for url in str(item).split(","):
            url = url.strip().rstrip("/")
            if url and url not in found:
                found.append(url)
    return found


def joined_urls(urls: str | list[str] | tuple[str, ...] | None) -> str | None:
    """One comma-separated string for one or several URLs (`split_urls`), None for none."""
    return ",".join(split_urls(urls)) or None


def parse_extra_body(text: str | dict | None, flag: str = "--extra-body") -> dict | None:
    """A JSON object from the command line (or a mapping from --config), or a one-line error."""
    if isinstance(text, dict):
        return text
    if text is None or not text.strip():
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise flag_json_error(flag, text) from None
    if not isinstance(value, dict):
        raise MascotError(f"{flag} must be a JSON object ({{...}}), got {type(value).__name__}")
    return value


def parse_thinking(value: str | bool | None, flag: str = "--thinking") -> bool | None:
    """on | off | default (or a YAML boolean) as a request setting: True, False or None (the
    server's default)."""
    if value is None or isinstance(value, bool):
        return value
    key = str(value).strip().lower() or "default"
    if key not in vocab.THINKING_CHOICES:
        raise MascotError(f"{flag} must be on, off or default (got {value!r})")
    return {"on": True, "off": False}.get(key)


def merged_extra_body(shared: dict | None, own: dict | None) -> dict:
    """The run's extra request fields with a role's own on top (chat_template_kwargs merged)."""
    shared, own = dict(shared or {}), dict(own or {})
    kwargs = {**(shared.get("chat_template_kwargs") or {}), **(own.get("chat_template_kwargs") or {})}
    merged = {**shared, **own}
    if kwargs:
        merged["chat_template_kwargs"] = kwargs
    return merged


# ---- per-role settings


@dataclass
class RoleSettings:
    """What one role calls and how it reasons: the `--<role>-*` flags, parsed. The library reads
    these (`settings.roles["speaker"].thinking`), never the flat flags."""

    model: Optional[str] = None
    adapter: Optional[str] = None
    server_url: list[str] = field(default_factory=list)  # several servers share the role's load
    extra_body: dict = field(default_factory=dict)  # the run's --extra-body with the role's own on top
    thinking: Optional[bool] = None  # None: the server's default
    adapter_version: Optional[str] = None  # the registry version `adapter` was resolved from (`--speaker-adapter current`)
    follows_current: bool = False  # given as `current`: a served role switches when another version is promoted


_ROLE_FLAGS = ("model", "adapter", "server_url", "extra_body", "thinking")


def role_mapping(s: SettingsObject) -> dict[str, RoleSettings]:
    """The `--<role>-*` flags a settings class declares, folded into role -> RoleSettings (the one
    place that reads the flat flags; roles without any flag are left out)."""
    shared = parse_extra_body(getattr(s, "extra_body", None))
    roles = {}
    for role in (*vocab.ROLES, vocab.SAFETY):
        given = {k: getattr(s, f"{role}_{k}") for k in _ROLE_FLAGS if hasattr(s, f"{role}_{k}")}
        if given:
            adapter, version = registry_adapter(given.get("adapter"), role)
            roles[role] = RoleSettings(
                model=given.get("model"),
                adapter=adapter,
                adapter_version=version,
                follows_current=str(given.get("adapter") or "").strip() == "current",
                server_url=split_urls(given.get("server_url")),
                extra_body=merged_extra_body(shared, parse_extra_body(given.get("extra_body"), f"--{role}-extra-body")),
                thinking=parse_thinking(given.get("thinking"), f"--{role}-thinking"),
            )
    return roles


def registry_adapter(value: Optional[str], role: str) -> tuple[Optional[str], Optional[str]]:
    """A `--<role>-adapter` value that names a registry version (`current`, `previous`, `v3`,
    `speaker-v3`) as that version's folder and id; a folder or served name as given."""
    if not value:
        return value, None
    from mascot.adapter_registry import resolve_adapter

    return resolve_adapter(value, role)


def roles_field() -> Any:
    """The `roles` mapping of a settings class, filled from its flags in `__post_init__`."""
    return field(default_factory=dict, repr=False, compare=False, metadata={"cli": False, "derived": True})


# ---- groups


@dataclass
class ClientLimits:
    """How many requests a server gets at once, how long each may take and how often it is tried."""

    max_in_flight: int = setting(vocab.MAX_IN_FLIGHT, "Requests in flight per endpoint.")
    request_timeout: float = setting(
        vocab.REQUEST_TIMEOUT_S, "Seconds a server may take to answer one request; a timed-out request is retried with a longer one."
    )
    retry_budget: float = setting(vocab.RETRY_BUDGET_S, "Seconds a failing request may spend retrying (backoff included) before it is given up.")
    max_stop_strings: int = setting(
        vocab.MAX_STOP_STRINGS, "Stop strings sent per request (stock vLLM refuses more than 4); the rest are cut when the reply arrives."
    )
    max_retries: int = fixed(vocab.MAX_RETRIES)
    local_batch_size: int = setting(
        vocab.LOCAL_BATCH_SIZE, "Rows the in-process model decodes together (a request's n choices are n rows); more rows, more tokens a second."
    )

    def __post_init__(self) -> None:
        check_limits(self)


def check_limits(s: ClientLimits) -> None:
    require(
        s.request_timeout > 0 and s.retry_budget >= 0 and s.max_stop_strings >= 0,
        "--request-timeout must be positive; --retry-budget and --max-stop-strings must not be negative",
    )
    require(s.max_in_flight >= 1, "--max-in-flight must be at least 1")
    require(s.local_batch_size >= 1, "--local-batch-size must be at least 1")


@dataclass
class SeedSettings:
    seed: int = setting(vocab.SEED, "Run seed; every episode's seed derives from it.", panel="Data")


@dataclass
class DataSettings(SeedSettings):
    """Which contexts seed the run."""

    dataset: str = setting("ESConv", "ESConv, EmpatheticDialogues (ED) or QMSum.")
    data_file: Optional[Path] = setting(None, "Read the dataset from a local file in its hub export format instead of the hub.")
    split: Optional[str] = setting(None, SPLIT_HELP)
    limit: Optional[int] = setting(None, "Use at most this many contexts.")
    transcript_window: int = setting(
        vocab.TRANSCRIPT_WINDOW,
        "QMSum: size of the meeting-transcript window each context carries, in estimated tokens (smaller: shorter prompts and pairs).",
        flags=("--token-budget",),
    )

    def __post_init__(self) -> None:
        check_data(self)


def check_data(s: DataSettings) -> None:
    from mascot.data.loaders import split_for
    from mascot.data.names import canonical_dataset_name

    s.dataset = canonical_dataset_name(s.dataset)
    s.split = split_for(s.split, s.data_file)
    require(s.transcript_window >= 1, "--transcript-window must be at least 1")
    require(s.limit is None or s.limit >= 0, "--limit must not be negative")


@dataclass
class ClientSettings(ClientLimits):
    """How requests reach a server."""

    extra_body: Optional[str] = setting(None, "JSON object merged into every request body, e.g. '{\"top_k\": 20}'.", panel="Requests")

    def __post_init__(self) -> None:
        check_client(self)


def check_client(s: ClientSettings) -> None:
    check_limits(s)
    parse_extra_body(s.extra_body)


@dataclass
class SpeakerEndpointSettings(ClientSettings):
    """Which server and model the Speakers call (all a Stage-1 run asks), and the shared ones."""

    model_name: Optional[str] = setting(None, MODEL_NAME_HELP, flags=("--model",))
    vllm_server_url: Optional[list[str]] = setting(None, SHARED_URL_HELP)
    speaker_server_url: Optional[list[str]] = setting(None, "Endpoint for the Speakers (overrides the shared one)." + _SEVERAL)
    speaker_model: Optional[str] = setting(None, "Model id the Speakers call.", flags=("--agent-model",))
    speaker_adapter: Optional[str] = setting(
        None, "LoRA adapter folder for the Speakers (local backend), or a registry version: current, previous, speaker-v3."
    )
    speaker_extra_body: Optional[str] = setting(None, "JSON object merged into the Speakers' request bodies (over --extra-body).")
    speaker_thinking: str = setting("default", "Speakers: " + THINKING_HELP)
    roles: dict[str, RoleSettings] = roles_field()

    def __post_init__(self) -> None:
        check_endpoints(self)


@dataclass
class GroupEndpointSettings(SpeakerEndpointSettings):
    """Which server and model the Director and the Speakers call (what a live conversation needs)."""

    director_server_url: Optional[list[str]] = setting(None, "Endpoint for the Director (overrides the shared one)." + _SEVERAL)
    director_model: Optional[str] = setting(None, "Model id the Director calls.", flags=("--directive-model",))
    director_adapter: Optional[str] = setting(
        None, "LoRA adapter folder for the Director (local backend), or a registry version: current, previous, director-v3."
    )
    share_model: bool = setting(False, "Opt-in: the other roles reuse the Speaker's model and endpoint.")
    director_extra_body: Optional[str] = setting(None, "JSON object merged into the Director's request bodies (over --extra-body).")
    director_thinking: str = setting("default", "Director: " + THINKING_HELP)
    safety_server_url: Optional[list[str]] = setting(
        None,
        "Endpoint of the safety screen's model stage: a served model asked, its answer constrained to a label, about user "
        "messages the rules do not flag (--safety-model-scope); never inherits --vllm-server-url; none: no model stage." + _SEVERAL,
    )
    safety_model: Optional[str] = setting(None, "Model id the safety screen's model stage calls (with --safety-server-url).")


@dataclass
class UserEndpointSettings:
    """Which server and model the simulated user calls."""

    user_server_url: Optional[list[str]] = setting(None, "Endpoint for the simulated user (overrides the shared one)." + _SEVERAL)
    user_model: Optional[str] = setting(None, "Model id the simulated user calls.")
    user_extra_body: Optional[str] = setting(None, "JSON object merged into the simulated user's request bodies (over --extra-body).")
    user_thinking: str = setting("default", "Simulated user: " + THINKING_HELP)


@dataclass
class EndpointSettings(UserEndpointSettings, GroupEndpointSettings):
    """Which server and model each role of a group episode calls: Director, Speakers, simulated user."""


@dataclass
class JudgeServerSettings:
    """Where the judges are served and how they reason."""

    judge_server_url: Optional[list[str]] = setting(
        None, "Endpoint for the judge; never inherits --vllm-server-url (no URL: local model)." + _SEVERAL
    )
    judge_thinking: str = setting("default", "Judge: " + THINKING_HELP)


@dataclass
class JudgeEndpointSettings(JudgeServerSettings):
    """The one judge a run asks: its server, model and request fields."""

    judge_model: Optional[str] = setting(None, "Model id the judge calls." + vocab.PLUGIN_JUDGE_HELP)
    judge_extra_body: Optional[str] = setting(None, "JSON object merged into the judge's request bodies (over --extra-body).")


def check_endpoints(s: SpeakerEndpointSettings) -> None:
    """Checks the endpoint flags and folds them into `s.roles`."""
    check_client(s)
    require(
        not (getattr(s, "safety_model", None) and not getattr(s, "safety_server_url", None)),
        "--safety-model needs --safety-server-url: the safety screen's model stage runs on a served model only",
    )
    s.roles = role_mapping(s)


@dataclass
class StrictSettings:
    strict: bool = setting(False, "Stop at the first failure instead of counting and continuing.")


@dataclass
class TraceSettings:
    trace_role_calls: bool = setting(
        False,
        "Write role_call_trace.jsonl (role, model id, endpoint, tokens, latency) beside the run's outputs (a chat: <session>.role_call_trace.jsonl).",
    )


@dataclass
class RosterSettings:
    roster: Optional[str] = setting(
        None, "Roster name (emotional_support, emotional_support_four, meetings) or roster file (default: the dataset's roster)."
    )


@dataclass
class OutputSettings(TraceSettings, StrictSettings):
    """Where a run writes, and what happens to a run already there."""

    output_dir: Path = setting(Path("data/rl"), "Parent folder of the run directory.")
    resume: bool = setting(False, "Continue an existing run after its last complete record.")
    overwrite: bool = setting(False, "Delete an existing run's outputs and start over.")

    def __post_init__(self) -> None:
        check_output(self)


def check_output(s: OutputSettings) -> None:
    require(not (s.resume and s.overwrite), "use either --resume or --overwrite, not both")


@dataclass
class ScoreMarginSettings:
    score_margin: float = setting(
        vocab.SCORE_MARGIN,
        "Minimum judged score gap (1-5 scale) for a preference pair: Stage 1's persona score, a group pair's collective Overall.",
        panel="Judging",
    )

    def __post_init__(self) -> None:
        check_score_margin(self)


def check_score_margin(s: ScoreMarginSettings) -> None:
    require(s.score_margin >= 0, "--score-margin must not be negative")


@dataclass
class RubricSettings:
    rubric_version: str = setting(vocab.DEFAULT_RUBRIC_VERSION, "Rubric version (built-in name or a rubric YAML file).", panel="Judging")


@dataclass
class JudgingSettings(RubricSettings):
    """How a judge scores: rubric, scoring mode, reply length and cache (Stage 1 and Stage 2 alike)."""

    judge_scoring: str = setting("auto", JUDGE_SCORING_HELP, panel="Judging")
    judge_max_tokens: int = setting(vocab.JUDGE_MAX_TOKENS, "Longest judge reply in tokens.", panel="Judging")
    cache_dir: Optional[Path] = setting(
        None, "Judgment cache folder (default $MASCOT_JUDGE_CACHE_DIR, $MASCOT_CACHE_DIR or ~/.cache/mascot).", panel="Judging"
    )
    no_cache: bool = setting(False, "Judge everything again instead of reusing cached judgments.", panel="Judging")

    def __post_init__(self) -> None:
        check_judging(self)


def check_judging(s: JudgingSettings) -> None:
    require(s.judge_max_tokens >= 1, "--judge-max-tokens must be at least 1")
    check_judge_scoring(s.judge_scoring)


def check_judge_scoring(mode: str) -> None:
    """--judge-scoring, wherever a command takes it (the judging group, `mascot eval`)."""
    modes = vocab.JUDGE_SCORING_MODES
    require(mode in modes, f"--judge-scoring must be one of {', '.join(modes)} (got {mode!r})")


@dataclass
class JudgePanelSettings(JudgeServerSettings, StrictSettings, JudgingSettings, ClientSettings):
    """The judges (one or several), their rubric, cache and client."""

    judges: Optional[list[str]] = setting(
        None,
        "Judge model id; repeat for several judges (all on --judge-server-url, or the local model)." + vocab.PLUGIN_JUDGE_HELP,
        flags=("--judge", "--judge-model"),
    )
    judges_file: Optional[Path] = setting(None, vocab.JUDGES_FILE_HELP)
    provider: str = setting("openai-compatible", vocab.PROVIDER_HELP)
    roles: dict[str, RoleSettings] = roles_field()

    def __post_init__(self) -> None:
        check_judge_panel(self)


def check_provider(provider: str) -> None:
    """--provider, wherever a command takes it (the judge panel, `mascot eval compare`)."""
    providers = vocab.JUDGE_PROVIDERS
    require(provider in providers, f"unknown --provider {provider!r}: use {', '.join(providers[:-1])} or {providers[-1]}")


def check_judge_panel(s: JudgePanelSettings) -> None:
    check_client(s)
    check_judging(s)
    require(not (s.judges_file and s.judges), "use either --judge or --judges-file, not both")
    check_provider(s.provider)
    s.roles = role_mapping(s)

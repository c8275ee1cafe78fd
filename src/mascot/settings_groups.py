"""Groups of settings that several commands share, as dataclasses their settings inherit from.

- `DataSettings`: which contexts (dataset, data file, split, limit, seed, QMSum window);
- `ClientSettings`: how requests are sent (in flight, timeout, retries, stop strings, extra body);
- `EndpointSettings`: per-role servers, models, adapters, extra bodies and reasoning modes;
- `OutputSettings`: the run folder (output dir, resume, overwrite, strict, trace);
- `JudgePanelSettings`: the judges, their rubric, cache and client.

Each group checks its own values in `check_*` (called from `__post_init__` of the groups and of
the command settings that combine them). Imports nothing heavy: `mascot --help` reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from mascot.errors import MascotError
from mascot.settings import require, setting

DEFAULT_TOKEN_BUDGET = 1500  # mascot.data.qmsum.DEFAULT_TOKEN_BUDGET, kept here so that --help stays cheap
DIALOGUE_ROLES = ("director", "speaker", "user")
THINKING_HELP = "on | off | default: the role's reasoning mode (sent as chat_template_kwargs.enable_thinking)."
_SEVERAL = " Repeat (or separate with commas) for several servers sharing the load."
MODEL_NAME_HELP = (
    "Model id for every role without its own (hub id, local folder, or served id). Default: the embedded SmolLM2-135M-Instruct on the local backend."
)
SPLIT_HELP = "Dataset split (train/valid/test; QMSum: train/val/test). Default: the split a --data-file's name states (valid.jsonl), else test."
SHARED_URL_HELP = "Shared OpenAI-compatible endpoint for Director, Speaker and User." + _SEVERAL


# ---- parsing flag values


def parse_extra_body(text: str | dict | None, flag: str = "--extra-body") -> dict | None:
    """A JSON object from the command line (or a mapping from --config), or a one-line error."""
    if isinstance(text, dict):
        return text
    if text is None or not text.strip():
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MascotError(f"{flag} is not valid JSON ({exc.msg} at column {exc.colno}): {' '.join(text.split())}") from None
    if not isinstance(value, dict):
        raise MascotError(f"{flag} must be a JSON object ({{...}}), got {type(value).__name__}")
    return value


def parse_thinking(value: str | bool | None, flag: str = "--thinking") -> bool | None:
    if isinstance(value, bool):
        return value
    choices = {"on": True, "off": False, "default": None, "": None}
    key = (value or "").strip().lower()
    if key not in choices:
        raise MascotError(f"{flag} must be on, off or default (got {value!r})")
    return choices[key]


def joined_urls(urls: list[str] | str | None) -> str | None:
    """Several URL flags (or comma-separated ones) as one comma-separated string; None for none."""
    if not urls:
        return None
    items = [urls] if isinstance(urls, str) else urls
    found = [u.strip() for item in items for u in item.split(",") if u.strip()]
    return ",".join(found) or None


# ---- groups


# mascot.judge.logprob.SCORING_MODES, kept here so that --help stays cheap
JUDGE_SCORING_MODES = ("auto", "logprobs", "json")
JUDGE_SCORING_HELP = (
    "auto | logprobs | json: score each criterion by the judge's probabilities of the answers 1-5 (logprobs; falls back "
    "to JSON where a server returns none) or by JSON verdicts; auto: logprobs on the local backend, JSON on servers."
)

@dataclass
class DataSettings:
    """Which contexts seed the run."""

    dataset: str = setting("ESConv", "ESConv, EmpatheticDialogues (ED) or QMSum.")
    data_file: Optional[Path] = setting(None, "Read the dataset from a local file in its hub export format instead of the hub.")
    split: Optional[str] = setting(None, SPLIT_HELP)
    limit: Optional[int] = setting(None, "Use at most this many contexts.")
    seed: int = setting(42, "Run seed; every episode's seed derives from it.")
    token_budget: int = setting(
        DEFAULT_TOKEN_BUDGET,
        "QMSum: size of the meeting-transcript window each context carries, in estimated tokens (smaller: shorter prompts and pairs).",
        flags=("--transcript-window",),
    )

    def __post_init__(self) -> None:
        check_data(self)


def check_data(s: Any) -> None:
    from mascot.data.loaders import split_for
    from mascot.data.names import canonical_dataset_name

    s.dataset = canonical_dataset_name(s.dataset)
    s.split = split_for(s.split, s.data_file)
    require(s.token_budget >= 1, "--token-budget must be at least 1")
    require(s.limit is None or s.limit >= 0, "--limit must not be negative")


@dataclass
class ClientSettings:
    """How requests reach a server."""

    max_in_flight: int = setting(64, "Requests in flight per endpoint.")
    request_timeout: float = setting(120.0, "Seconds a server may take to answer one request; a timed-out request is retried with a longer one.")
    retry_budget: float = setting(60.0, "Seconds a failing request may spend retrying (backoff included) before it is given up.")
    max_stop_strings: int = setting(4, "Stop strings sent per request (stock vLLM refuses more than 4); the rest are cut when the reply arrives.")
    extra_body: Optional[str] = setting(None, 'JSON object merged into every request body, e.g. \'{"top_k": 20}\'.')

    def __post_init__(self) -> None:
        check_client(self)

    def client_options(self) -> dict[str, Any]:
        """The `EndpointOptions` fields these settings fill."""
        return dict(
            max_in_flight=self.max_in_flight,
            timeout_s=self.request_timeout,
            retry_budget_s=self.retry_budget,
            max_stop_strings=self.max_stop_strings,
            extra_body=parse_extra_body(self.extra_body),
        )


def check_client(s: Any) -> None:
    require(
        s.request_timeout > 0 and s.retry_budget >= 0 and s.max_stop_strings >= 0,
        "--request-timeout must be positive; --retry-budget and --max-stop-strings must not be negative",
    )
    require(s.max_in_flight >= 1, "--max-in-flight must be at least 1")
    parse_extra_body(s.extra_body)


@dataclass
class GroupEndpointSettings(ClientSettings):
    """Which server and model the Director and the Speakers call (what a live conversation needs)."""

    model_name: Optional[str] = setting(None, MODEL_NAME_HELP, flags=("--model",))
    vllm_server_url: Optional[list[str]] = setting(None, SHARED_URL_HELP)
    director_server_url: Optional[list[str]] = setting(None, "Endpoint for the Director (overrides the shared one)." + _SEVERAL)
    speaker_server_url: Optional[list[str]] = setting(None, "Endpoint for the Speakers (overrides the shared one)." + _SEVERAL)
    director_model: Optional[str] = setting(None, "Model id the Director calls.", flags=("--directive-model",))
    speaker_model: Optional[str] = setting(None, "Model id the Speakers call.", flags=("--agent-model",))
    director_adapter: Optional[str] = setting(None, "LoRA adapter folder for the Director (local backend).")
    speaker_adapter: Optional[str] = setting(None, "LoRA adapter folder for the Speakers (local backend).")
    share_model: bool = setting(False, "Opt-in: the other roles reuse the Speaker's model and endpoint.")
    director_extra_body: Optional[str] = setting(None, "JSON object merged into the Director's request bodies (over --extra-body).")
    speaker_extra_body: Optional[str] = setting(None, "JSON object merged into the Speakers' request bodies (over --extra-body).")
    director_thinking: str = setting("default", "Director: " + THINKING_HELP)
    speaker_thinking: str = setting("default", "Speakers: " + THINKING_HELP)

    def __post_init__(self) -> None:
        check_endpoints(self)

    def roles(self) -> tuple[str, ...]:
        """The roles these settings name endpoints for."""
        return tuple(r for r in (*DIALOGUE_ROLES, "judge") if hasattr(self, f"{r}_server_url"))

    def endpoint_options(self, **extra: Any):
        """The `mascot.llm.routing.EndpointOptions` these settings describe."""
        from mascot.llm.routing import EndpointOptions

        names = ("model_name", "director_adapter", "speaker_adapter", "share_model", *(f"{r}_model" for r in self.roles()))
        urls = {f"{role}_server_url": getattr(self, f"{role}_server_url") for role in self.roles()}
        roles = {}
        for role in self.roles():
            roles[f"{role}_extra_body"] = parse_extra_body(getattr(self, f"{role}_extra_body"), f"--{role}-extra-body")
            roles[f"{role}_thinking"] = parse_thinking(getattr(self, f"{role}_thinking"), f"--{role}-thinking")
        values = {n: getattr(self, n) for n in names}
        return EndpointOptions(**values, vllm_server_url=self.vllm_server_url, **urls, **self.client_options(), **roles, **extra)


@dataclass
class EndpointSettings(GroupEndpointSettings):
    """Which server and model each role calls: the group, the simulated user and the judge."""

    user_server_url: Optional[list[str]] = setting(None, "Endpoint for the simulated user (overrides the shared one)." + _SEVERAL)
    judge_server_url: Optional[list[str]] = setting(None, "Endpoint for the judge; never inherits --vllm-server-url (no URL: local model)." + _SEVERAL)
    user_model: Optional[str] = setting(None, "Model id the simulated user calls.")
    judge_model: Optional[str] = setting(None, "Model id the judge calls.")
    user_extra_body: Optional[str] = setting(None, "JSON object merged into the simulated user's request bodies (over --extra-body).")
    judge_extra_body: Optional[str] = setting(None, "JSON object merged into the judge's request bodies (over --extra-body).")
    user_thinking: str = setting("default", "Simulated user: " + THINKING_HELP)
    judge_thinking: str = setting("default", "Judge: " + THINKING_HELP)


def check_endpoints(s: Any) -> None:
    check_client(s)
    for role in s.roles():
        parse_extra_body(getattr(s, f"{role}_extra_body"), f"--{role}-extra-body")
        parse_thinking(getattr(s, f"{role}_thinking"), f"--{role}-thinking")


@dataclass
class OutputSettings:
    """Where a run writes, and what happens to a run already there."""

    output_dir: Path = setting(Path("data/rl"), "Parent folder of the run directory.")
    resume: bool = setting(False, "Continue an existing run after its last complete record.")
    overwrite: bool = setting(False, "Delete an existing run's outputs and start over.")
    strict: bool = setting(False, "Stop at the first failure instead of counting and continuing.")
    trace_role_calls: bool = setting(False, "Write role_call_trace.jsonl (role, model id, endpoint, tokens, latency).")

    def __post_init__(self) -> None:
        check_output(self)


def check_output(s: Any) -> None:
    require(not (s.resume and s.overwrite), "use either --resume or --overwrite, not both")


PROVIDERS = ("openai-compatible", "vllm", "openai", "anthropic", "gemini")


@dataclass
class JudgePanelSettings(ClientSettings):
    """The judges (one or several), their rubric, cache and client."""

    judges: Optional[list[str]] = setting(
        None, "Judge model id; repeat for several judges (all on --judge-server-url, or the local model).", flags=("--judge", "--judge-model")
    )
    judges_file: Optional[Path] = setting(None, "YAML list of judges: name, model, url, provider, api_key_env.")
    provider: str = setting("openai-compatible", "openai-compatible (vllm) | openai | anthropic | gemini, for --judge.")
    judge_server_url: Optional[list[str]] = setting(None, "Endpoint for the judge; never inherits --vllm-server-url (no URL: local model)." + _SEVERAL)
    rubric_version: str = setting("paper_v1", "Rubric version (built-in name or a rubric YAML file).")
    cache_dir: Optional[Path] = setting(None, "Judgment cache folder (default $MASCOT_JUDGE_CACHE_DIR, $MASCOT_CACHE_DIR or ~/.cache/mascot).")
    no_cache: bool = setting(False, "Judge everything again instead of reusing cached judgments.")
    judge_max_tokens: int = setting(512, "Longest judge reply in tokens.")
    judge_scoring: str = setting("auto", JUDGE_SCORING_HELP)
    judge_thinking: str = setting("default", "Judge: " + THINKING_HELP)
    strict: bool = setting(False, "Stop at the first failure instead of counting and continuing.")

    def __post_init__(self) -> None:
        check_judge_panel(self)

    def judge_specs(self) -> list:
        """One JudgeSpec per judge (from --judges-file, or --judge ids on --judge-server-url)."""
        from mascot.judge.panel import JudgeSpec, load_judges_file
        from mascot.llm.base import DEFAULT_LOCAL_MODEL

        if self.judges_file:
            return load_judges_file(self.judges_file)
        provider = "openai-compatible" if self.provider == "vllm" else self.provider
        url = joined_urls(self.judge_server_url)
        return [JudgeSpec(model=m, url=url, provider=provider) for m in self.judges or [DEFAULT_LOCAL_MODEL]]  # type: ignore[arg-type]

    def client_options(self) -> dict[str, Any]:
        return {**super().client_options(), "judge_thinking": parse_thinking(self.judge_thinking, "--judge-thinking")}


def check_judge_panel(s: Any) -> None:
    check_client(s)
    require(not (s.judges_file and s.judges), "use either --judge or --judges-file, not both")
    require(s.provider in PROVIDERS, f"unknown --provider {s.provider!r}: use openai-compatible, vllm, openai, anthropic or gemini")
    require(s.judge_max_tokens >= 1, "--judge-max-tokens must be at least 1")
    require(s.judge_scoring in JUDGE_SCORING_MODES, f"--judge-scoring must be one of {', '.join(JUDGE_SCORING_MODES)} (got {s.judge_scoring!r})")
    parse_thinking(s.judge_thinking, "--judge-thinking")

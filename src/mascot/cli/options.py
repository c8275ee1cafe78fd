"""Flags shared by several subcommands, defined once with their help text.

Importing this module must stay cheap: typer only, nothing heavy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from mascot.errors import MascotError

# ---- data
Dataset = Annotated[str, typer.Option("--dataset", help="ESConv, EmpatheticDialogues (ED) or QMSum.")]
DataFile = Annotated[
    Optional[Path],
    typer.Option("--data-file", help="Read the dataset from a local file in its hub export format instead of the hub."),
]
Split = Annotated[str, typer.Option("--split", help="Dataset split (train/valid/test; QMSum: train/val/test).")]
Limit = Annotated[Optional[int], typer.Option("--limit", help="Use at most this many contexts.")]
Seed = Annotated[int, typer.Option("--seed", help="Run seed; every episode's seed derives from it.")]
TokenBudget = Annotated[
    int,
    typer.Option(
        "--token-budget",
        "--transcript-window",
        help="QMSum: size of the meeting-transcript window each context carries, in estimated tokens (smaller: shorter prompts and pairs).",
    ),
]
DEFAULT_TOKEN_BUDGET = 1500  # mascot.data.qmsum.DEFAULT_TOKEN_BUDGET, kept here so that --help stays cheap

# ---- models and endpoints
ModelName = Annotated[
    Optional[str],
    typer.Option(
        "--model-name",
        "--model",
        help="Model id for every role without its own (hub id, local folder, or served id). "
        "Default: the embedded SmolLM2-135M-Instruct on the local backend.",
    ),
]
_SEVERAL = " Repeat (or separate with commas) for several servers sharing the load."
VllmServerUrl = Annotated[
    Optional[list[str]],
    typer.Option("--vllm-server-url", help="Shared OpenAI-compatible endpoint for Director, Speaker and User." + _SEVERAL),
]
DirectorServerUrl = Annotated[Optional[list[str]], typer.Option("--director-server-url", help="Endpoint for the Director (overrides the shared one)." + _SEVERAL)]
SpeakerServerUrl = Annotated[Optional[list[str]], typer.Option("--speaker-server-url", help="Endpoint for the Speakers (overrides the shared one)." + _SEVERAL)]
UserServerUrl = Annotated[Optional[list[str]], typer.Option("--user-server-url", help="Endpoint for the simulated user (overrides the shared one)." + _SEVERAL)]
JudgeServerUrl = Annotated[
    Optional[list[str]],
    typer.Option("--judge-server-url", help="Endpoint for the judge; never inherits --vllm-server-url (no URL: local model)." + _SEVERAL),
]
DirectorModel = Annotated[Optional[str], typer.Option("--director-model", "--directive-model", help="Model id the Director calls.")]
SpeakerModel = Annotated[Optional[str], typer.Option("--speaker-model", "--agent-model", help="Model id the Speakers call.")]
UserModel = Annotated[Optional[str], typer.Option("--user-model", help="Model id the simulated user calls.")]
JudgeModel = Annotated[Optional[str], typer.Option("--judge-model", help="Model id the judge calls.")]
DirectorAdapter = Annotated[Optional[str], typer.Option("--director-adapter", help="LoRA adapter folder for the Director (local backend).")]
SpeakerAdapter = Annotated[Optional[str], typer.Option("--speaker-adapter", help="LoRA adapter folder for the Speakers (local backend).")]
ShareModel = Annotated[bool, typer.Option("--share-model", help="Opt-in: Director and User reuse the Speaker's model and endpoint.")]
MaxInFlight = Annotated[int, typer.Option("--max-in-flight", help="Requests in flight per endpoint.")]
RequestTimeout = Annotated[float, typer.Option("--request-timeout", help="Seconds a server may take to answer one request; a timed-out request is retried with a longer one.")]
RetryBudget = Annotated[float, typer.Option("--retry-budget", help="Seconds a failing request may spend retrying (backoff included) before it is given up.")]
MaxStopStrings = Annotated[int, typer.Option("--max-stop-strings", help="Stop strings sent per request (stock vLLM refuses more than 4); the rest are cut when the reply arrives.")]
ExtraBody = Annotated[Optional[str], typer.Option("--extra-body", help='JSON object merged into every request body, e.g. \'{"top_k": 20}\'.')]
DirectorExtraBody = Annotated[Optional[str], typer.Option("--director-extra-body", help="JSON object merged into the Director's request bodies (over --extra-body).")]
SpeakerExtraBody = Annotated[Optional[str], typer.Option("--speaker-extra-body", help="JSON object merged into the Speakers' request bodies (over --extra-body).")]
UserExtraBody = Annotated[Optional[str], typer.Option("--user-extra-body", help="JSON object merged into the simulated user's request bodies (over --extra-body).")]
JudgeExtraBody = Annotated[Optional[str], typer.Option("--judge-extra-body", help="JSON object merged into the judge's request bodies (over --extra-body).")]
_THINKING = "on | off | default: the role's reasoning mode (sent as chat_template_kwargs.enable_thinking)."
DirectorThinking = Annotated[str, typer.Option("--director-thinking", help="Director: " + _THINKING)]
SpeakerThinking = Annotated[str, typer.Option("--speaker-thinking", help="Speakers: " + _THINKING)]
UserThinking = Annotated[str, typer.Option("--user-thinking", help="Simulated user: " + _THINKING)]
JudgeThinking = Annotated[str, typer.Option("--judge-thinking", help="Judge: " + _THINKING)]
JudgeScoring = Annotated[
    str,
    typer.Option(
        "--judge-scoring",
        help="auto | logprobs | json: score each criterion by the judge's probabilities of the answers 1-5 (logprobs; "
        "falls back to JSON where a server returns none) or by JSON verdicts; auto: logprobs on the local backend, JSON on servers.",
    ),
]
TraceRoleCalls = Annotated[bool, typer.Option("--trace-role-calls", help="Write role_call_trace.jsonl (role, model id, endpoint, tokens, latency).")]

# ---- run store
OutputDir = Annotated[Path, typer.Option("--output-dir", help="Parent folder of the run directory.")]
Resume = Annotated[bool, typer.Option("--resume", help="Continue an existing run after its last complete record.")]
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Delete an existing run's outputs and start over.")]
Strict = Annotated[bool, typer.Option("--strict", help="Stop at the first failure instead of counting and continuing.")]


# ---- parsing flag values


def parse_extra_body(text: str | None, flag: str = "--extra-body") -> dict | None:
    """A JSON object from the command line, or a one-line error saying what is wrong with it."""
    if text is None or not text.strip():
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MascotError(f"{flag} is not valid JSON ({exc.msg} at column {exc.colno}): {' '.join(text.split())}") from None
    if not isinstance(value, dict):
        raise MascotError(f"{flag} must be a JSON object ({{...}}), got {type(value).__name__}")
    return value


def parse_thinking(value: str | None, flag: str = "--thinking") -> bool | None:
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


def client_settings(flags: dict, roles: tuple[str, ...] = ("director", "speaker", "user", "judge")) -> dict:
    """EndpointOptions fields from a command's client flags (those it has), validated."""
    settings: dict = {}
    for name, field in (("request_timeout", "timeout_s"), ("retry_budget", "retry_budget_s"), ("max_stop_strings", "max_stop_strings")):
        if flags.get(name) is not None:
            settings[field] = flags[name]
    if settings.get("timeout_s", 1) <= 0 or settings.get("retry_budget_s", 0) < 0 or settings.get("max_stop_strings", 0) < 0:
        raise MascotError("--request-timeout must be positive; --retry-budget and --max-stop-strings must not be negative")
    settings["extra_body"] = parse_extra_body(flags.get("extra_body"))
    for role in roles:
        if f"{role}_extra_body" in flags:
            settings[f"{role}_extra_body"] = parse_extra_body(flags[f"{role}_extra_body"], f"--{role}-extra-body")
        if f"{role}_thinking" in flags:
            settings[f"{role}_thinking"] = parse_thinking(flags[f"{role}_thinking"], f"--{role}-thinking")
    return settings

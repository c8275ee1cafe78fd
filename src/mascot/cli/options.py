"""Flags shared by several subcommands, defined once with their help text.

Importing this module must stay cheap: typer only, nothing heavy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

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
VllmServerUrl = Annotated[
    Optional[str],
    typer.Option("--vllm-server-url", help="Shared OpenAI-compatible endpoint for Director, Speaker and User."),
]
DirectorServerUrl = Annotated[Optional[str], typer.Option("--director-server-url", help="Endpoint for the Director (overrides the shared one).")]
SpeakerServerUrl = Annotated[Optional[str], typer.Option("--speaker-server-url", help="Endpoint for the Speakers (overrides the shared one).")]
UserServerUrl = Annotated[Optional[str], typer.Option("--user-server-url", help="Endpoint for the simulated user (overrides the shared one).")]
JudgeServerUrl = Annotated[
    Optional[str],
    typer.Option("--judge-server-url", help="Endpoint for the judge; never inherits --vllm-server-url (no URL: local model)."),
]
DirectorModel = Annotated[Optional[str], typer.Option("--director-model", "--directive-model", help="Model id the Director calls.")]
SpeakerModel = Annotated[Optional[str], typer.Option("--speaker-model", "--agent-model", help="Model id the Speakers call.")]
UserModel = Annotated[Optional[str], typer.Option("--user-model", help="Model id the simulated user calls.")]
JudgeModel = Annotated[Optional[str], typer.Option("--judge-model", help="Model id the judge calls.")]
DirectorAdapter = Annotated[Optional[str], typer.Option("--director-adapter", help="LoRA adapter folder for the Director (local backend).")]
SpeakerAdapter = Annotated[Optional[str], typer.Option("--speaker-adapter", help="LoRA adapter folder for the Speakers (local backend).")]
ShareModel = Annotated[bool, typer.Option("--share-model", help="Opt-in: Director and User reuse the Speaker's model and endpoint.")]
MaxInFlight = Annotated[int, typer.Option("--max-in-flight", help="Requests in flight per endpoint.")]
TraceRoleCalls = Annotated[bool, typer.Option("--trace-role-calls", help="Write role_call_trace.jsonl (role, model id, endpoint, tokens, latency).")]

# ---- run store
OutputDir = Annotated[Path, typer.Option("--output-dir", help="Parent folder of the run directory.")]
Resume = Annotated[bool, typer.Option("--resume", help="Continue an existing run after its last complete record.")]
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Delete an existing run's outputs and start over.")]
Strict = Annotated[bool, typer.Option("--strict", help="Stop at the first failure instead of counting and continuing.")]

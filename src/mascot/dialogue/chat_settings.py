"""Settings of a live conversation with the group (`mascot chat`, and the web app's group chat).

The endpoint fields are those every command that talks to models declares; they are kept as one
group here so that a shared endpoints group can replace `EndpointFields` without changing a flag.
This module imports nothing heavy: `mascot --help` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from mascot.settings import fixed, require, setting

CHAT_SYSTEM = "mascot-chat"
DEFAULT_SESSION_DIR = Path("outputs/chat")
_SEVERAL = " Repeat (or separate with commas) for several servers sharing the load."


@dataclass
class EndpointFields:
    """Which models answer for the Director and the Speakers, and where."""

    model_name: Optional[str] = setting(
        None,
        "Model id for every role without its own (hub id, local folder, or served id). "
        "Default: the embedded SmolLM2-135M-Instruct on the local backend.",
        flags=("--model",),
    )
    vllm_server_url: Optional[list[str]] = setting(None, "Shared OpenAI-compatible endpoint for Director and Speakers." + _SEVERAL)
    director_server_url: Optional[list[str]] = setting(None, "Endpoint for the Director (overrides the shared one)." + _SEVERAL)
    speaker_server_url: Optional[list[str]] = setting(None, "Endpoint for the Speakers (overrides the shared one)." + _SEVERAL)
    director_model: Optional[str] = setting(None, "Model id the Director calls.", flags=("--directive-model",))
    speaker_model: Optional[str] = setting(None, "Model id the Speakers call.", flags=("--agent-model",))
    director_adapter: Optional[str] = setting(None, "LoRA adapter folder for the Director (local backend).")
    speaker_adapter: Optional[str] = setting(None, "LoRA adapter folder for the Speakers (local backend).")
    share_model: bool = setting(False, "Opt-in: the Director reuses the Speaker's model and endpoint.")

    def endpoint_options(self):
        """The routing layer's view of these fields."""
        from mascot.llm.routing import EndpointOptions

        return EndpointOptions(
            model_name=self.model_name,
            vllm_server_url=self.vllm_server_url,
            director_server_url=self.director_server_url,
            speaker_server_url=self.speaker_server_url,
            director_model=self.director_model,
            speaker_model=self.speaker_model,
            director_adapter=self.director_adapter,
            speaker_adapter=self.speaker_adapter,
            share_model=self.share_model,
        )


@dataclass
class ConversationSettings:
    """How the group answers each message: sampling, seed, rounds per message."""

    rounds_per_message: int = setting(1, "Directed replies after each of your messages.")
    seed: int = setting(42, "Run seed; every episode's seed derives from it.")
    temperature: float = setting(0.7, "Sampling temperature of Director and Speakers.")
    max_tokens: int = setting(160, "Longest reply in tokens.")
    safety: str = setting("auto", "Crisis-language screen of your messages (mascot.safety): auto (emotional-support roster only), on or off.")
    safety_locale: Optional[str] = setting(None, "Locale section of the crisis resources (default: the file's default section).")
    system: str = fixed(CHAT_SYSTEM)

    def __post_init__(self) -> None:
        require(self.rounds_per_message >= 1, "--rounds-per-message must be at least 1")
        require(self.max_tokens >= 1, "--max-tokens must be at least 1")
        require(self.temperature >= 0, "--temperature must be 0 or more")
        require(self.safety in ("auto", "on", "off"), f"unknown --safety {self.safety!r}: choose auto, on or off")


@dataclass
class ChatSettings(EndpointFields, ConversationSettings):
    """Chat with the group: the Director picks who answers each message; replies stream as they are written."""

    roster: Optional[str] = setting(None, "Roster name (emotional_support, meetings) or roster file.")
    dataset: Optional[str] = setting(None, "Choose the roster by dataset (ESConv, ED, QMSum); recorded in metadata.")
    situation: Optional[str] = setting(None, "What the conversation is about (meetings: the participant's question).")
    meeting_file: Optional[Path] = setting(None, "Meetings roster: a transcript ('Speaker: text' lines, JSONL, or a QMSum record).")
    session: Optional[Path] = setting(
        None, "Session file; an existing one is shown and continued (default: outputs/chat/session-<time>.jsonl)."
    )
    show_directives: bool = setting(False, "Show the Director's directive before every reply.")
    trace_role_calls: bool = setting(False, "Write <session>.role_call_trace.jsonl next to the session file.")

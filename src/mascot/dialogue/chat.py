"""An interactive group conversation with one person: each message the person sends becomes a user
turn, then the Director picks who answers and the Speaker's reply streams out as it is generated.

The whole conversation is one Episode record (`generation_mode` "chat"), rewritten atomically after
every change, so `mascot judge` can read it and a session interrupted at any moment loses nothing
already said. A chat round starts with the person's message: the user turn carries the round id of
the first directed round it prompts.

Nothing here prints: the terminal front end passes a `ChatView` whose methods print, tests pass one
that records.
"""

from __future__ import annotations

import re
from contextlib import aclosing
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from mascot.dialogue.agents import stop_strings, clean_reply
from mascot.dialogue.director import Director, DirectorDecision
from mascot.dialogue.prompts import PROMPT_VERSION, speaker_messages
from mascot.dialogue.seeds import derive_seed
from mascot.dialogue.tally import Tally
from mascot.errors import MascotError
from mascot.llm.base import ChatClient, ChatRequest, cut_at_stop, strip_think  # noqa: F401 - cut_at_stop re-exported
from mascot.rosters import BUILTIN_ROSTERS, load_roster, roster_for_dataset
from mascot.safety import SAFETY_ACTION, SafetyScreen, screen_applies
from mascot.schema import (
    Context,
    Counters,
    DialogueLine,
    Directive,
    Episode,
    EpisodeMetadata,
    Persona,
    RoleIdentity,
    Roster,
    SafetyEvent,
    Turn,
    utc_now,
)
from mascot.store import iter_json_objects, read_jsonl, write_jsonl

CHAT_SYSTEM = "mascot-chat"
CHAT_MODE = "chat"
CHAT_ROLES = ("director", "speaker")
DEFAULT_SESSION_DIR = Path("outputs/chat")
_DOMAINS = ("emotional_support", "meetings")


class ChatSessionError(MascotError):
    """A session file or chat setting that cannot be used; one line for the user."""


# --------------------------------------------------------------------------- streamed replies

# Where agents.first_paragraph cuts a reply; used only to stop generating early, the saved reply
# is always clean_reply's.
_PARAGRAPH_END = re.compile(r"\n\s*\n|\n?</?(?:transcript|directive|meeting_transcript)>")
_TAG_WINDOW = 24  # an unclosed '<' this close to the end may still become a tag


def _pending_stop_length(text: str, stops: tuple[str, ...]) -> int:
    """Length of the longest tail of `text` that is the start of a stop string."""
    longest = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:k]):
                longest = k
                break
    return longest


def _open_tag_length(text: str) -> int:
    """Length of a tail that starts with '<' and has no '>' yet: maybe `<think>` or `</transcript>`."""
    start = text.rfind("<")
    if start < 0 or ">" in text[start:] or len(text) - start > _TAG_WINDOW:
        return 0
    return len(text) - start


def _may_become_name_prefix(visible: str, name: str) -> bool:
    """True while the reply so far could still grow into the 'Name:' prefix clean_reply removes."""
    seen = visible.lstrip().lstrip("*").lower()
    wanted = name.lower()
    if len(seen) <= len(wanted):
        return wanted.startswith(seen)
    return seen.startswith(wanted) and re.fullmatch(r"\**\s*", seen[len(wanted) :]) is not None


class ReplyStream:
    """Turns streamed pieces into the visible reply as it grows: reasoning inside <think> hidden,
    nothing after a stop string, no 'Name:' prefix, only the first paragraph. What it shows joins to
    exactly `clean_reply` of the whole text; the few characters that could still change meaning (a
    half-received tag, stop string or name) are held back until they settle."""

    def __init__(self, speaker_name: str, stops: tuple[str, ...] = ()) -> None:
        self.speaker_name = speaker_name
        self.stops = tuple(s for s in stops if s)
        self.raw = ""
        self.shown = ""
        self.text = ""  # the final reply, set by finish()
        self.done = False  # nothing more can change the reply: stop generating
        self.diverged = False  # the final reply does not continue what was shown (never expected)

    def feed(self, piece: str) -> str:
        """Adds a streamed piece; returns the text newly visible."""
        self.raw += piece
        cut, stopped = cut_at_stop(self.raw, self.stops)
        if stopped:
            self.done = True
            return self._advance(clean_reply(cut, self.speaker_name))
        settled = cut[: len(cut) - max(_pending_stop_length(cut, self.stops), _open_tag_length(cut))]
        visible = strip_think(settled)
        if _may_become_name_prefix(visible, self.speaker_name):
            return ""
        reply = clean_reply(settled, self.speaker_name)
        if reply and _PARAGRAPH_END.search(reply_body(visible, self.speaker_name)):
            self.done = True
        return self._advance(reply)

    def finish(self) -> str:
        """The stream ended (or was stopped): returns the rest of the reply."""
        cut, _ = cut_at_stop(self.raw, self.stops)
        self.text = clean_reply(cut, self.speaker_name)
        self.diverged = not self.text.startswith(self.shown)
        return self._advance(self.text)

    def _advance(self, reply: str) -> str:
        if not reply.startswith(self.shown):
            return ""
        new, self.shown = reply[len(self.shown) :], reply
        return new


def reply_body(visible: str, speaker_name: str) -> str:
    """The visible text after a leading 'Name:' prefix, stripped (as clean_reply sees it)."""
    return re.sub(rf"^\s*\**{re.escape(speaker_name)}\**\s*:\s*", "", visible, flags=re.IGNORECASE).strip()


# --------------------------------------------------------------------------- what the UI is told


class ChatView(Protocol):
    def directive(self, decision: DirectorDecision, round_id: int) -> None: ...

    def reply_start(self, agent_name: str) -> None: ...

    def reply_text(self, text: str) -> None: ...

    def reply_end(self, turn: Turn, revised: bool) -> None: ...


class SilentView:
    """A view that shows nothing (batch use); also the base for views that record."""

    def directive(self, decision: DirectorDecision, round_id: int) -> None:
        return None

    def reply_start(self, agent_name: str) -> None:
        return None

    def reply_text(self, text: str) -> None:
        return None

    def reply_end(self, turn: Turn, revised: bool) -> None:
        return None


# --------------------------------------------------------------------------- setting up


def choose_roster(roster: str | None, dataset: str | None) -> tuple[Roster, str]:
    """The roster (`--roster`, else the dataset's, else emotional support) and the dataset label
    written to metadata: the dataset when given, else the roster's domain (which the judge reads)."""
    from mascot.data import canonical_dataset_name

    dataset = canonical_dataset_name(dataset) if dataset else None
    chosen = load_roster(roster) if roster else roster_for_dataset(dataset) if dataset else load_roster("emotional_support")
    if dataset:
        return chosen, dataset
    if chosen.domain in _DOMAINS:
        return chosen, chosen.domain
    return chosen, chosen.datasets[0] if chosen.datasets else "emotional_support"


def read_meeting_file(path: Path, token_budget: int | None = None) -> list[DialogueLine]:
    """A meeting transcript for the meetings roster: `Speaker: text` lines, JSONL lines with
    speaker and text (or content), or a QMSum record. Kept to the prompt budget QMSum contexts use."""
    from mascot.data import qmsum

    path = Path(path)
    if not path.is_file():
        raise ChatSessionError(f"meeting file not found: {path}")
    try:
        raw = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ChatSessionError(f"{path}: not UTF-8 text") from None
    turns = _json_transcript(path) if raw.lstrip().startswith("{") else _text_transcript(raw)
    if not turns:
        raise ChatSessionError(f"{path}: no transcript lines found (expected 'Speaker: text' lines or JSONL)")
    return qmsum.transcript_window(turns, 0, token_budget or qmsum.DEFAULT_TOKEN_BUDGET)


def _text_transcript(raw: str) -> list[tuple[str, str]]:
    turns: list[tuple[str, str]] = []
    for line in raw.splitlines():
        if not line.strip():
            continue
        speaker, sep, text = line.partition(":")
        if sep and 0 < len(speaker.strip()) <= 40 and text.strip():
            turns.append((speaker.strip(), text.strip()))
        elif turns:  # a wrapped line continues the previous speaker's turn
            turns[-1] = (turns[-1][0], f"{turns[-1][1]} {line.strip()}")
        else:
            turns.append(("Speaker", line.strip()))
    return turns


def _json_transcript(path: Path) -> list[tuple[str, str]]:
    turns: list[tuple[str, str]] = []
    for number, record in iter_json_objects(path, ChatSessionError):
        record_turns = record["meeting_transcripts"] if isinstance(record.get("meeting_transcripts"), list) else [record]
        for turn in record_turns:
            text = turn.get("text", turn.get("content")) if isinstance(turn, dict) else None
            if not isinstance(text, str):
                raise ChatSessionError(f"{path}:{number}: each line needs a 'speaker' and a string 'text' (or 'content')")
            turns.append((str(turn.get("speaker") or "Speaker").strip(), text))
    return turns


def chat_context(
    session_id: str,
    roster: Roster,
    dataset: str,
    *,
    situation: str | None = None,
    meeting_file: Path | None = None,
) -> Context:
    """The context a chat is held in: the person's situation, or for the meetings roster a meeting
    (the transcript from `meeting_file`) with the situation as the participant's question."""
    if meeting_file is not None and roster.domain != "meetings":
        raise ChatSessionError("--meeting-file is for the meetings roster (--roster meetings or --dataset QMSum)")
    if roster.domain == "meetings":
        transcript = read_meeting_file(meeting_file) if meeting_file else []
        return Context(
            context_id=session_id,
            dataset=dataset,
            split=CHAT_MODE,
            meeting=meeting_file.stem if meeting_file else "live meeting",
            start_idx=0,
            transcript=transcript,
            query=situation or None,
        )
    return Context(context_id=session_id, dataset=dataset, split=CHAT_MODE, conv_id=session_id, situation=situation or "")


def new_session_path(directory: Path = DEFAULT_SESSION_DIR, now: datetime | None = None) -> Path:
    """outputs/chat/session-<timestamp>.jsonl, never an existing file."""
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    path = directory / f"session-{stamp}.jsonl"
    suffix = 1
    while path.exists():
        suffix += 1
        path = directory / f"session-{stamp}-{suffix}.jsonl"
    return path


def load_session_episode(path: Path) -> Episode:
    """The one Episode a session file holds."""
    path = Path(path)
    if path.is_dir():
        raise ChatSessionError(f"--session {path} is a folder: give a .jsonl file path")
    episodes = list(read_jsonl(path, Episode))
    if len(episodes) != 1:
        raise ChatSessionError(f"{path}: a chat session file holds exactly one episode record (found {len(episodes)})")
    episode = episodes[0]
    if episode.metadata.generation_mode != CHAT_MODE:
        raise ChatSessionError(f"{path}: not a chat session (generation_mode {episode.metadata.generation_mode!r})")
    return episode


def saved_context(episode: Episode) -> Context:
    if episode.context is not None:
        return episode.context
    session_id = episode.context_id or episode.episode_id
    return Context(context_id=session_id, dataset=episode.metadata.dataset, split=CHAT_MODE, conv_id=session_id)


def roster_for_session(episode: Episode, roster: str | None, dataset: str | None) -> Roster:
    """The roster a saved session continues with: the one it was held with. A roster asked for on
    the command line must be that one; a session held with a roster file needs the file again."""
    saved = episode.metadata.roster
    if roster or dataset:
        chosen, _ = choose_roster(roster, dataset)
        if saved and chosen.name != saved:
            raise ChatSessionError(f"this session was held with roster {saved!r}, not {chosen.name!r}: drop --roster/--dataset to continue it")
        return chosen
    if saved in BUILTIN_ROSTERS:
        return load_roster(saved)
    raise ChatSessionError(f"this session was held with roster {saved!r} from a file: pass --roster FILE to continue it")


# --------------------------------------------------------------------------- the session


@dataclass
class ChatSettings:
    rounds_per_message: int = 1
    seed: int = 42
    temperature: float = 0.7
    max_tokens: int = 160
    system: str = CHAT_SYSTEM
    safety: str = "auto"  # crisis-language screen (mascot.safety): "auto" = emotional-support roster only
    safety_locale: str | None = None


class ChatSession:
    """One conversation: send() a message, get the directed rounds it prompts; saved as it goes."""

    def __init__(
        self,
        roster: Roster,
        context: Context,
        clients: dict[str, ChatClient],
        path: Path,
        settings: ChatSettings | None = None,
        *,
        dataset: str | None = None,
        role_identities: dict[str, RoleIdentity] | None = None,
        episode: Episode | None = None,
    ) -> None:
        self.roster = roster
        self.context = context
        self.clients = clients
        self.path = Path(path)
        self.settings = settings or ChatSettings()
        if self.settings.rounds_per_message < 1:
            raise ChatSessionError("--rounds-per-message must be at least 1")
        self.dataset = dataset or (episode.metadata.dataset if episode else context.dataset)
        self.session_id = episode.episode_id if episode else context.context_id
        self.created_at = (episode.metadata.created_at if episode else None) or utc_now()
        self.turns: list[Turn] = list(episode.turns) if episode else []
        saved_counters = (episode.model_extra or {}).get("counters") if episode else None
        self.tally = Tally(Counters.model_validate(saved_counters) if isinstance(saved_counters, dict) else Counters())
        self.role_identities = role_identities or {
            role: RoleIdentity(base_model=c.model, served_model=c.model, backend=c.backend)  # type: ignore[arg-type]
            for role, c in clients.items()
        }
        s = self.settings
        self.director = Director(clients["director"], roster, self.tally, temperature=s.temperature, max_tokens=s.max_tokens)
        self.safety = SafetyScreen(locale=s.safety_locale) if screen_applies(s.safety, roster.domain) else None
        self.safety_events: list[SafetyEvent] = list(episode.safety_events or []) if episode else []

    @classmethod
    def resume(cls, episode: Episode, roster: Roster, clients: dict[str, ChatClient], path: Path, settings: ChatSettings | None = None, **kwargs) -> ChatSession:
        return cls(roster, saved_context(episode), clients, path, settings, episode=episode, **kwargs)

    # ------------------------------------------------------------------ state

    @property
    def counters(self) -> Counters:
        return self.tally.counters

    @property
    def next_round_id(self) -> int:
        return max((t.round_id for t in self.turns), default=-1) + 1

    @property
    def num_rounds(self) -> int:
        return len({t.round_id for t in self.turns if not t.is_user})

    @property
    def last_directed_turn(self) -> Turn | None:
        return next((t for t in reversed(self.turns) if not t.is_user and t.directive is not None), None)

    # ------------------------------------------------------------------ a message and its rounds

    async def send(self, text: str, view: ChatView | None = None) -> list[Turn]:
        """Adds the person's message (saved at once), then plays the directed rounds it prompts,
        saving after each. Returns the new turns."""
        view = view or SilentView()
        text = text.strip()
        if not text:
            raise ChatSessionError("an empty message cannot be sent")
        first = len(self.turns)
        round_id = self.next_round_id
        self.turns.append(Turn(turn_idx=first, round_id=round_id, agent_name="user", response=text, turn_type="user"))
        self.save()
        if self._answer_crisis(first, round_id, view):
            return self.turns[first:]
        for offset in range(self.settings.rounds_per_message):
            await self.play_round(round_id + offset, view)
            self.save()
        return self.turns[first:]

    def _answer_crisis(self, user_turn_idx: int, round_id: int, view: ChatView) -> bool:
        """A screened message gets the group's safety reply instead of the directed rounds (saved)."""
        finding = self.safety.check(self.turns[user_turn_idx].response) if self.safety is not None else None
        if finding is None:
            return False
        voice = self.roster.personas[0].name
        turn = Turn(turn_idx=len(self.turns), round_id=round_id, agent_name=voice, response=self.safety.reply(finding),  # type: ignore[union-attr]
                    directive=Directive(agent_name=voice, action=SAFETY_ACTION, tone="calm, direct"))
        self.turns.append(turn)
        self.safety_events.append(self.safety.event(finding, user_turn_idx, turn.turn_idx))  # type: ignore[union-attr]
        view.reply_start(voice)
        view.reply_text(turn.response)
        view.reply_end(turn, False)
        self.save()
        return True

    async def play_round(self, round_id: int, view: ChatView) -> Turn:
        decision = await self.director.decide(self.context, self.turns, self._seed(round_id, "director"))
        view.directive(decision, round_id)
        persona = self.roster.persona(decision.directive.agent_name)
        reply, revised = await self._stream_reply(persona, decision.directive, self._seed(round_id, "speaker"), view)
        turn = Turn(
            turn_idx=len(self.turns),
            round_id=round_id,
            agent_name=persona.name,
            response=reply,
            directive=decision.directive,
            directive_output=decision.output or None,
        )
        self.turns.append(turn)
        view.reply_end(turn, revised)
        return turn

    async def _stream_reply(self, persona: Persona, directive: Directive, seed: int, view: ChatView) -> tuple[str, bool]:
        """The Speaker's reply, streamed to the view; an empty reply is retried once with another seed."""
        messages = speaker_messages(persona, self.roster, self.context, self.turns, directive)
        stops = stop_strings(self.roster, self.context)
        view.reply_start(persona.name)
        for attempt in range(2):
            request = ChatRequest(
                messages=messages,
                temperature=self.settings.temperature,
                max_tokens=self.settings.max_tokens,
                seed=seed + attempt,
                stop=stops,
            )
            stream = ReplyStream(persona.name, stops)
            async with aclosing(self.clients["speaker"].stream(request)) as pieces:
                async for piece in pieces:
                    if shown := stream.feed(piece):
                        view.reply_text(shown)
                    if stream.done:  # the rest would be cut from the reply anyway
                        break
            if rest := stream.finish():
                view.reply_text(rest)
            if stream.text:
                return stream.text, stream.diverged
        self.tally.count("num_empty_responses", f"{persona.name} gave an empty reply twice")
        return "", False

    def _seed(self, round_id: int, purpose: str) -> int:
        return derive_seed(self.settings.seed, self.session_id, round_id, purpose)

    # ------------------------------------------------------------------ the record

    def to_episode(self) -> Episode:
        ident = self.role_identities
        spoken: dict[str, int] = {}
        for turn in self.turns:
            if not turn.is_user:
                spoken[turn.agent_name] = spoken.get(turn.agent_name, 0) + 1
        metadata = EpisodeMetadata(
            system=self.settings.system,
            dataset=self.dataset,
            director_model=ident["director"].served_model if "director" in ident else None,
            speaker_model=ident["speaker"].served_model if "speaker" in ident else None,
            roster=self.roster.name,
            roster_version=self.roster.version,
            roles=dict(ident),
            generation_mode=CHAT_MODE,
            turn_policy="director",
            seed=self.settings.seed,
            run_id=self.session_id,
            prompt_version=PROMPT_VERSION,
            created_at=self.created_at,
            updated_at=utc_now(),
            sampling={
                "temperature": self.settings.temperature,
                "max_tokens": self.settings.max_tokens,
                "rounds_per_message": self.settings.rounds_per_message,
            },
        )
        episode = Episode(
            episode_id=self.session_id,
            context_id=self.context.context_id,
            turns=list(self.turns),
            agents_spoken=spoken,
            metadata=metadata,
            context=self.context,  # what the judge reads the turns in
            counters=self.counters.model_dump(),
            safety_events=list(self.safety_events) or None,
        )
        if self.context.is_meeting:
            episode.id, episode.start_idx, episode.meeting = self.context.context_id, self.context.start_idx, self.context.meeting
        else:
            episode.conv_id = self.context.conv_id or self.context.context_id
        return episode

    def save(self) -> None:
        """Rewrites the session file atomically (temp file + rename): one JSONL line."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(self.path, [self.to_episode()])


def open_session(
    path: Path,
    clients: dict[str, ChatClient],
    settings: ChatSettings,
    *,
    roster: str | None = None,
    dataset: str | None = None,
    situation: str | None = None,
    meeting_file: Path | None = None,
    role_identities: dict[str, RoleIdentity] | None = None,
) -> tuple[ChatSession, bool]:
    """A new session, or the saved one at `path` continued. Returns (session, continued)."""
    path = Path(path)
    if path.exists():
        episode = load_session_episode(path)
        team = roster_for_session(episode, roster, dataset)
        return ChatSession.resume(episode, team, clients, path, settings, role_identities=role_identities), True
    team, label = choose_roster(roster, dataset)
    context = chat_context(path.stem, team, label, situation=situation, meeting_file=meeting_file)
    return ChatSession(team, context, clients, path, settings, dataset=label, role_identities=role_identities), False

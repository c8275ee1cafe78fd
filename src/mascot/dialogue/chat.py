"""A live group conversation with one person, held over the episode engine: each message the
person sends enters the transcript through the engine's user-message entry point, then the engine
plays the directed rounds it prompts, streaming each reply to a listener as it is generated.

The whole conversation is one Episode record (`generation_mode` "chat"), rewritten atomically after
every change, so `mascot judge` can read it and a session interrupted at any moment loses nothing
already said. A chat round starts with the person's message: the user turn carries the round id of
the first directed round it prompts. This module holds the session's state and its file; the
terminal and the web front ends pass a listener that shows what happens.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from mascot.data.meeting_file import read_meeting_file
from mascot.data.registry import canonical_dataset_name
from mascot.dialogue.chat_settings import CHAT_SYSTEM, DEFAULT_SESSION_DIR, ChatSettings, ConversationSettings
from mascot.dialogue.director import render_directive
from mascot.dialogue.engine import EpisodeEngine, EpisodeState
from mascot.dialogue.reply_stream import RoundListener, SilentListener
from mascot.dialogue.run import role_identities
from mascot.dialogue.seeds import derive_seed
from mascot.dialogue.settings import EngineSettings, engine_settings_from
from mascot.dialogue.tally import Tally
from mascot.errors import MascotError
from mascot.files import read_jsonl, write_jsonl
from mascot.llm.base import ChatClient
from mascot.llm.following import VERSION_IN_USE
from mascot.llm.providers import build_backends
from mascot.llm.routing import resolve_roles, with_safety
from mascot.llm.served import resolve_served_identities
from mascot.rosters import BUILTIN_ROSTERS, load_roster, roster_for_dataset
from mascot.rubrics import DOMAINS
from mascot.safety.screen import SAFETY_ACTION
from mascot.schema import Context, Counters, Episode, RoleIdentity, Roster, Turn, utc_now
from mascot.settings_groups import GroupEndpointSettings
from mascot.vocab import SAFETY

__all__ = ["CHAT_SYSTEM", "DEFAULT_SESSION_DIR", "ChatSettings", "ChatSession", "ChatSessionError", "open_session"]

CHAT_MODE = "chat"
CHAT_ROLES = ("director", "speaker")

# The terminal's and the web app's names for what a session tells about each round.
ChatView = RoundListener
SilentView = SilentListener


class ChatSessionError(MascotError):
    """A session file or chat setting that cannot be used; one line for the user."""


# --------------------------------------------------------------------------- setting up


def runs_smoke_test_model(settings: GroupEndpointSettings) -> bool:
    """True when a chat role answers from the embedded smoke-test model, in process: its replies
    show that the program works, not what the companions can do, and the terminal and the web
    pages say so."""
    return answers_from_smoke_test_model(resolve_roles(settings, CHAT_ROLES))


def answers_from_smoke_test_model(endpoints: dict) -> bool:
    """`runs_smoke_test_model` for roles already resolved (a chat's own backends: no second
    resolving, which asks servers for their models again)."""
    from mascot.llm.models import is_embedded_checkpoint
    from mascot.vocab import DEFAULT_LOCAL_MODEL

    def tiny(model: str | None) -> bool:
        return model == DEFAULT_LOCAL_MODEL or (model is not None and is_embedded_checkpoint(model))

    return any(e.url is None and (tiny(e.model) or tiny(e.base_model)) for role, e in endpoints.items() if role in CHAT_ROLES)


def choose_roster(roster: str | None, dataset: str | None) -> tuple[Roster, str]:
    """The roster (`--roster`, else the dataset's, else emotional support) and the dataset label
    written to metadata: the dataset when given, else the roster's domain (which the judge reads)."""

    dataset = canonical_dataset_name(dataset) if dataset else None
    chosen = load_roster(roster) if roster else roster_for_dataset(dataset) if dataset else load_roster("emotional_support")
    return chosen, dataset_label(chosen, dataset)


def dataset_label(roster: Roster, dataset: str | None = None) -> str:
    if dataset:
        return dataset

    if roster.domain in DOMAINS:
        return roster.domain
    return roster.datasets[0] if roster.datasets else "emotional_support"


def chat_context(session_id: str, roster: Roster, dataset: str, *, situation: str | None = None, meeting_file: Path | None = None) -> Context:
    """The context a chat is held in: the person's situation, or for the meetings roster a meeting
    (the transcript from `meeting_file`) with the situation as the participant's question."""

    if meeting_file is not None and roster.domain != "meetings":
        raise ChatSessionError("--meeting-file is for the meetings roster (--roster meetings or --dataset QMSum)")
    if roster.domain == "meetings":
        return Context(
            context_id=session_id,
            dataset=dataset,
            split=CHAT_MODE,
            meeting=meeting_file.stem if meeting_file else "live meeting",
            start_idx=0,
            transcript=read_meeting_file(meeting_file) if meeting_file else [],
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


def roster_for_session(episode: Episode, roster: str | Roster | None, dataset: str | None) -> Roster:
    """The roster a saved session continues with: the one it was held with. A roster asked for on
    the command line must be that one; a session held with a roster file needs the file again."""
    saved = episode.metadata.roster
    if isinstance(roster, Roster):  # loaded by the caller (an uploaded roster)
        if saved and roster.name != saved:
            raise ChatSessionError(f"this session was held with roster {saved!r}, not {roster.name!r}")
        return roster
    if roster or dataset:
        chosen, _ = choose_roster(roster, dataset)
        if saved and chosen.name != saved:
            raise ChatSessionError(f"this session was held with roster {saved!r}, not {chosen.name!r}: drop --roster/--dataset to continue it")
        return chosen
    if saved in BUILTIN_ROSTERS:
        return load_roster(saved)
    raise ChatSessionError(f"this session was held with roster {saved!r} from a file: pass --roster FILE to continue it")


def chat_backends(settings: GroupEndpointSettings, trace: Path | None = None) -> tuple:
    """The Director's and the Speakers' backends (the caller closes them with `aclose()`), and
    who answers for each role."""

    if trace:
        trace.parent.mkdir(parents=True, exist_ok=True)
    backends = build_backends(resolve_roles(settings, with_safety(settings, CHAT_ROLES)), settings, trace_path=trace, follow_registry=True)
    return backends, resolve_served_identities(role_identities(backends), backends.endpoints)


def local_model_loaders(backends) -> list:
    """The `load` of each in-process model the backends hold (roles on one model share one)."""
    loaders = {id(inner): inner.load for role in backends.local_roles if hasattr(inner := backends[role].inner, "load")}
    return list(loaders.values())


async def preload_local_models(backends) -> None:
    """Loads in-process models up front (in a thread), so the first reply does not wait for them."""

    for load in local_model_loaders(backends):
        await asyncio.to_thread(load)


# --------------------------------------------------------------------------- the session


def engine_settings(settings: ConversationSettings, session_id: str) -> EngineSettings:
    """The engine settings of a chat: the Director picks every speaker, nobody simulates the person
    (each role's reasoning mode is its endpoint's: --speaker-thinking, --director-thinking); every
    engine setting the chat declares (sampling, safety...) is taken by its name."""
    return engine_settings_from(settings, turn_policy="director", enable_user_simulation=False, run_id=session_id)


class ChatSession:
    """One conversation: send() a message, get the directed rounds it prompts; saved as it goes."""

    def __init__(
        self,
        roster: Roster,
        context: Context,
        clients: dict[str, ChatClient],
        path: Path,
        settings: ConversationSettings | None = None,
        *,
        dataset: str | None = None,
        role_identities: dict[str, RoleIdentity] | None = None,
        episode: Episode | None = None,
        store: Callable[[Episode], None] | None = None,
    ) -> None:
        self.roster = roster
        self.store = store  # where save() writes the record (None: the session file at `path`)
        self.context = context
        self.path = Path(path)
        self.settings = settings or ChatSettings()
        self.dataset = dataset or (episode.metadata.dataset if episode else context.dataset)
        self.session_id = episode.episode_id if episode else context.context_id
        self.created_at = (episode.metadata.created_at if episode else None) or utc_now()
        self.tally = Tally(episode.counters.model_copy() if episode and episode.counters else Counters())
        chat_clients = {role: clients[role] for role in (*CHAT_ROLES, SAFETY) if role in clients}
        self.engine = EpisodeEngine(
            roster, chat_clients, engine_settings(self.settings, self.session_id), self.tally, role_identities=role_identities, dataset=self.dataset
        )
        # Seeds derive from (run seed, session id, round, purpose), whatever the session's file name.
        self.state = EpisodeState(context, 0, (self.settings.seed, self.session_id), None, turns=list(episode.turns) if episode else [])
        self.state.safety_events = list(episode.safety_events or []) if episode else []

    @classmethod
    def resume(
        cls, episode: Episode, roster: Roster, clients: dict[str, ChatClient], path: Path, settings: ConversationSettings | None = None, **kwargs
    ) -> ChatSession:
        return cls(roster, saved_context(episode), clients, path, settings, episode=episode, **kwargs)

    # ------------------------------------------------------------------ state

    @property
    def turns(self) -> list[Turn]:
        return self.state.turns

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

    async def send(self, text: str, view: RoundListener | None = None) -> list[Turn]:
        """Adds the person's message (saved at once), then plays the directed rounds it prompts,
        saving after each. Returns the new turns."""
        view = view or SilentListener()
        text = text.strip()
        if not text:
            raise ChatSessionError("an empty message cannot be sent")
        first = len(self.turns)
        round_id = self.next_round_id
        await self.engine.add_user_message(self.state, text, round_id)
        self.save()
        # A message the safety screen flags gets the group's safety reply alone (one round).
        rounds = 1 if self.state.pending_safety is not None else self.settings.rounds_per_message
        for offset in range(rounds):
            before = len(self.turns)
            VERSION_IN_USE.set(None)
            await self.engine.play_round(self.state, round_id + offset, listener=view)
            self.record_speaker_version(self.turns[before:])
            self.save()
        return self.turns[first:]

    def speaker_version(self) -> str | None:
        """The registry version of the Speaker that answered last: the one a following client
        went to, else the one `--speaker-adapter` named when the session started (None: no version)."""
        role = (getattr(self.settings, "roles", None) or {}).get("speaker")
        return VERSION_IN_USE.get() or (role.adapter_version if role else None)

    def record_speaker_version(self, turns: list[Turn]) -> None:
        if version := self.speaker_version():
            for turn in turns:
                if not turn.is_user:
                    turn.speaker_version = version  # type: ignore[attr-defined]  # a Record keeps extra fields

    async def alternative_reply(self, turn_idx: int, attempt: int) -> tuple[str, str | None]:
        """Another reply to the latest companion turn, to the same prompt (the same conversation
        before it and the same directive), for a person to choose between, and the Speaker version
        that wrote it; the turn is unchanged."""
        last = self.turns[-1] if self.turns else None
        if last is None or last.turn_idx != turn_idx or last.is_user or not last.response:
            raise ChatSessionError("only the latest companion's reply can be compared with another one")
        persona = self.roster.persona(last.agent_name)
        seed = derive_seed(*self.state.seed_key, last.round_id, "alternative", attempt)
        VERSION_IN_USE.set(None)
        reply = await self.engine.speaker.reply(persona, self.context, self.turns[:-1], last.directive, seed)
        return reply.text, self.speaker_version()

    async def alternative_direction(self, turn_idx: int, attempt: int, tries: int = 3) -> tuple[Turn, str | None]:
        """Another way the group could have answered at the latest companion turn: the Director
        decides again (another seed; up to `tries` times while it repeats the directive it gave)
        and the companion it names replies. Returns that turn, not added to the conversation, and
        the Speaker version that wrote it."""
        last = self.turns[-1] if self.turns else None
        if last is None or last.turn_idx != turn_idx or last.is_user or last.directive is None or not last.response:
            raise ChatSessionError("only the latest directed companion's reply can be compared with another approach")
        if last.directive.action == SAFETY_ACTION:
            raise ChatSessionError("the safety reply is not swapped for another approach")
        history, first = self.turns[:-1], render_directive(last.directive)
        for number in range(tries):
            scratch = EpisodeState(self.context, 0, self.state.seed_key, None, turns=list(history))
            seed = derive_seed(*self.state.seed_key, last.round_id, "alternative-direction", attempt, number)
            VERSION_IN_USE.set(None)
            decision = await self.engine.policy.next_turn(self.context, history, last.round_id, seed)
            await self.engine.play_round(scratch, last.round_id, decision)
            turn = scratch.turns[-1]
            if render_directive(turn.directive) != first:
                break
        turn.turn_idx = last.turn_idx
        return turn, self.speaker_version()

    def replace_turn(self, turn_idx: int, turn: Turn, version: str | None = None) -> None:
        """The person chose the other approach: its turn (directive, companion, reply) becomes the
        latest one, and the session is saved."""
        last = self.turns[-1]
        if last.turn_idx != turn_idx or last.is_user:
            raise ChatSessionError("only the latest companion's turn can be replaced")
        replacement = turn.model_copy(update={"turn_idx": turn_idx, "round_id": last.round_id})
        (replacement.model_extra or {}).pop("speaker_version", None)
        if version:
            replacement.speaker_version = version  # type: ignore[attr-defined]
        self.turns[-1] = replacement
        self.save()

    def replace_reply(self, turn_idx: int, text: str, version: str | None = None) -> None:
        """The person chose the other reply: it becomes the latest turn's (with the version that
        wrote it), and the session is saved."""
        last = self.turns[-1]
        if last.turn_idx != turn_idx or last.is_user:
            raise ChatSessionError("only the latest companion's reply can be replaced")
        last.response = text
        extra = last.model_extra if last.model_extra is not None else {}
        extra.pop("speaker_version", None)
        if version:
            last.speaker_version = version  # type: ignore[attr-defined]
        self.save()

    def count_failed_round(self) -> None:
        """A backend failure ended a round: counted in the record, which keeps every earlier turn."""
        self.tally.counters.num_generation_failures += 1
        self.save()

    # ------------------------------------------------------------------ the record

    def to_episode(self) -> Episode:
        """The engine's record of the conversation, with what a chat session adds to it."""
        episode = self.engine.to_episode(self.state)
        episode.episode_id = self.session_id
        episode.turns = list(self.turns)
        episode.counters = self.counters.model_copy()
        s = self.settings
        episode.metadata = episode.metadata.model_copy(
            update={
                "generation_mode": CHAT_MODE,
                "run_id": self.session_id,
                "created_at": self.created_at,
                "updated_at": utc_now(),
                "sampling": {"temperature": s.temperature, "max_tokens": s.max_tokens, "rounds_per_message": s.rounds_per_message},
            }
        )
        return episode

    def save(self) -> None:
        """Rewrites the session file atomically (temp file + rename): one JSONL line; or hands the
        record to the session's store (the accounts database)."""
        if self.store is not None:
            self.store(self.to_episode())
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(self.path, [self.to_episode()])


def open_session(
    path: Path,
    clients: dict[str, ChatClient],
    settings: ConversationSettings,
    *,
    roster: str | Roster | None = None,
    dataset: str | None = None,
    situation: str | None = None,
    meeting_file: Path | None = None,
    role_identities: dict[str, RoleIdentity] | None = None,
) -> tuple[ChatSession, bool]:
    """A new session, or the saved one at `path` continued. Returns (session, continued). `roster`
    is a name, a file, or a roster already loaded (an uploaded one)."""
    path = Path(path)
    if path.exists():
        episode = load_session_episode(path)
        team = roster_for_session(episode, roster, dataset)
        return ChatSession.resume(episode, team, clients, path, settings, role_identities=role_identities), True
    if isinstance(roster, Roster):
        team, label = roster, dataset_label(roster, dataset)
    else:
        team, label = choose_roster(roster, dataset)
    context = chat_context(path.stem, team, label, situation=situation, meeting_file=meeting_file)
    return ChatSession(team, context, clients, path, settings, dataset=label, role_identities=role_identities), False

"""The episode engine: rounds of Director -> Speaker (-> simulated user), in three generation modes.

- directed: one episode per context;
- independent: `num_episodes` full episodes per context (pairs for the group reward model);
- branching: per context a directed "spine" episode, then at every decision point (round) the
  Director proposes `num_candidates` directives and each is continued to the end of the episode.
  Branch records share `metadata.branch.group_id` and the prefix `turns[:prefix_turns]`.

Every random choice derives its seed from (run seed, context, episode, round, purpose), so episodes
are the same whether they run one by one or many at once on a deterministic backend.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from mascot.dialogue.agents import SimulatedUser, Speaker
from mascot.dialogue.director import Director, DirectorDecision
from mascot.dialogue.emotion import EmotionReports
from mascot.dialogue.policies import TurnLimit, TurnPolicy, make_policy
from mascot.dialogue.prompt_families import check_prompt_family, family_prompt_version, family_thinks
from mascot.dialogue.reasoning import OutputPaths, role_thinks
from mascot.dialogue.reply_stream import RoundListener
from mascot.dialogue.seeds import derive_seed, derived_rng
from mascot.dialogue.settings import EngineSettings, user_profile_choice
from mascot.dialogue.tally import Tally
from mascot.llm.base import ChatClient, route_together
from mascot.rosters import load_profiles, profile_set, user_profile
from mascot.safety import SAFETY_ACTION, Finding, SafetyScreen, screen_applies
from mascot.safety.model_check import ModelCheck
from mascot.schema import (
    BranchInfo,
    Context,
    Directive,
    Episode,
    EpisodeMetadata,
    RoleIdentity,
    Roster,
    SafetyEvent,
    Turn,
    UserProfile,
    utc_now,
)
from mascot.vocab import DEFAULT_RUBRIC_VERSION, MAX_CONSECUTIVE_TURNS, PROMPT_VERSION


@dataclass
class EpisodeState:
    context: Context
    episode_idx: int
    seed_key: tuple
    profile: UserProfile | None
    turns: list[Turn] = field(default_factory=list)
    emotions: list[str] = field(default_factory=list)
    safety_events: list[SafetyEvent] = field(default_factory=list)
    pending_safety: tuple[Finding, int] | None = None  # a screened user message the next round answers

    @property
    def next_turn_idx(self) -> int:
        return len(self.turns)


def turns_before_round(turns: list[Turn], round_id: int) -> list[Turn]:
    return [t for t in turns if t.round_id < round_id]


def copy_state(state: EpisodeState) -> EpisodeState:
    """A copy that grows apart from `state` (its own lists; turns themselves are never changed)."""
    return dataclasses.replace(state, turns=list(state.turns), emotions=list(state.emotions), safety_events=list(state.safety_events))


class EpisodeEngine:
    def __init__(
        self,
        roster: Roster,
        clients: dict[str, ChatClient],
        settings: EngineSettings,
        tally: Tally | None = None,
        *,
        role_identities: dict[str, RoleIdentity] | None = None,
        dataset: str | None = None,
    ) -> None:
        self.roster = roster
        # Labels the episodes carry: from the command's data and judging settings where it has them.
        self.dataset = dataset or getattr(settings, "dataset", None)
        self.rubric_version = getattr(settings, "rubric_version", None) or DEFAULT_RUBRIC_VERSION
        self.settings = settings
        self.tally = tally or Tally()
        self.clients = clients
        s = settings
        # Settings objects made before these options (a chat's, a test's) get the defaults.
        self.prompt_version = getattr(s, "prompt_version", PROMPT_VERSION)
        self.max_consecutive_turns = getattr(s, "max_consecutive_turns", MAX_CONSECUTIVE_TURNS)
        self.output_paths = OutputPaths()
        self.emotion_reports = EmotionReports()
        self.director = (
            Director(
                clients["director"],
                roster,
                self.tally,
                temperature=s.temperature,
                max_tokens=s.director_max_tokens,  # None: what the longest valid directive needs
                thinking=role_thinks(clients["director"]),
                reasoning_allowance=s.reasoning_allowance,
                output_paths=self.output_paths,
                prompt_version=self.prompt_version,
            )
            if "director" in clients
            else None
        )
        think = role_thinks(clients["speaker"]) or family_thinks(check_prompt_family(s.prompt_family))
        self.speaker = Speaker.for_settings(
            clients["speaker"],
            roster,
            self.tally,
            s,
            think=think,
            prompt_version=self.prompt_version,
            prompt_family=s.prompt_family,
            samples=s.self_consistency_samples,
        )
        policy = make_policy(s.turn_policy, roster, self.director, speaker_client=clients["speaker"], settings=s, tally=self.tally)
        self.policy: TurnPolicy = TurnLimit(policy, roster, self.max_consecutive_turns, self.tally) if self.max_consecutive_turns else policy
        # A "safety" client, when given, is the screen's model stage (for the messages its scope names).
        model_check = ModelCheck(clients["safety"], tally=self.tally) if "safety" in clients else None
        self.safety = (
            SafetyScreen(locale=s.safety_locale, embeddings=s.safety_embeddings, model_check=model_check, model_scope=s.safety_model_scope)
            if screen_applies(s.safety, roster.domain)
            else None
        )
        set_name, self.fixed_profile = user_profile_choice(s)
        self.profile_set = profile_set(set_name) if set_name else None
        self.role_identities = role_identities or {
            role: RoleIdentity(base_model=c.model, served_model=c.model, backend=c.backend)
            for role, c in clients.items()  # type: ignore[arg-type]
        }

    # ------------------------------------------------------------------ one episode
    @property
    def simulates_user(self) -> bool:
        return self.settings.enable_user_simulation and self.settings.user_response_probability > 0 and "user" in self.clients

    def _profile_for(self, context: Context, episode_idx: int) -> UserProfile | None:
        if self.profile_set is None:
            return None
        if self.fixed_profile:
            return user_profile(self.fixed_profile, self.profile_set.name)
        profiles = list(load_profiles(self.profile_set.name).values())
        return derived_rng(self.settings.seed, context.context_id, episode_idx, self.profile_set.label).choice(profiles)

    def new_state(self, context: Context, episode_idx: int, *seed_extra: object) -> EpisodeState:
        state = EpisodeState(
            context, episode_idx, (self.settings.seed, context.context_id, episode_idx, *seed_extra), self._profile_for(context, episode_idx)
        )
        if context.emotion and not context.is_meeting:
            state.emotions.append(context.emotion)
        return state

    async def play_round(
        self, state: EpisodeState, round_id: int, decision: DirectorDecision | None = None, listener: RoundListener | None = None
    ) -> None:
        """One Director -> Speaker (-> User) cycle appended to `state.turns`; a `listener` (a live
        conversation) is told the directive and gets the reply streamed as it is generated."""
        ctx = state.context
        if listener is not None:
            listener.round_start(round_id)
        if state.pending_safety is not None:  # the group answers a screened message with the safety reply
            self._safety_reply(state, round_id, listener)
        else:
            if decision is None:
                decision = await self.policy.next_turn(ctx, state.turns, round_id, derive_seed(*state.seed_key, round_id, "director"))
            await self._directed_reply(state, round_id, decision, listener)
        if self.simulates_user and derived_rng(*state.seed_key, round_id, "user-turn").random() < self.settings.user_response_probability:
            await self._user_turn(state, round_id)

    async def _directed_reply(self, state: EpisodeState, round_id: int, decision: DirectorDecision, listener: RoundListener | None) -> None:
        # A policy that writes the reply itself (MultiAgentESC's response agent) hands it over with
        # its backstage record; every other policy leaves the reply to the persona Speaker.
        written = getattr(decision, "reply", None)
        persona = getattr(decision, "persona", None) or self.roster.persona(decision.directive.agent_name)
        if listener is not None:
            listener.directive(decision, round_id)
            listener.reply_start(persona.name)
        if written is None:
            reply = await self.speaker.reply(
                persona, state.context, state.turns, decision.directive, derive_seed(*state.seed_key, round_id, "speaker"), listener
            )
        else:
            reply = written
            if listener is not None:
                listener.reply_text(reply.text)
        # A random fallback's directive was not the Director's: its failed answers are kept apart,
        # as is the answer of a pick the turn limit gave to another companion.
        fell_back = getattr(decision, "fell_back", False)
        overridden = getattr(decision, "overridden_pick", None)
        kept_apart = fell_back or overridden is not None
        turn = Turn(
            turn_idx=state.next_turn_idx,
            round_id=round_id,
            directive=decision.directive,
            agent_name=persona.name,
            response=reply.text,
            directive_output=None if kept_apart else decision.output or None,
            director_fallback=True if fell_back else None,
            director_raw_output=(decision.output or None) if kept_apart else None,
            director_copied_example=True if fell_back and getattr(decision, "copied_example", False) else None,
            director_pick=overridden,
            reasoning=reply.reasoning,
            directive_reasoning=decision.reasoning,
            backstage=getattr(decision, "backstage", None) or getattr(reply, "backstage", None),
        )
        state.turns.append(turn)
        if listener is not None:
            listener.reply_end(turn, getattr(reply, "revised", False))

    # ---- the one way a user message enters the transcript (BEGIN)
    async def add_user_message(self, state: EpisodeState, text: str, round_id: int, emotion: str | None = None) -> Turn:
        """Appends a user message (typed by a person in chat, or the simulated user's) to the
        transcript, before the group answers it, and screens it (mascot.safety): a match makes the
        next round the group's safety reply instead of a directed round. Every user turn enters here."""
        if emotion:
            state.emotions.append(emotion)
        turn = Turn(turn_idx=state.next_turn_idx, round_id=round_id, agent_name="user", response=text, turn_type="user", emotion=emotion)
        state.turns.append(turn)
        finding = await self.safety.check_async(text) if self.safety is not None else None
        if finding is not None:
            state.pending_safety = (finding, turn.turn_idx)
        return turn

    # ---- (END)

    def _safety_reply(self, state: EpisodeState, round_id: int, listener: RoundListener | None = None) -> Turn:
        finding, user_turn_idx = state.pending_safety  # type: ignore[misc]
        state.pending_safety = None
        voice = self.roster.personas[0].name
        turn = Turn(
            turn_idx=state.next_turn_idx,
            round_id=round_id,
            agent_name=voice,
            response=self.safety.reply(finding),  # type: ignore[union-attr]
            directive=Directive(agent_name=voice, action=SAFETY_ACTION, tone="calm, direct"),
        )
        state.turns.append(turn)
        state.safety_events.append(self.safety.event(finding, user_turn_idx, turn.turn_idx))  # type: ignore[union-attr]
        if listener is not None:  # a live conversation shows the safety reply like any other
            listener.reply_start(voice)
            listener.reply_text(turn.response)
            listener.reply_end(turn, False)
        return turn

    async def _user_turn(self, state: EpisodeState, round_id: int) -> None:
        s = self.settings
        user = SimulatedUser(
            self.clients["user"],
            self.roster,
            self.tally,
            profile=state.profile,
            temperature=s.temperature,
            max_tokens=s.user_max_tokens,
            thinking=role_thinks(self.clients["user"]),
            reasoning_allowance=s.reasoning_allowance,
            prompt_version=self.prompt_version,
        )
        reply = await user.respond(state.context, state.turns, derive_seed(*state.seed_key, round_id, "user"))
        if not state.context.is_meeting:  # asked for an emotion report
            self.emotion_reports.note(reply.emotion is not None)
            if reply.emotion is None:
                self.tally.count("num_user_emotions_missing", "a simulated-user reply carried no emotion report")
        await self.add_user_message(state, reply.text, round_id, reply.emotion)

    async def play_rounds(self, state: EpisodeState, start: int, end: int, first: DirectorDecision | None = None) -> None:
        route_together(f"{state.context.context_id}:{state.episode_idx}")  # one server per episode: its prefix cache holds the transcript
        for round_id in range(start, end):
            await self.play_round(state, round_id, first if round_id == start else None)
        if state.pending_safety is not None:  # a screened last message is still answered
            self._safety_reply(state, end)

    async def continue_from(
        self,
        context: Context,
        prefix: list[Turn],
        directive: Directive,
        *,
        num_rounds: int | None = None,
        seed_key: tuple = (),
        directive_output: str | None = None,
    ) -> list[Turn]:
        """Continues an episode from recorded `prefix` turns with `directive` as the next decision,
        for `num_rounds` rounds (default: to the end of the episode). Returns only the new turns.
        This is the suffix rollout of Director GRPO."""
        start = (max((t.round_id for t in prefix), default=-1)) + 1
        end = start + num_rounds if num_rounds is not None else max(self.settings.num_turns, start + 1)
        state = self.new_state(context, 0, "rollout", *seed_key)
        state.turns = list(prefix)
        await self.play_rounds(state, start, end, DirectorDecision(directive, directive_output or ""))
        return state.turns[len(prefix) :]

    def record_id(self, context: Context, suffix: str) -> str:
        """`<context_id>:<run tag>:<suffix>` (without a tag: `<context_id>:<suffix>`)."""
        tag = self.settings.run_tag
        return f"{context.context_id}:{tag}:{suffix}" if tag else f"{context.context_id}:{suffix}"

    def to_episode(self, state: EpisodeState, branch: BranchInfo | None = None, key_suffix: str = "") -> Episode:
        ctx, s = state.context, self.settings
        spoken: dict[str, int] = {}
        for t in state.turns:
            if not t.is_user:
                spoken[t.agent_name] = spoken.get(t.agent_name, 0) + 1
        emotional = not ctx.is_meeting
        ran_user = self.simulates_user
        ident = self.role_identities
        metadata = EpisodeMetadata(
            system=s.system,
            dataset=self.dataset or ctx.dataset,
            persona_set=self.profile_set.label if state.profile and self.profile_set else "default",
            director_model=ident["director"].served_model if "director" in ident and s.turn_policy == "director" else None,
            speaker_model=ident["speaker"].served_model if "speaker" in ident else None,
            user_model=ident["user"].served_model if ran_user and "user" in ident else None,
            rubric_version=self.rubric_version,
            roster=self.roster.name,
            roster_version=self.roster.version,
            roles={r: i for r, i in ident.items() if r != "user" or ran_user},
            generation_mode=s.generation_mode,
            turn_policy=s.turn_policy,
            seed=s.seed,
            run_id=s.run_id,
            episode_idx=state.episode_idx,
            branch=branch,
            created_at=utc_now(),
            prompt_version=family_prompt_version(s.prompt_family, self.prompt_version),
            prompt_family=None if s.prompt_family == "persona" else s.prompt_family,
            self_consistency_samples=s.self_consistency_samples if s.self_consistency_samples > 1 else None,
        )
        episode = Episode(
            episode_id=self.record_id(ctx, f"e{state.episode_idx}{key_suffix}"),
            context_id=ctx.context_id,
            turns=state.turns,
            agents_spoken=spoken,
            context=ctx,
            metadata=metadata,
            safety_events=list(state.safety_events) or None,
        )
        if ctx.is_meeting:
            episode.id, episode.start_idx, episode.meeting = ctx.context_id, ctx.start_idx, ctx.meeting
        else:
            episode.conv_id = getattr(ctx, "conv_id", None) or ctx.context_id
        if emotional:
            episode.initial_emotion = state.emotions[0] if state.emotions else None
            episode.final_emotion = state.emotions[-1] if state.emotions else None
            episode.emotion_trajectory = list(state.emotions)
            if state.profile and self.profile_set:
                setattr(episode, self.profile_set.episode_field, state.profile.name)
        return episode

    async def run_episode(self, context: Context, episode_idx: int = 0) -> Episode:
        state = self.new_state(context, episode_idx)
        await self.play_rounds(state, 0, self.settings.num_turns)
        return self.to_episode(state)

    # ------------------------------------------------------------------ branching
    def spine_id(self, context: Context) -> str:
        return self.record_id(context, "spine")

    def branch_id(self, context: Context, decision_round: int, candidate_idx: int) -> str:
        return self.record_id(context, f"d{decision_round}:k{candidate_idx}")

    async def run_spine(self, context: Context) -> Episode:
        state = self.new_state(context, 0, "spine")
        await self.play_rounds(state, 0, self.settings.num_turns)
        episode = self.to_episode(state)
        episode.episode_id = self.spine_id(context)
        return episode

    async def run_branch_group(self, context: Context, spine: Episode, decision_round: int, skip: Callable[[str], bool]) -> list[Episode]:
        """The `num_candidates` continuations of one decision point of `spine`."""
        s = self.settings
        prefix = turns_before_round(spine.turns, decision_round)
        count = self.candidates_per_decision()
        missing = [k for k in range(count) if not skip(self.branch_id(context, decision_round, k))]
        if not missing:
            return []
        if self.director is None:
            raise ValueError("branching generation needs a Director")
        seed = derive_seed(s.seed, context.context_id, "branch", decision_round, "propose")
        if self.branch_proposals == "roster":
            decisions = await self.director.propose_each(context, prefix, seed, self.roster.names)
        else:
            decisions = await self.director.propose(context, prefix, seed, count)
        group_id = self.record_id(context, f"d{decision_round}")

        async def one(k: int) -> Episode:
            state = self.new_state(context, 0, "branch", decision_round, k)
            state.turns = list(prefix)
            state.emotions = self._emotions_of(spine, prefix)
            self._carry_safety(state, spine, len(prefix))
            await self.play_rounds(state, decision_round, s.num_turns, decisions[k])
            branch = BranchInfo(group_id=group_id, decision_round=decision_round, candidate_idx=k, num_candidates=count, prefix_turns=len(prefix))
            episode = self.to_episode(state, branch)
            episode.episode_id = self.branch_id(context, decision_round, k)
            return episode

        return list(await asyncio.gather(*(one(k) for k in missing)))

    def _carry_safety(self, state: EpisodeState, spine: Episode, prefix_len: int) -> None:
        """A branch keeps the spine's safety events in its prefix, and answers a screened last
        message with the safety reply as the spine did."""
        for event in spine.safety_events or []:
            if event.response_turn_idx is not None and event.response_turn_idx < prefix_len:
                state.safety_events.append(event)
            elif event.turn_idx < prefix_len and self.safety is not None:
                state.pending_safety = (Finding(event.category, event.method, event.rule, event.score), event.turn_idx)

    @staticmethod
    def _emotions_of(spine: Episode, prefix: list[Turn]) -> list[str]:
        emotions = [spine.initial_emotion] if spine.initial_emotion else []
        return emotions + [t.emotion for t in prefix if t.is_user and t.emotion]

    # ------------------------------------------------------------------ work units
    @property
    def branch_proposals(self) -> str:
        return getattr(self.settings, "branch_proposals", "director")  # settings made before the option: the Director's

    def candidates_per_decision(self) -> int:
        """Branches per decision point: one per companion (roster proposals), else --num-candidates."""
        return len(self.roster.personas) if self.branch_proposals == "roster" else self.settings.num_candidates

    def records_per_context(self) -> int:
        s = self.settings
        if s.generation_mode == "independent":
            return s.num_episodes
        if s.generation_mode == "branching":
            return 1 + s.num_turns * self.candidates_per_decision()
        if s.generation_mode == "tree":
            return len(self.roster.personas) ** s.num_turns
        return 1

    # ------------------------------------------------------------------ tree
    def tree_id(self, context: Context, path: list[int]) -> str:
        return self.record_id(context, "t" + "".join(map(str, path)))

    def _tree_leaves(self, path: list[int]) -> list[list[int]]:
        """Every leaf path below `path` (each index a companion of the roster)."""
        leaves = [path]
        for _ in range(self.settings.num_turns - len(path)):
            leaves = [[*leaf, k] for leaf in leaves for k in range(len(self.roster.personas))]
        return leaves

    async def run_tree(self, context: Context, skip: Callable[[str], bool]) -> list[Episode]:
        """Every sequence of companions over the rounds (tree mode): at each round, for every
        conversation so far, the Director writes one directive per companion (`propose_each`) and
        each is played on a copy of it, so a shared beginning is generated once. Whether the user
        speaks after a round is drawn once per context and round: conversations that differ only in
        the companions' turns also agree on when the person spoke. The leaves are the records."""
        if self.director is None:
            raise ValueError("tree generation needs a Director")
        return await self._grow(self.new_state(context, 0, "tree"), 0, [], skip)

    async def _grow(self, state: EpisodeState, round_id: int, path: list[int], skip: Callable[[str], bool]) -> list[Episode]:
        context = state.context
        if all(skip(self.tree_id(context, leaf)) for leaf in self._tree_leaves(path)):
            return []  # written by an earlier run (resume)
        if round_id == self.settings.num_turns:
            return [self._tree_record(state, path)]
        if state.pending_safety is not None:  # the safety reply is the only way on from here
            decisions: list[DirectorDecision | None] = [None]
        else:
            seed = derive_seed(*state.seed_key, round_id, "propose", *path)
            decisions = list(await self.director.propose_each(context, state.turns, seed, self.roster.names))  # type: ignore[union-attr]

        async def child(k: int, decision: DirectorDecision | None) -> list[Episode]:
            if all(skip(self.tree_id(context, leaf)) for leaf in self._tree_leaves([*path, k])):
                return []
            branch = copy_state(state)
            await self.play_round(branch, round_id, decision)
            return await self._grow(branch, round_id + 1, [*path, k], skip)

        grown = await asyncio.gather(*(child(k, d) for k, d in enumerate(decisions)))
        return [episode for leaves in grown for episode in leaves]

    def _tree_record(self, state: EpisodeState, path: list[int]) -> Episode:
        if state.pending_safety is not None:  # a screened last message is still answered
            self._safety_reply(state, self.settings.num_turns)
        prefix = turns_before_round(state.turns, self.settings.num_turns - 1)
        branch = BranchInfo(group_id=self.tree_id(state.context, path[:-1]), decision_round=self.settings.num_turns - 1, candidate_idx=path[-1],
                            num_candidates=len(self.roster.personas), prefix_turns=len(prefix))  # fmt: skip
        episode = self.to_episode(state, branch)
        episode.episode_id = self.tree_id(state.context, path)
        return episode

    async def run_context(self, context: Context, skip: Callable[[str], bool], spine: Episode | None = None) -> AsyncIterator[Episode]:
        """Yields every missing record of one context, in write order."""
        s = self.settings
        if s.generation_mode == "tree":
            for episode in await self.run_tree(context, skip):
                yield episode
            return
        if s.generation_mode == "branching":
            if spine is None:
                spine = await self.run_spine(context)
                yield spine
            groups = [self.run_branch_group(context, spine, d, skip) for d in range(s.num_turns)]
            for episodes in await asyncio.gather(*groups):
                for episode in episodes:
                    yield episode
            return
        count = s.num_episodes if s.generation_mode == "independent" else 1
        # A context's independent episodes run together (their calls share batches and servers'
        # queues); each is yielded, in index order, as soon as it and those before it are done.
        tasks = [asyncio.ensure_future(self.run_episode(context, idx)) for idx in range(count) if not skip(self.record_id(context, f"e{idx}"))]
        try:
            for task in tasks:
                yield await task
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

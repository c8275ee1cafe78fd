"""Decision points of Director GRPO: where in recorded episodes the Director decided, with the
recorded prefix its prompt is rebuilt from."""

from __future__ import annotations

import dataclasses
import logging
import random
from dataclasses import dataclass, field
from typing import Any

from mascot.data.loaders import load_contexts
from mascot.dialogue.prompts import director_messages
from mascot.episodes import episode_context, episode_domain, episode_roster
from mascot.errors import MascotError
from mascot.llm.base import Message
from mascot.rosters import load_roster, roster_for_dataset
from mascot.schema import Context, Episode, Roster, Turn
from mascot.train import data
from mascot.train.common import validate_grpo
from mascot.train.config import DirectorGRPOSettings
from mascot.train.guard import require_group_prompts
from mascot.train.runtime import TrainingSetupError
from mascot.vocab import PROMPT_VERSION

log = logging.getLogger(__name__)

ROLLOUT_DIRECTORS = ("base", "policy")
ROLLOUT_SOURCES = ("live", "recorded")


@dataclass
class DecisionPoint:
    point_id: str
    episode_id: str
    context: Context
    prefix: list[Turn]
    roster: Roster
    domain: str
    decision_round: int
    prompt_version: str = PROMPT_VERSION  # the episode's: the Director trains on the prompts it decided on
    episode_rounds: int = 0  # rounds of the episode it comes from (0: unknown)

    def rounds_to_end(self) -> int:
        """Rounds from the decision to the end of its episode (at least the decision's own)."""
        return max(1, self.episode_rounds - self.decision_round)

    def prompt(self) -> list[Message]:
        return director_messages(self.roster, self.context, self.prefix, self.prompt_version)


def decision_rounds(episode: Episode) -> list[int]:
    """Rounds in which a Speaker spoke: the Director decided there."""
    return sorted({t.round_id for t in episode.turns if not t.is_user})


def source_episodes(episodes: list[Episode]) -> list[Episode]:
    """Whole episodes; branch records (branching, tree) are used only when there are none (a tree
    run's records are all branches), each decision point once whatever the records that share it."""
    whole = [e for e in episodes if e.metadata.branch is None]
    return whole or episodes


def sample_decision_points(
    episodes: list[Episode],
    per_episode: int,
    seed: int,
    *,
    contexts: dict[str, Context] | None = None,
    roster: Roster | None = None,
    balance_last_speaker: bool = False,
) -> tuple[list[DecisionPoint], int]:
    """Seeded decision points, and how many episodes had no recorded context (a bare one is used):
    `per_episode` rounds of each episode, or (`balance_last_speaker`) as many points in all, drawn
    evenly over who spoke last before the decision."""

    rng = random.Random(seed)
    points, pool, bare_contexts = [], [], 0
    seen: set[tuple] = set()  # records of one tree share their beginnings: each decision point once
    for episode in source_episodes(episodes):
        rounds = decision_rounds(episode)
        if not rounds:
            continue
        context = episode_context(episode, contexts)
        if context is None:
            bare_contexts += 1
            context = Context(context_id=episode.context_id or episode.episode_id, dataset=episode.metadata.dataset)
        team = roster or episode_roster(episode) or roster_for_dataset(episode.metadata.dataset)
        episode_points = [p for p in (_decision_point(episode, round_id, context, team) for round_id in rounds) if _first_time(p, seen)]
        if not episode_points:
            continue
        rounds = [p.decision_round for p in episode_points]
        pool.extend(episode_points)
        points.extend(sorted(rng.sample(episode_points, min(per_episode, len(rounds))), key=lambda p: p.decision_round))
    if balance_last_speaker:
        points = balanced_by_last_speaker(pool, len(points), rng)  # as many as the plain draw
    return points, bare_contexts


def _first_time(point: DecisionPoint, seen: set[tuple]) -> bool:
    """Whether no earlier point had this context and prefix (the same prompt, the same rollouts)."""
    key = (point.context.context_id, point.decision_round, prefix_key(point.prefix))
    if key in seen:
        return False
    seen.add(key)
    return True


def prefix_key(turns: list[Turn]) -> tuple:
    return tuple((t.agent_name, t.response) for t in turns)


def recorded_continuations(episodes: list[Episode], points: list[DecisionPoint]) -> dict[str, dict[str, list[list[Turn]]]]:
    """For each decision point, every recorded way its conversation went on, by the companion that
    spoke first: in a tree run (`--generation-mode tree`) each companion's subtree, whose leaves are
    whole recorded conversations. `--rollouts recorded` rewards a sampled choice with the scores of
    those conversations instead of rolling one out."""
    by_prefix: dict[tuple, dict[str, dict[tuple, list[Turn]]]] = {}
    for episode in episodes:
        context_id = episode.context_id or episode.episode_id
        for round_id in decision_rounds(episode):
            suffix = [t for t in episode.turns if t.round_id >= round_id]
            first = next((t.agent_name for t in suffix if not t.is_user), None)
            if first is None:
                continue
            key = (context_id, round_id, prefix_key([t for t in episode.turns if t.round_id < round_id]))
            by_prefix.setdefault(key, {}).setdefault(first, {})[prefix_key(suffix)] = suffix
    sources = {e.episode_id: e.context_id or e.episode_id for e in episodes}
    return {
        p.point_id: {
            name: list(found.values()) for name, found in by_prefix.get((sources[p.episode_id], p.decision_round, prefix_key(p.prefix)), {}).items()
        }
        for p in points
    }


def require_recorded_choices(points: list[DecisionPoint], recorded: dict[str, dict[str, list[list[Turn]]]], data_file) -> None:
    """--rollouts recorded needs a recorded continuation for every companion at every decision point."""
    missing = [(p, [n for n in p.roster.names if n not in recorded.get(p.point_id, {})]) for p in points]
    missing = [(p, names) for p, names in missing if names]
    if missing:
        point, names = missing[0]
        raise TrainingSetupError(
            f"--rollouts recorded: {len(missing)} of {len(points)} decision points of {data_file} have no recorded conversation for "
            f"every companion (first: {point.point_id} lacks {', '.join(names)}); record the episodes with `mascot generate "
            "--generation-mode tree`, or roll out live (--rollouts live)"
        )


def _decision_point(episode: Episode, round_id: int, context: Context, team: Roster) -> DecisionPoint:
    return DecisionPoint(
        point_id=f"{episode.episode_id}@r{round_id}",
        episode_id=episode.episode_id,
        context=context,
        prefix=[t for t in episode.turns if t.round_id < round_id],
        roster=team,
        domain=episode_domain(episode),
        decision_round=round_id,
        prompt_version=episode.metadata.prompt_version or PROMPT_VERSION,
        episode_rounds=max((t.round_id for t in episode.turns), default=-1) + 1,
    )


def last_speaker(point: DecisionPoint) -> str | None:
    """The companion who spoke last before the decision (None at the opening)."""
    return next((t.agent_name for t in reversed(point.prefix) if not t.is_user), None)


def balanced_by_last_speaker(pool: list[DecisionPoint], wanted: int, rng: random.Random) -> list[DecisionPoint]:
    """`wanted` points, as many after each last Speaker (the opening counts as one) as after any
    other: each kind's points in a seeded order, taken in turn, a scarce kind's reused from its
    start. Interleaved, so that any leading share (--limit, a run cut short) stays balanced."""
    kinds: dict[str | None, list[DecisionPoint]] = {}
    for point in pool:
        kinds.setdefault(last_speaker(point), []).append(point)
    queues = [rng.sample(group, len(group)) for _, group in sorted(kinds.items(), key=lambda kv: kv[0] or "")]
    points = []
    for i in range(wanted if queues else 0):
        queue, turn = queues[i % len(queues)], i // len(queues)
        point, reuse = queue[turn % len(queue)], turn // len(queue)
        points.append(dataclasses.replace(point, point_id=f"{point.point_id}#{reuse}") if reuse else point)  # ids stay distinct
    return points


def context_index(data_file, settings: dict[str, Any]) -> dict[str, Context] | None:
    """The dataset items the episodes started from, when the generating run names a local file."""
    source = settings.get("data_file")
    if not source:
        return None

    try:
        loaded = load_contexts(settings["dataset"], split=settings.get("split", "test"), data_file=source)
    except (MascotError, OSError, KeyError) as exc:
        log.warning("cannot reload the run's contexts from %s (%s): prompts use bare contexts", source, exc)
        return None
    return {c.context_id: c for c in loaded}


@dataclass
class DecisionInputs:
    """What Director GRPO reads before any model is loaded."""

    data_file: Any
    episodes: list
    run: dict
    dataset: str
    roster: Roster | None
    points: list[DecisionPoint]
    recorded: dict[str, dict[str, list[list[Turn]]]] | None = None  # --rollouts recorded: each point's continuations by companion
    held_out: list[DecisionPoint] = field(default_factory=list)  # --eval-fraction: the points of held-out contexts

    def all_points(self) -> dict[str, DecisionPoint]:
        return {p.point_id: p for p in [*self.points, *self.held_out]}


def load_decision_inputs(settings: DirectorGRPOSettings) -> DecisionInputs:
    """The episodes, their run's settings and the sampled decision points (at most --limit)."""
    data_file, episodes = data.load_episodes(settings.data_path)
    run = data.run_settings(data_file)

    roster = load_roster(settings.roster) if settings.roster else None
    points, bare = sample_decision_points(
        episodes,
        settings.decision_points_per_episode,
        settings.seed,
        contexts=context_index(data_file, run),
        roster=roster,
        balance_last_speaker=settings.balance_last_speaker,
    )
    if bare:
        log.warning("%d episodes carry no context and their run names no local data file: their prompts show only the transcript", bare)
    points, held_out = held_out_contexts(points, settings.eval_fraction, settings.seed)
    sampled = len(points)
    points = data.limit_records(points, settings.limit, settings.seed)
    if settings.limit is not None and held_out:  # --limit caps the held-out points in the same proportion: each is sampled and rolled out
        held_out = data.limit_records(held_out, max(1, round(settings.limit * settings.eval_fraction / (1 - settings.eval_fraction))), settings.seed)
    if held_out:
        log.info(
            "%d decision points of %d contexts held out: sampled and rewarded every --eval-steps (%d completions each time)",
            len(held_out),
            len({p.context.context_id for p in held_out}),
            len(held_out) * settings.num_generations,
        )
    if not points:
        raise data.TrainingDataError(f"{data_file}: no decision points (no episode has a Speaker turn)")
    require_decision_points(settings, len(points), sampled, data_file, len(source_episodes(episodes)))
    recorded = None
    if settings.rollouts == "recorded":
        recorded = recorded_continuations(episodes, points + held_out)
        require_recorded_choices(points + held_out, recorded, data_file)
    return DecisionInputs(data_file, episodes, run, data.resolve_dataset(settings.dataset, run), roster, points, recorded, held_out)


def held_out_contexts(points: list[DecisionPoint], eval_fraction: float, seed: int) -> tuple[list[DecisionPoint], list[DecisionPoint]]:
    """A seeded share of the contexts with all their decision points, apart (none at 0)."""
    if eval_fraction <= 0:
        return points, []
    if not 0 < eval_fraction < 1:
        raise data.TrainingDataError(f"--eval-fraction must be in [0, 1), got {eval_fraction}")
    contexts = sorted({p.context.context_id for p in points})
    random.Random(seed).shuffle(contexts)
    held = set(contexts[: min(len(contexts) - 1, max(1, round(len(contexts) * eval_fraction)))])
    return [p for p in points if p.context.context_id not in held], [p for p in points if p.context.context_id in held]


def validate_rollouts(settings: DirectorGRPOSettings) -> None:
    """Rollout settings that would roll out nothing, refused before anything is loaded."""
    for flag, value in (
        ("--rollout-max-tokens", settings.rollout_max_tokens),
        ("--rollout-user-max-tokens", settings.rollout_user_max_tokens),
        ("--rollout-director-max-tokens", settings.rollout_director_max_tokens or 1),
    ):
        if value < 1:
            raise TrainingSetupError(f"{flag} must be at least 1, got {value}")
    if settings.rollouts not in ROLLOUT_SOURCES:
        raise TrainingSetupError(f"--rollouts must be {' or '.join(ROLLOUT_SOURCES)}, got {settings.rollouts!r}")
    if settings.rollouts == "recorded" and settings.rollout_director == "policy":
        raise TrainingSetupError("--rollout-director policy directs live rollouts: it has nothing to direct with --rollouts recorded")
    if settings.rollout_director not in ROLLOUT_DIRECTORS:
        raise TrainingSetupError(f"--rollout-director must be {' or '.join(ROLLOUT_DIRECTORS)}, got {settings.rollout_director!r}")
    if settings.suffix_rounds < 0:
        raise TrainingSetupError(f"--suffix-rounds must be 0 (to the end of the episode) or more, got {settings.suffix_rounds}")
    if settings.rollout_temperature < 0:
        raise TrainingSetupError(f"--rollout-temperature must not be negative, got {settings.rollout_temperature}")
    penalty = settings.rollout_repetition_penalty
    if penalty is not None and not 0 < penalty <= 2:
        raise TrainingSetupError(f"--rollout-repetition-penalty must be above 0 and at most 2 (1.0: off), got {penalty}")


def require_decision_points(settings: DirectorGRPOSettings, kept: int, sampled: int, data_file, num_episodes: int) -> None:
    """One line when the decision points are fewer than one GRPO step's prompts (`num_episodes`
    counts the episodes they are sampled from: branch records are not)."""

    validate_grpo(settings)
    validate_rollouts(settings)
    limited = f", {kept} kept by --limit" if kept < sampled else ""
    counted = f"{sampled} sampled from {num_episodes} episodes of {data_file} (--decision-points-per-episode {settings.decision_points_per_episode}){limited}"
    more = "raise --decision-points-per-episode, or record more episodes"
    require_group_prompts(kept, settings, what="decision points", counted=counted, more=more)

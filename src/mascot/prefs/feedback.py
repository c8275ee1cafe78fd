"""`mascot prefs feedback`: persona-level preference pairs from people's ratings of the companions.

Each rated reply of the web app (`mascot.web.feedback`) is rebuilt as the Speaker saw it: the
prompt is `speaker_messages` over the conversation before the reply and the directive it followed,
so a pair looks exactly like a Stage-1 pair and trains the same persona reward model. A reply
rated helpful is paired with replies of the same companion rated not helpful: first those of the
same conversation, then those whose person wrote the most similar message just before (word
overlap), at most `max_pairs_per_reply` each. The pair's prompt is the helpful reply's; a rejected
reply from another conversation stands in as an answer to it, as a cross-persona reply does for
Stage 1. Every pair carries its provenance (`source: "feedback"`, the session and turn of each
side). Only ratings given with consent are read; the others are counted and left out.

A choice between two replies of one companion ("another reply") is a persona-level pair under the
prompt both answered. A choice between two of the Director's options ("another approach": each a
directive and the reply of the companion it named) is a directive-level pair: the Director's prompt
over the conversation before that turn, the chosen directive against the other, in the format of
the pairs `mascot prefs group` builds from branching episodes (for `mascot train director-dpo`).
"""

from __future__ import annotations

import logging
import random
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mascot.schema import Episode, PreferencePair, Roster

log = logging.getLogger(__name__)

FEEDBACK_PAIRS_FILE = "pairs.jsonl"
WORD = re.compile(r"[a-z']+")


@dataclass
class RatedReply:
    session_id: str
    turn_idx: int
    roster: str
    persona: str
    prompt: list[dict[str, str]]
    response: str
    helpful: bool
    person_said: set[str]  # the words of the person's message before the reply
    dataset: str | None = None
    version: str | None = None  # the registry version of the Speaker that wrote it

    @property
    def where(self) -> str:
        return f"{self.session_id}#t{self.turn_idx}"


@dataclass
class FeedbackCounts:
    sessions: int = 0
    ratings: int = 0
    without_consent: int = 0
    unusable: int = 0  # the rated turn or its companion is no longer in the session
    helpful: int = 0
    not_helpful: int = 0
    choices: int = 0  # consented choices between two replies to one prompt, each a pair
    direction_choices: int = 0  # consented choices between two of the Director's options, each a directive pair
    reasons: Counter = field(default_factory=Counter)


def session_roster(episode: Episode, session_dir: Path) -> Roster:
    """The roster a session was held with: a built-in one, or an upload kept in `<session dir>/rosters/`."""
    from mascot.rosters import BUILTIN_ROSTERS, RosterError, load_roster

    name, version = episode.metadata.roster or "", episode.metadata.roster_version
    if name in BUILTIN_ROSTERS:
        return load_roster(name)
    for path in sorted((session_dir / "rosters").glob("upload-*.yaml")):
        roster = load_roster(str(path))
        if roster.name == name and roster.version == version:
            return roster
    raise RosterError(f"roster {name!r} is neither built in nor among the uploads in {session_dir / 'rosters'}")


def rated_replies(session_dir: Path, choices: list | None = None) -> tuple[list[RatedReply], FeedbackCounts]:
    """Every consented rating of `session_dir`, as the reply and the prompt it answered; the
    consented choices between two replies are added to `choices` as pairs when it is given."""
    from mascot.web.feedback import FEEDBACK_FOLDER, ReplyRating, read_feedback

    counts = FeedbackCounts()
    replies: list[RatedReply] = []
    for ratings_file in sorted((Path(session_dir) / FEEDBACK_FOLDER).glob("*.jsonl")):
        records = list(read_feedback(ratings_file))
        latest = {r.turn_idx: r for r in records if isinstance(r, ReplyRating)}
        chosen = [r for r in records if not isinstance(r, ReplyRating)]
        counts.sessions += 1
        counts.ratings += len(latest) + len(chosen)
        consented = [r for r in latest.values() if r.consent]
        consented_choices = [c for c in chosen if c.consent]
        counts.without_consent += len(latest) - len(consented) + len(chosen) - len(consented_choices)
        if consented:
            replies += session_replies(Path(session_dir), ratings_file.stem, consented, counts)
        if consented_choices and choices is not None:
            choices += choice_pairs(Path(session_dir), ratings_file.stem, consented_choices, counts)
    counts.helpful = sum(r.helpful for r in replies)
    counts.not_helpful = len(replies) - counts.helpful
    return replies, counts


def rated_session(session_dir: Path, session_id: str, records: int, counts: FeedbackCounts) -> tuple[Episode, Roster, dict[int, int]] | None:
    """The session some feedback is about, its roster and where each turn index sits in it; None
    (its `records` counted unusable) when it cannot be read."""
    from mascot.dialogue.chat import load_session_episode
    from mascot.errors import MascotError

    try:
        episode = load_session_episode(session_dir / f"{session_id}.jsonl")
        return episode, session_roster(episode, session_dir), {t.turn_idx: i for i, t in enumerate(episode.turns)}
    except (MascotError, OSError) as exc:
        left_out(counts, f"session unreadable: {exc}", records)
        log.warning("the feedback on %s is left out: %s", session_id, exc)
        return None


def turns_of(session_dir: Path, session_id: str, records: list, counts: FeedbackCounts) -> Iterator[tuple]:
    """(record, episode, roster, position, turn) for each feedback record of a session that can be
    read; the turn is None where the record's turn is not in the session."""
    opened = rated_session(session_dir, session_id, len(records), counts)
    if opened is None:
        return
    episode, roster, index = opened
    for record in records:
        at = index.get(record.turn_idx)
        yield record, episode, roster, at, (episode.turns[at] if at is not None else None)


def left_out(counts: FeedbackCounts, reason: str, records: int = 1) -> None:
    counts.unusable += records
    counts.reasons[reason] += records


def reply_prompt(episode: Episode, roster: Roster, index: int) -> list[dict[str, str]]:
    """The prompt the Speaker answered at `episode.turns[index]`: the conversation before it and its directive."""
    from mascot.dialogue.prompts import speaker_messages

    turn = episode.turns[index]
    return speaker_messages(roster.persona(turn.agent_name), roster, episode.context, episode.turns[:index], turn.directive)


def session_replies(session_dir: Path, session_id: str, ratings: list, counts: FeedbackCounts) -> list[RatedReply]:
    out = []
    for rating, episode, roster, index, turn in turns_of(session_dir, session_id, ratings, counts):
        if turn is None or turn.is_user or not turn.response or turn.agent_name not in roster.names:
            left_out(counts, "the rated reply is not in the session")
            continue
        if rating.response is not None and rating.response != turn.response:
            left_out(counts, "the rated reply was swapped for another afterwards")
            continue
        said = next((t.response for t in reversed(episode.turns[:index]) if t.is_user), "")
        out.append(RatedReply(session_id, turn.turn_idx, roster.name, turn.agent_name, reply_prompt(episode, roster, index), turn.response, rating.rating == "helpful",
                              set(WORD.findall(said.lower())), episode.metadata.dataset, rating.speaker_version))  # fmt: skip
    return out


def choice_pairs(session_dir: Path, session_id: str, choices: list, counts: FeedbackCounts) -> list[PreferencePair]:
    """A person's choice between two replies to one prompt: the chosen against the other, under
    the prompt both answered (the conversation before the turn and its directive)."""
    pairs = []
    for choice, episode, roster, at, turn in turns_of(session_dir, session_id, choices, counts):
        if turn is None or turn.agent_name != choice.agent_name or choice.agent_name not in roster.names or choice.chosen == choice.rejected:
            left_out(counts, "the chosen reply is not in the session")
            continue
        if choice.alternative_of == "direction":
            pair = direction_pair(choice, episode, at, counts)
            if pair is not None:
                pairs.append(pair)
            continue
        pairs.append(PreferencePair(
            prompt=reply_prompt(episode, roster, at), chosen=[{"role": "assistant", "content": choice.chosen}], rejected=[{"role": "assistant", "content": choice.rejected}],
            margin=1.0, persona=turn.agent_name, context_id=session_id, chosen_score=1.0, rejected_score=0.0, kind="persona", roster=roster.name,
            provenance={"source": "feedback", "choice": f"{session_id}#t{turn.turn_idx}", "chose_alternative": choice.chose_alternative,
                        "same_conversation": True, **versions_of(choice.chosen_version, choice.rejected_version)},
        ))  # fmt: skip
        counts.choices += 1
    return pairs


def direction_pair(choice, episode: Episode, at: int, counts: FeedbackCounts) -> PreferencePair | None:
    """The Director's option the person chose against the other, under the Director's prompt at
    that moment (the conversation before the turn)."""
    from mascot.dialogue.director import render_directive
    from mascot.prefs.group import director_prompt

    if choice.chosen_directive is None or choice.rejected_directive is None:
        left_out(counts, "a choice between approaches without both directives")
        return None
    chosen, rejected = render_directive(choice.chosen_directive), render_directive(choice.rejected_directive)
    if chosen == rejected:
        left_out(counts, "the two approaches gave the same directive")
        return None
    counts.direction_choices += 1
    where = f"{choice.session_id}#t{choice.turn_idx}"
    return PreferencePair(
        prompt=director_prompt(episode, episode.turns[:at], None), chosen=[{"role": "assistant", "content": chosen}],
        rejected=[{"role": "assistant", "content": rejected}], margin=1.0, persona=choice.agent_name, context_id=choice.session_id,
        chosen_score=1.0, rejected_score=0.0, kind="directive", pair_id=f"{where}:{'alternative' if choice.chose_alternative else 'shown'}",
        roster=episode.metadata.roster, roster_version=episode.metadata.roster_version, system=episode.metadata.system,
        decision_round=episode.turns[at].round_id,
        provenance={"source": "feedback", "choice": where, "chose_alternative": choice.chose_alternative, "alternative_of": "direction",
                    "chosen_reply": choice.chosen, "rejected_reply": choice.rejected, "rejected_agent": choice.rejected_agent,
                    **versions_of(choice.chosen_version, choice.rejected_version)},
    )  # fmt: skip


def versions_of(chosen: str | None, rejected: str | None) -> dict[str, str]:
    """The Speaker versions that wrote each side, where they are known."""
    return {k: v for k, v in (("chosen_version", chosen), ("rejected_version", rejected)) if v}


def similarity(a: RatedReply, b: RatedReply) -> float:
    """How alike the two people's messages were (Jaccard overlap of their words)."""
    union = a.person_said | b.person_said
    return len(a.person_said & b.person_said) / len(union) if union else 0.0


def feedback_pairs(replies: list[RatedReply], *, max_pairs_per_reply: int = 4, seed: int = 0) -> list[PreferencePair]:
    """Helpful against not helpful, per companion: the same conversation first, then the most similar."""
    rng = random.Random(seed)
    pairs = []
    for helpful in (r for r in replies if r.helpful):
        rejected = [
            r for r in replies if not r.helpful and (r.roster, r.persona) == (helpful.roster, helpful.persona) and r.response != helpful.response
        ]
        rng.shuffle(rejected)  # ties broken by the seed, not by file order
        rejected.sort(key=lambda r: (r.session_id != helpful.session_id, -similarity(helpful, r)))
        for other in rejected[:max_pairs_per_reply]:
            pairs.append(PreferencePair(
                prompt=helpful.prompt, chosen=[{"role": "assistant", "content": helpful.response}],
                rejected=[{"role": "assistant", "content": other.response}], margin=1.0, persona=helpful.persona,
                context_id=helpful.session_id, chosen_score=1.0, rejected_score=0.0, kind="persona", roster=helpful.roster,
                provenance={"source": "feedback", "chosen": helpful.where, "rejected": other.where,
                            "same_conversation": other.session_id == helpful.session_id,
                            **versions_of(helpful.version, other.version)},
            ))  # fmt: skip
    return pairs


# --------------------------------------------------------------------------- the study's blinded choices


@dataclass
class StudyCounts:
    choices: int = 0  # ratings of real pairs by raters who passed every attention check, turned into pairs
    ties: int = 0
    excluded: int = 0  # attention checks, and the ratings of raters who failed one
    unusable: int = 0  # a rated conversation no longer in the study's source files


def study_pairs(study_file: Path) -> tuple[list[PreferencePair], StudyCounts]:
    """Episode-level pairs from the human study: the conversation a rater chose against the other,
    read whole (directives included) from the episode files the study was made from, and rendered
    as the group reward model reads them (`mascot.prefs.group`); ties make no pair."""
    from mascot.study.db import all_ratings, meta, opened
    from mascot.study.results import kept_ratings

    with opened(study_file) as conn:
        info, ratings = meta(conn), all_ratings(conn)
    kept = kept_ratings(ratings)
    counts = StudyCounts(excluded=len(ratings) - len(kept))
    sources = {side: _study_source(info, side) for side in ("a", "b")}
    pairs = []
    for rating in kept:
        if rating["choice"] not in ("a", "b"):
            counts.ties += 1
            continue
        other = "b" if rating["choice"] == "a" else "a"
        chosen, rejected = sources[rating["choice"]].get(rating["context_id"]), sources[other].get(rating["context_id"])
        if chosen is None or rejected is None:
            counts.unusable += 1
            continue
        pairs.append(
            _study_pair(chosen, rejected, {"source": "study", "study": str(study_file), "pair_id": rating["pair_id"], "rater_id": rating["rater_id"]})
        )
        counts.choices += 1
    return pairs, counts


def _study_source(info: dict, side: str) -> dict[str, Episode]:
    """A study side's episodes by context, from the file it was made from ({} where it is gone)."""
    from mascot.errors import MascotError
    from mascot.study.create import episodes_by_context

    path = Path(str(info.get(f"source_{side}") or ""))
    try:
        return episodes_by_context(path, f"source_{side}")
    except (MascotError, OSError) as exc:
        log.warning("the study's conversations of system %s cannot be read (%s): its choices are left out", side, exc)
        return {}


def _study_pair(chosen: Episode, rejected: Episode, provenance: dict) -> PreferencePair:
    from mascot.episodes import episode_context, episode_domain
    from mascot.prefs.group import TRAJECTORY_FORMAT, group_rm_prompt, render_trajectory

    domain = episode_domain(chosen)
    return PreferencePair(
        prompt=group_rm_prompt(episode_context(chosen), domain), chosen=[{"role": "assistant", "content": render_trajectory(chosen.turns, domain)}],
        rejected=[{"role": "assistant", "content": render_trajectory(rejected.turns, domain)}], margin=1.0, context_id=chosen.context_id,
        chosen_score=1.0, rejected_score=0.0, kind="episode", trajectory_format=TRAJECTORY_FORMAT, roster=chosen.metadata.roster,
        provenance={**provenance, "chosen_system": chosen.metadata.system, "rejected_system": rejected.metadata.system},
    )  # fmt: skip

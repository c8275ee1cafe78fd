"""Episode files as the judge and the metrics see them, and the items judged from each episode.

- `load_episode_file` reads episode JSONL, including legacy files without a metadata block (the
  dataset then comes from `--dataset` or, with a warning, from the file name) and files whose turns
  carry no `round_id` (reported, so that round-based metrics can refuse or infer rounds).
- `agent_items` makes one agent-scope item per Speaker turn, judged in context (persona, the
  conversation so far); `collective_item` one collective-scope item per episode, or per
  continuation after a shared prefix (branching episodes).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from mascot.errors import MascotError
from mascot.judge.prompt import JudgeItem, Line
from mascot.rosters import BUILTIN_ROSTERS, load_roster, roster_for_dataset
from mascot.rubrics import domain_of
from mascot.schema import Context, Episode, Persona, Roster, Turn
from mascot.store import RecordFormatError, iter_json_objects

log = logging.getLogger(__name__)

_NAME_HINTS = (("qmsum", "QMSum"), ("esconv", "ESConv"), ("empathetic", "EmpatheticDialogues"), ("_ed_", "EmpatheticDialogues"))


def guess_dataset(path: Path) -> str | None:
    name = f"_{Path(path).name.lower()}_".replace("-", "_").replace(".", "_")
    for hint, dataset in _NAME_HINTS:
        if hint in name:
            return dataset
    return None


@dataclass
class EpisodeFile:
    path: Path
    episodes: list[Episode]
    legacy_records: int = 0  # records without a metadata block
    missing_round_ids: set[str] = field(default_factory=set)  # episodes whose turns had no round_id
    warnings: list[str] = field(default_factory=list)


def _fill_turns(raw: dict) -> bool:
    """Gives legacy turns a turn_idx (their position) and a provisional round_id; True when any
    turn lacked its round_id."""
    missing = False
    for position, turn in enumerate(raw.get("turns") or []):
        if not isinstance(turn, dict):
            continue
        turn.setdefault("turn_idx", position)
        if turn.get("round_id") is None:
            missing = True
            turn["round_id"] = position
        if turn.get("turn_type") == "user" or turn.get("role") == "user":
            turn["turn_type"] = "user"
            turn.setdefault("agent_name", "user")
        turn.setdefault("response", turn.get("content", ""))
    return missing


class IdLedger:
    """Episode ids of one file. Two records with one id would be merged by everything downstream
    (judgments, scores, pairs are keyed by it), so a file with duplicate ids is refused."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: dict[str, list[int]] = {}
        self.derived_counts: dict[str, int] = {}

    def given(self, episode_id: str, number: int) -> None:
        self.lines.setdefault(episode_id, []).append(number)

    def derived(self, base: str) -> str:
        count = self.derived_counts.get(base, 0)
        self.derived_counts[base] = count + 1
        return base if count == 0 else f"{base}#{count}"

    def check(self) -> None:
        duplicates = {i: lines for i, lines in self.lines.items() if len(lines) > 1}
        if not duplicates:
            return
        shown = ", ".join(f"{i!r} (lines {', '.join(map(str, lines[:3]))})" for i, lines in list(duplicates.items())[:3])
        raise RecordFormatError(
            f"{self.path}: {len(duplicates)} episode ids occur more than once, e.g. {shown}; records with one id would be merged: "
            "keep one run per file or regenerate with a current mascot (its ids name the system)"
        )


def load_episode_file(path: Path, *, dataset: str | None = None, fallback_dataset: str | None = None) -> EpisodeFile:
    """`dataset` overrides every record's; `fallback_dataset` only fills records without metadata
    (quietly: for callers that do not need the dataset)."""
    path = Path(path)
    if not path.exists():
        raise MascotError(f"input file not found: {path}")
    out = EpisodeFile(path, [])
    guessed: str | None = None
    ids = IdLedger(path)
    for number, raw in iter_json_objects(path):
        if raw.get("metadata") is not None and not isinstance(raw["metadata"], dict):
            raise RecordFormatError(f"{path}:{number}: the metadata block is malformed (expected an object, found {type(raw['metadata']).__name__})")
        if not isinstance(raw.get("metadata"), dict):
            if dataset is None and guessed is None and fallback_dataset is None:
                guessed = guess_dataset(path)
                if guessed is None:
                    raise MascotError(f"{path}: records have no metadata block and the file name names no dataset: pass --dataset")
                out.warnings.append(f"{path.name}: no metadata block; dataset {guessed} guessed from the file name (pass --dataset to set it)")
            raw["metadata"] = {"dataset": dataset or guessed or fallback_dataset, "system": "unknown", "schema_version": "legacy"}
            out.legacy_records += 1
        elif dataset:
            raw["metadata"]["dataset"] = dataset
        if raw.get("episode_id") is None:  # legacy records: an id derived from the dataset's, made unique
            raw["episode_id"] = ids.derived(raw.get("conv_id") or (f"{raw['id']}:{raw.get('start_idx', 0)}" if raw.get("id") else f"{path.stem}:{number}"))
        else:
            ids.given(str(raw["episode_id"]), number)
        raw.setdefault("context_id", raw.get("conv_id") or raw.get("id"))
        missing_rounds = _fill_turns(raw)
        try:
            episode = Episode.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "record"
            raise RecordFormatError(f"{path}:{number}: not a valid episode ({where}: {first['msg']})") from None
        if missing_rounds:
            out.missing_round_ids.add(episode.episode_id)
        out.episodes.append(episode)
    ids.check()
    if not out.episodes:
        raise MascotError(f"{path}: no episodes in the file (it is empty)")
    for warning in out.warnings:
        log.warning(warning)
    return out


# --------------------------------------------------------------------------- context and roster


def episode_domain(episode: Episode) -> str:
    return domain_of(episode.metadata.dataset)


def episode_roster(episode: Episode) -> Roster | None:
    name = episode.metadata.roster
    try:
        if name in BUILTIN_ROSTERS:
            return load_roster(name)
        return roster_for_dataset(episode.metadata.dataset)
    except MascotError:
        return None


def persona_of(roster: Roster | None, name: str) -> Persona:
    if roster is not None:
        try:
            return roster.persona(name)
        except KeyError:
            pass
    return Persona(name=name, role="companion")


def episode_context(episode: Episode, contexts: dict[str, Context] | None = None) -> Context | None:
    """The dataset item an episode started from: embedded in the record, or looked up by id."""
    if episode.context is not None:
        return episode.context
    if contexts and episode.context_id in contexts:
        return contexts[episode.context_id]
    return None


def render_context(context: Context | None) -> str:
    if context is None:
        return ""
    if context.is_meeting:
        transcript = "\n".join(f"{line.speaker}: {line.text}" for line in context.transcript)
        return f"Meeting: {context.meeting}\nParticipant's question: {context.query or '(none given)'}\nTranscript excerpt:\n{transcript}"
    parts = [f"The person's situation: {context.situation or '(not stated)'}"]
    if context.emotion:
        parts.append(f"The person feels: {context.emotion}")
    return "\n".join(parts)


def user_label(domain: str) -> str:
    return "Participant" if domain == "meetings" else "Person"


def opening_lines(context: Context | None, domain: str) -> list[Line]:
    if context is None:
        return []
    who = user_label(domain)
    return [(who if line.speaker in ("user", "usr", "seeker") else line.speaker.capitalize(), line.text) for line in context.opening_turns]


def turn_lines(turns: list[Turn], domain: str) -> list[Line]:
    who = user_label(domain)
    return [(who if t.is_user else t.agent_name, t.response) for t in turns]


# --------------------------------------------------------------------------- items


def agent_items(episode: Episode, contexts: dict[str, Context] | None = None) -> list[JudgeItem]:
    domain = episode_domain(episode)
    context = episode_context(episode, contexts)
    roster = episode_roster(episode)
    opening = opening_lines(context, domain)
    items = []
    for position, turn in enumerate(episode.turns):
        if turn.is_user:
            continue
        items.append(
            JudgeItem(
                item_id=f"{episode.episode_id}#t{turn.turn_idx}",
                scope="agent",
                domain=domain,
                context=render_context(context),
                history=opening + turn_lines(episode.turns[:position], domain),
                response=turn.response,
                persona=persona_of(roster, turn.agent_name),
                system=episode.metadata.system,
                provenance={"episode_id": episode.episode_id, "context_id": episode.context_id, "turn_idx": turn.turn_idx, "round_id": turn.round_id},
            )
        )
    return items


def collective_item(episode: Episode, contexts: dict[str, Context] | None = None, *, prefix_turns: int = 0) -> JudgeItem:
    """The whole episode, or (with `prefix_turns`) the continuation after a shared prefix, which the
    judge sees as earlier conversation only."""
    domain = episode_domain(episode)
    context = episode_context(episode, contexts)
    roster = episode_roster(episode)
    spoken = list(dict.fromkeys(t.agent_name for t in episode.turns if not t.is_user))
    personas = list(roster.personas) if roster is not None else [persona_of(None, n) for n in spoken]
    suffix = "#collective" if prefix_turns == 0 else f"#continuation@{prefix_turns}"
    return JudgeItem(
        item_id=f"{episode.episode_id}{suffix}",
        scope="collective",
        domain=domain,
        context=render_context(context),
        history=opening_lines(context, domain) + turn_lines(episode.turns[:prefix_turns], domain),
        turns=turn_lines(episode.turns[prefix_turns:], domain),
        roster=personas,
        system=episode.metadata.system,
        provenance={"episode_id": episode.episode_id, "context_id": episode.context_id},
    )

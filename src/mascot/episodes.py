"""Episode files, read one way by every consumer (judging, metrics, pairing, training, the study,
head-to-head comparison), and what an episode is looked up by (its domain, roster, context).

The reading rule:
- a line that is not an episode (not JSON, not an object, a record that does not validate) is
  skipped and counted; the file's skipped lines are logged once, with their line numbers, and
  listed in `EpisodeFile.warnings` (which reports carry);
- a last line without its newline that does not parse is a write cut short by a stopped run: it
  is dropped with a note, not counted as malformed;
- a file with no valid episode is one MascotError line;
- two records with one episode id are refused (everything downstream is keyed by it);
- legacy records without a metadata block get their dataset from `dataset`, `fallback_dataset`
  or, with a warning, the file name; legacy turns without `round_id` get their position
  (`missing_round_ids` names those episodes, so that round-based metrics can refuse them).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from mascot.data.registry import guess_dataset
from mascot.errors import MascotError, json_problem
from mascot.files import RecordFormatError
from mascot.progress import plural
from mascot.rosters import BUILTIN_ROSTERS, load_roster, roster_for_dataset
from mascot.rubrics import domain_of
from mascot.schema import Context, Episode, Persona, Roster

log = logging.getLogger(__name__)

EPISODE_FILE = "episodes.jsonl"  # a run folder's episodes
SHOWN_LINES = 5  # line numbers listed in the one warning about skipped lines


class MalformedLine(Exception):
    """One line that is not an episode; its message says why (internal to the reader)."""


@dataclass
class EpisodeFile:
    path: Path
    episodes: list[Episode]
    legacy_records: int = 0  # records without a metadata block
    missing_round_ids: set[str] = field(default_factory=set)  # episodes whose turns had no round_id
    skipped_lines: list[int] = field(default_factory=list)  # malformed lines, skipped
    torn_tail: bool = False  # the last line was cut short and dropped
    warnings: list[str] = field(default_factory=list)

    def skipped_note(self) -> str:
        """'; skipped 2 malformed lines of episodes.jsonl' for a closing line ('' when none was)."""
        if not self.skipped_lines:
            return ""
        return f"; skipped {plural(len(self.skipped_lines), 'malformed line')} of {self.path.name}"


def episode_file_path(path: Path | str) -> Path:
    """An episode file, or the episodes.jsonl of a run folder."""
    path = Path(path)
    if path.is_dir():
        path = path / EPISODE_FILE
    if not path.is_file():
        raise MascotError(f"no episode file at {path} (give an episode JSONL or a run folder holding {EPISODE_FILE})")
    return path


def _fill_turns(raw: dict) -> bool:
    """Gives legacy turns a turn_idx (their position) and a provisional round_id; True when any
    turn lacked its round_id."""
    missing = False
    turns = raw.get("turns")
    for position, turn in enumerate(turns if isinstance(turns, list) else []):
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


def _parse_line(raw: bytes) -> dict:
    try:
        record = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise MalformedLine("not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise MalformedLine(f"not valid JSON ({json_problem(exc)})") from None
    if not isinstance(record, dict):
        raise MalformedLine(f"expected a JSON object, found {type(record).__name__}")
    if record.get("metadata") is not None and not isinstance(record["metadata"], dict):
        raise MalformedLine(f"the metadata block is malformed (expected an object, found {type(record['metadata']).__name__})")
    return record


def _validated(raw: dict) -> Episode:
    try:
        return Episode.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "record"
        raise MalformedLine(f"not a valid episode ({where}: {first['msg']})") from None


class _Reader:
    """The state of reading one file: ids, the guessed dataset, what was skipped."""

    def __init__(self, path: Path, dataset: str | None, fallback_dataset: str | None) -> None:
        self.out = EpisodeFile(path, [])
        self.ids = IdLedger(path)
        self.dataset, self.fallback = dataset, fallback_dataset
        self.guessed: str | None = None
        self.first_problem: str | None = None

    def metadata_for_legacy(self) -> dict:
        path = self.out.path
        if self.dataset is None and self.guessed is None and self.fallback is None:
            self.guessed = guess_dataset(path)
            if self.guessed is None:
                raise MascotError(f"{path}: records have no metadata block and the file name names no dataset: pass --dataset")
            self.out.warnings.append(f"{path.name}: no metadata block; dataset {self.guessed} guessed from the file name (pass --dataset to set it)")
        self.out.legacy_records += 1
        return {"dataset": self.dataset or self.guessed or self.fallback, "system": "unknown", "schema_version": "legacy"}

    def episode(self, raw: dict, number: int) -> Episode:
        if not isinstance(raw.get("metadata"), dict):
            raw["metadata"] = self.metadata_for_legacy()
        elif self.dataset:
            raw["metadata"]["dataset"] = self.dataset
        given_id = raw.get("episode_id")
        if given_id is None:  # legacy records: an id derived from the dataset's, made unique
            raw["episode_id"] = self.ids.derived(
                raw.get("conv_id") or (f"{raw['id']}:{raw.get('start_idx', 0)}" if raw.get("id") else f"{self.out.path.stem}:{number}")
            )
        raw.setdefault("context_id", raw.get("conv_id") or raw.get("id"))
        missing_rounds = _fill_turns(raw)
        episode = _validated(raw)
        if given_id is not None:
            self.ids.given(str(given_id), number)
        if missing_rounds:
            self.out.missing_round_ids.add(episode.episode_id)
        return episode

    def line(self, raw: bytes, number: int, is_tail: bool) -> None:
        try:
            self.out.episodes.append(self.episode(_parse_line(raw), number))
        except MalformedLine as problem:
            if is_tail:
                self.out.torn_tail = True
                return
            self.out.skipped_lines.append(number)
            self.first_problem = self.first_problem or f"{self.out.path.name}:{number}: {problem}"

    def finish(self) -> EpisodeFile:
        out, path = self.out, self.out.path
        self.ids.check()
        if out.skipped_lines:
            shown = ", ".join(map(str, out.skipped_lines[:SHOWN_LINES])) + (", ..." if len(out.skipped_lines) > SHOWN_LINES else "")
            out.warnings.append(
                f"{path.name}: skipped {plural(len(out.skipped_lines), 'malformed line')} (lines {shown}; the first: {self.first_problem})"
            )
        if out.torn_tail:
            out.warnings.append(f"{path.name}: the last line is cut short (a run stopped while writing it?) and was ignored")
        if not out.episodes:
            found = (
                f"{plural(len(out.skipped_lines), 'malformed line')}, the first: {self.first_problem}"
                if out.skipped_lines
                else "only a cut-short last line"
                if out.torn_tail
                else "it is empty"
            )
            raise MascotError(f"{path}: no episodes in the file ({found})")
        for warning in out.warnings:
            log.warning(warning)
        return out


def _lines(path: Path) -> list[tuple[int, bytes, bool]]:
    """(line number, bytes, is the unterminated last line) of each non-blank line."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise MascotError(f"cannot read {path}: {exc.strerror or exc}") from None
    lines = data.split(b"\n")
    return [(n, raw, n == len(lines) and not data.endswith(b"\n")) for n, raw in enumerate(lines, start=1) if raw.strip()]


def load_episode_file(path: Path | str, *, dataset: str | None = None, fallback_dataset: str | None = None) -> EpisodeFile:
    """The episodes of a file, by the rule above (`episode_file_path` finds a run folder's). `dataset`
    overrides every record's; `fallback_dataset` only fills records without metadata (quietly: for
    callers that do not need the dataset)."""
    path = Path(path)
    if path.is_dir():
        raise MascotError(f"{path} is a folder, not a file")
    if not path.exists():
        raise MascotError(f"input file not found: {path}")
    reader = _Reader(path, dataset, fallback_dataset)
    for number, raw, is_tail in _lines(reader.out.path):
        reader.line(raw, number, is_tail)
    return reader.finish()


# --------------------------------------------------------------------------- what an episode is looked up by


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

"""QMSum (Zhong et al., 2021): one meeting per JSON line, about 550 transcript turns each.

One Context per (meeting, specific query): the query, and a window of the transcript that starts at
the query's first relevant turn and fits the token budget. A meeting without specific queries
falls back to its general queries, with the window at the start of the meeting. Records carry no
id, so a meeting's id is `qmsum-<split>-<line>` and a context's `<meeting>-<query index>` (general
queries: `<meeting>-g<index>`).

Token counts are estimated as whitespace words x 1.3 (see `estimate_tokens`), which is close enough
to keep a window within a prompt budget without loading a tokenizer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mascot.data.registry import DatasetError
from mascot.data.sources import (
    estimate_tokens,
    iter_json_lines,
    load_hub_split,
    no_contexts_error,
    require_list,
    require_str,
)
from mascot.schema import Context, DialogueLine
from mascot.vocab import TRANSCRIPT_WINDOW

NAME = "QMSum"
# No re-upload on the hub keeps the original layout, so the default source is the QMSum
# repository's own JSONL files, read with the `json` builder of `datasets`.
SOURCE_URL = "https://raw.githubusercontent.com/Yale-LILY/QMSum/main/data/ALL/jsonl/{split}.jsonl"
DEFAULT_TRANSCRIPT_WINDOW = TRANSCRIPT_WINDOW
RecordFilter = Callable[[dict[str, Any]], bool]

_MARKER = re.compile(r"\{(?:disfmarker|vocalsound|nonvocalsound|pause|gap|comment)\}", re.IGNORECASE)
_SPACE_BEFORE = re.compile(r"\s+(?=[.,!?;:%)\]]|n't\b|'(?:s|re|ve|ll|d|m|t)\b)", re.IGNORECASE)
_SPACE_AFTER_OPEN = re.compile(r"([(\[])\s+")


def file_candidates(split: str) -> list[str]:
    return [f"{split}.jsonl"]


def detokenize(text: str) -> str:
    """Light clean-up for prompts: transcription markers removed, no space before punctuation or
    contractions ("it 's great ." -> "it's great.")."""
    text = _MARKER.sub(" ", text)
    text = " ".join(text.split())
    text = _SPACE_BEFORE.sub("", text)
    return _SPACE_AFTER_OPEN.sub(r"\1", text)


def _transcript(record: dict[str, Any], where: str) -> list[tuple[str, str]]:
    turns = require_list(record, "meeting_transcripts", where)
    if not turns:
        raise DatasetError(f"{where}: meeting_transcripts is empty")
    parsed = []
    for idx, turn in enumerate(turns):
        if not isinstance(turn, dict) or not isinstance(turn.get("content"), str):
            raise DatasetError(f"{where}: meeting_transcripts[{idx}] needs a string 'content'")
        parsed.append((str(turn.get("speaker") or "Speaker").strip(), turn["content"]))
    return parsed


def _truncate_to_budget(text: str, budget: int) -> str:
    words = text.split()
    keep = max(1, int(budget / 1.3))
    return text if len(words) <= keep else " ".join(words[:keep]) + " ..."


def window_of(turns: list[tuple[str, str]], start: int, size: int) -> list[DialogueLine]:
    """Consecutive turns from `start` while they fit the budget; turns that are only markers are
    skipped. A first turn longer than the whole budget is cut rather than dropped."""
    window: list[DialogueLine] = []
    used = 0
    for speaker, content in turns[start:]:
        text = detokenize(content)
        if not text:
            continue
        cost = estimate_tokens(text)
        if used + cost > size:
            if not window:
                window.append(DialogueLine(speaker=speaker, text=_truncate_to_budget(text, size)))
            break
        window.append(DialogueLine(speaker=speaker, text=text))
        used += cost
    return window


def _span_start(query: dict[str, Any], where: str, num_turns: int) -> int:
    spans = require_list(query, "relevant_text_span", where)
    starts = []
    for span in spans:
        if not isinstance(span, (list, tuple)) or len(span) != 2:
            raise DatasetError(f"{where}: relevant_text_span entries must be [start, end] pairs (found {span!r})")
        try:
            starts.append(int(str(span[0]).strip()))
        except ValueError:
            raise DatasetError(f"{where}: span start {span[0]!r} is not a turn index") from None
    if not starts:
        return 0
    start = min(starts)
    if not 0 <= start < num_turns:
        raise DatasetError(f"{where}: span start {start} is outside the transcript's {num_turns} turns")
    return start


def _queries(record: dict[str, Any], where: str, num_turns: int) -> list[tuple[str, dict[str, Any], int]]:
    """(id suffix, query record, window start) for each query this meeting contributes."""
    specific = require_list(record, "specific_query_list", where)
    picked = []
    for idx, query in enumerate(specific):
        q_where = f"{where}: specific_query_list[{idx}]"
        if not isinstance(query, dict):
            raise DatasetError(f"{q_where} must be an object")
        picked.append((str(idx), query, _span_start(query, q_where, num_turns)))
    if picked:
        return picked
    general = record.get("general_query_list") or []
    if not isinstance(general, list):
        raise DatasetError(f"{where}: field 'general_query_list' must be a list")
    return [(f"g{idx}", query, 0) for idx, query in enumerate(general) if isinstance(query, dict)]


def meeting_contexts(
    record: dict[str, Any], *, split: str, number: int, where: str, transcript_window: int = DEFAULT_TRANSCRIPT_WINDOW
) -> Iterator[Context]:
    meeting = f"qmsum-{split}-{number}"
    turns = _transcript(record, where)
    for suffix, query, start in _queries(record, where, len(turns)):
        text = require_str(query, "query", f"{where}: query {suffix}", allow_empty=False)
        answer = query.get("answer")
        yield Context(
            context_id=f"{meeting}-{suffix}",
            dataset=NAME,
            split=split,
            meeting=meeting,
            start_idx=start,
            query=" ".join(text.split()),
            transcript=window_of(turns, start, transcript_window),
            answer=answer if isinstance(answer, str) else None,
        )


def iter_file(
    path: Path, split: str, *, transcript_window: int = DEFAULT_TRANSCRIPT_WINDOW, keep_record: RecordFilter | None = None, **_: Any
) -> Iterator[Context]:
    """`keep_record`: a filter on whole meeting records (the evaluation splits by domain)."""
    count = skipped = 0
    for number, record in iter_json_lines(path):
        if keep_record is not None and not keep_record(record):
            skipped += 1
            continue
        for context in meeting_contexts(record, split=split, number=number, where=f"{path}:{number}", transcript_window=transcript_window):
            count += 1
            yield context
    if not count and not skipped:
        raise no_contexts_error(NAME, str(path), split)


def iter_hub(
    split: str, *, transcript_window: int = DEFAULT_TRANSCRIPT_WINDOW, keep_record: RecordFilter | None = None, **_: Any
) -> Iterator[Context]:
    url = SOURCE_URL.format(split=split)
    rows = load_hub_split(NAME, "json", "train", source=url, shown_split=split, data_files=url)  # one file per split: datasets calls it "train"
    count = skipped = 0
    for number, row in enumerate(rows, start=1):
        if keep_record is not None and not keep_record(dict(row)):
            skipped += 1
            continue
        where = f"{url} line {number}"
        for context in meeting_contexts(dict(row), split=split, number=number, where=where, transcript_window=transcript_window):
            count += 1
            yield context
    if not count and not skipped:
        raise no_contexts_error(NAME, url, split)

"""Empathetic Dialogues (Rashkin et al., 2019): one utterance per CSV row, 8 columns.

Rows are grouped by `conv_id` and ordered by `utterance_idx`; one Context per conversation, whose
opening is the first utterance of the speaker who started it (the person seeking support).
Commas inside text are stored as `_comma_` and are decoded before anything reaches a prompt.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from mascot.data.registry import DatasetError
from mascot.data.sources import load_hub_split, no_contexts_error, require_file
from mascot.schema import Context, DialogueLine

NAME = "EmpatheticDialogues"
HUB_ID = "facebook/empathetic_dialogues"
# The hub repository holds a loading script that recent `datasets` no longer runs; its parquet
# conversion branch has the same columns.
HUB_REVISION = "refs/convert/parquet"
HUB_SPLITS = {"train": "train", "valid": "validation", "test": "test"}
COLUMNS = ["conv_id", "utterance_idx", "context", "prompt", "speaker_idx", "utterance", "selfeval", "tags"]

_COMMA_BEFORE_WORD = re.compile(r"_comma_(?=[^\W\d_])")


def file_candidates(split: str) -> list[str]:
    return [f"{split}.csv"]


def decode_text(text: str) -> str:
    """`_comma_` back to a comma; a space after it when a word follows directly ("Today_comma_as")."""
    return _COMMA_BEFORE_WORD.sub(", ", text).replace("_comma_", ",").strip()


def _utterance_idx(value: Any, where: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise DatasetError(f"{where}: utterance_idx must be an integer (found {value!r})") from None


def _conversation_context(conv_id: str, rows: list[tuple[int, dict[str, Any]]], split: str) -> Context:
    rows.sort(key=lambda item: item[0])
    first = rows[0][1]
    return Context(
        context_id=conv_id,
        conv_id=conv_id,
        dataset=NAME,
        split=split,
        situation=decode_text(str(first["prompt"])),
        emotion=str(first["context"]).strip(),
        opening_turns=[DialogueLine(speaker="user", text=decode_text(str(first["utterance"])))],
    )


def _group(rows: Iterable[tuple[str, dict[str, Any]]], split: str) -> Iterator[Context]:
    """Conversations in order of first appearance. The data sets are small (a few MB), so grouping
    in memory is cheap and also tolerates conversations whose rows are not contiguous."""
    conversations: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for where, row in rows:
        for column in ("conv_id", "context", "prompt", "utterance"):
            if not isinstance(row.get(column), str):
                raise DatasetError(f"{where}: column {column!r} is missing")
        if not row["conv_id"].strip():
            raise DatasetError(f"{where}: empty conv_id")
        conversations.setdefault(row["conv_id"], []).append((_utterance_idx(row.get("utterance_idx"), where), row))
    for conv_id, conv_rows in conversations.items():
        yield _conversation_context(conv_id, conv_rows, split)


def csv_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(file:line, row) of an ED CSV, its header and column count checked (DatasetError otherwise)."""
    with open(path, encoding="utf-8-sig", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise DatasetError(f"{path}: empty file")
        if [h.strip() for h in header] != COLUMNS:
            raise DatasetError(f"{path}:1: expected the columns {','.join(COLUMNS)}, found {','.join(header)[:200]}")
        start = reader.line_num + 1
        try:
            for row in reader:
                where = f"{path}:{start}"
                start = reader.line_num + 1
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue
                if len(row) != len(COLUMNS):
                    raise DatasetError(f"{where}: expected {len(COLUMNS)} columns, found {len(row)}")
                yield where, dict(zip(COLUMNS, row))
        except csv.Error as exc:
            raise DatasetError(f"{path}:{start}: malformed CSV ({exc})") from None


def iter_file(path: Path, split: str, **_: Any) -> Iterator[Context]:
    require_file(path)
    try:
        contexts = list(_group(csv_rows(path), split))
    except UnicodeDecodeError:
        raise DatasetError(f"{path}: not UTF-8 text") from None
    if not contexts:
        raise no_contexts_error(NAME, str(path), split)
    yield from contexts


def iter_hub(split: str, **_: Any) -> Iterator[Context]:
    hub_split = HUB_SPLITS[split]
    rows = load_hub_split(NAME, HUB_ID, hub_split, revision=HUB_REVISION)
    where = f"{HUB_ID}[{hub_split}] row"
    contexts = list(_group(((f"{where} {i}", dict(r)) for i, r in enumerate(rows, start=1)), split))
    if not contexts:
        raise no_contexts_error(NAME, HUB_ID, split)
    yield from contexts


def supporter_dialogues(path: Path) -> list[tuple[Context, list[DialogueLine]]]:
    """Each whole conversation of a file, for SFT on the listener's turns: the speaker (the person)
    opens and the listener answers, alternately."""
    conversations: dict[str, list[dict]] = {}
    for _, row in csv_rows(path):
        conversations.setdefault(row["conv_id"], []).append(row)
    out = []
    for conv_id, rows in conversations.items():
        rows.sort(key=lambda r: int(r["utterance_idx"]))
        lines = [DialogueLine(speaker="user" if i % 2 == 0 else "supporter", text=decode_text(r["utterance"])) for i, r in enumerate(rows)]
        out.append((Context(context_id=conv_id, dataset=NAME, situation=decode_text(rows[0]["prompt"]), emotion=rows[0]["context"].strip()), lines))
    return out

"""Training data: preference pairs and episodes read from a run directory or a JSONL file.

Everything arrives as the typed records of `mascot.schema` (PreferencePair, Episode); this module
turns them into what TRL takes (TRL's conversational prompt/chosen/rejected + margin) and holds out
a seeded share for evaluation, split by prompt so that no held-out prompt was seen in training.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mascot.data.registry import canonical_dataset_name
from mascot.episodes import load_episode_file
from mascot.errors import MascotError
from mascot.files import read_jsonl
from mascot.llm.context_fit import (
    CUT_MARK,  # one mark for a cut prompt, in training and at the server
)
from mascot.runs.record import settings_view
from mascot.schema import Episode, PreferencePair
from mascot.train.scoring import chat_ids, encode_fitted

log = logging.getLogger(__name__)

# File names each kind of record has in a run directory, most specific first.
PAIR_FILES = {
    "persona": ("pairs.jsonl", "preference_pairs.jsonl", "persona_pairs.jsonl"),
    "episode": ("episode_pairs.jsonl", "group_pairs.jsonl", "pairs.jsonl", "preference_pairs.jsonl"),
    "directive": ("directive_pairs.jsonl", "pairs.jsonl", "preference_pairs.jsonl"),
}
EPISODE_FILES = ("episodes.jsonl",)


class TrainingDataError(MascotError, ValueError):
    """Training data that is missing, empty or of the wrong kind."""


def resolve_data_file(path: str | Path, candidates: Sequence[str]) -> Path:
    """A JSONL file as given, or the first of `candidates` inside a run directory."""
    path = Path(path)
    if path.is_file():
        return path
    if path.is_dir():
        for name in candidates:
            if (path / name).is_file():
                return path / name
        raise TrainingDataError(f"{path} holds none of {', '.join(candidates)}")
    raise TrainingDataError(f"training data not found: {path}")


def load_pairs(path: str | Path, kind: str) -> tuple[Path, list[PreferencePair]]:
    """Pairs of one kind ('persona', 'episode' or 'directive'); other kinds in the file are skipped."""
    file = resolve_data_file(path, PAIR_FILES[kind])
    pairs = list(read_jsonl(file, PreferencePair))
    wanted = [p for p in pairs if p.kind == kind]
    if len(wanted) < len(pairs):
        log.warning("%s: skipped %d pairs that are not kind=%r", file, len(pairs) - len(wanted), kind)
    if not wanted:
        raise TrainingDataError(f"{file}: no preference pairs of kind {kind!r} ({len(pairs)} records of other kinds)")
    return file, wanted


def load_episodes(path: str | Path, dataset: str | None = None) -> tuple[Path, list[Episode]]:
    """The episodes of a file or run folder, read by the one episode reader (`mascot.episodes`)."""

    file = resolve_data_file(path, EPISODE_FILES)
    return file, load_episode_file(file, dataset=dataset).episodes


def prompt_key(prompt: list[dict[str, str]]) -> str:
    return json.dumps(prompt, sort_keys=True, ensure_ascii=False)


def context_key(pair: PreferencePair) -> str:
    """What holds a context's prompts together across personas: its id, else the prompt itself."""
    return pair.context_id or prompt_key(pair.prompt)


def split_by_prompt(pairs: Sequence[PreferencePair], eval_fraction: float, seed: int, key=None) -> tuple[list, list]:
    """Seeded hold-out of whole prompts (or of whatever `key` groups, e.g. `context_key`): a
    held-out pair's prompt never appears in training.

    Falls back to a pair-level split when there is a single prompt."""
    key = key or (lambda pair: prompt_key(pair.prompt))
    if eval_fraction <= 0 or len(pairs) < 2:
        return list(pairs), []
    if not 0 < eval_fraction < 1:
        raise TrainingDataError(f"--eval-fraction must be in [0, 1), got {eval_fraction}")
    groups: dict[str, list[PreferencePair]] = {}
    for pair in pairs:
        groups.setdefault(key(pair), []).append(pair)
    keys = list(groups)
    rng = random.Random(seed)
    if len(keys) == 1:
        shuffled = list(pairs)
        rng.shuffle(shuffled)
        cut = max(1, round(len(shuffled) * eval_fraction))
        return shuffled[cut:], shuffled[:cut]
    rng.shuffle(keys)
    cut = min(len(keys) - 1, max(1, round(len(keys) * eval_fraction)))
    held = {k for k in keys[:cut]}
    train = [p for p in pairs if key(p) not in held]
    evals = [p for p in pairs if key(p) in held]
    return train, evals


def limit_records(records: list, limit: int | None, seed: int) -> list:
    """At most `limit` records, a seeded sample that keeps the file order."""
    if limit is None or limit >= len(records):
        return records
    keep = sorted(random.Random(seed).sample(range(len(records)), limit))
    return [records[i] for i in keep]


def pair_rows(pairs: Sequence[PreferencePair], margin_scale: float = 0.0) -> list[dict[str, Any]]:
    """TRL's conversational preference rows; `margin` only when it is used."""
    rows = []
    for pair in pairs:
        row: dict[str, Any] = {"prompt": pair.prompt, "chosen": pair.chosen, "rejected": pair.rejected}
        if margin_scale:
            row["margin"] = float(pair.margin) * margin_scale
        rows.append(row)
    return rows


def tokenized_pair_rows(pairs: Sequence[PreferencePair], tokenizer, max_length: int, margin_scale: float = 0.0) -> tuple[list[dict[str, Any]], int]:
    """RewardTrainer rows already tokenized and fitted to `max_length` (the middle of an over-long
    prompt is dropped, see `scoring.encode_fitted`), so that no pair is lost to its length; also
    the number of pairs that were cut."""

    rows, cut = [], 0
    for pair in pairs:
        chosen, chosen_cut = encode_fitted(tokenizer, pair.prompt, pair.chosen, max_length)
        rejected, rejected_cut = encode_fitted(tokenizer, pair.prompt, pair.rejected, max_length)
        cut += chosen_cut or rejected_cut
        row: dict[str, Any] = {"chosen_ids": chosen, "rejected_ids": rejected}
        if margin_scale:
            row["margin"] = float(pair.margin) * margin_scale
        rows.append(row)
    return rows, cut


FIT_SLACK_TOKENS = 8  # re-tokenising cut text can merge or split a few tokens at the seams


def shorten_prompt(
    tokenizer, prompt: list[dict[str, str]], completions: Sequence[list[dict[str, str]]], max_length: int
) -> tuple[list[dict[str, str]], bool]:
    """The prompt with the middle of its longest message cut, so that prompt + each completion fits
    in `max_length` tokens (for trainers that tokenize text themselves, like TRL's DPOTrainer)."""

    prompt = [dict(m) for m in prompt]
    cut = False
    for _ in range(3):  # a second pass absorbs tokens the cut text gained when re-tokenised
        excess = max(len(chat_ids(tokenizer, prompt + list(c))) for c in completions) - max_length
        if excess <= 0:
            return prompt, cut
        longest = max(range(len(prompt)), key=lambda i: len(prompt[i]["content"]))
        ids = tokenizer(prompt[longest]["content"], add_special_tokens=False)["input_ids"]
        keep = len(ids) - excess - FIT_SLACK_TOKENS
        if keep < 2:
            break
        head = keep // 2
        prompt[longest]["content"] = tokenizer.decode(ids[:head]) + CUT_MARK + tokenizer.decode(ids[len(ids) - (keep - head) :])
        cut = True
    return prompt, cut


def fitted_pair_rows(pairs: Sequence[PreferencePair], tokenizer, max_length: int) -> tuple[list[dict[str, Any]], int]:
    """Conversational rows whose prompts are shortened to fit `max_length`, and how many were."""
    rows, cut = [], 0
    for pair in pairs:
        prompt, was_cut = shorten_prompt(tokenizer, pair.prompt, (pair.chosen, pair.rejected), max_length)
        cut += was_cut
        rows.append({"prompt": prompt, "chosen": pair.chosen, "rejected": pair.rejected})
    return rows, cut


def require_records_left(left: int, *, what: str, source: Path, read: int, held_out: int, dropped: int = 0, dropped_by: str = "") -> None:
    """One line, with the counts and the flag to change, when nothing is left to train on."""
    if left > 0:
        return
    parts = [f"{read} read from {source}", f"{held_out} held out for evaluation (--eval-fraction)"]
    if dropped:
        parts.append(f"{dropped} dropped by {dropped_by}")
    hint = f"; raise {dropped_by} or " if dropped else "; "
    raise TrainingDataError(
        f"no {what} left to train on: {', '.join(parts)}; one optimizer step needs at least 1{hint}"
        "generate more data (--limit, --num-candidates) or lower --eval-fraction"
    )


def to_dataset(rows: list[dict[str, Any]]):
    from datasets import Dataset

    return Dataset.from_list(rows)


@dataclass
class PromptRow:
    prompt: list[dict[str, str]]
    persona: str


def unique_prompts(pairs: Sequence[PreferencePair]) -> list[PromptRow]:
    """The pairs' prompts, each once, in file order (GRPO samples its own completions for them)."""
    seen: set[str] = set()
    rows = []
    for pair in pairs:
        key = prompt_key(pair.prompt)
        if key not in seen:
            seen.add(key)
            rows.append(PromptRow(prompt=pair.prompt, persona=pair.persona or ""))
    return rows


def run_settings(data_file: Path) -> dict[str, Any]:
    """The `settings` block of the run_config.json beside a data file (dataset, rubric version...)."""
    for folder in (data_file.parent, data_file.parent.parent):
        config = folder / "run_config.json"
        if config.is_file():
            try:
                data = json.loads(config.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                log.warning("%s is unreadable; dataset and rubric version must come from flags", config)
                return {}
            settings = settings_view(data.get("settings") or {})
            settings.setdefault("_roles", data.get("roles") or {})
            return settings
    return {}


def resolve_dataset(flag: str | None, settings: dict[str, Any]) -> str:
    name = flag or settings.get("dataset")
    if not name:
        raise TrainingDataError("pass --dataset (the data's run_config.json does not name one)")
    return canonical_dataset_name(str(name))

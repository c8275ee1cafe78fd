"""Supervised examples for `mascot train sft`: (Speaker prompt, reply) in TRL's conversational
prompt-completion format.

- `candidates` (default): from a Stage-1 run (candidates.jsonl), the best-scored candidate of each
  query (one context, one persona); ties go to the earliest candidate. Unjudged or empty
  candidates are skipped and counted.
- `dataset`: the dataset's own supporter turns (ESConv's supporter, Empathetic Dialogues' listener),
  each after the dialogue so far, written with a persona's Speaker prompt: personas take the turns
  in rotation, so every persona learns from the same share of the data.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from mascot.data.registry import dataset as registered
from mascot.dialogue.prompts import speaker_messages
from mascot.files import read_jsonl
from mascot.schema import Candidate, Roster
from mascot.train.data import TrainingDataError, resolve_data_file, shorten_prompt

SFT_SOURCES = ("candidates", "dataset")
CANDIDATE_FILES = ("candidates.jsonl",)


@dataclass
class SFTExample:
    prompt: list[dict[str, str]]
    completion: list[dict[str, str]]
    query: str  # examples of one query stay on one side of the held-out split
    persona: str
    score: float | None = None


@dataclass
class SFTData:
    source: Path
    examples: list[SFTExample]
    read: int
    skipped: dict[str, int] = field(default_factory=dict)


def best_candidates(path: str | Path) -> SFTData:
    file = resolve_data_file(path, CANDIDATE_FILES)
    candidates = list(read_jsonl(file, Candidate))
    skipped = {"unjudged": 0, "empty": 0}
    best: dict[tuple[str, str], Candidate] = {}
    for c in candidates:
        if c.overall is None:
            skipped["unjudged"] += 1
            continue
        if not c.response.strip():
            skipped["empty"] += 1
            continue
        key = (c.context_id, c.persona)
        held = best.get(key)
        if held is None or (c.overall, -c.candidate_idx) > (held.overall, -held.candidate_idx):
            best[key] = c
    examples = [
        SFTExample(c.prompt, [{"role": "assistant", "content": c.response}], f"{c.context_id}\x1f{c.persona}", c.persona, c.overall)
        for c in best.values()
    ]
    if not examples:
        raise TrainingDataError(f"{file}: no judged, non-empty candidate to learn from ({len(candidates)} read)")
    return SFTData(file, examples, len(candidates), skipped)


def dataset_turns(path: str | Path, dataset: str, roster: Roster) -> SFTData:
    """Every supporter turn that answers something, as a persona's Speaker prompt and reply."""

    path = Path(path)
    if not path.is_file():
        raise TrainingDataError(f"--sft-data dataset needs the dataset file as --data-path: {path} is not a file")
    examples: list[SFTExample] = []
    dialogues = registered(dataset).sft_dialogues(path)
    for ctx, lines in dialogues:
        for i, line in enumerate(lines):
            if line.speaker != "supporter" or i == 0 or not line.text or not any(x.speaker == "user" for x in lines[:i]):
                continue
            persona = roster.personas[len(examples) % len(roster.personas)]
            turn_ctx = ctx.model_copy(update={"opening_turns": lines[:i]})
            prompt = speaker_messages(persona, roster, turn_ctx, [])
            examples.append(SFTExample(prompt, [{"role": "assistant", "content": line.text}], ctx.context_id, persona.name))
    if not examples:
        raise TrainingDataError(f"{path}: no supporter turn that follows a seeker turn ({len(dialogues)} dialogues read)")
    return SFTData(path, examples, len(dialogues))


def split_by_query(examples: list[SFTExample], eval_fraction: float, seed: int) -> tuple[list[SFTExample], list[SFTExample]]:
    queries = sorted({e.query for e in examples})
    random.Random(seed).shuffle(queries)
    held = set(queries[: int(len(queries) * eval_fraction)]) if len(queries) > 1 else set()
    return [e for e in examples if e.query not in held], [e for e in examples if e.query in held]


def fitted_rows(examples: list[SFTExample], tokenizer, max_length: int) -> tuple[list[dict], int]:
    """TRL rows; a prompt too long for `max_length` loses its middle (the reply stays whole)."""

    rows, cut = [], 0
    for e in examples:
        prompt, shortened = shorten_prompt(tokenizer, e.prompt, [e.completion], max_length)
        cut += int(shortened)
        rows.append({"prompt": prompt, "completion": e.completion})
    return rows, cut

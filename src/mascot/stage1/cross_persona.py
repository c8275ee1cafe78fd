"""Pairs that only the persona decides (`mascot generate --mode individual --cross-persona-pairs N`).

A Stage-1 query's own pairs compare replies written for one persona under that persona's prompt, so
a reward model can rank them by what any good reply has (a question, "you") without reading who is
speaking. Trained on them alone, the learning preset's reward model preferred a persona's marker
about as often under another persona's prompt as under its own (`benchmarks/persona_swap.py`), and
the Speaker trained against it learnt the easiest marker for every persona: persona collapse, taught
by the reward model.

Here, once every query of a context is complete, each reply written for another persona of the
roster is judged again as this persona (same context, this persona's card and rubric) and paired
with this persona's own replies under this persona's prompt, when the judge's scores differ by the
margin. The same reply is then chosen under one persona and rejected under another, so only a model
that reads the persona ranks both. At most N such pairs per query are kept (a seeded draw), so that
they add to the query's own pairs instead of drowning them.

- `cross_judgments.jsonl`: one Candidate per (borrowed reply, persona it is judged as), its
  `written_for` naming the persona the reply was written for. Derived data, rewritten whole at the
  end of each run; with an LLM judge, the judgment cache makes a rerun cost nothing.
- pairs.jsonl: the pairs, with `chosen_written_for` or `rejected_written_for` on the borrowed side.
  `--resume` removes them and builds them again from the candidates.

Costs (roster size - 1) judgments per candidate: nothing for a rule judge, that many calls for an
LLM judge.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mascot.dialogue.seeds import derived_rng
from mascot.judge.prompt import JudgeItem
from mascot.judge.rubric_judge import failure_kind
from mascot.prefs.pairs import IndexPair, preference_index_pairs
from mascot.schema import Candidate, Context, Persona, PreferencePair
from mascot.stage1.candidates import apply_judgment

log = logging.getLogger(__name__)

CROSS_FILE = "cross_judgments.jsonl"


def is_cross_pair(record: dict | PreferencePair) -> bool:
    get = record.get if isinstance(record, dict) else (lambda name: getattr(record, name, None))
    return bool(get("chosen_written_for") or get("rejected_written_for"))


def side_key(candidate: Candidate) -> str:
    """A side of a pair id: the own candidate's index, or `<persona written for>/<index>`."""
    return f"{candidate.written_for}/{candidate.candidate_idx}" if candidate.written_for else str(candidate.candidate_idx)


@dataclass
class CrossOutcome:
    judgments: list[Candidate] = field(default_factory=list)
    pairs: list[PreferencePair] = field(default_factory=list)
    skipped_contexts: int = 0  # a query of the context is incomplete: no borrowing from or for it
    failed: list[Candidate] = field(default_factory=list)

    def summary(self) -> dict:
        return {
            "num_judged": sum(1 for c in self.judgments if c.overall is not None),
            "num_failed": len(self.failed),
            "num_failed_backend": sum(1 for c in self.failed if failure_kind(getattr(c, "judgment_error", None)) == "judge-backend"),
            "num_pairs": len(self.pairs),
            "num_contexts_skipped": self.skipped_contexts,
        }


def borrowed(query: str, source: Candidate, persona: Persona, prompt: list) -> Candidate:
    """`source` (written for another persona) as a candidate of `query`, to be judged as `persona`."""
    return Candidate(
        candidate_id=f"{query}::from:{source.persona}::c{source.candidate_idx}", context_id=source.context_id, persona=persona.name,
        prompt=prompt, response=source.response, candidate_idx=source.candidate_idx, model=source.model, roster=source.roster,
        roster_version=source.roster_version, prompt_version=source.prompt_version, written_for=source.persona,
    )  # fmt: skip


def cross_pairs(
    own: Sequence[Candidate], others: Sequence[Candidate], margin: float, limit: int, seed_parts: tuple
) -> list[tuple[IndexPair, Candidate, Candidate]]:
    """At most `limit` pairs of one own and one borrowed reply whose scores (as this persona) differ by
    the margin, drawn with a seed: (index pair, chosen, rejected)."""
    pool = list(own) + list(others)
    index_pairs, _ = preference_index_pairs([c.overall for c in pool], margin, [c.response for c in pool])
    mixed = [p for p in index_pairs if (p.chosen < len(own)) != (p.rejected < len(own))]
    derived_rng(*seed_parts).shuffle(mixed)
    return [(p, pool[p.chosen], pool[p.rejected]) for p in mixed[:limit]]


async def judge_across_personas(
    contexts: Sequence[Context],
    personas: Sequence[Persona],
    written: dict[str, dict[int, Candidate]],
    *,
    query_of: Callable[[Context, Persona], str],
    judge_item: Callable[[str, Context, Persona, str], JudgeItem],
    judge,
    make_pair: Callable[[str, Candidate, Candidate, float], PreferencePair],
    num_candidates: int,
    margin: float,
    limit: int,
    seed: int,
) -> CrossOutcome:
    """Judges every complete context's replies as each other persona and builds the pairs."""
    outcome = CrossOutcome()
    plans: list[tuple[str, list[Candidate], list[Candidate]]] = []  # (query, own scored replies, borrowed replies)
    items: list[JudgeItem] = []
    for context in contexts:
        queries = {p.name: written.get(query_of(context, p), {}) for p in personas}
        if any(len(found) < num_candidates for found in queries.values()):
            outcome.skipped_contexts += 1
            continue
        for persona in personas:
            query, mine = query_of(context, persona), queries[persona.name]
            own = [mine[k] for k in sorted(mine) if mine[k].overall is not None]
            prompt = mine[min(mine)].prompt
            others = [
                borrowed(query, c, persona, prompt)
                for other in personas
                if other.name != persona.name
                for _, c in sorted(queries[other.name].items())
                if c.response
            ]
            items.extend(judge_item(b.candidate_id, context, persona, b.response) for b in others)
            plans.append((query, own, others))
    judgments = iter(await judge.judge_many(items) if items else [])
    for query, own, others in plans:
        for b in others:
            apply_judgment(b, next(judgments))
            outcome.judgments.append(b)
            if b.overall is None:
                outcome.failed.append(b)
        scored = [b for b in others if b.overall is not None]
        for index_pair, chosen, rejected in cross_pairs(own, scored, margin, limit, (seed, query, "cross-persona")):
            outcome.pairs.append(make_pair(query, chosen, rejected, index_pair.margin))
    if outcome.failed:
        first = outcome.failed[0]
        log.warning(
            "%d of %d cross-persona judgments failed (no pair uses them); the first, %s: %s",
            len(outcome.failed),
            len(outcome.judgments),
            first.candidate_id,
            getattr(first, "judgment_error", None),
        )
    return outcome

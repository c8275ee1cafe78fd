"""Stage-1 data: K candidate replies per (context, persona), judged, turned into preference pairs.

For each query (one context, one persona) the Speaker is asked once for `n = K` completions (servers
that ignore `n` are topped up by the HTTP client). Each candidate is judged with the agent rubric of
the dataset's domain, in the same context the Speaker saw. Every unordered pair whose Overall gap is
at least the score margin becomes a pair in TRL's conversational preference format.

Outputs in the run directory (a RunStore, so --resume and --overwrite work):
- candidates.jsonl: one Candidate per reply, with its scores, reasons and Overall (1-5 mean);
- pairs.jsonl: PreferencePair records (prompt, chosen, rejected as message lists; margin, persona,
  context_id, chosen_score, rejected_score, pair_id); `datasets.load_dataset("json", ...)` reads it;
- pairs_stats.json: pairs per query, the margin distribution, how many pairs the margin dropped.

Resume: a query whose K candidates are all written is not generated again; a query cut short gets
only its missing candidates; a candidate whose judgment failed (the judge was down, or its answer
never parsed) keeps its text and is judged again (`mascot.stage1.candidates`); pairs that a crash
kept from being written are added from the stored candidates (pairs are a deterministic function
of them).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable

from mascot.dialogue.agents import Speaker
from mascot.dialogue.prompts import speaker_messages
from mascot.dialogue.reasoning import response_parts
from mascot.dialogue.reply_stream import clean_reply
from mascot.dialogue.seeds import derive_seed
from mascot.dialogue.tally import Tally
from mascot.errors import MascotError
from mascot.files import write_json_atomic, write_jsonl
from mascot.judge.items import opening_lines, render_context
from mascot.judge.prompt import JudgeItem
from mascot.judge.rubric_judge import RubricJudge
from mascot.llm.base import ChatClient, LLMError, Message, route_together
from mascot.prefs.pairs import PairStats, preference_index_pairs
from mascot.progress import cancel_on_interrupt, stop_requested
from mascot.rubrics import domain_of, rubric_for
from mascot.runs.store import RunStore
from mascot.schema import Candidate, Context, Judgment, Persona, PreferencePair, Roster
from mascot.stage1.candidates import (
    apply_judgment,
    compact_candidates,
    judging_summary,
    judgment_failed,
    latest_candidates,
    rejudged,
    unjudged_failures,
)
from mascot.stage1.cross_persona import CROSS_FILE, CrossOutcome, is_cross_pair, judge_across_personas, side_key
from mascot.stage1.settings import CandidateSettings

log = logging.getLogger(__name__)

CANDIDATES_FILE = "candidates.jsonl"
PAIRS_FILE = "pairs.jsonl"
STATS_FILE = "pairs_stats.json"
OUTPUTS = (CANDIDATES_FILE, PAIRS_FILE)


class GenerationStop(MascotError):
    """--strict: the Speaker failed or answered empty."""


def query_id(context: Context, persona: Persona) -> str:
    return f"{context.context_id}::{persona.name}"


def candidate_id(query: str, idx: int) -> str:
    return f"{query}::c{idx}"


def candidate_key(record: dict) -> str:
    return str(record.get("candidate_id") or record.get("pair_id"))


def pair_record(query: str, prompt: list[Message], chosen: Candidate, rejected: Candidate, margin: float) -> PreferencePair:
    """A pair of two replies under the query's prompt; a reply borrowed from another persona
    (`mascot.stage1.cross_persona`) says whom it was written for."""
    return PreferencePair(
        prompt=prompt,
        chosen=[{"role": "assistant", "content": chosen.response}],
        rejected=[{"role": "assistant", "content": rejected.response}],
        margin=margin,
        persona=chosen.persona,
        context_id=chosen.context_id,
        chosen_score=chosen.overall,
        rejected_score=rejected.overall,
        kind="persona",
        chosen_written_for=chosen.written_for,
        rejected_written_for=rejected.written_for,
        pair_id=f"{query}::{side_key(chosen)}>{side_key(rejected)}",
        chosen_scores=chosen.scores,
        rejected_scores=rejected.scores,
        roster=chosen.roster,
        roster_version=chosen.roster_version,
        rubric_version=chosen.rubric_version,
    )


class IndividualRun:
    """One Stage-1 run over contexts x personas, writing into an open RunStore, with the command's
    settings (`mascot.stage1.settings.CandidateSettings`)."""

    def __init__(self, roster: Roster, speaker: ChatClient, judge: RubricJudge, store: RunStore, settings: CandidateSettings) -> None:
        if settings.num_candidates < 2:
            raise MascotError("--num-candidates must be at least 2 to make preference pairs")
        self.roster = roster
        self.speaker = speaker
        self.judge = judge
        self.store = store
        self.settings = settings
        speaker_role = settings.roles.get("speaker")
        self.speaker_thinks = speaker_role is not None and speaker_role.thinking is True  # --speaker-thinking on
        # The episodes' Speaker writes each query's requests: its decoding (sampling, lengths,
        # repetition penalty, stop strings: candidates end where episode replies end), n at once.
        self.persona_speaker = Speaker.for_settings(speaker, roster, Tally(), settings, think=self.speaker_thinks)
        self.judge.counters = store.counters  # judge failures land in run_summary.json
        self.stats = PairStats(score_margin=settings.score_margin, num_candidates=settings.num_candidates)
        self.written: dict[str, dict[int, Candidate]] = {}
        self.written_pairs: set[str] = set()
        self.superseded = 0  # candidate lines a later line of the same id replaces (compacted at the end)
        self.cross: CrossOutcome | None = None  # --cross-persona-pairs: what judging across personas made
        self._scale_min = 1
        if store.resume:
            self._load_previous()

    # ------------------------------------------------------------------ resume
    def _load_previous(self) -> None:
        path = self.store.path(CANDIDATES_FILE)
        if path.exists():
            candidates, self.superseded = latest_candidates(path)
            for candidate in candidates:
                query = candidate.candidate_id.rsplit("::", 1)[0]
                self.written.setdefault(query, {})[candidate.candidate_idx] = candidate
        self._update_judging()  # the counters say what the file holds, whatever an earlier attempt counted
        self._drop_stale_pairs()

    def _drop_stale_pairs(self) -> None:
        """Keeps only pairs that match the stored candidates. A candidate line lost to a torn write
        is generated again with another text and score, so a pair written from the old one no
        longer belongs to the data: it is removed (counted in the log) and the pair set is rebuilt
        from the candidates, as pairs are a deterministic function of them."""
        path = self.store.path(PAIRS_FILE)
        if not path.exists():
            return
        kept, dropped, rebuilt = [], 0, 0
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            if is_cross_pair(record):  # derived from the stored candidates at the end of every run
                rebuilt += 1
            elif self._pair_matches_candidates(record):
                kept.append(line)
                self.written_pairs.add(record.get("pair_id", ""))
            else:
                dropped += 1
        if dropped:
            log.warning("%s: %d pairs no longer match their stored candidates and are rebuilt", path, dropped)
        if dropped or rebuilt:
            with open(path, "r+", encoding="utf-8") as fh:  # in place: the store's append descriptor stays valid
                fh.write("".join(f"{line}\n" for line in kept))
                fh.truncate()

    def _pair_matches_candidates(self, record: dict) -> bool:
        query, _, indices = str(record.get("pair_id", "")).rpartition("::")
        chosen_idx, _, rejected_idx = indices.partition(">")
        candidates = self.written.get(query, {})
        if not (chosen_idx.isdigit() and rejected_idx.isdigit()) or len(candidates) < self.settings.num_candidates:
            return False
        chosen, rejected = candidates.get(int(chosen_idx)), candidates.get(int(rejected_idx))
        if chosen is None or rejected is None:
            return False
        texts = ((record.get("chosen") or [{}])[-1].get("content"), (record.get("rejected") or [{}])[-1].get("content"))
        return texts == (chosen.response, rejected.response) and (record.get("chosen_score"), record.get("rejected_score")) == (
            chosen.overall,
            rejected.overall,
        )

    # ------------------------------------------------------------------ one query
    def personas(self) -> list[Persona]:
        if not self.settings.personas:
            return list(self.roster.personas)
        try:
            return [self.roster.persona(name) for name in self.settings.personas]
        except KeyError as exc:
            raise MascotError(str(exc.args[0])) from None

    def _count(self, counter: str, detail: str) -> None:
        counters = self.store.counters
        setattr(counters, counter, getattr(counters, counter) + 1)
        log.warning("%s: %s", counter, detail)
        if self.settings.strict:
            raise GenerationStop(f"--strict: stopping at the first failure ({counter}: {detail})")

    async def _generate(self, query: str, prompt: list[Message], context: Context, count: int) -> list[tuple[str, str | None]] | None:
        """`count` (visible reply, reasoning) pairs; reasoning never reaches a reply or a pair."""
        request = self.persona_speaker.request(prompt, context, derive_seed(self.settings.seed, query, "candidates", count), n=count)
        try:
            response = await self.speaker.chat(request)
        except LLMError as exc:
            self.store.drop(query, exc)  # counted once per query; a resumed run that repairs it uncounts it
            if self.settings.strict:
                raise GenerationStop(f"--strict: stopping at the first failure (num_generation_failures: {query}: {exc})") from None
            return None
        return [response_parts(response, i) for i in range(min(count, len(response.texts)))]

    def _judge_item(self, item_id: str, context: Context, persona: Persona, response: str) -> JudgeItem:
        domain = domain_of(context.dataset)
        return JudgeItem(
            item_id=item_id,
            scope="agent",
            domain=domain,
            context=render_context(context),
            history=opening_lines(context, domain),
            response=response,
            persona=persona,
            provenance={"context_id": context.context_id},
        )

    def _candidate(
        self, query: str, idx: int, context: Context, persona: Persona, prompt: list[Message], text: str, judgment: Judgment | None
    ) -> Candidate:
        return apply_judgment(Candidate(
            candidate_id=candidate_id(query, idx),
            context_id=context.context_id,
            persona=persona.name,
            prompt=prompt,
            response=text,
            candidate_idx=idx,
            model=self.speaker.model,
            prompt_version=self.settings.prompt_version,
            roster=self.roster.name,
            roster_version=self.roster.version,
        ), judgment)  # fmt: skip

    async def run_query(self, context: Context, persona: Persona) -> None:
        query = query_id(context, persona)
        route_together(query)  # the query's candidates and criteria on one server: its prefix cache holds their beginning
        existing = self.written.setdefault(query, {})
        missing = [k for k in range(self.settings.num_candidates) if k not in existing]
        prompt = speaker_messages(persona, self.roster, context, [], None, think=self.speaker_thinks, version=self.settings.prompt_version)
        generated = await self._generate(query, prompt, context, len(missing)) if missing else []
        replies = [(k, clean_reply(t, persona.name), r) for k, (t, r) in zip(missing, generated or [])]
        retry = [k for k in sorted(existing) if judgment_failed(existing[k])]  # judged again, text kept
        to_judge = [(k, text) for k, text, _ in replies if text] + [(k, existing[k].response) for k in retry]
        self.store.counters.num_annotation_failures = max(0, self.store.counters.num_annotation_failures - len(retry))
        judgments = dict(
            zip(
                (k for k, _ in to_judge),
                await self.judge.judge_many([self._judge_item(candidate_id(query, k), context, persona, t) for k, t in to_judge]),
            )
        )
        new = []
        for k, reply, reasoning in replies:
            if not reply:
                self._count("num_empty_responses", f"{query} candidate {k} is empty")
            candidate = self._candidate(query, k, context, persona, prompt, reply, judgments.get(k))
            candidate.reasoning = reasoning
            new.append(candidate)
            existing[k] = candidate
        # One write for the request's candidates: a run killed around it keeps all or none of them,
        # so --resume asks again for the same n with the same seed and gets the same replies.
        self.store.append_many(new, CANDIDATES_FILE)
        for k in retry:
            if (repaired := rejudged(existing[k], judgments[k])) is not None:
                self.store.append(repaired, CANDIDATES_FILE)  # supersedes the failed line
                self.superseded += 1
                existing[k] = repaired
        self._write_pairs(query, [existing[k] for k in sorted(existing)])

    def _write_pairs(self, query: str, candidates: list[Candidate]) -> None:
        if len(candidates) < self.settings.num_candidates:
            return  # generation failed part-way: the query is finished on --resume
        index_pairs, counts = preference_index_pairs([c.overall for c in candidates], self.settings.score_margin, [c.response for c in candidates])
        self.stats.add_query(query, index_pairs, counts)
        for p in index_pairs:
            record = pair_record(query, candidates[p.chosen].prompt, candidates[p.chosen], candidates[p.rejected], p.margin)
            if record.pair_id not in self.written_pairs:
                self.store.append(record, PAIRS_FILE)
                self.written_pairs.add(record.pair_id)

    # ------------------------------------------------------------------ all queries
    async def run(self, contexts: Iterable[Context], on_progress: Callable[[int], None] | None = None) -> PairStats:
        contexts = list(contexts)
        personas = self.personas()
        queries = [(c, p) for c in contexts for p in personas]
        if queries:
            self._scale_min = rubric_for(domain_of(queries[0][0].dataset), "agent", self.judge.rubric_version).scale_min
        semaphore = asyncio.Semaphore(max(1, self.settings.max_concurrent_episodes))  # --max-concurrent-episodes
        done = 0

        async def one(context: Context, persona: Persona) -> None:
            nonlocal done
            async with semaphore:
                if stop_requested():  # Ctrl-C: no new query starts (those in flight are cancelled)
                    return
                await self.run_query(context, persona)
            done += 1
            if on_progress:
                on_progress(done)

        tasks = [asyncio.ensure_future(one(c, p)) for c, p in queries]
        try:
            try:
                with cancel_on_interrupt(tasks):
                    await asyncio.gather(*tasks)
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if not stop_requested() or (current is not None and current.cancelling()):
                    raise  # this task itself was cancelled, not only its queries by Ctrl-C
                await asyncio.gather(*tasks, return_exceptions=True)  # every query has unwound
            if self.settings.cross_persona_pairs and not stop_requested():
                await self._pair_across_personas(contexts, personas)
        except BaseException:
            for task in tasks:
                task.cancel()
            raise
        finally:
            write_json_atomic(self.store.path(STATS_FILE), self.stats.to_dict())
            self._update_judging()
        if self.superseded:  # every record is written: one line per candidate id from here on
            compact_candidates(self.store.path(CANDIDATES_FILE))
            self.superseded = 0
        return self.stats

    async def _pair_across_personas(self, contexts: list[Context], personas: list[Persona]) -> None:
        """--cross-persona-pairs: every complete context's replies judged as each other persona, and
        the pairs that only the persona decides (`mascot.stage1.cross_persona`)."""
        s = self.settings
        self.cross = await judge_across_personas(
            contexts, personas, self.written, query_of=query_id, judge_item=self._judge_item, judge=self.judge,
            make_pair=lambda query, chosen, rejected, margin: pair_record(query, chosen.prompt, chosen, rejected, margin),
            num_candidates=s.num_candidates, margin=s.score_margin, limit=s.cross_persona_pairs, seed=s.seed,
        )  # fmt: skip
        write_jsonl(self.store.path(CROSS_FILE), self.cross.judgments)
        self.store.append_many(self.cross.pairs, PAIRS_FILE)
        self.stats.cross_persona_pairs = len(self.cross.pairs)

    def _update_judging(self) -> None:
        """The summary's judgment figures from the candidates as they stand: `judging`,
        `failures.unjudged` and `counters.num_annotation_failures` agree with the candidates file."""
        candidates = [c for by_idx in self.written.values() for c in by_idx.values()]
        block = judging_summary(candidates, self._scale_min)
        summary = self.store.summary
        if self.cross is not None:
            block["cross_persona"] = self.cross.summary()
        summary.judging = block if candidates else None
        summary.failures.unjudged = unjudged_failures(candidates) or None
        summary.counters.num_annotation_failures = block["num_failed"]


async def run_individual(
    contexts: Iterable[Context],
    roster: Roster,
    speaker: ChatClient,
    judge: RubricJudge,
    store: RunStore,
    settings: CandidateSettings,
    *,
    on_progress: Callable[[int], None] | None = None,
) -> PairStats:
    """Runs Stage-1 generation into an open `store` (outputs=OUTPUTS) with the command's settings
    (`mascot generate --mode individual`); returns the pair statistics."""
    return await IndividualRun(roster, speaker, judge, store, settings).run(contexts, on_progress)

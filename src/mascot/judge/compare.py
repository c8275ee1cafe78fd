"""Head-to-head judging: two or three systems' conversations on the same context, blinded.

The judge sees the conversations as "Conversation 1/2(/3)" in every order (`orders`: all
permutations, or for three systems the three rotations), and answers, per collective criterion of
the rubric and overall, which conversation is better or "tie". Verdicts are mapped back to systems,
so a judge's preference for a position cancels across orders.

A reply is parsed strictly (every criterion, a valid label) after forgiving packaging (think
blocks, fences, prose around the JSON); an unusable reply gets one corrective follow-up, then the
verdict is recorded as failed and counted. Successful verdicts are cached in the judge cache, keyed
by the judge model, rubric version, prompt version and the ordered episodes (ids and content).

A plug-in judge (`python:PATH_OR_MODULE:FUNCTION`, `mascot.judge.plugin`) scores one item at a time,
never two conversations side by side: it scores each system's conversation as the collective item
`mascot judge` would (sharing its cache), and per criterion and overall (the rubric's Overall) the
system with the highest score wins; a shared highest score is a tie. A conversation it could not
score fails the verdict (counted, like an unparseable reply). It sees no positions, so its verdict
is the same in every order.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from dataclasses import dataclass, field
from itertools import permutations
from pathlib import Path

from mascot.episodes import episode_context, episode_domain, episode_file_path, load_episode_file
from mascot.errors import MascotError
from mascot.files import ensure_writable_dir
from mascot.judge.cache import JudgmentCache, cache_key
from mascot.judge.compare_checks import TIE, ranking_report
from mascot.judge.compare_report import summarize, write_outputs
from mascot.judge.compare_settings import DEFAULT_COMPARE_ROOT, CompareSettings
from mascot.judge.items import collective_item, opening_lines, render_context, turn_lines
from mascot.judge.opener import JudgeConfig, OpenJudges, judge_specs, open_judges, plugin_judge
from mascot.judge.parse import _load_object, json_object_spans, normalize_key
from mascot.judge.plugin import SCORING as PLUGIN_SCORING
from mascot.judge.plugin import PluginJudge
from mascot.judge.prompt import defuse, render_lines
from mascot.llm.base import ChatClient, ChatRequest, LLMError, Message, strip_think
from mascot.prompt_text import prompt_environment
from mascot.rubrics import rubric_for
from mascot.schema import Episode, Judgment
from mascot.settings_groups import ClientLimits
from mascot.system_labels import describe_system, distinct_labels, system_traits

log = logging.getLogger(__name__)

COMPARE_PROMPT_VERSION = "compare_v1"
OVERALL = "overall"
ORDER_MODES = ("all", "rotations")


class VerdictParseError(ValueError):
    """The reply is not a complete verdict; the message says why."""


@dataclass
class Matchup:
    """The episodes of every system on one context (same context, same episode index)."""

    key: str
    episodes: dict[str, Episode]  # system label -> episode


def system_run(path: Path, episodes: list[Episode]) -> tuple[str, dict[str, str] | None]:
    """A file's system label and what its system ran with; a file mixing systems goes by its name."""
    systems = {e.metadata.system for e in episodes if e.metadata.system}
    if len(systems) != 1 or not episodes:
        return Path(path).stem, None
    return systems.pop(), system_traits(episodes[0].metadata)


def system_labels(paths: list[Path], files: list) -> list[str]:
    """Each file's label (`mascot.system_labels.distinct_labels`); two runs of one system are refused."""
    runs = [system_run(p, f.episodes) for p, f in zip(paths, files)]
    names = distinct_labels(runs)
    if names is None:
        shared = next(run for run in runs if sum(other[0] == run[0] for other in runs) > 1)
        shown = describe_system(*shared) if shared[1] else repr(shared[0])
        raise MascotError(f"two files hold runs of one system ({shown}): to compare them, name them with --labels A,B")
    return names


def load_matchups(paths: list[Path], labels: list[str] | None = None, limit: int | None = None) -> tuple[list[str], list[Matchup], dict]:
    """System labels, the contexts all systems share (directed episodes, matched by context and
    episode index, in the first file's order) and what could not be matched."""
    loaded = [load_episode_file(episode_file_path(p), fallback_dataset="unknown") for p in paths]
    names = list(labels or system_labels(paths, loaded))
    if len(set(names)) != len(names):
        raise MascotError(f"the systems need distinct labels, got {', '.join(names)}: pass --labels")
    keyed = [{_match_key(e): e for e in f.episodes if e.metadata.branch is None} for f in loaded]
    shared = [k for k in keyed[0] if all(k in other for other in keyed[1:])]
    if limit is not None:
        shared = shared[:limit]
    if not shared:
        raise MascotError("the episode files share no context (episodes are matched by context_id and episode index)")
    domains = {episode_domain(keyed[0][k]) for k in shared}
    if len(domains) > 1:
        raise MascotError(f"the episodes mix domains ({', '.join(sorted(domains))}): compare one dataset at a time")
    unmatched = {name: len(k) - len([x for x in shared if x in k]) for name, k in zip(names, keyed)}
    return names, [Matchup(k, {n: keyed[i][k] for i, n in enumerate(names)}) for k in shared], unmatched


def _match_key(episode: Episode) -> str:
    return f"{episode.context_id or episode.episode_id}#e{episode.metadata.episode_idx}"


def orders_for(count: int, mode: str) -> list[tuple[int, ...]]:
    """Presentation orders as tuples of system indices."""
    if mode not in ORDER_MODES:
        raise MascotError(f"unknown --orders {mode!r}: use all or rotations")
    if mode == "rotations":
        return [tuple((start + i) % count for i in range(count)) for start in range(count)]
    return list(permutations(range(count)))


# --------------------------------------------------------------------------- prompt


def _render(part: str, **values) -> str:
    return prompt_environment().get_template(f"{COMPARE_PROMPT_VERSION}_{part}.j2").render(**values).strip()


def conversation_text(episode: Episode, domain: str) -> str:
    return render_lines(turn_lines(episode.turns, domain))


def compare_messages(matchup: Matchup, order: list[str], rubric) -> tuple[list[Message], str]:
    """The judge's messages for `order` (system labels, first shown first) and the content
    fingerprint that keys the cache."""
    first = matchup.episodes[order[0]]
    domain = episode_domain(first)
    context = episode_context(first)
    conversations = [conversation_text(matchup.episodes[name], domain) for name in order]
    opening = render_lines(opening_lines(context, domain))
    context_text = defuse(render_context(context)).strip()
    fingerprint = "\x1e".join([context_text, opening, *(f"{matchup.episodes[n].episode_id}\x1f{c}" for n, c in zip(order, conversations))])
    nonce = hashlib.sha256(fingerprint.encode("utf-8")).hexdigest()[:12]
    system = _render("system", count=len(order), domain=rubric.domain, criteria=rubric.criteria)
    user = _render("user", nonce=nonce, context=context_text, opening=opening, conversations=conversations)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}], fingerprint


def verdict_schema(keys: list[str], count: int) -> dict:
    choice = {
        "type": "object",
        "properties": {"winner": {"type": "string", "enum": [*map(str, range(1, count + 1)), TIE]}, "reason": {"type": "string"}},
        "required": ["winner", "reason"],
        "additionalProperties": False,
    }
    return {"type": "object", "properties": {k: choice for k in keys}, "required": keys, "additionalProperties": False}


# --------------------------------------------------------------------------- parse


def _label(value: object, key: str, count: int) -> str:
    if isinstance(value, dict):
        if "winner" not in value:
            raise VerdictParseError(f'criterion {key!r} has no "winner"')
        value = value["winner"]
    text = normalize_key(str(value)).replace("conversation_", "")
    if text in (TIE, "equal", "none", "neither"):
        return TIE
    if text.isdigit() and 1 <= int(text) <= count and not isinstance(value, bool):
        return text
    raise VerdictParseError(f"criterion {key!r} names {value!r}, not one of 1-{count} or tie")


def parse_verdict(text: str, keys: list[str], names: dict[str, str], count: int) -> dict[str, str]:
    """criterion key -> "1".."count" or "tie". Accepts criterion names for keys."""
    visible = strip_think(text or "").replace("```json", "").replace("```", "")
    aliases = {normalize_key(k): k for k in keys} | {normalize_key(n): k for k, n in names.items()}
    for span in reversed(json_object_spans(visible)):
        obj = _load_object(span) or {}
        found = {aliases[normalize_key(k)]: v for k, v in obj.items() if normalize_key(k) in aliases}
        if found:
            missing = [k for k in keys if k not in found]
            if missing:
                raise VerdictParseError(f"missing criteria {', '.join(missing)}")
            return {k: _label(found[k], k, count) for k in keys}
    raise VerdictParseError("no JSON object with the criteria in the reply")


def corrective(problem: str, keys: list[str], count: int) -> Message:
    labels = ", ".join(f'"{n}"' for n in range(1, count + 1))
    return {
        "role": "user",
        "content": f"Your answer could not be used: {problem}. Reply again with only one JSON object with exactly the keys "
        f'{", ".join(repr(k) for k in keys)}, each mapped to {{"winner": {labels} or "tie", "reason": "<one sentence>"}}.',
    }


# --------------------------------------------------------------------------- judge


@dataclass
class CompareJudge:
    client: ChatClient
    label: str
    rubric_version: str
    cache: JudgmentCache | None = None
    max_tokens: int = 512
    stats: dict = field(default_factory=lambda: {"calls": 0, "cached": 0, "retries": 0, "failures": 0})

    async def _ask(self, messages: list[Message], schema: dict) -> str:
        self.stats["calls"] += 1
        request = ChatRequest(
            messages=messages, temperature=0.0, max_tokens=self.max_tokens, role="judge", thinking=False, json_schema=schema, schema_name="verdict"
        )
        return (await self.client.chat(request)).texts[0]

    @property
    def reads(self) -> dict:
        """What the judge read: the model and the comparison prompt's version."""
        return {"model": self.client.model, "prompt_version": COMPARE_PROMPT_VERSION}

    async def _verdict(self, messages: list[Message], keys: list[str], names: dict[str, str], count: int) -> dict:
        schema = verdict_schema(keys, count)
        try:
            reply = await self._ask(messages, schema)
            try:
                return {"winners": parse_verdict(reply, keys, names, count)}
            except VerdictParseError as first:
                self.stats["retries"] += 1
                retry = [*messages, {"role": "assistant", "content": reply}, corrective(str(first), keys, count)]
                return {"winners": parse_verdict(await self._ask(retry, schema), keys, names, count)}
        except VerdictParseError as exc:
            return {"failed": True, "error": f"unparseable verdict after a corrective retry: {exc}"}
        except LLMError as exc:
            return {"failed": True, "error": f"judge backend failed: {exc}"}

    async def judge(self, matchup: Matchup, order: list[str]) -> dict:
        """One verdict record: per criterion the winning system (or "tie"), in this order."""
        first = matchup.episodes[order[0]]
        rubric = rubric_for(episode_domain(first), "collective", self.rubric_version)
        keys, names = [*rubric.keys, OVERALL], {**rubric.names, OVERALL: "Overall"}
        messages, fingerprint = compare_messages(matchup, order, rubric)

        async def compute() -> dict:
            return await self._verdict(messages, keys, names, len(order))

        if self.cache is None:
            value = await compute()
        else:
            key = cache_key(self.client.model, self.rubric_version, COMPARE_PROMPT_VERSION, fingerprint)
            value, hit = await self.cache.get_or_compute(
                key, compute, judge_model=self.client.model, rubric_version=self.rubric_version, template_version=COMPARE_PROMPT_VERSION
            )
            self.stats["cached"] += int(hit)
        record = verdict_record(matchup, order, self.label, self.rubric_version, COMPARE_PROMPT_VERSION)
        if value.get("failed"):
            self.stats["failures"] += 1
            log.warning("comparison failed for %s (%s, order %s): %s", matchup.key, self.label, "/".join(order), value["error"])
            return {**record, "failed": True, "error": value["error"]}
        positions = {k: (order[int(v) - 1] if v != TIE else TIE) for k, v in value["winners"].items()}
        return {**record, "failed": False, "positions": value["winners"], "winners": positions}


def verdict_record(matchup: Matchup, order: list[str], label: str, rubric_version: str, prompt_version: str) -> dict:
    first = matchup.episodes[order[0]]
    return {
        "matchup": matchup.key,
        "context_id": first.context_id,
        "judge": label,
        "order": list(order),
        "episodes": {n: matchup.episodes[n].episode_id for n in order},
        "words": {n: conversation_words(matchup.episodes[n]) for n in order},
        "prompt_version": prompt_version,
        "rubric_version": rubric_version,
    }


def conversation_words(episode: Episode) -> int:
    """The length the length checks use: words said by the agents (user turns left out)."""
    return sum(len(turn.response.split()) for turn in episode.agent_turns)


def best_system(scores: dict[str, float]) -> str:
    """The system with the highest score, or "tie" when the highest is shared."""
    top = max(scores.values())
    leaders = [name for name, score in scores.items() if score == top]
    return leaders[0] if len(leaders) == 1 else TIE


@dataclass
class PluginCompareJudge:
    """A plug-in judge in a comparison: each side scored alone, the higher score wins (module docstring)."""

    scorer: PluginJudge
    failures: int = 0
    _judgments: dict[str, asyncio.Task] = field(default_factory=dict, repr=False)  # episode id -> its judgment, shared by every order

    @property
    def label(self) -> str:
        return self.scorer.label

    @property
    def stats(self) -> dict:
        return {"function_calls": self.scorer.function_calls, "cached": self.scorer.stats.cached, "failures": self.failures}

    @property
    def reads(self) -> dict:
        """What the judge read: the plug-in function (and its declared version), no prompt."""
        return {"plugin": self.scorer.ref, "version": self.scorer.version, "prompt_version": None}

    async def _judgment(self, episode: Episode) -> Judgment:
        if episode.episode_id not in self._judgments:
            self._judgments[episode.episode_id] = asyncio.ensure_future(self.scorer.judge(collective_item(episode)))
        return await self._judgments[episode.episode_id]

    async def judge(self, matchup: Matchup, order: list[str]) -> dict:
        judgments = {name: await self._judgment(matchup.episodes[name]) for name in order}
        record = verdict_record(matchup, order, self.label, self.scorer.rubric_version, PLUGIN_SCORING)
        failed = [j for j in judgments.values() if j.failed]
        if failed:
            self.failures += 1
            log.warning("comparison failed for %s (%s, order %s): %s", matchup.key, self.label, "/".join(order), failed[0].error)
            return {**record, "failed": True, "error": failed[0].error}
        scores = {name: {**j.scores, OVERALL: j.overall} for name, j in judgments.items()}
        winners = {key: best_system({name: s[key] for name, s in scores.items()}) for key in scores[order[0]]}
        positions = {key: (str(order.index(w) + 1) if w != TIE else TIE) for key, w in winners.items()}
        return {**record, "failed": False, "positions": positions, "winners": winners, "scores": scores}


async def judge_matchups(judges: list[CompareJudge | PluginCompareJudge], matchups: list[Matchup], names: list[str], order_mode: str) -> list[dict]:
    from mascot.progress import ProgressLine

    orders = [[names[i] for i in order] for order in orders_for(len(names), order_mode)]
    with ProgressLine("verdicts", len(matchups) * len(orders) * len(judges), unit="verdicts") as progress:

        async def counted(judge, matchup: Matchup, order: list[str]) -> dict:
            verdict = await judge.judge(matchup, order)
            progress.advance()
            return verdict

        return list(await asyncio.gather(*(counted(j, m, order) for m in matchups for order in orders for j in judges)))


# --------------------------------------------------------------------------- a whole comparison


@dataclass
class CompareResult:
    output_dir: Path
    report: dict


def compare_judge_specs(settings: CompareSettings) -> list:
    return judge_specs(settings.judge, settings.judges_file, settings.provider, settings.judge_server_url)


def default_output_dir(names: list[str]) -> Path:
    """`<A>_vs_<B>`, each label as a folder-name part ("mascot (round-robin)" -> mascot-round-robin)."""
    return Path(DEFAULT_COMPARE_ROOT) / "_vs_".join(re.sub(r"[^A-Za-z0-9._+-]+", "-", n).strip("-") or "system" for n in names)


def run_compare(settings: CompareSettings, *, clients: dict | None = None) -> CompareResult:
    """`clients` (judge label -> ChatClient) replaces the endpoints (tests, embedded judges)."""
    names, matchups, unmatched = load_matchups([Path(p) for p in settings.systems], settings.label_list, settings.limit)
    output = Path(settings.output_dir) if settings.output_dir else default_output_dir(names)

    ensure_writable_dir(output, "--output-dir")  # refused before any model call
    rubric = rubric_for(episode_domain(next(iter(matchups[0].episodes.values()))), "collective", settings.rubric_version)
    records, judges = asyncio.run(_judge_all(settings, names, matchups, clients))
    orders = [[names[i] for i in order] for order in orders_for(len(names), settings.orders)]
    report = summarize(records, names, [*rubric.keys, OVERALL], [j.label for j in judges], orders, settings.order_rule)
    report["ranking"] = ranking_report(records, OVERALL, names, settings.order_rule, samples=settings.ranking_resamples)
    report.update(
        inputs={n: str(p) for n, p in zip(names, settings.systems)},
        rubric_version=settings.rubric_version,
        prompt_version=COMPARE_PROMPT_VERSION if any(j.reads["prompt_version"] for j in judges) else None,  # a plug-in reads no prompt
        judge_reads={j.label: j.reads for j in judges},
        domain=rubric.domain,
        criterion_names={**rubric.names, OVERALL: "Overall"},
        unmatched_episodes=unmatched,
        judge_stats={j.label: dict(j.stats) for j in judges},
    )
    write_outputs(output, records, report)
    if records and report["num_failed_verdicts"] == len(records):
        raise MascotError(f"every verdict failed ({len(records)}); see the warnings above and {output / 'verdicts.jsonl'}")
    return CompareResult(output, report)


async def _judge_all(settings: CompareSettings, names: list[str], matchups: list, clients: dict | None):
    limits = ClientLimits(max_in_flight=settings.max_in_flight, request_timeout=settings.request_timeout)
    async with open_judges(
        compare_judge_specs(settings), limits, cache_dir=settings.cache_dir, no_cache=settings.no_cache, clients=clients
    ) as opened:
        judges = [compare_judge(spec, opened, settings) for spec in opened.specs]  # every judge named, plug-ins included
        return await judge_matchups(judges, matchups, names, settings.orders), judges


def compare_judge(spec, opened: OpenJudges, settings: CompareSettings) -> CompareJudge | PluginCompareJudge:
    if spec.is_plugin:
        scorer = plugin_judge(spec.model, JudgeConfig(settings.rubric_version), opened.cache, label=spec.label, function=opened.functions[spec.label])
        return PluginCompareJudge(scorer)
    return CompareJudge(opened.clients[spec.label], spec.label, settings.rubric_version, opened.cache, settings.judge_max_tokens)

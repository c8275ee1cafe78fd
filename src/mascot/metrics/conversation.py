"""Conversation checks: what a person reading an episode notices first, counted over every episode.

Each check is a count over a stated unit, and its rate is count / units (pooled over episodes):

- `directive_example_copies` (unit: Director directives): the directive copies the prompt's worked
  example (`mascot.dialogue.examples`: half of its action's word trigrams in an example's action,
  the example's placeholder, or an example's tone word for word); a turn whose copy the Director
  replaced by the neutral directive (`director_copied_example`) counts as one;
- `same_speaker_repeats` (unit: agent turns after another agent turn): the same companion as the
  agent turn before (the person's messages in between do not count); with the balance figures
  `top_speaker_share` (the most frequent companion's share of agent turns) and
  `longest_speaker_run` (most agent turns of one companion in a row), each per episode;
- `instruction_restatements` (unit: agent replies and simulated-user turns): a reply that talks
  about its instructions ("Your role is to...", "as the emotional validator", "the Director") or
  repeats six words in a row of its own system prompt (a companion's: the roster's persona as the
  prompts describe it; the person's: the user prompt without its situation);
- `third_person_user` (unit: agent replies): a reply that speaks of the person instead of to them
  ("the person", "the user", "this person", "they feel" opening a sentence);
- `speaking_as_another` (unit: all turns): a line that opens with another participant's name and a
  colon ("The person:", "Anchor:", another companion's name; for the person, any companion's);
- `repeated_sentences` (unit: sentences of three words or more, all turns): a sentence said
  before in the same episode (case and punctuation aside); `most_repeated_sentence` per episode;
- `user_as_companion` (unit: simulated-user turns): supportive phrasing or offers of help from the
  person's side ("I'm here for you", "you're not alone", "have you tried...").

Patterns are English, as the prompts are. Nothing here loads a model.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from mascot.dialogue.examples import copies_example, example_directives, ngrams, words
from mascot.dialogue.turn_taking import repeats, runs
from mascot.schema import Episode, Roster, Turn
from mascot.vocab import FIRST_PROMPT_VERSION, PROMPT_VERSIONS

CHECKS = (
    "directive_example_copies", "directive_without_instruction", "same_speaker_repeats", "instruction_restatements", "third_person_user",
    "speaking_as_another", "repeated_sentences", "user_as_companion",
)  # fmt: skip
UNITS = {
    "directive_example_copies": "Director directives",
    "directive_without_instruction": "Director directives",
    "same_speaker_repeats": "agent turns after another agent turn",
    "instruction_restatements": "agent replies and simulated-user turns",
    "third_person_user": "agent replies",
    "speaking_as_another": "turns",
    "repeated_sentences": "sentences of 3+ words",
    "user_as_companion": "simulated-user turns",
}
RESTATED_RUN = 6  # words in a row shared with the speaker's system prompt
MIN_ACTION_WORDS = 3  # an action shorter than this, names aside, tells the Speaker nothing
MIN_SENTENCE_WORDS = 3
USER_LABELS = ("the person", "person", "user", "the user", "participant", "seeker", "me")

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")
_META = re.compile(
    r"\b(?:(?:your|my) (?:role|purpose|job|task|instructions?) (?:is|are|here)\b|in my role as\b|as (?:your|the) "
    r"[a-z -]{0,30}(?:validator|guide|advocate|thinker|companion|coach)\b|the director\b|reply now\b|"
    r"(?:one|1) to (?:three|3) sentences\b)",
    re.IGNORECASE,
)
_THIRD_PERSON = re.compile(
    r"\b(?:the|this) (?:person|user|seeker)\b(?!\s*:|\s+(?:who|that|whom|you|in your|at|from|of your)\b)"
    r"|(?:^|[.!?]\s+)(?:they|he|she)(?:'re| are| is)? (?:feel|feels|feeling)\b",
    re.IGNORECASE,
)
_SUPPORTIVE = re.compile(
    r"\b(?:i'?m here for you|i am here for you|(?:i'?m|i am) here to (?:help|listen|support)|how can i help|let me know (?:if|how)|"
    r"it'?s (?:okay|ok|normal|understandable|natural) to (?:feel|be)|you'?re not alone|you are not alone|i hear you|"
    r"that sounds (?:really |so |very )?(?:hard|tough|difficult|challenging|painful)|take care of yourself|"
    r"have you (?:tried|considered)|you (?:could|might|should) (?:try|consider)|you'?ve got this|(?:i'?m|i am) proud of you)",
    re.IGNORECASE,
)


# --------------------------------------------------------------------------- directives


def lacks_instruction(action: str, tone: str, names: list[str]) -> bool:
    """Whether a directive says nothing to do: an action of fewer than MIN_ACTION_WORDS words once
    the participants' names are left out ("The Catalyst", as a small model fills a constrained
    directive), or a tone that is a participant's name."""
    spelled = {" ".join(words(name)) for name in names} - {""}
    action_text = f" {' '.join(words(action))} "
    for name in spelled:
        action_text = action_text.replace(f" {name} ", " ")
    return len(action_text.split()) < MIN_ACTION_WORDS or " ".join(words(tone)) in spelled


def director_directive(turn: Turn) -> tuple[str, str] | None:
    """(action, tone) of a directive the Director wrote, or None (no directive, an empty one,
    the fallback's or the safety reply's)."""
    from mascot.dialogue.director import NEUTRAL_ACTION
    from mascot.safety import SAFETY_ACTION

    d = turn.directive
    if turn.is_user or d is None or turn.director_fallback or not (d.action or d.tone):
        return None
    if d.action in (SAFETY_ACTION, NEUTRAL_ACTION):  # MASCOT's own directives (a file without the fallback flag)
        return None
    return d.action or "", d.tone or ""


# --------------------------------------------------------------------------- speakers' own text


def name_pattern(names: list[str]) -> re.Pattern | None:
    """A line opening with one of `names` and a colon ("**The Anchor**:", "Anchor:"), at the start
    of the text, of a line or of a sentence."""
    alternatives = set()
    for name in names:
        plain = re.sub(r"^the\s+", "", name.strip().lower())
        if plain:
            alternatives.add(r"(?:the\s+)?" + r"\s+".join(re.escape(w) for w in plain.split()))
    if not alternatives:
        return None
    joined = "|".join(sorted(alternatives, key=len, reverse=True))
    return re.compile(rf"(?:^|\n|[.!?]\s+)\s*[*_]*(?:{joined})[*_]*\s*:", re.IGNORECASE)


def sentences(text: str) -> list[str]:
    """The sentences of a turn, lower case, punctuation gone; shorter than three words left out."""
    out = []
    for part in _SENTENCE_SPLIT.split(text or ""):
        tokens = words(part)
        if len(tokens) >= MIN_SENTENCE_WORDS:
            out.append(" ".join(tokens))
    return out


def persona_prompts(roster: Roster | None, version: str) -> dict[str, list[str]]:
    """Each companion's system prompt as words (what a reply must not read back)."""
    if roster is None:
        return {}
    from mascot.dialogue.prompts import speaker_messages
    from mascot.schema import Context

    version = version if version in PROMPT_VERSIONS else FIRST_PROMPT_VERSION
    context = Context(context_id="check", dataset="check")
    return {p.name: words(speaker_messages(p, roster, context, [], version=version)[0]["content"]) for p in roster.personas}


def user_prompt_words(version: str) -> list[str]:
    """The simulated user's system prompt as words, its situation and emotion left empty (the
    person may well repeat their own situation)."""
    from mascot.dialogue.prompts import user_messages
    from mascot.schema import Context

    version = version if version in PROMPT_VERSIONS else FIRST_PROMPT_VERSION
    return words(user_messages(Context(context_id="check", dataset="ESConv"), [], report_emotion=True, version=version)[0]["content"])


def restates_instructions(reply: str, prompt_words: list[str]) -> bool:
    if _META.search(reply or ""):
        return True
    return bool(prompt_words) and bool(ngrams(words(reply), RESTATED_RUN) & ngrams(prompt_words, RESTATED_RUN))


# --------------------------------------------------------------------------- one episode


@dataclass
class EpisodeChecks:
    """One episode's counts: check -> [count, units]; flagged texts kept as examples."""

    counts: dict[str, list[int]] = field(default_factory=lambda: {name: [0, 0] for name in CHECKS})
    flagged: dict[str, list[str]] = field(default_factory=dict)
    balance: dict[str, float | int | None] = field(default_factory=dict)

    def add(self, check: str, hit: bool, text: str = "") -> None:
        self.counts[check][1] += 1
        if hit:
            self.counts[check][0] += 1
            self.flagged.setdefault(check, []).append(text[:160])

    def to_dict(self) -> dict:
        return {**{name: {"count": c, "of": n} for name, (c, n) in self.counts.items()}, **self.balance}


def speaker_balance(agents: list[Turn], checks: EpisodeChecks) -> None:
    names = [t.agent_name for t in agents]
    longest = max(runs(names), default=0)
    for before, name, repeated in zip(names, names[1:], repeats(names)):
        checks.add("same_speaker_repeats", repeated, f"{name} after {before}")
    top = Counter(names).most_common(1)
    checks.balance = {
        "top_speaker_share": round(top[0][1] / len(names), 4) if top else None,
        "longest_speaker_run": longest if names else None,
        "most_repeated_sentence": 0,
    }


def check_episode(episode: Episode, roster: Roster | None = None) -> EpisodeChecks:
    """Every check over one episode; `roster` (the episode's, when it loads) gives the companions'
    names and system prompts, else the names that spoke in the episode are used."""
    checks = EpisodeChecks()
    agents = [t for t in episode.turns if not t.is_user]
    speaker_balance(agents, checks)
    companions = list(roster.names) if roster else sorted({t.agent_name for t in agents})
    prompts = persona_prompts(roster, episode.metadata.prompt_version or FIRST_PROMPT_VERSION)
    user_words = user_prompt_words(episode.metadata.prompt_version or FIRST_PROMPT_VERSION)
    examples = example_directives()
    user_as_speaker = name_pattern(companions)
    said: Counter[str] = Counter()
    for turn in episode.turns:
        text = turn.response or ""
        if turn.is_user:
            checks.add("user_as_companion", bool(_SUPPORTIVE.search(text)), text)
            checks.add("instruction_restatements", restates_instructions(text, user_words), text)
            checks.add("speaking_as_another", bool(user_as_speaker and user_as_speaker.search(text)), text)
        else:
            agent_turn_checks(turn, text, [n for n in companions if n != turn.agent_name], prompts, examples, checks)
        for sentence in sentences(text):
            checks.add("repeated_sentences", said[sentence] > 0, sentence)
            said[sentence] += 1
    checks.balance["most_repeated_sentence"] = max(said.values(), default=0)
    return checks


def agent_turn_checks(turn: Turn, text: str, others: list[str], prompts: dict[str, list[str]], examples, checks: EpisodeChecks) -> None:
    from mascot.safety import SAFETY_ACTION

    if turn.directive is not None and turn.directive.action == SAFETY_ACTION:
        return  # the safety reply is MASCOT's own text, not a Speaker's
    directive = director_directive(turn)
    if turn.director_copied_example:  # the Director's copy was replaced by the neutral directive: still a copy
        checks.add("directive_example_copies", True, "(copied the example; the neutral directive was used)")
    elif directive is not None:
        checks.add("directive_example_copies", copies_example(*directive, examples), " / ".join(directive))
        names = [turn.agent_name, *others]
        checks.add("directive_without_instruction", lacks_instruction(*directive, names), " / ".join(directive))
    checks.add("instruction_restatements", restates_instructions(text, prompts.get(turn.agent_name, [])), text)
    checks.add("third_person_user", bool(_THIRD_PERSON.search(text)), text)
    speaking_as = name_pattern([*others, *USER_LABELS])
    checks.add("speaking_as_another", bool(speaking_as and speaking_as.search(text)), text)


# --------------------------------------------------------------------------- a file of episodes


def episode_roster(episode: Episode, tally: Counter) -> Roster | None:
    """The roster an episode names; a record that names none (a legacy file) has its dataset's
    (`mascot metrics --dataset` gives it where the file does not); else None (counted: names then
    come from the episode)."""
    from mascot.errors import MascotError
    from mascot.rosters import load_roster, roster_for_dataset

    name = episode.metadata.roster
    try:
        return load_roster(name) if name else roster_for_dataset(episode.metadata.dataset)
    except (MascotError, OSError, ValueError):
        tally["num_episodes_without_roster"] += 1
        return None


def conversation_report(episodes: list[Episode], examples_per_check: int = 3) -> tuple[dict, list[dict]]:
    """(the pooled report, each episode's counts in episode order)."""
    tally: Counter = Counter()
    rosters: dict[tuple[str | None, str | None], Roster | None] = {}
    totals = {name: [0, 0] for name in CHECKS}
    shown: dict[str, list[dict]] = {name: [] for name in CHECKS}
    per_episode, shares, runs = [], [], []
    for episode in episodes:
        key = (episode.metadata.roster, episode.metadata.dataset)
        if key not in rosters:
            rosters[key] = episode_roster(episode, tally)
        checks = check_episode(episode, rosters[key])
        per_episode.append(checks.to_dict())
        for name, (count, units) in checks.counts.items():
            totals[name][0] += count
            totals[name][1] += units
            for text in checks.flagged.get(name, [])[: examples_per_check - len(shown[name])]:
                shown[name].append({"episode_id": episode.episode_id, "text": text})
        if checks.balance["top_speaker_share"] is not None:
            shares.append(checks.balance["top_speaker_share"])
            runs.append(checks.balance["longest_speaker_run"])
    report = {
        "checks": {name: {"count": c, "of": n, "unit": UNITS[name], "rate": round(c / n, 4) if n else None} for name, (c, n) in totals.items()},
        "speaker_balance": {
            "mean_top_speaker_share": round(sum(shares) / len(shares), 4) if shares else None,
            "mean_longest_speaker_run": round(sum(runs) / len(runs), 4) if runs else None,
            "max_longest_speaker_run": max(runs, default=None),
        },
        "examples": {name: rows for name, rows in shown.items() if rows},
        "num_episodes_without_roster": tally["num_episodes_without_roster"],
    }
    return report, per_episode


def summary_line(report: dict) -> str:
    """The checks in one line: "directive example copies 12% (3/25), ..."."""
    parts = []
    for name, row in report["checks"].items():
        if row["of"]:
            parts.append(f"{name.replace('_', ' ')} {row['rate']:.0%} ({row['count']}/{row['of']})")
    share = report["speaker_balance"]["mean_top_speaker_share"]
    if share is not None:
        parts.append(f"top speaker share {share:.0%}, longest run {report['speaker_balance']['max_longest_speaker_run']}")
    return ", ".join(parts) or "no turns to check"

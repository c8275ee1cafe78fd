"""Every record that passes between MASCOT's stages, as pydantic models written to JSONL.

Generation, judging, pair building, training and evaluation all read and write these models;
nobody re-parses dicts by hand. Field names follow the episode layout users of the research code
already know (`conv_id`, `turns`, `round_id`, `directive_output`, `agents_spoken`, `metadata`).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SCHEMA_VERSION = "1.0"


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _first_non_finite(value: Any, where: str) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return where
    if isinstance(value, dict):
        return next((w for k, v in value.items() if (w := _first_non_finite(v, f"{where}.{k}"))), None)
    if isinstance(value, list):
        return next((w for i, v in enumerate(value) if (w := _first_non_finite(v, f"{where}[{i}]"))), None)
    return None


class Record(BaseModel):
    """Base for every JSONL record: unknown fields from newer files survive a round trip.

    Numbers must be finite, in declared and unknown fields alike: a NaN margin or score would
    otherwise travel silently into training (where it turns every weight into NaN)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, allow_inf_nan=False)

    @model_validator(mode="after")
    def _extras_are_finite(self):
        where = _first_non_finite(self.__pydantic_extra__ or {}, "record")
        if where:
            raise ValueError(f"{where.removeprefix('record.')} must be a finite number")
        return self

    def to_json(self) -> str:
        return self.model_dump_json(exclude_none=True)


def check_messages(messages: list[dict[str, str]], name: str) -> list[dict[str, str]]:
    """A chat in TRL's conversational format: at least one message, each with a role and text."""
    if not messages:
        raise ValueError(f"{name} is empty: it needs at least one message")
    for i, message in enumerate(messages):
        if not str(message.get("role") or "").strip():
            raise ValueError(f"{name}[{i}] has no role")
        if not str(message.get("content") or "").strip():
            raise ValueError(f"{name}[{i}] has no text")
    return messages


# --------------------------------------------------------------------------- personas and rosters


class Persona(Record):
    name: str
    role: str = Field(description="one-line role, e.g. 'emotional validator'")
    traits: list[str] = Field(default_factory=list)
    linguistic_style: str = ""
    expertise: str = ""
    disposition: str = ""
    goal: str = ""


class Roster(Record):
    name: str
    version: str
    domain: Literal["emotional_support", "meetings", "custom"] = "custom"
    description: str = ""
    datasets: list[str] = Field(default_factory=list)
    personas: list[Persona]

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.personas]

    def persona(self, name: str) -> Persona:
        for p in self.personas:
            if p.name == name:
                return p
        raise KeyError(f"{name!r} is not on roster {self.name!r} ({', '.join(self.names)})")

    @property
    def ident(self) -> str:
        return f"{self.name}@{self.version}"


class BigFiveProfile(Record):
    name: str = Field(description="e.g. 'High Openness'")
    trait: Literal["Openness", "Conscientiousness", "Extraversion", "Agreeableness", "Neuroticism"]
    level: Literal["High", "Low"]
    description: str

    @property
    def label(self) -> str:
        """How the simulated user's prompt names the profile."""
        return self.name


MBTI_LETTERS = {
    "E": "Extraversion",
    "I": "Introversion",
    "S": "Sensing",
    "N": "Intuition",
    "T": "Thinking",
    "F": "Feeling",
    "J": "Judging",
    "P": "Perceiving",
}


class MbtiProfile(Record):
    name: str = Field(pattern=r"^[EI][SN][TF][JP]$", description="the type's four letters, e.g. 'INTJ'")
    letters: list[str] = Field(description="what each letter stands for, in order: e.g. Introversion, Intuition, Thinking, Judging")
    description: str

    @model_validator(mode="after")
    def _letters_match_name(self):
        expected = [MBTI_LETTERS[c] for c in self.name]
        if self.letters != expected:
            raise ValueError(f"{self.name}: letters must be {', '.join(expected)}")
        return self

    @property
    def label(self) -> str:
        return f"{self.name} ({', '.join(self.letters)})"


UserProfile = BigFiveProfile | MbtiProfile


# --------------------------------------------------------------------------- dataset items


class DialogueLine(Record):
    speaker: str
    text: str


class Context(Record):
    """One dataset item that seeds an episode or a Stage-1 query."""

    context_id: str
    dataset: str
    split: str = ""
    conv_id: str | None = None  # the dataset's own conversation id where it has one
    # emotional support (ESConv, Empathetic Dialogues)
    situation: str = ""
    emotion: str | None = None
    problem_type: str | None = None
    opening_turns: list[DialogueLine] = Field(default_factory=list)
    # meetings (QMSum)
    meeting: str | None = None
    start_idx: int | None = None
    transcript: list[DialogueLine] = Field(default_factory=list)
    query: str | None = None

    @property
    def is_meeting(self) -> bool:
        return self.meeting is not None


# --------------------------------------------------------------------------- episodes


class Directive(Record):
    agent_name: str
    action: str = ""
    tone: str = ""


class Turn(Record):
    turn_idx: int
    round_id: int
    agent_name: str
    response: str
    directive: Directive | None = None
    directive_output: str | None = None  # the Director's answer that `directive` was parsed from
    # True when no Director answer could be parsed and a random speaker ran with a neutral
    # directive: `directive_output` is then absent and the failed answers are kept here instead.
    director_fallback: bool | None = None
    director_raw_output: str | None = None
    # True when the fallback replaced a directive that copied the Director prompt's worked example
    # (`mascot.dialogue.examples`): the turn keeps the companion the Director named, with the
    # neutral directive. Absent otherwise, as in records written before it existed.
    director_copied_example: bool | None = None
    turn_type: Literal["user"] | None = None  # absent on agent turns, as in the reference layout
    emotion: str | None = None  # the simulated user's reported state on user turns
    # Reasoning set aside from `response` / `directive_output` (absent when the role did not think)
    reasoning: str | None = None
    directive_reasoning: str | None = None
    # What a baseline's agents said backstage before this reply (MultiAgentESC: analysis, strategy
    # proposals and votes); absent for MASCOT's own turns.
    backstage: dict[str, Any] | None = None
    # The companion the Director named when --max-consecutive-turns gave the turn to another: the
    # Director's answer is then kept in `director_raw_output`, as it was not the directive followed.
    director_pick: str | None = None

    @property
    def is_user(self) -> bool:
        return self.turn_type == "user"


class RoleIdentity(Record):
    """Which weights actually answered for a role: base model, adapter, served id, backend."""

    base_model: str | None = None
    adapter: str | None = None
    served_model: str | None = None
    backend: Literal["http", "local", "scripted"] | None = None


class BranchInfo(Record):
    """Where a branching episode forked: records sharing `group_id` share the prefix."""

    group_id: str
    decision_round: int
    candidate_idx: int
    num_candidates: int
    prefix_turns: int = Field(description="turns in the shared prefix before the decision point")


class EpisodeMetadata(Record):
    schema_version: str = SCHEMA_VERSION
    system: str = "mascot"
    dataset: str
    persona_set: str = "default"
    director_model: str | None = None
    speaker_model: str | None = None
    user_model: str | None = None
    rubric_version: str = "paper_v1"
    roster: str | None = None
    roster_version: str | None = None
    roles: dict[str, RoleIdentity] = Field(default_factory=dict)
    generation_mode: str | None = None
    turn_policy: str | None = None
    seed: int | None = None
    run_id: str | None = None
    episode_idx: int = 0
    branch: BranchInfo | None = None
    prompt_version: str | None = None
    prompt_family: str | None = None  # a prompting baseline's family; absent for MASCOT's persona prompts
    self_consistency_samples: int | None = None  # replies sampled per Speaker turn, the most consistent kept; absent: one
    created_at: str | None = None
    updated_at: str | None = None  # chat sessions: when the record was last rewritten
    sampling: dict[str, Any] | None = None  # chat sessions: temperature, max_tokens, rounds per message


class SafetyEvent(Record):
    """A user message the safety screen matched, and the safety reply the group gave instead of a round."""

    turn_idx: int  # the user turn that was screened
    category: str  # suicide, self_harm, abuse, danger_to_others
    method: Literal["rule", "embedding", "model"]  # the screen's stage that caught it
    rule: str  # "<category>:<pattern index>" or the closest example phrase
    score: float | None = None  # similarity, for the embedding check
    rules_version: str
    locale: str
    response_turn_idx: int | None = None


class Episode(Record):
    episode_id: str
    conv_id: str | None = None
    id: str | None = None  # QMSum
    start_idx: int | None = None  # QMSum
    meeting: str | None = None  # QMSum
    context_id: str | None = None
    turns: list[Turn] = Field(default_factory=list)
    agents_spoken: dict[str, int] = Field(default_factory=dict)
    initial_emotion: str | None = None
    final_emotion: str | None = None
    emotion_trajectory: list[str] | None = None
    user_big_five: str | None = None
    user_mbti: str | None = None  # the simulated user's MBTI type (--user-profile-set mbti)
    context: Context | None = None  # the dataset item it grew from: records stand on their own
    safety_events: list[SafetyEvent] | None = None  # absent when the screen matched nothing
    metadata: EpisodeMetadata
    counters: Counters | None = None  # chat sessions: the failures counted while it was held

    @property
    def agent_turns(self) -> list[Turn]:
        return [t for t in self.turns if not t.is_user]


# --------------------------------------------------------------------------- Stage-1 data and judging


class Candidate(Record):
    candidate_id: str
    context_id: str
    persona: str
    prompt: list[dict[str, str]]
    response: str
    candidate_idx: int
    model: str | None = None
    reasoning: str | None = None  # set aside from `response`; absent when the Speaker did not think
    overall: float | None = None
    scores: dict[str, int | float] | None = None  # floats: expected scores of the logprob judge
    roster: str | None = None
    roster_version: str | None = None
    rubric_version: str | None = None
    prompt_version: str | None = None
    # A cross-persona judgment (`mascot.stage1.cross_persona`): the reply was written for this other
    # persona and is judged here as `persona`, under `persona`'s prompt.
    written_for: str | None = None


class Judgment(Record):
    item_id: str
    judge_model: str
    rubric_version: str
    scope: Literal["agent", "collective"] = "agent"
    persona: str | None = None
    system: str | None = None
    scores: dict[str, int | float] = Field(default_factory=dict)  # float: an expected score (logprobs)
    reasons: dict[str, str] = Field(default_factory=dict)
    overall: float | None = None
    failed: bool = False
    error: str | None = None
    # json: integer verdicts parsed from a JSON reply; logprobs: per criterion, the probabilities
    # of the answers on the scale (`distributions`) and their expected value (`scores`).
    # python: a plug-in judge's scores (`mascot.judge.plugin`), with the version its function declares
    scoring: Literal["json", "logprobs", "python"] = "json"
    distributions: dict[str, dict[str, float]] | None = None
    judge_version: str | None = None


class PreferencePair(Record):
    """TRL's conversational preference format plus provenance."""

    prompt: list[dict[str, str]]
    chosen: list[dict[str, str]]
    rejected: list[dict[str, str]]
    margin: float
    persona: str | None = None
    context_id: str | None = None
    chosen_score: float | None = None
    rejected_score: float | None = None
    kind: Literal["persona", "episode", "directive"] = "persona"
    # Cross-persona pairs: the persona a side's reply was written for, when not the pair's own
    # (`mascot.stage1.cross_persona`); None on both sides for every other pair.
    chosen_written_for: str | None = None
    rejected_written_for: str | None = None
    # Episode-level pairs: the turns both sides open with (a branch and its sibling or spine share
    # their prefix; two independent episodes share none). None where not counted.
    shared_turns: int | None = None
    # Episode-level pairs: how the sides are written (`mascot.prefs.group.TRAJECTORY_FORMATS`;
    # None: written before the field, format 1).
    trajectory_format: int | None = None
    roster: str | None = None
    roster_version: str | None = None
    rubric_version: str | None = None

    @property
    def is_cross_persona(self) -> bool:
        return bool(self.chosen_written_for or self.rejected_written_for)

    @property
    def pair_kind(self) -> str:
        """What the two sides differ in, as held-out accuracy is reported: a persona pair's own
        replies or a borrowed one (cross_persona); an episode pair's whole conversations (episode)
        or the continuations of one shared beginning (branch)."""
        if self.kind == "persona":
            return "cross_persona" if self.is_cross_persona else "own"
        if self.kind == "episode":
            return "branch" if self.shared_turns else "episode"
        return self.kind

    @field_validator("prompt", "chosen", "rejected")
    @classmethod
    def _messages_have_text(cls, messages: list[dict[str, str]], info) -> list[dict[str, str]]:
        return check_messages(messages, info.field_name)


# --------------------------------------------------------------------------- runs


class Counters(Record):
    num_generation_failures: int = 0
    num_directive_parse_failures: int = 0
    num_random_agent_fallbacks: int = 0
    num_empty_responses: int = 0
    num_annotation_failures: int = 0
    num_skipped_samples: int = 0
    num_director_truncations: int = 0  # Director replies that reached their token limit
    # Director answers that named a companion but copied the prompt's worked example (unusable, like a parse failure)
    num_directive_example_copies: int = Field(0, exclude_if=lambda v: not v)
    num_user_emotions_missing: int = 0  # simulated-user turns asked for an emotion that gave none
    # Picks given to another companion by --max-consecutive-turns (a policy event, not a failure)
    num_turn_limit_overrides: int = Field(0, exclude_if=lambda v: not v)
    # Safety-screen model-stage answers that were no label, or calls that failed (the rules' decision stood)
    num_safety_model_fallbacks: int = Field(0, exclude_if=lambda v: not v)


class RoleUsage(Record):
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failures: int = 0  # failed requests (after the client's retries), in all attempts of the run
    failures_by_cause: dict[str, int] = Field(default_factory=dict)  # "http-400", "timeout", ...
    structured: int = 0  # requests with a JSON schema sent as a structured-output constraint
    unstructured: int = 0  # requests with a JSON schema sent free (the endpoint has no support)
    attempts: int = 0  # HTTP attempts sent (the endpoint table's `requests`, summed over servers)
    retries: int = 0  # failed attempts sent again (the endpoint table's `retries`)
    retries_by_cause: dict[str, int] = Field(default_factory=dict)
    prompts_fitted: int = Field(0, exclude_if=lambda v: not v)  # prompts cut to fit the server's context
    prompt_tokens_cut: int = Field(0, exclude_if=lambda v: not v)  # tokens (estimated) those cuts removed

    def add(self, other: RoleUsage) -> RoleUsage:
        """Adds another count (one call's, or an earlier attempt's) into this one."""
        for name in (
            "requests",
            "prompt_tokens",
            "completion_tokens",
            "failures",
            "structured",
            "unstructured",
            "attempts",
            "retries",
            "prompts_fitted",
            "prompt_tokens_cut",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for mine, theirs in ((self.failures_by_cause, other.failures_by_cause), (self.retries_by_cause, other.retries_by_cause)):
            for cause, count in theirs.items():
                mine[cause] = mine.get(cause, 0) + count
        return self


class Failures(Record):
    """What a run lost, as of its last attempt: a context or item repaired by --resume leaves it."""

    by_cause: dict[str, int] = Field(default_factory=dict)
    dropped: dict[str, str] = Field(default_factory=dict)  # context / item id -> "cause: message"
    # Stage 1: candidate id -> "judge-backend: message" (or judge-unparseable) for a kept candidate
    # whose judgment failed; --resume judges it again. Absent when there is none.
    unjudged: dict[str, str] | None = None
    # failed requests that were sent again, by cause, over all roles (usage.<role>.retries_by_cause
    # summed; the endpoint table's `retries` summed over servers); absent when there were none
    retried_by_cause: dict[str, int] = Field(default_factory=dict, exclude_if=lambda v: not v)


class RunConfig(Record):
    run_id: str
    command: str
    created_at: str = Field(default_factory=utc_now)
    mascot_version: str = ""
    output_file: str
    roles: dict[str, dict[str, Any]] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)


class RunSummary(Record):
    run_id: str
    status: Literal["running", "completed", "failed", "interrupted"] = "running"
    started_at: str = Field(default_factory=utc_now)
    finished_at: str | None = None
    duration_s: float | None = None
    num_records: int = 0
    num_resumed_records: int = 0
    num_torn_lines_dropped: int = 0
    counters: Counters = Field(default_factory=Counters)
    usage: dict[str, RoleUsage] = Field(default_factory=dict)
    failures: Failures = Field(default_factory=Failures)
    endpoints: dict[str, dict[str, int]] = Field(default_factory=dict)  # per server URL: requests, failures
    num_safety_events: int | None = None  # user messages the safety screen answered (absent when none)
    # Stage 1: the run's judgments over all its candidates: scored, failed, following a fixed pattern
    # (mascot.judge.patterns); absent for runs that judge nothing.
    judging: dict[str, Any] | None = None
    error: str | None = None


Episode.model_rebuild()  # `counters` names Counters, declared further down

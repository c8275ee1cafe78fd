"""The episode engine's settings: one dataclass, whose flag fields become `mascot generate` options.

A new engine setting is one line here: a `setting(...)` field appears as a flag of every command
whose settings inherit this class, and reaches the engine unchanged (the engine is given the
command's settings object). Fields made with `fixed(...)` are filled in by code (the run id and tag).

Imports nothing heavy: `mascot --help` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal, Optional

from mascot import vocab
from mascot.settings import fixed, require, setting
from mascot.settings_groups import SeedSettings
from mascot.vocab import (
    BRANCH_PROPOSALS,
    GENERATION_MODES,
    MAX_CONSECUTIVE_TURNS,
    PROMPT_VERSION,
    PROMPT_VERSIONS,
    SAFETY_MODEL_SCOPES,
    SAFETY_MODES,
    TURN_POLICIES,
    USER_MAX_TOKENS,
)

GenerationMode = Literal["directed", "independent", "branching", "tree"]


@dataclass
class SamplingSettings(SeedSettings):
    """How replies are sampled: seed, temperature, length, repetition penalty (episodes, Stage 1, a chat)."""

    temperature: float = setting(vocab.TEMPERATURE, "Sampling temperature of the Director, Speakers and User.")
    max_tokens: int = setting(vocab.MAX_TOKENS, "Longest reply in tokens.")
    repetition_penalty: float = setting(1.0, vocab.REPETITION_PENALTY_HELP)


@dataclass
class SafetySettings:
    """The crisis-language screen of user messages (mascot.safety)."""

    safety: str = setting("auto", "Crisis-language screen of user messages (mascot.safety): auto (emotional-support roster only), on or off.")
    safety_locale: Optional[str] = setting(None, "Locale section of the crisis resources (default: the file's default section).")
    safety_model_scope: str = setting("unsure", vocab.SAFETY_MODEL_SCOPE_HELP)


@dataclass
class SpeakerSettings(SamplingSettings):
    """What a Speaker run asks of the model beyond sampling: replies per request, prompts, queries in flight, thinking room."""

    num_candidates: int = setting(vocab.NUM_CANDIDATES, "Directives per decision point (branching) or replies per persona (individual).")
    max_concurrent_episodes: int = setting(vocab.MAX_CONCURRENT_EPISODES, "Contexts (group) or queries (individual) in flight at once.")
    reasoning_allowance: int = setting(
        vocab.REASONING_ALLOWANCE, "Extra tokens a role that thinks (its --thinking flag on) may spend on reasoning before its reply."
    )
    prompt_version: str = setting(
        PROMPT_VERSION, "Director, Speaker and user prompts: " + " | ".join(PROMPT_VERSIONS) + " (v1: the first prompts, kept for earlier runs)."
    )


@dataclass
class EngineSettings(SafetySettings, SpeakerSettings):
    """How episodes unfold: rounds, generation mode, turn policy, simulated users, sampling."""

    num_turns: int = setting(5, "Rounds per episode (one round = Director -> Speaker -> maybe User).")
    generation_mode: str = setting(
        "directed",
        "directed | independent | branching | tree (every sequence of companions over the rounds, each turn's directive written "
        "by the Director for that companion: roster size ** rounds conversations per context, their shared beginnings generated once).",
    )
    num_episodes: int = setting(vocab.NUM_EPISODES, "Episodes per context (independent mode).")
    branch_proposals: str = setting(
        "director",
        "Branching: what each decision point is continued with - director (--num-candidates directives sampled from the Director) "
        "| roster (one per companion, the Director writing each one's action and tone: every choice tried once).",
    )
    user_response_probability: float = setting(0.5, "Chance the simulated user speaks after a round.")
    enable_user_simulation: bool = setting(True, "Simulate the user between rounds.", flags=("--enable-user-simulation/--no-user-simulation",))
    enable_big_five: bool = setting(False, "Give simulated users Big Five profiles (persona_set big5); as --user-profile-set big_five.")
    user_big_five_profile: Optional[str] = setting(None, 'One Big Five profile for every user, e.g. "High Openness".')
    user_profile_set: Optional[str] = setting(
        None, "Give simulated users profiles of this set, one drawn per episode: " + " | ".join(vocab.USER_PROFILE_SETS) + "."
    )
    user_profile: Optional[str] = setting(
        None, f'One profile for every user, from --user-profile-set (default {vocab.DEFAULT_USER_PROFILE_SET}), e.g. "High Openness" or INTJ.'
    )
    turn_policy: str = setting("director", "Who speaks next: director | round-robin | random | multiagentesc (the MultiAgentESC baseline).")
    prompt_family: str = setting(
        "persona", "Speaker prompts: persona (MASCOT's) | zero-shot | zero-shot-cot | few-shot | few-shot-cot (prompting baselines)."
    )
    max_consecutive_turns: int = setting(
        MAX_CONSECUTIVE_TURNS,
        "Most agent turns one companion may take in a row: a pick past it goes to the companion silent longest (counted); 0: no limit.",
    )
    self_consistency_samples: int = setting(
        1, "Replies sampled per Speaker turn; above 1 the one most consistent with the others is kept (the Self-Consistency baseline)."
    )
    mesc_strategists: int = setting(3, "multiagentesc: agents that each propose a support strategy and vote.")
    system: str = setting("mascot", "System label written to metadata (mascot, mascot-g, mascot-i, a baseline name).")
    director_max_tokens: Optional[int] = setting(
        None, "Longest Director reply in tokens (default: what the longest valid directive needs, about 230 for the shipped rosters)."
    )
    user_max_tokens: int = setting(USER_MAX_TOKENS, "Longest simulated-user reply in tokens.")
    safety_embeddings: bool = setting(False, "Add the embedding-similarity check (MiniLM) to the screen's rules.")
    # Filled in by code, not flags. Each role's reasoning mode is its endpoint's (`--<role>-thinking`,
    # on the clients the engine is given); the dataset and rubric labels come from the command's
    # data and judging settings where it has them.
    run_id: Optional[str] = fixed(None)
    # A short tag of the run's settings (system, policy, models...) inside every episode id, so
    # that episodes of two systems or runs on the same contexts never share an id.
    run_tag: str = fixed("")

    def __post_init__(self) -> None:
        check_engine(self)


def engine_settings_from(source: object, *, prefix: str = "", **overrides: Any) -> EngineSettings:
    """The engine settings of a run that declares engine fields of its own (a chat, the Director
    trainer's rollouts): each engine field `source` declares, under `prefix` + its name where it
    has that (the rollouts' `rollout_max_tokens`: they deliberately differ from the trainer's own
    sampling) or else under its name, then `overrides`. A setting such a run declares reaches its
    engine by its name, with no copy to keep; one left unset (None where the engine has a value,
    such as a rollout penalty not yet read from the episodes' run) keeps the engine's default."""
    taken = {}
    for f in fields(EngineSettings):
        name = next((key for key in (prefix + f.name, f.name) if hasattr(source, key)), None)
        if name is not None and (getattr(source, name) is not None or f.default is None):
            taken[f.name] = getattr(source, name)
    return EngineSettings(**{**taken, **overrides})


def check_sampling(s: SamplingSettings) -> None:
    require(s.temperature >= 0, "--temperature must be 0 or more")
    require(s.max_tokens >= 1, "--max-tokens must be at least 1")
    check_repetition_penalty(s.repetition_penalty)


def check_safety(s: SafetySettings) -> None:
    require(s.safety in SAFETY_MODES, f"unknown --safety {s.safety!r}: choose auto, on or off")
    require(
        s.safety_model_scope in SAFETY_MODEL_SCOPES,
        f"unknown --safety-model-scope {s.safety_model_scope!r}: choose {' or '.join(SAFETY_MODEL_SCOPES)}",
    )


def check_speaker(s: SpeakerSettings) -> None:
    check_sampling(s)
    require(s.prompt_version in PROMPT_VERSIONS, f"unknown --prompt-version {s.prompt_version!r}: choose one of {', '.join(PROMPT_VERSIONS)}")
    require(s.num_candidates >= 1, "--num-candidates must be at least 1")
    require(s.max_concurrent_episodes >= 1, "--max-concurrent-episodes must be at least 1")
    require(s.reasoning_allowance >= 0, "--reasoning-allowance must not be negative")


def check_repetition_penalty(value: float) -> None:
    """--repetition-penalty, wherever a command takes it (the sampling settings, `mascot eval`)."""
    require(0 < value <= 2, "--repetition-penalty must be above 0 and at most 2 (1.0: off)")


def check_engine(s: EngineSettings) -> None:
    """The engine settings' own checks (also run by command settings that inherit the fields)."""
    require(s.generation_mode in GENERATION_MODES, f"unknown --generation-mode {s.generation_mode!r}: choose one of {', '.join(GENERATION_MODES)}")
    require(s.branch_proposals in BRANCH_PROPOSALS, f"unknown --branch-proposals {s.branch_proposals!r}: choose {' or '.join(BRANCH_PROPOSALS)}")
    if s.generation_mode == "tree":
        require(s.turn_policy == "director", "--generation-mode tree: the Director writes every companion's directive (--turn-policy director)")
    require(s.turn_policy in TURN_POLICIES, f"unknown --turn-policy {s.turn_policy!r}: choose one of {', '.join(TURN_POLICIES)}")
    check_safety(s)
    check_speaker(s)
    from mascot.dialogue.prompt_families import check_prompt_family

    check_prompt_family(s.prompt_family)
    require(s.max_consecutive_turns >= 0, "--max-consecutive-turns must be 0 (no limit) or more")
    require(s.mesc_strategists >= 1, "--mesc-strategists must be at least 1")
    require(s.self_consistency_samples >= 1, "--self-consistency-samples must be at least 1")
    require(
        s.self_consistency_samples == 1 or s.turn_policy != vocab.MULTIAGENTESC,
        "--self-consistency-samples: multiagentesc writes its replies itself (no Speaker samples to choose among)",
    )
    require(0.0 <= s.user_response_probability <= 1.0, "--user-response-probability must lie between 0 and 1")
    require(min(s.num_turns, s.num_episodes) >= 1, "--num-turns and --num-episodes must be at least 1")
    require(s.user_max_tokens >= 1, "--user-max-tokens must be at least 1")
    check_user_profiles(s)


def check_user_profiles(s: EngineSettings) -> None:
    """Fails early on an unknown set or profile. Big Five users are recorded under the Big Five
    settings whichever flags asked for them, so that their runs keep the ids they always had."""
    from mascot.rosters import profile_set, user_profile

    chosen = profile_set(s.user_profile_set).name if (s.user_profile_set or s.user_profile) else None
    if chosen == "big_five":
        require(
            not (s.user_profile and s.user_big_five_profile and s.user_profile != s.user_big_five_profile),
            "--user-profile and --user-big-five-profile name different profiles",
        )
        s.user_big_five_profile = s.user_profile or s.user_big_five_profile
        s.enable_big_five, s.user_profile_set, s.user_profile = True, None, None
    elif chosen is not None:
        require(
            not (s.enable_big_five or s.user_big_five_profile),
            f"--user-profile-set {chosen} and Big Five users (--enable-big-five, --user-big-five-profile) exclude each other",
        )
        s.user_profile_set = chosen
        if s.user_profile:
            s.user_profile = user_profile(s.user_profile, chosen).name  # the file's spelling
    if s.user_big_five_profile:
        user_profile(s.user_big_five_profile, "big_five")  # kept as typed: run ids have always digested it so
        s.enable_big_five = True  # one profile for every user implies Big Five users


def user_profile_choice(s: EngineSettings) -> tuple[str | None, str | None]:
    """(profile set, the one profile every user gets or None for one drawn per episode); no set
    when simulated users have no profile."""
    if s.user_profile_set:
        return s.user_profile_set, s.user_profile
    if s.enable_big_five or s.user_big_five_profile:
        return "big_five", s.user_big_five_profile
    return None, None

"""The episode engine's settings: one dataclass, whose flag fields become `mascot generate` options.

A new engine setting is one line here: a `setting(...)` field appears as a flag of every command
whose settings inherit this class, and reaches the engine unchanged (the engine is given the
command's settings object). Fields made with `fixed(...)` are filled in by code (the run id and tag).

Imports nothing heavy: `mascot --help` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

from mascot import vocab
from mascot.settings import fixed, require, setting
from mascot.settings_groups import SeedSettings
from mascot.vocab import GENERATION_MODES, SAFETY_MODES, TURN_POLICIES, USER_MAX_TOKENS

GenerationMode = Literal["directed", "independent", "branching"]


@dataclass
class EngineSettings(SeedSettings):
    """How episodes unfold: rounds, generation mode, turn policy, simulated users, sampling."""

    num_turns: int = setting(5, "Rounds per episode (one round = Director -> Speaker -> maybe User).")
    generation_mode: str = setting("directed", "directed | independent | branching.")
    num_episodes: int = setting(vocab.NUM_EPISODES, "Episodes per context (independent mode).")
    num_candidates: int = setting(vocab.NUM_CANDIDATES, "Directives per decision point (branching) or replies per persona (individual).")
    user_response_probability: float = setting(0.5, "Chance the simulated user speaks after a round.")
    enable_user_simulation: bool = setting(True, "Simulate the user between rounds.", flags=("--enable-user-simulation/--no-user-simulation",))
    enable_big_five: bool = setting(False, "Give simulated users Big Five profiles (persona_set big5).")
    user_big_five_profile: Optional[str] = setting(None, 'One profile for every user, e.g. "High Openness".')
    turn_policy: str = setting("director", "Who speaks next: director | round-robin | random | multiagentesc (the MultiAgentESC baseline).")
    prompt_family: str = setting(
        "persona", "Speaker prompts: persona (MASCOT's) | zero-shot | zero-shot-cot | few-shot-cot (prompting baselines)."
    )
    mesc_strategists: int = setting(3, "multiagentesc: agents that each propose a support strategy and vote.")
    max_concurrent_episodes: int = setting(vocab.MAX_CONCURRENT_EPISODES, "Contexts (group) or queries (individual) in flight at once.")
    system: str = setting("mascot", "System label written to metadata (mascot, mascot-g, mascot-i, a baseline name).")
    temperature: float = setting(vocab.TEMPERATURE, "Sampling temperature of the Director, Speakers and User.")
    max_tokens: int = setting(vocab.MAX_TOKENS, "Longest reply in tokens.")
    director_max_tokens: Optional[int] = setting(
        None, "Longest Director reply in tokens (default: what the longest valid directive needs, about 230 for the shipped rosters)."
    )
    user_max_tokens: int = setting(USER_MAX_TOKENS, "Longest simulated-user reply in tokens.")
    reasoning_allowance: int = setting(
        vocab.REASONING_ALLOWANCE, "Extra tokens a role that thinks (its --thinking flag on) may spend on reasoning before its reply."
    )
    safety: str = setting(
        "auto", "Crisis-language screen of user messages (mascot.safety): auto (emotional-support roster only), on or off."
    )
    safety_locale: Optional[str] = setting(None, "Locale section of the crisis resources (default: the file's default section).")
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


def check_engine(s: Any) -> None:
    """The engine settings' own checks (also run by command settings that inherit the fields)."""
    require(s.generation_mode in GENERATION_MODES, f"unknown --generation-mode {s.generation_mode!r}: choose one of {', '.join(GENERATION_MODES)}")
    require(s.turn_policy in TURN_POLICIES, f"unknown --turn-policy {s.turn_policy!r}: choose one of {', '.join(TURN_POLICIES)}")
    require(s.safety in SAFETY_MODES, f"unknown --safety {s.safety!r}: choose auto, on or off")
    from mascot.dialogue.prompt_families import check_prompt_family

    check_prompt_family(s.prompt_family)
    require(s.mesc_strategists >= 1, "--mesc-strategists must be at least 1")
    require(0.0 <= s.user_response_probability <= 1.0, "--user-response-probability must lie between 0 and 1")
    require(min(s.num_turns, s.num_candidates, s.num_episodes) >= 1, "--num-turns, --num-candidates and --num-episodes must be at least 1")
    require(min(s.max_tokens, s.user_max_tokens, s.max_concurrent_episodes) >= 1, "--max-tokens, --user-max-tokens and --max-concurrent-episodes must be at least 1")
    if s.user_big_five_profile:
        from mascot.rosters import big_five_profile

        big_five_profile(s.user_big_five_profile)  # fail early on a typo
        s.enable_big_five = True  # one profile for every user implies Big Five users

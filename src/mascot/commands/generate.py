"""`mascot generate`: Stage-1 candidates (`--mode individual`) and group episodes (`--mode group`).

The options are the fields of `GenerateSettings` (data, endpoints, engine, judging, run folder,
plus the few of this command); the settings object itself is what the library runs on, down to
the engine, the judge and the clients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from mascot import vocab
from mascot.dialogue.settings import EngineSettings, check_engine
from mascot.settings import fixed, require, setting
from mascot.settings_groups import DataSettings, EndpointSettings, JudgingSettings, OutputSettings, check_data, check_endpoints, check_judging, check_output

MODES = vocab.GENERATE_MODES
# The settings only one mode reads: a group run never judges; Stage 1 asks the Speaker alone, for
# one reply per candidate (no Director, no simulated user, no turns).
STAGE_1_ONLY = (
    "score_margin", "cross_persona_pairs", "judge_scoring", "judge_max_tokens", "cache_dir", "no_cache", "judge_server_url", "judge_model",
    "judge_extra_body", "judge_thinking",
)  # fmt: skip
GROUP_ONLY = (
    "num_turns", "generation_mode", "num_episodes", "branch_proposals", "user_response_probability", "enable_user_simulation", "enable_big_five",
    "user_big_five_profile", "user_profile_set", "user_profile", "turn_policy", "max_consecutive_turns", "prompt_family", "self_consistency_samples", "mesc_strategists", "system", "director_max_tokens",
    "user_max_tokens", "safety", "safety_locale", "safety_embeddings", "safety_model_scope", "safety_server_url", "safety_model",
    "director_server_url", "director_model",
    "director_adapter", "director_extra_body", "director_thinking", "user_server_url", "user_model", "user_extra_body",
    "user_thinking", "share_model",
)  # fmt: skip


@dataclass
class GenerateSettings(OutputSettings, JudgingSettings, EngineSettings, EndpointSettings, DataSettings):
    """Generate Stage-1 candidates and pairs, or group episodes, into OUTPUT_DIR/<mode>_<dataset>_<model>/."""

    mode: str = setting("group", "group: multi-agent episodes; individual: K candidates per persona + preference pairs.")
    roster: Optional[str] = setting(None, "Roster name or file (default: the dataset's roster).", panel="Generation")
    score_margin: float = setting(vocab.SCORE_MARGIN, "Minimum judged score gap for a preference pair (individual mode).", panel="Judging")
    cross_persona_pairs: int = setting(
        0,
        "Individual mode: also judge each reply as every other persona of the roster and keep up to N pairs per query of an own "
        "and a borrowed reply, which only the persona decides (teaches the reward model who is speaking; costs roster-1 more "
        "judgments per candidate with an LLM judge). 0: off.",
        panel="Judging",
    )
    personas: Optional[tuple[str, ...]] = fixed(None)  # Stage 1: the personas asked (default: the whole roster)

    def __post_init__(self) -> None:
        require(self.mode in MODES, f"unknown --mode {self.mode!r}: choose one of {', '.join(MODES)}")
        check_data(self)
        check_engine(self)
        check_endpoints(self)
        check_judging(self)
        check_output(self)
        require(self.score_margin >= 0, "--score-margin must not be negative")
        require(self.cross_persona_pairs >= 0, "--cross-persona-pairs must not be negative")
        if self.mode == "individual":
            require(self.num_candidates >= 2, "--num-candidates must be at least 2 to make preference pairs")


def ignored_by_mode(s: GenerateSettings) -> list[str]:
    """The flags set away from their defaults that this mode does not read."""
    from dataclasses import fields

    from mascot.settings import default_of, flag_name

    unread = GROUP_ONLY if s.mode == "individual" else STAGE_1_ONLY
    return [flag_name(f.name) for f in fields(s) if f.name in unread and getattr(s, f.name) not in (default_of(f), None, [], ())]


def warn_ignored(s: GenerateSettings) -> None:
    ignored = ignored_by_mode(s)
    if ignored:
        import typer

        typer.secho(f"warning: {', '.join(ignored)} {'has' if len(ignored) == 1 else 'have'} no effect with --mode {s.mode}", fg="yellow", err=True)


def run_generate(s: GenerateSettings) -> None:
    warn_ignored(s)
    if s.mode == "individual":
        from mascot.prefs.generate import run_individual_generation

        run_individual_generation(s)
        return
    from mascot.dialogue.run import run_group_generation

    run_group_generation(s, command="mascot generate --mode group")


def dry_run_generate(_command: str, s: GenerateSettings) -> None:
    from mascot.commands.dryrun import dry_run_generation

    warn_ignored(s)
    if s.mode == "individual":
        from mascot.prefs.generate import client_roles, individual_run_dir, judge_model
        from mascot.prefs.individual import OUTPUTS

        outputs, roles, run_dir = OUTPUTS, client_roles(s), individual_run_dir(s)
        if "judge" not in roles:  # a plug-in judge: its function must load
            from mascot.judge.plugin import load_judge_function

            load_judge_function(judge_model(s))
        settings: dict[str, Any] = {k: getattr(s, k) for k in ("num_candidates", "score_margin", "cross_persona_pairs", "temperature", "max_tokens", "repetition_penalty", "seed", "rubric_version", "judge_scoring")}
    else:
        from mascot.dialogue.run import engine_record, roles_needed, run_dir_for

        outputs, roles, run_dir, settings = ("episodes.jsonl",), roles_needed(s), run_dir_for(s), engine_record(s)
    dry_run_generation(
        s.mode, dataset=s.dataset, data_file=s.data_file, split=s.split, limit=s.limit, roster=s.roster, endpoints=s,
        roles=roles, run_dir=run_dir, outputs=outputs, resume=s.resume, overwrite=s.overwrite, settings=settings,
    )  # fmt: skip

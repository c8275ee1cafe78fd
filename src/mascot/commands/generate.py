"""`mascot generate`: Stage-1 candidates (`--mode individual`) and group episodes (`--mode group`).

The options are the fields of `GenerateSettings` (data, endpoints, engine, run folder, plus the
few of this command); the body builds the library's run configuration and calls it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from mascot.dialogue.settings import EngineSettings, check_engine, engine_part
from mascot.settings import require, setting
from mascot.settings_groups import JUDGE_SCORING_HELP, JUDGE_SCORING_MODES, THINKING_HELP, DataSettings, EndpointSettings, OutputSettings, check_data, check_endpoints, check_output

MODES = ("group", "individual")


@dataclass
class GenerateSettings(OutputSettings, EngineSettings, EndpointSettings, DataSettings):
    """Generate Stage-1 candidates and pairs, or group episodes, into OUTPUT_DIR/<mode>_<dataset>_<model>/."""

    mode: str = setting("group", "group: multi-agent episodes; individual: K candidates per persona + preference pairs.")
    # Over the engine's filled-in fields of the same names: here they are the flags.
    dataset: str = setting("ESConv", "ESConv, EmpatheticDialogues (ED) or QMSum.")
    director_thinking: str = setting("default", "Director: " + THINKING_HELP)
    user_thinking: str = setting("default", "Simulated user: " + THINKING_HELP)
    roster: Optional[str] = setting(None, "Roster name or file (default: the dataset's roster).", panel="Generation")
    num_episodes: int = setting(2, "Episodes per context (independent mode).", panel="Generation")
    score_margin: float = setting(0.5, "Minimum judged score gap for a preference pair.", panel="Judging")
    judge_max_tokens: int = setting(512, "Longest judge reply in tokens (individual mode).")
    judge_scoring: str = setting("auto", JUDGE_SCORING_HELP + " (individual mode)")

    def __post_init__(self) -> None:
        require(self.mode in MODES, f"unknown --mode {self.mode!r}: choose one of {', '.join(MODES)}")
        check_data(self)
        check_engine(self)
        check_endpoints(self)
        check_output(self)
        require(self.score_margin >= 0, "--score-margin must not be negative")
        require(self.judge_scoring in JUDGE_SCORING_MODES, f"--judge-scoring must be one of {', '.join(JUDGE_SCORING_MODES)} (got {self.judge_scoring!r})")
        if self.mode == "individual":
            require(self.num_candidates >= 2, "--num-candidates must be at least 2 to make preference pairs")


def group_config(s: GenerateSettings):
    """The group run these settings describe."""
    from mascot.dialogue.reasoning import thinking_for
    from mascot.dialogue.run import GroupGenerationConfig

    endpoints = s.endpoint_options()
    thinking = {name: thinking_for(endpoints, role) for name, role in (("speaker_think", "speaker"), ("director_thinking", "director"), ("user_thinking", "user"))}
    return GroupGenerationConfig(
        dataset=s.dataset,
        data_file=s.data_file,
        split=s.split,
        limit=s.limit,
        transcript_window=s.token_budget,
        roster=s.roster,
        engine=engine_part(s, director_temperature=s.temperature, **thinking),
        endpoints=endpoints,
        score_margin=s.score_margin,
        output_dir=s.output_dir,
        resume=s.resume,
        overwrite=s.overwrite,
        strict=s.strict,
        trace_role_calls=s.trace_role_calls,
    )


def individual_config(s: GenerateSettings):
    """The Stage-1 run these settings describe."""
    from mascot.dialogue.reasoning import thinking_for
    from mascot.prefs.generate import IndividualGenerationConfig
    from mascot.prefs.individual import IndividualSettings

    endpoints = s.endpoint_options()
    settings = IndividualSettings(
        num_candidates=s.num_candidates, score_margin=s.score_margin, temperature=s.temperature, max_tokens=s.max_tokens, seed=s.seed,
        strict=s.strict, speaker_think=thinking_for(endpoints, "speaker"), reasoning_allowance=s.reasoning_allowance,
    )  # fmt: skip
    return IndividualGenerationConfig(
        dataset=s.dataset, data_file=s.data_file, split=s.split, limit=s.limit, transcript_window=s.token_budget, roster=s.roster,
        settings=settings, endpoints=endpoints, output_dir=s.output_dir, resume=s.resume, overwrite=s.overwrite,
        trace_role_calls=s.trace_role_calls, judge_max_tokens=s.judge_max_tokens, judge_scoring=s.judge_scoring,
    )  # fmt: skip


def run_generate(s: GenerateSettings) -> None:
    if s.mode == "individual":
        from mascot.prefs.generate import run_individual_generation

        run_individual_generation(individual_config(s))
        return
    from mascot.dialogue.run import run_group_generation

    run_group_generation(group_config(s), command="mascot generate --mode group")


def dry_run_generate(_command: str, s: GenerateSettings) -> None:
    from dataclasses import asdict

    from mascot.commands.dryrun import dry_run_generation

    if s.mode == "individual":
        from mascot.prefs.generate import individual_run_dir
        from mascot.prefs.individual import OUTPUTS

        outputs, roles, run_dir = OUTPUTS, ("speaker", "judge"), individual_run_dir(individual_config(s))
        settings: dict[str, Any] = {k: getattr(s, k) for k in ("num_candidates", "score_margin", "temperature", "max_tokens", "seed")}
    else:
        from mascot.dialogue.run import roles_needed, run_dir_for

        group = group_config(s)
        outputs, roles, run_dir, settings = ("episodes.jsonl",), roles_needed(group.engine), run_dir_for(group), asdict(group.engine)
    dry_run_generation(
        s.mode, dataset=s.dataset, data_file=s.data_file, split=s.split, limit=s.limit, roster=s.roster, endpoints=s.endpoint_options(),
        roles=roles, run_dir=run_dir, outputs=outputs, resume=s.resume, overwrite=s.overwrite, settings=settings,
    )  # fmt: skip



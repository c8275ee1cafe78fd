"""`mascot generate`: group episodes (`--mode group`, `GroupEpisodeSettings`) and Stage-1
candidates (`--mode individual`, `CandidateSettings`).

`--mode` picks the settings class, so a mode's flags are exactly the settings its run reads; each
class lives beside the code that runs it.
"""

from __future__ import annotations

from typing import Any

from mascot.dialogue.run_settings import GroupEpisodeSettings
from mascot.stage1.settings import CandidateSettings


def run_group(s: GroupEpisodeSettings) -> None:
    from mascot.dialogue.run import run_group_generation

    run_group_generation(s, command="mascot generate --mode group")


def run_candidates(s: CandidateSettings) -> None:
    from mascot.stage1.run import run_individual_generation

    run_individual_generation(s)


def dry_run_group(_command: str, s: GroupEpisodeSettings) -> None:
    from mascot.commands.dryrun import dry_run_generation
    from mascot.dialogue.run import engine_record, roles_needed, run_dir_for

    dry_run_generation(
        s.mode, dataset=s.dataset, data_file=s.data_file, split=s.split, limit=s.limit, roster=s.roster, endpoints=s,
        roles=roles_needed(s), run_dir=run_dir_for(s), outputs=("episodes.jsonl",), resume=s.resume, overwrite=s.overwrite, settings=engine_record(s),
    )  # fmt: skip


def dry_run_candidates(_command: str, s: CandidateSettings) -> None:
    from mascot.commands.dryrun import dry_run_generation
    from mascot.stage1.individual import OUTPUTS
    from mascot.stage1.run import client_roles, individual_run_dir, judge_model

    roles = client_roles(s)
    if "judge" not in roles:  # a plug-in judge: its function must load
        from mascot.judge.plugin import load_judge_function

        load_judge_function(judge_model(s))
    names = (
        "num_candidates",
        "score_margin",
        "cross_persona_pairs",
        "temperature",
        "max_tokens",
        "repetition_penalty",
        "seed",
        "rubric_version",
        "judge_scoring",
    )
    settings: dict[str, Any] = {k: getattr(s, k) for k in names}
    dry_run_generation(
        s.mode, dataset=s.dataset, data_file=s.data_file, split=s.split, limit=s.limit, roster=s.roster, endpoints=s,
        roles=roles, run_dir=individual_run_dir(s), outputs=OUTPUTS, resume=s.resume, overwrite=s.overwrite, settings=settings,
    )  # fmt: skip

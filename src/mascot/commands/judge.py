"""`mascot judge`: rubric LLM-as-a-judge over an episode file (per agent turn and per episode).

`JudgedFileSettings` (the judge panel plus where the episodes' contexts come from) is shared with
`mascot prefs group`, and so is the dry run; both open their judges with `mascot.judge.opener`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer

from mascot.errors import MascotError
from mascot.settings import default_for, require, setting
from mascot.settings_groups import SPLIT_HELP, DataSettings, JudgePanelSettings, OutputSettings, check_judge_panel

SCOPES = {"both": ("agent", "collective"), "agent": ("agent",), "collective": ("collective",)}


@dataclass
class JudgedFileSettings(JudgePanelSettings):
    """An episode file to judge: the panel, the contexts to judge in, where to write."""

    dataset: Optional[str] = default_for(DataSettings, "dataset", None, help="Override the dataset (default: each record's metadata.dataset).")
    data_file: Optional[Path] = default_for(
        DataSettings,
        "data_file",
        None,
        help="Dataset file or folder to look up each episode's context by context_id (otherwise judged on the conversation).",
    )
    split: Optional[str] = default_for(DataSettings, "split", None, help=SPLIT_HELP)
    output_dir: Optional[Path] = default_for(OutputSettings, "output_dir", None, help="Where to write (default: next to the input file).")

    def __post_init__(self) -> None:
        check_judged_file(self)


def check_judged_file(s: JudgedFileSettings) -> None:
    from mascot.data.loaders import split_for

    check_judge_panel(s)
    s.split = split_for(s.split, s.data_file)
    require(s.data_file is None or s.dataset is not None, "--data-file needs --dataset to know how to read it")


@dataclass
class JudgeSettings(JudgedFileSettings):
    """Judge episodes with the rubric LLM judge (each agent turn and each episode).

    Writes metrics_<stem>.json (0-100 per criterion; per persona, per system and overall) and judgments_<stem>.jsonl next to the input or under --output-dir.
    """

    input_file: Path = setting(None, "Episode JSONL to judge.", required=True)
    scope: str = setting("both", "agent | collective | both.")
    limit: Optional[int] = default_for(DataSettings, "limit", None, help="Judge only the first N episodes.")

    def __post_init__(self) -> None:
        check_judged_file(self)
        require(self.scope in SCOPES, f"unknown --scope {self.scope!r}: use agent, collective or both")


def load_context_index(s: JudgedFileSettings) -> dict | None:
    if s.data_file is None:
        return None
    from mascot.data.loaders import load_contexts

    return {c.context_id: c for c in load_contexts(s.dataset, split=s.split, data_file=s.data_file)}


def dry_run_judging(command: str, input_file: Path, s: JudgedFileSettings, settings: dict) -> None:
    """--dry-run of `mascot judge` and `mascot prefs group`: input, contexts, rubric, judges."""
    from mascot.commands.dryrun import check_judges, check_path, print_settings
    from mascot.judge.opener import panel_specs

    check_path(input_file, "--input-file", kind="file")
    resolved = {"input_file": input_file, "judges": check_judges(panel_specs(s), s.rubric_version), "rubric_version": s.rubric_version}
    if s.data_file is not None:
        check_path(s.data_file, "--data-file")
        resolved["num_contexts"] = len(load_context_index(s) or {})
    print_settings(command, {"resolved": resolved, "settings": settings})


def judging_progress(panel, num_items: int):
    """Judgments made so far by every judge of the panel, of `num_items` items each."""
    from mascot.progress import ProgressLine

    return ProgressLine("judgments", num_items * len(panel.judges), unit="judgments", poll=lambda: sum(j.stats.judged for j in panel.judges))


def run_judge(s: JudgeSettings) -> None:
    import asyncio
    import dataclasses

    from rich.console import Console

    from mascot.episodes import load_episode_file
    from mascot.judge.opener import open_panel
    from mascot.judge.run import items_for, judge_episode_file, output_paths
    from mascot.progress import plural

    output_paths(s.input_file, s.output_dir)  # an unwritable output folder is refused before any model call
    loaded = load_episode_file(s.input_file, dataset=s.dataset)  # a bad input file is refused before any server is asked
    contexts = load_context_index(s)
    console = Console(stderr=True)

    num_items = len(items_for(dataclasses.replace(loaded, episodes=loaded.episodes[: s.limit]), SCOPES[s.scope], contexts))
    if num_items == 0:  # before any model loads or server is asked
        raise MascotError(f"{s.input_file}: nothing to judge (no episode{' within --limit' if s.limit is not None else ''} has a {s.scope} item)")

    async def run():
        async with open_panel(s, console) as panel:
            with judging_progress(panel, num_items):
                return await judge_episode_file(
                    s.input_file, panel, rubric_version=s.rubric_version, dataset=s.dataset, contexts=contexts, scopes=SCOPES[s.scope],
                    output_dir=s.output_dir, limit=s.limit, loaded=loaded,
                )  # fmt: skip

    result = asyncio.run(run())
    c, num_judges = result.report["counters"], len(result.report["judges"])
    console.print(
        f"judged {plural(c['num_items'], 'item')} with {plural(num_judges, 'judge')}: {plural(c['num_model_calls'], 'model call')}, "
        + (f"{plural(c['num_function_calls'], 'function call')}, " if c["num_function_calls"] else "")
        + f"{c['num_cached']} cached, {plural(c['num_annotation_failures'], 'annotation failure')}; wrote {result.judgments_path} and {result.metrics_path}"
        + loaded.skipped_note(),
        soft_wrap=True,
        markup=False,
    )
    fail_if_nothing_judged(c["num_items"] * num_judges, c["num_annotation_failures"], result.metrics_path)
    typer.echo(str(result.metrics_path))


def dry_run_judge(command: str, s: JudgeSettings) -> None:
    from mascot.judge.run import output_paths

    output_paths(s.input_file, s.output_dir)
    dry_run_judging("judge", s.input_file, s, {"scope": s.scope, "limit": s.limit, "output_dir": s.output_dir})


def fail_if_nothing_judged(num_judgments: int, num_failed: int, report_path: Path) -> None:
    """Every judgment failed: the report says `failed` and the command exits non-zero."""
    from mascot.runs.store import mark_failed

    if num_judgments and num_failed >= num_judgments:
        message = f"every judgment failed ({num_failed} of {num_judgments}; the first failure of each kind is shown above)"
        mark_failed(report_path, message)
        raise MascotError(message)

"""`mascot prefs group`: Stage-2 preference pairs from group episodes (collective rubric); `mascot prefs
feedback`: persona-level pairs from people's ratings in the web app."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer

from mascot.commands.judge import JudgedFileSettings, check_judged_file
from mascot.errors import MascotError
from mascot.settings import default_for, require, setting
from mascot.settings_groups import DataSettings, OutputSettings, ScoreMarginSettings, SeedSettings, check_score_margin
from mascot.study.settings import StudyResultsSettings
from mascot.web.settings import WebSettings

OUTPUT_NAMES = {"episode": "group_pairs", "trajectory": "group_pairs", "directive": "directive_pairs"}
MODES = ("auto", "episode", "trajectory", "directive")
COMPARED = {"episode": "episodes of a context", "trajectory": "records of a context", "directive": "branches of a decision point"}


@dataclass
class PrefsGroupSettings(ScoreMarginSettings, JudgedFileSettings):
    """Stage-2 pairs: group reward model (episode, trajectory) or Director DPO (directive) data.

    Reads the collective judgments `mascot judge` wrote (--judgments, or judgments_<stem>.jsonl next to the episodes); without them judges the episodes (or branch continuations) with the collective rubric. Writes group_pairs.jsonl / directive_pairs.jsonl, their stats and the judgments used.
    """

    episodes: Path = setting(None, "Episode JSONL from `mascot generate --mode group`.", flags=("--input-file",), required=True)
    judgments: Optional[Path] = default_for(
        StudyResultsSettings,
        "judgments",
        None,
        help="Judgments from `mascot judge` (its judgments_<stem>.jsonl); default: that file next to the episodes when it judges every item with these judges and --rubric-version, else the episodes are judged here.",
    )
    mode: str = setting(
        "auto",
        "episode (independent episodes -> group reward model) | trajectory (every record of a context, branches included, each "
        "judged whole -> group reward model) | directive (branching -> Director DPO) | auto (directive for branching files, else episode).",
    )

    def __post_init__(self) -> None:
        check_judged_file(self)
        require(self.mode in MODES, f"unknown --mode {self.mode!r}: use episode, trajectory, directive or auto")
        check_score_margin(self)

    @property
    def folder(self) -> Path:
        return Path(self.output_dir) if self.output_dir else Path(self.episodes).parent


def _prepare(s: PrefsGroupSettings):
    """The episodes and the resolved mode, checked before any model call."""
    from mascot.episodes import load_episode_file
    from mascot.files import ensure_writable_dir
    from mascot.prefs.group import resolve_mode

    loaded = load_episode_file(s.episodes, dataset=s.dataset)
    resolved = resolve_mode(loaded.episodes, s.mode)
    ensure_writable_dir(s.folder)
    return loaded, resolved


@dataclass
class JudgmentsSource:
    """Where the collective judgments come from: a file (`per_judge` read from it) or the panel
    (`per_judge` None); `note` is the one line that says which."""

    note: str
    path: Path | None = None
    per_judge: dict | None = None


def judgments_source(s: PrefsGroupSettings, items: list) -> JudgmentsSource:
    """--judgments as given (every item must be judged there); else `mascot judge`'s file next to the
    episodes when it judges every item with these judges and --rubric-version; else the panel judges."""
    from mascot.judge.run import output_paths
    from mascot.prefs.group import read_judgments
    from mascot.progress import plural

    path = s.judgments or output_paths(s.episodes, None)[1]
    if s.judgments is None and not path.is_file():
        return JudgmentsSource(f"no judgments given (--judgments) or found at {path}: judging {plural(len(items), 'item')} here")
    per_judge, missing = read_judgments(path, items)
    rubrics = sorted({j.rubric_version for js in per_judge.values() for j in js})
    problem = f"it has no judgment for {len(missing)} of {len(items)} items (e.g. {missing[0]})" if missing else None
    if problem is None and s.judgments is None:
        problem = _not_this_panel(s, per_judge, rubrics)
    if problem and s.judgments is not None:
        raise MascotError(f"--judgments {path}: {problem}: judge them with `mascot judge --scope collective`, or leave --judgments out")
    if problem:
        return JudgmentsSource(f"judgments at {path} not used ({problem}): judging {plural(len(items), 'item')} here")
    num = sum(len(js) for js in per_judge.values())
    note = f"read {plural(num, 'judgment')} of {plural(len(items), 'item')} by {', '.join(per_judge)} from {path} (rubric {', '.join(rubrics)}); nothing judged here"
    return JudgmentsSource(note, path, per_judge)


def _not_this_panel(s: PrefsGroupSettings, per_judge: dict, rubrics: list[str]) -> str | None:
    """Why found judgments are not what this command's judges would give, if they are not."""
    if rubrics != [s.rubric_version]:
        return f"its rubric is {', '.join(rubrics)}, not --rubric-version {s.rubric_version}"
    from mascot.judge.opener import panel_specs

    specs = panel_specs(s)
    judges, wanted = sorted(per_judge), sorted(spec.label for spec in specs)
    if judges != wanted:
        return f"judged by {', '.join(judges)}, not {', '.join(wanted)}"
    return next((problem for spec in specs if (problem := _not_this_judge(spec, per_judge[spec.label]))), None)


def _not_this_judge(spec, judgments: list) -> str | None:
    """A judge of the same label that is not the same judge: a model where a function is named (or
    the other way round), another function, or the same function at another declared version. A
    function without a version may have changed since: its judgments are never reused."""
    from mascot.judge.plugin import SCORING, declared_version, load_judge_function

    by_function = {j.scoring == SCORING for j in judgments}
    if by_function != {spec.is_plugin}:
        return f"judge {spec.label} is {'a Python function' if spec.is_plugin else 'a model'} here, not in that file"
    if not spec.is_plugin:
        return None
    version = declared_version(load_judge_function(spec.model))
    if version is None:
        return f"judge {spec.label} declares no version, so its judgments there may come from other code"
    found = sorted({f"{j.judge_model} version {j.judge_version}" for j in judgments})
    if found != [f"{spec.model} version {version}"]:
        return f"judge {spec.label} is {spec.model} version {version} here, {', '.join(found)} there"
    return None


def _judged_here(s: PrefsGroupSettings, loaded, resolved: str, contexts, num_items: int):
    import asyncio

    from mascot.commands.judge import judging_progress
    from mascot.judge.opener import open_panel
    from mascot.prefs.group import group_preferences

    async def run():
        async with open_panel(s) as panel:
            with judging_progress(panel, num_items):
                result = await group_preferences(loaded.episodes, panel, mode=resolved, margin=s.score_margin, contexts=contexts)
            return result, panel.judges[0].counters

    return asyncio.run(run())


def _read_here(s: PrefsGroupSettings, loaded, resolved: str, contexts, source: JudgmentsSource):
    from mascot.prefs.group import pairs_from_judgments
    from mascot.schema import Counters

    result = pairs_from_judgments(loaded.episodes, source.per_judge or {}, mode=resolved, margin=s.score_margin, contexts=contexts)  # type: ignore[arg-type]
    return result, Counters(num_annotation_failures=sum(1 for j in result.judgments if j.failed))


def run_prefs_group(s: PrefsGroupSettings) -> None:
    from rich.console import Console

    from mascot.commands.judge import fail_if_nothing_judged, load_context_index
    from mascot.files import write_json_atomic, write_jsonl
    from mascot.prefs.group import items_for_mode

    loaded, resolved = _prepare(s)
    contexts = load_context_index(s)
    items = items_for_mode(loaded.episodes, resolved, contexts)
    if not items:  # before any model loads or server is asked
        raise MascotError(f"{s.episodes}: nothing to judge in {resolved} mode (no {'branch' if resolved == 'directive' else 'episode'} to compare)")
    console = Console(stderr=True)
    source = judgments_source(s, items)
    console.print(source.note, soft_wrap=True, markup=False)
    if source.per_judge is None:
        result, counters = _judged_here(s, loaded, resolved, contexts, len(items))
    else:
        result, counters = _read_here(s, loaded, resolved, contexts, source)
    name, folder = OUTPUT_NAMES[resolved], s.folder
    write_jsonl(folder / f"{name}.jsonl", result.pairs)
    write_jsonl(folder / f"{name}_judgments.jsonl", result.judgments)
    judgments = {"source": "file" if source.path else "judged", "file": str(source.path) if source.path else None, "note": source.note}
    stats = {
        "mode": resolved,
        "input_file": str(s.episodes),
        "judgments": judgments,
        **result.stats.to_dict(),
        "counters": counters.model_dump(),
        "usage": result.usage,
    }
    if loaded.skipped_lines:  # malformed lines of the episodes file, named in the closing line too
        stats["num_skipped_lines"] = len(loaded.skipped_lines)
    write_json_atomic(folder / f"{name}_stats.json", stats)
    _closing_line(console, result, resolved, s.score_margin, counters, folder / f"{name}.jsonl", loaded.skipped_note())
    fail_if_nothing_judged(len(result.judgments), sum(1 for j in result.judgments if j.failed), folder / f"{name}_stats.json")
    if not result.pairs:  # nothing to train on: the next step would stop; say what to change here
        from mascot.runs.store import mark_failed

        reason = no_pairs_reason(result.stats, resolved, s.score_margin)
        mark_failed(folder / f"{name}_stats.json", reason)
        raise MascotError(reason)
    typer.echo(str(folder / f"{name}.jsonl"))


def _closing_line(console, result, mode: str, margin: float, counters, path: Path, skipped: str = "") -> None:
    from mascot.progress import plural

    console.print(
        f"wrote {plural(len(result.pairs), f'{mode} pair')} (margin {margin}) from {plural(len(result.judgments), 'judgment')} to {path}; "
        f"{plural(counters.num_annotation_failures, 'annotation failure')}{skipped}",
        soft_wrap=True,
        markup=False,
    )


def no_pairs_reason(stats, mode: str, margin: float) -> str:
    """Why judged episodes gave no pair, naming the setting to change and a value that works."""
    counts = stats.counts
    compared = COMPARED[mode]
    if counts.largest_gap > 0:
        return (
            f"0 {mode} pairs: no two {compared} differ by --score-margin {margin} ({counts.dropped_ties} ties, {counts.dropped_by_margin} smaller gaps); "
            f"the largest gap is {counts.largest_gap:g}: rerun with --score-margin {counts.largest_gap:g} or lower "
            "(a 135M judge's collective scores of one context lie within a few hundredths: 0.02 works for the embedded model)"
        )
    if counts.dropped_ties:
        return f"0 {mode} pairs: every compared pair is a tie ({counts.dropped_ties}), so no --score-margin makes one: use a judge that tells the {compared} apart"
    return f"0 {mode} pairs: no {compared} had two scored, different trajectories (see the failures above)"


def dry_run_prefs_group(_command: str, s: PrefsGroupSettings) -> None:
    from mascot.commands.dryrun import DryRunError
    from mascot.commands.judge import dry_run_judging

    if not Path(s.episodes).is_file():
        raise DryRunError(f"--episodes {s.episodes} does not exist")
    from mascot.prefs.group import items_for_mode

    loaded, resolved = _prepare(s)
    source = judgments_source(s, items_for_mode(loaded.episodes, resolved, None))
    settings = {
        "mode": resolved,
        "num_episodes": len(loaded.episodes),
        "score_margin": s.score_margin,
        "output_dir": s.folder,
        "judgments": source.note,
    }
    dry_run_judging("prefs group", s.episodes, s, settings)


# --------------------------------------------------------------------------- people's ratings


@dataclass
class PrefsFeedbackSettings:
    """Persona-level pairs from people's ratings in the web app: a reply rated helpful against
    replies of the same companion rated not helpful (the same conversation first, then the most
    similar). Only ratings given with consent (`mascot web --feedback-consent`) are used. Writes
    pairs.jsonl (the Stage-1 pair format, each pair with its provenance) and pairs_stats.json."""

    session_dir: Path = default_for(
        WebSettings,
        "session_dir",
        Path("outputs/chat"),
        help="Folder of the web app's sessions (its --session-dir); ratings are in its feedback/ folder.",
    )
    output_dir: Path = default_for(
        OutputSettings, "output_dir", Path("outputs/feedback_pairs"), help="Where pairs.jsonl, pairs_stats.json and run_config.json go."
    )
    max_pairs_per_reply: int = setting(4, "Replies rated not helpful paired with each helpful one, at most.")
    study: Optional[Path] = default_for(
        WebSettings,
        "study",
        None,
        help="A study file (`mascot study create`): each blinded choice becomes an episode-level pair for the group reward model.",
    )
    with_pairs: Optional[list[Path]] = setting(None, "Judge-built pair files to mix in (repeatable): the reward model trains on both.")
    dataset: Optional[str] = default_for(
        DataSettings, "dataset", None, help="Dataset recorded for the trainers (default: the sessions' own, when they agree)."
    )
    seed: int = default_for(SeedSettings, "seed", 0, help="Seed of the order ties are broken in.")
    accounts: bool = default_for(
        WebSettings,
        "accounts",
        False,
        help="Read the ratings of `mascot web --accounts` from its database (mascot.db in --session-dir, or --database-url): "
        "only of people who consent on their account page.",
    )
    database_url: Optional[str] = default_for(
        WebSettings, "database_url", None, help="The accounts database to read with --accounts (as `mascot web --database-url`)."
    )

    def __post_init__(self) -> None:
        require(self.max_pairs_per_reply >= 1, "--max-pairs-per-reply must be at least 1")
        require(self.accounts or self.database_url is None, "--database-url is read with --accounts: add --accounts")
        require(Path(self.session_dir).is_dir(), f"--session-dir {self.session_dir} is not a folder (the web app's --session-dir)")
        for path in self.with_pairs or []:
            require(Path(path).is_file(), f"--with-pairs {path} is not a file")
        require(self.study is None or Path(self.study).is_file(), f"--study {self.study}: no such study file")


def run_prefs_feedback(s: PrefsFeedbackSettings) -> None:
    from mascot.files import write_json_atomic, write_jsonl
    from mascot.prefs.feedback import FEEDBACK_PAIRS_FILE, feedback_pairs, rated_replies, study_pairs

    choices: list = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = consented_ratings(s, Path(scratch)) if s.accounts else s.session_dir
        replies, counts = rated_replies(folder, choices)
    pairs = feedback_pairs(replies, max_pairs_per_reply=s.max_pairs_per_reply, seed=s.seed) + choices
    chosen, study = study_pairs(s.study) if s.study else ([], None)
    mixed_by_file = _mixed_pairs(s.with_pairs or [])
    mixed = [pair for pairs_of_file in mixed_by_file.values() for pair in pairs_of_file]
    said = (f"{len(pairs)} pairs from {counts.helpful} helpful and {counts.not_helpful} not helpful replies, {counts.choices} choices between two "
            f"replies and {counts.direction_choices} between two of the Director's approaches (directive pairs), of {counts.sessions} rated sessions "
            f"({counts.without_consent} ratings without consent and {counts.unusable} unusable left out)")  # fmt: skip
    if study:
        said += f", {len(chosen)} episode pairs from the study's choices ({study.ties} ties, {study.excluded} excluded, {study.unusable} unusable)"
    if not pairs and not chosen and not mixed:
        why = "no consented rating" if not replies else "no companion has both a helpful and a not helpful reply"
        raise MascotError(f"prefs feedback made no pair: {why}; {said}")
    s.output_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(s.output_dir / FEEDBACK_PAIRS_FILE, [*pairs, *chosen, *mixed])
    write_json_atomic(s.output_dir / "pairs_stats.json", _feedback_stats(s, counts, pairs, study, len(chosen), mixed_by_file))
    write_json_atomic(s.output_dir / "run_config.json", {"command": "mascot prefs feedback", "settings": {"dataset": _dataset(s, replies)}})
    typer.secho(f"wrote {said}" + (f", and {len(mixed)} judge-built pairs mixed in" if mixed else ""), fg="green", err=True)
    typer.echo(str(s.output_dir / FEEDBACK_PAIRS_FILE))


def consented_ratings(s: PrefsFeedbackSettings, folder: Path) -> Path:
    """The accounts database's consented ratings, as the app's files in `folder`."""
    from mascot.web.accounts.consented import export_consented
    from mascot.web.accounts.database import default_url

    counts = export_consented(s.database_url or default_url(s.session_dir), folder)
    typer.echo(f"accounts: {counts.ratings} consented ratings in {counts.conversations} conversations of {counts.people} people "
               f"({counts.left_out_people} who rated but do not consent left out)", err=True)  # fmt: skip
    return folder


def _feedback_stats(s: PrefsFeedbackSettings, counts, pairs: list, study, study_pairs: int, mixed: dict[Path, list]) -> dict:
    return {"session_dir": str(s.session_dir), "sessions": counts.sessions, "ratings": counts.ratings, "without_consent": counts.without_consent,
            "unusable": counts.unusable, "unusable_reasons": dict(counts.reasons), "helpful": counts.helpful, "not_helpful": counts.not_helpful,
            "choices": counts.choices, "direction_choices": counts.direction_choices, "directive_pairs": sum(p.kind == "directive" for p in pairs),
            "feedback_pairs": len(pairs), "same_conversation_pairs": sum(bool(p.provenance.get("same_conversation")) for p in pairs),
            "study": None if study is None else {"file": str(s.study), "pairs": study_pairs, "ties": study.ties, "excluded": study.excluded, "unusable": study.unusable},
            "mixed_in": {str(p): len(found) for p, found in mixed.items()}, "pairs": len(pairs) + study_pairs + sum(map(len, mixed.values()))}  # fmt: skip


def _dataset(s: PrefsFeedbackSettings, replies: list) -> str | None:
    """The dataset the trainers record: the flag, else the rated sessions' own when they agree."""
    datasets = {r.dataset for r in replies if r.dataset}
    return s.dataset or (datasets.pop() if len(datasets) == 1 else None)


def _mixed_pairs(files: list[Path]) -> dict[Path, list]:
    """The judge-built pairs of each --with-pairs file, read once."""
    from mascot.files import read_jsonl
    from mascot.schema import PreferencePair

    return {Path(path): list(read_jsonl(Path(path), PreferencePair)) for path in files}


def dry_run_prefs_feedback(command: str, s: PrefsFeedbackSettings) -> None:
    """What the ratings would make, counted; nothing written."""
    from dataclasses import asdict

    from mascot.commands.dryrun import print_settings
    from mascot.prefs.feedback import feedback_pairs, rated_replies

    choices: list = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = consented_ratings(s, Path(scratch)) if s.accounts else s.session_dir
        replies, counts = rated_replies(folder, choices)
    resolved = {"rated_sessions": counts.sessions, "ratings": counts.ratings, "without_consent": counts.without_consent, "unusable": counts.unusable,
                "helpful": counts.helpful, "not_helpful": counts.not_helpful, "choices": counts.choices,
                "feedback_pairs": len(feedback_pairs(replies, max_pairs_per_reply=s.max_pairs_per_reply, seed=s.seed)) + len(choices),
                "mixed_in": {str(p): len(found) for p, found in _mixed_pairs(s.with_pairs or []).items()}}  # fmt: skip
    print_settings(command or "prefs feedback", {"resolved": resolved, "settings": asdict(s)})

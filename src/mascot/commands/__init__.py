"""Every `mascot` command as data: its words, its settings class, what runs it and its dry run.

The command line (`mascot.cli`) generates each command from its entry here, and the orchestrators
(`mascot pipeline`, `mascot eval`) run a step by building the same settings object and calling
the same function, so a step and the command a user types are one code path. Entries name their
objects by import path: looking a command up loads only its own module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mascot.settings import SettingsObject

GROUPS = {
    "data": "Inspect datasets: the contexts that seed episodes.",
    "prefs": "Build preference pairs from judged data.",
    "train": "Train reward models and policies (Stage 1 and Stage 2) with TRL.",
    "study": "Blinded human preference study: build it, then read its results.",
    "adapters": "Trained Speakers, Directors and reward models as versions: list, compare, promote, roll back.",
    "eval": "Evaluate systems against their baselines, per split; compare two systems head to head.",
    "web": "The web app: group chat in a browser; with --accounts, a service for many people (`mascot web users`, `mascot web import`).",
    "users": "Accounts of `mascot web --accounts`: create one (the first admin), list them, make invitation codes.",
}


@dataclass(frozen=True)
class Command:
    words: tuple[str, ...]
    settings: str  # "module:Class"
    run: str  # "module:function" taking the settings
    dry_run: str | None = None  # "module:function" taking (command name, settings)
    interrupts: bool = True  # Ctrl-C saves and says how to resume (off: the command handles it)
    no_args_is_help: bool = True
    mode: str | None = None  # the --mode that picks this entry among those with the same words (`mascot generate`)

    @property
    def name(self) -> str:
        return " ".join(self.words)

    def settings_class(self) -> type:
        return _load(self.settings)

    def runner(self) -> Callable[[Any], None]:
        return _load(self.run)

    def dry_runner(self) -> Callable[[str, Any], None] | None:
        return _load(self.dry_run) if self.dry_run else None


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(import_module(module), name)


def _train(word: str, settings: str, run: str) -> Command:
    return Command(("train", word), f"mascot.train.config:{settings}", f"mascot.commands.train:{run}", "mascot.commands.train:dry_run_train")


C = "mascot.commands"  # the modules of most commands
# In pipeline order: `mascot --help` lists them so.
COMMANDS = (
    Command(("demo",), f"{C}.demo:DemoSettings", f"{C}.demo:demo", no_args_is_help=False),
    Command(("data", "preview"), f"{C}.data:PreviewSettings", f"{C}.data:preview", no_args_is_help=False),
    Command(
        ("generate",), "mascot.dialogue.run_settings:GroupEpisodeSettings", f"{C}.generate:run_group", f"{C}.generate:dry_run_group", mode="group"
    ),
    Command(
        ("generate",),
        "mascot.stage1.settings:CandidateSettings",
        f"{C}.generate:run_candidates",
        f"{C}.generate:dry_run_candidates",
        mode="individual",
    ),
    Command(("judge",), f"{C}.judge:JudgeSettings", f"{C}.judge:run_judge", f"{C}.judge:dry_run_judge"),
    Command(("metrics",), f"{C}.metrics:MetricsCommandSettings", f"{C}.metrics:run_metrics", f"{C}.metrics:dry_run_metrics"),
    Command(("prefs", "group"), f"{C}.prefs:PrefsGroupSettings", f"{C}.prefs:run_prefs_group", f"{C}.prefs:dry_run_prefs_group"),
    Command(
        ("prefs", "feedback"),
        f"{C}.prefs:PrefsFeedbackSettings",
        f"{C}.prefs:run_prefs_feedback",
        f"{C}.prefs:dry_run_prefs_feedback",
        no_args_is_help=False,
    ),
    _train("reward-model", "RewardModelSettings", "run_reward_model"),
    _train("speaker", "SpeakerGRPOSettings", "run_speaker"),
    _train("group-reward-model", "GroupRewardModelSettings", "run_group_reward_model"),
    _train("director-grpo", "DirectorGRPOSettings", "run_director_grpo"),
    _train("director-dpo", "DirectorDPOSettings", "run_director_dpo"),
    _train("sft", "SFTSettings", "run_sft"),
    Command(("merge-lora",), "mascot.train.config:MergeSettings", f"{C}.train:run_merge", f"{C}.train:dry_run_train"),
    *(
        Command(
            ("adapters", word),
            f"mascot.adapters.command:{cls}",
            f"mascot.adapters.command:run_{word}",
            "mascot.adapters.command:dry_run_compare" if word == "compare" else None,
            interrupts=word == "compare",
            no_args_is_help=word != "list",
        )
        for word, cls in (
            ("list", "ListSettings"),
            ("show", "ShowSettings"),
            ("compare", "CompareSettings"),
            ("promote", "PromoteSettings"),
            ("rollback", "RollbackSettings"),
            ("register", "RegisterSettings"),
        )
    ),
    Command(("eval",), "mascot.eval.settings:EvalSettings", "mascot.eval.run:run_eval_command", "mascot.eval.run:dry_run_eval"),
    Command(("eval", "compare"), "mascot.judge.compare_settings:CompareSettings", f"{C}.compare:run_compare_command", f"{C}.compare:dry_run_compare"),
    Command(
        ("pipeline",),
        "mascot.pipeline.settings:PipelineSettings",
        "mascot.pipeline.runner:run_pipeline_command",
        "mascot.pipeline.dryrun:dry_run_pipeline_command",
        no_args_is_help=False,
    ),
    Command(
        ("serve",),
        "mascot.adapters.serve_command:ServeSettings",
        "mascot.adapters.serve_command:run_serve",
        "mascot.adapters.serve_command:dry_run_serve",
        interrupts=False,
        no_args_is_help=False,
    ),
    Command(("chat",), "mascot.dialogue.chat_settings:ChatSettings", f"{C}.chat:run_chat_command", interrupts=False, no_args_is_help=False),
    Command(("web",), "mascot.web.settings:WebSettings", f"{C}.web:run_web", f"{C}.web:dry_run_web", interrupts=False, no_args_is_help=False),
    *(
        Command(
            ("web", "users", word),
            f"mascot.commands.web_accounts:{cls}",
            f"mascot.commands.web_accounts:run_{word}",
            "mascot.commands.web_accounts:dry_run_accounts",
            interrupts=False,
            no_args_is_help=word == "create",
        )
        for word, cls in (("create", "CreateUserSettings"), ("list", "ListUsersSettings"), ("invite", "InviteSettings"))
    ),
    Command(
        ("web", "import"),
        "mascot.commands.web_accounts:ImportSettings",
        "mascot.commands.web_accounts:run_import",
        "mascot.commands.web_accounts:dry_run_accounts",
        interrupts=False,
    ),
    Command(("study", "create"), "mascot.study.settings:StudyCreateSettings", f"{C}.study:run_study_create", f"{C}.study:dry_run_study_create"),
    Command(("study", "results"), "mascot.study.settings:StudyResultsSettings", f"{C}.study:run_study_results", f"{C}.study:dry_run_study_results"),
)


def command(*words: str, mode: str | None = None) -> Command:
    """The command `mascot WORDS...` (with `--mode MODE` where its words have several; none: the
    first, the command line's default); a one-line error for one that does not exist."""
    from mascot.errors import MascotError

    entries = [entry for entry in COMMANDS if entry.words == tuple(words)]
    if not entries:
        raise MascotError(f"no command `mascot {' '.join(words)}`")
    if mode is None or entries[0].mode is None:
        return entries[0]
    chosen = next((entry for entry in entries if entry.mode == mode), None)
    if chosen is None:
        raise MascotError(f"unknown --mode {mode!r} of `mascot {' '.join(words)}`: choose {' or '.join(str(e.mode) for e in entries)}")
    return chosen


def modes(*words: str) -> list[Command]:
    """The entries of a command whose --mode picks its settings (none for most commands)."""
    return [entry for entry in COMMANDS if entry.words == tuple(words) and entry.mode is not None]


def command_running(words: tuple[str, ...], settings: SettingsObject) -> Command:
    """The entry of `mascot WORDS...` whose settings class `settings` is."""
    entries = [entry for entry in COMMANDS if entry.words == tuple(words)]
    return next((entry for entry in entries if type(settings) is entry.settings_class()), entries[0])

"""The plan: each step's command and settings, its folder and how its output is found.

The evaluation is `mascot eval`'s cells (`mascot.eval.plan`): each system (`base`, `mascot`, and
with ablations `mascot-c` and `mascot-p` of the shipped catalogue, on this pipeline's adapters) runs
the same `mascot generate`, `mascot judge` and `mascot metrics` calls as in `mascot eval`, with the
same contexts and seeds, each call a step of its own here (skipped, resumed or reused as any step).

A step's flags are the pipeline's (models, endpoints, data, inputs from earlier steps) with the
config's `steps` entries on top (a config entry replaces a flag, or removes it with null). The
step's command builds its settings from them when the plan is made, so a misspelt or invalid step
setting is refused before anything runs; the step runs by calling the command's function on those
settings, and the command line it shows is rendered from them (`mascot.settings.command_line`).

Without a data file the pipeline reads the contexts shipped with mascot
(`mascot/samples/contexts.jsonl`), written out as an ESConv file so that its generation steps read
them through `--data-file` like any dataset file (`pipeline_data_file`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mascot.errors import MascotError
from mascot.eval.plan import Cell, generate_flags, judge_flags, metrics_flags
from mascot.eval.settings import EvalSettings
from mascot.eval.systems import Catalogue, RoleSpec
from mascot.pipeline.settings import STEP_GROUPS, SYSTEMS, PipelineSettings

Flags = dict[str, Any]


@dataclass
class Step:
    """One step: the command it runs, its settings (validated when the plan is made) and where its
    output goes."""

    name: str
    kind: str  # generation | training | judging | metrics | report
    words: tuple[str, ...]  # the command's words, e.g. ("train", "speaker"); () for the report
    settings: Any  # that command's settings object; None for the report
    folder: Path  # everything the step writes is under it
    inputs: list[Path] = field(default_factory=list)  # outputs of earlier steps it reads
    given: frozenset[str] = frozenset()  # the settings the plan sets (shown even at their default)
    served: frozenset[str] = frozenset()  # earlier steps whose adapters reach it through a server, not a file it reads

    def settings_for(self, *, resume: bool = False) -> Any:
        """The step's settings, resuming where its command can (judging and pairs steps cannot)."""
        return replace(self.settings, resume=True) if resume and hasattr(self.settings, "resume") else self.settings

    def command_line(self, *, resume: bool = False) -> str:
        from mascot.settings import command_line

        return command_line(self.words, self.settings_for(resume=resume), self.given)

    def run(self, *, resume: bool = False) -> None:
        """Runs the step's command on its settings, as `mascot WORDS...` does."""
        from mascot.commands import command_running

        command_running(self.words, self.settings).runner()(self.settings_for(resume=resume))


def make_step(
    name: str, kind: str, words: tuple[str, ...], flags: Flags, folder: Path, inputs: list[Path] | None = None, served: tuple[str, ...] = ()
) -> Step:
    """A step whose settings are its command's, built from `flags` (a null flag: the command's
    default); a misspelt or invalid setting is one line naming the step."""
    from mascot.commands import command
    from mascot.settings import aliases, settings_from

    given = {k: v for k, v in flags.items() if v is not None}
    where = f"pipeline step {name} (`mascot {' '.join(words)}`)"
    try:
        cls = command(*words, mode=given.get("mode")).settings_class()
        settings = settings_from(cls, given, where)
    except MascotError as exc:
        message = str(exc)
        raise MascotError(message if message.startswith(where) else f"{where}: {message}") from None
    names = aliases(cls)
    return Step(
        name, kind, words, settings, folder, list(inputs or []), frozenset(names[k.lstrip("-").replace("-", "_")] for k in given), frozenset(served)
    )


def _merged(base: Flags, *extra: Flags) -> Flags:
    merged = dict(base)
    for more in extra:
        for key, value in more.items():
            merged[key.replace("-", "_").lstrip("_")] = value
    return merged


def _extra(settings: PipelineSettings, name: str) -> Flags:
    flags = settings.step_flags
    groups = [g for g, members in STEP_GROUPS.items() if name in members]
    return _merged({}, *(flags.get(g, {}) for g in groups), flags.get(name, {}))


def find_run_dir(parent: Path) -> Path | None:
    """The run folder a generation step wrote under its own folder (the newest, if several)."""
    if not parent.is_dir():
        return None
    runs = [p for p in parent.iterdir() if p.is_dir() and ((p / "run_config.json").exists() or (p / "run_summary.json").exists())]
    return max(runs, key=lambda p: p.stat().st_mtime) if runs else None


class Plan:
    """Every step of one pipeline, with the paths that connect them."""

    def __init__(self, settings: PipelineSettings, data_file: Path | None) -> None:
        self.settings = settings
        self.root = Path(settings.output_dir)
        self.data_file = data_file
        self.steps = self._build()

    def folder(self, name: str) -> Path:
        return self.root / name

    def run_dir(self, name: str) -> Path:
        """A generation step's run folder (where it will be, before it exists: its parent)."""
        return find_run_dir(self.folder(name)) or self.folder(name)

    def episodes_file(self, name: str) -> Path:
        return self.run_dir(name) / "episodes.jsonl"

    def step(self, name: str) -> Step:
        return next(s for s in self.steps if s.name == name)

    # ---- shared flag groups
    def _data(self, *, evaluation: bool = False) -> Flags:
        """The training steps' contexts, or (`evaluation`) the evaluation's: --eval-split, --eval-limit."""
        s = self.settings
        split, limit = (s.evaluation_split, s.eval_limit or s.limit) if evaluation else (s.split, s.limit)
        return {"dataset": s.dataset, "data_file": self.data_file, "split": split, "limit": limit, "seed": s.seed}

    def _generation_roles(self, *, trained_speaker: bool, trained_director: bool) -> Flags:
        s = self.settings
        flags: Flags = {"model_name": s.policy_model}
        if s.generation_url:
            flags["vllm_server_url"] = s.generation_url
            if trained_speaker:
                flags["speaker_model"] = s.speaker_served_name
            if trained_director:
                flags["director_model"] = s.director_served_name
            return flags
        if trained_speaker:
            flags["speaker_adapter"] = self.folder("speaker")
        if trained_director:
            flags["director_adapter"] = self.folder("director")
        return flags

    def _judge(self, key: str, *, conversations: bool = True) -> Flags:
        """The judge flags of a judging step: the judge of conversations (Stage 2, the evaluation),
        or (`conversations=False`) Stage 1's."""
        s = self.settings
        return {key: (s.group_judge_model or s.judge_model) if conversations else s.judge_model, "judge_server_url": s.judge_url}

    def _contexts_of(self, generation: tuple) -> Flags:
        """For judging a generation step's episodes: where each episode's context is looked up by
        its id, the dataset, file and split that step reads (with the config's `steps` entries on
        top), so a judging step always carries the split it judges."""
        flags = _merged(generation[3], _extra(self.settings, generation[0]))
        return {key: flags.get(key) for key in ("dataset", "data_file", "split")}

    def _training(self, name: str, model: str) -> Flags:
        return {"model": model, "dataset": self.settings.dataset, "seed": self.settings.seed, "output_dir": self.folder(name)}

    # ---- the steps
    def _build(self) -> list[Step]:
        # Each step as (name, kind, command words, flags, folder, inputs): the config's `steps`
        # entries go over the flags before the command's settings are built from them.
        s = self.settings
        steps = [*self._stage_1(), *self._stage_2(), *self._evaluation()]
        planned = [make_step(name, kind, tuple(words), _merged(flags, _extra(s, name)), *rest) for name, kind, words, flags, *rest in steps]
        return [*planned, Step("report", "report", (), None, self.root)]

    def _stage_1(self) -> list[tuple]:
        """Candidates, the persona reward model, the Speaker."""
        s = self.settings
        candidates = self.run_dir("candidates")
        return [
            (
                "candidates",
                "generation",
                ["generate"],
                {
                    "mode": "individual",
                    **self._data(),
                    **self._generation_roles(trained_speaker=False, trained_director=False),
                    **self._judge("judge_model", conversations=False),
                    "output_dir": self.folder("candidates"),
                },
                self.folder("candidates"),
            ),
            (
                "reward_model",
                "training",
                ["train", "reward-model"],
                {"data_path": candidates, **self._training("reward_model", s.reward_model)},
                self.folder("reward_model"),
                [candidates],
            ),
            (
                "speaker",
                "training",
                ["train", "speaker"],
                {"data_path": candidates, **self._training("speaker", s.policy_model), "reward_model_path": self.folder("reward_model")},
                self.folder("speaker"),
                [candidates, self.folder("reward_model")],
            ),
        ]

    def _stage_2(self) -> list[tuple]:
        """Episodes with the trained Speaker, group pairs, the group reward model, the Director."""
        s = self.settings
        episodes = self.episodes_file("episodes")
        stage_2_episodes = (
            "episodes",
            "generation",
            ["generate"],
            {
                "mode": "group",
                "generation_mode": "independent",
                **self._data(),
                **self._generation_roles(trained_speaker=True, trained_director=False),
                "output_dir": self.folder("episodes"),
            },
            self.folder("episodes"),
            [] if s.generation_url else [self.folder("speaker")],
            ("speaker",) if s.generation_url else (),
        )
        return [
            stage_2_episodes,
            (
                "group_pairs",
                "judging",
                ["prefs", "group"],
                {
                    "episodes": episodes,
                    "mode": "trajectory",
                    **self._judge("judge"),
                    **self._contexts_of(stage_2_episodes),
                    "output_dir": self.folder("group_pairs"),
                },
                self.folder("group_pairs"),
                [episodes],
            ),
            (
                "group_reward_model",
                "training",
                ["train", "group-reward-model"],
                {"data_path": self.folder("group_pairs") / "group_pairs.jsonl", **self._training("group_reward_model", s.reward_model)},
                self.folder("group_reward_model"),
                [self.folder("group_pairs") / "group_pairs.jsonl"],
            ),
            (
                "director",
                "training",
                ["train", "director-grpo"],
                {
                    "data_path": self.run_dir("episodes"),
                    **self._training("director", s.policy_model),
                    "group_reward_model_path": self.folder("group_reward_model"),
                    **self._rollouts(),
                },
                self.folder("director"),
                [self.run_dir("episodes"), self.folder("group_reward_model")],
            ),
        ]

    def _rollouts(self) -> Flags:
        s = self.settings
        url = s.rollout_url or s.generation_url
        if url:
            return {"rollout_server_url": url, "rollout_model": s.policy_model, "speaker_adapter": s.speaker_served_name}
        return {"speaker_adapter": self.folder("speaker")}

    def _evaluation(self) -> list[tuple]:
        """Per system, the `mascot eval` cell of it on the evaluation contexts: its episodes, their
        judgments and metrics, each with this pipeline's step config on top and in its own folder."""
        evaluation, catalogue = self._eval_settings(), self._catalogue()
        steps, systems = [], self.settings.systems
        cells = {system: self._eval_cell(system, catalogue) for system in systems}
        for system, (cell, served) in cells.items():
            trained = [self.folder(role) for role in ("speaker", "director") if cell.spec.role(role).adapter]
            flags = generate_flags(cell, evaluation, catalogue, self.settings.dataset, pending=trained)  # writes under the cell's folder
            steps.append((f"eval_{system}", "generation", ["generate"], flags, self.folder(f"eval_{system}"), trained, served))
        for system, generation in zip(systems, list(steps)):
            episodes = self.episodes_file(f"eval_{system}")
            flags = {
                **judge_flags(episodes, cells[system][0], evaluation, self.settings.dataset),
                **self._contexts_of(generation),
                "output_dir": self.folder(f"judge_{system}"),
            }
            steps.append((f"judge_{system}", "judging", ["judge"], flags, self.folder(f"judge_{system}"), [episodes]))
        for system in systems:
            episodes = self.episodes_file(f"eval_{system}")
            flags = {**metrics_flags(episodes, evaluation), "output_file": self.folder(f"metrics_{system}") / "metrics_auto.json"}
            steps.append((f"metrics_{system}", "metrics", ["metrics"], flags, self.folder(f"metrics_{system}"), [episodes]))
        return steps

    def _eval_settings(self) -> EvalSettings:
        """The `mascot eval` settings of this pipeline's evaluation (its decoding: the command's
        defaults, with the config's `evaluation` entries over each cell's flags). No NLI model loads
        offline: NLI is opt-in (metrics: {skip_nli: false})."""
        s, data = self.settings, self._data(evaluation=True)
        return EvalSettings(
            systems=",".join(SYSTEMS[name] for name in s.systems), dataset=s.dataset, split=data["split"],
            data_file=str(self.data_file) if self.data_file else None, limit=data["limit"], seed=s.seed, model_name=s.policy_model,
            vllm_server_url=[s.generation_url] if s.generation_url else None, judges=[s.group_judge_model or s.judge_model],
            judge_server_url=[s.judge_url] if s.judge_url else None, nli=False, output_dir=str(self.root),
        )  # fmt: skip

    def _catalogue(self) -> Catalogue:
        """The shipped systems, their adapters this pipeline's trained ones (`mascot eval --adapter`)."""
        return Catalogue(adapters={"speaker_grpo": str(self.folder("speaker")), "director_grpo": str(self.folder("director"))})

    def _eval_cell(self, system: str, catalogue: Catalogue) -> tuple[Cell, tuple[str, ...]]:
        """The cell of one system, and the trained roles a server reaches by name: with
        --generation-url the server serves the trained adapters as models (--speaker-served-name,
        --director-served-name), so those roles name a model instead of an adapter folder."""
        s, name = self.settings, SYSTEMS[system]
        spec = catalogue.get(name)
        served = tuple(role for role in ("speaker", "director") if spec.role(role).adapter) if s.generation_url else ()
        if served:
            names = {"speaker": s.speaker_served_name, "director": s.director_served_name}
            spec = spec.model_copy(update={"roles": {**spec.roles, **{role: RoleSpec(model=names[role]) for role in served}}})
        return Cell(self._data(evaluation=True)["split"], name, spec, self.folder(f"eval_{system}")), served


SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "contexts.jsonl"
_SPEAKER = {"user": "usr", "supporter": "sys"}


def write_esconv_samples(folder: Path) -> Path:
    """The shipped ESConv contexts in ESConv's export format (situation, emotion_type, problem_type, dialog)."""
    from mascot.files import read_jsonl
    from mascot.schema import Context

    lines = []
    for context in read_jsonl(SAMPLES, Context):
        if context.dataset != "ESConv":
            continue
        dialog = [{"speaker": _SPEAKER.get(t.speaker, "usr"), "text": t.text} for t in context.opening_turns]
        record = {"situation": context.situation, "emotion_type": context.emotion, "problem_type": context.problem_type, "dialog": dialog}
        lines.append(json.dumps(record, ensure_ascii=False))
    if not lines:
        raise MascotError(f"{SAMPLES} holds no ESConv contexts")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "samples.jsonl"
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


HUB = "hub"
SHIPPED = "shipped:"  # `shipped:NAME`: a folder of split files shipped with mascot (mascot/samples/NAME)


def shipped_data(name: str) -> Path:
    folder = SAMPLES.parent / name
    if not name or not folder.is_dir():
        known = sorted(p.name for p in SAMPLES.parent.iterdir() if p.is_dir() and not p.name.startswith("_"))
        raise MascotError(f"--data-file {SHIPPED}{name}: mascot ships no such contexts (shipped: {', '.join(known) or 'none'})")
    return folder


def pipeline_data_file(dataset: str, data_file: str | None, folder: Path) -> Path | None:
    """The dataset file every generation step reads: the given one, a shipped folder of split
    files (`shipped:NAME`), the shipped ESConv samples when none is given, or None for `hub` (the
    split is read from the Hugging Face hub)."""
    if data_file == HUB:
        return None
    if data_file and data_file.startswith(SHIPPED):
        return shipped_data(data_file[len(SHIPPED) :])
    if data_file:
        return Path(data_file)
    from mascot.data.registry import canonical_dataset_name

    if canonical_dataset_name(dataset) != "ESConv":
        raise MascotError(f"--data-file is needed for {dataset}: mascot ships sample contexts for ESConv only")
    return write_esconv_samples(folder)

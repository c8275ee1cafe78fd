"""The plan: each step's `mascot` command line, its folder and how its output is found.

The evaluation is `Plan._evaluation`: directed episodes of the base and the trained system on the
same contexts and seeds, then `mascot judge` and `mascot metrics` on each; a dedicated evaluation
command replaces those steps there.

A step's flags are the pipeline's (models, endpoints, data, inputs from earlier steps) with the
config's `steps` entries on top. Flags are kept as an ordered mapping until the end, so a config
entry replaces a flag (or removes it, with null) instead of repeating it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from mascot.pipeline.settings import STEP_GROUPS, PipelineSettings

Flags = dict[str, Any]


@dataclass
class Step:
    """One step: the command it runs and where its output goes."""

    name: str
    kind: str  # generation | training | judging | metrics | report
    command: list[str]  # the subcommand words, e.g. ["train", "speaker"]
    flags: Flags
    folder: Path  # everything the step writes is under it
    inputs: list[Path] = field(default_factory=list)  # outputs of earlier steps it reads

    def argv(self, *, resume: bool = False) -> list[str]:
        negatives = negative_flags(tuple(self.command)) if self.command else frozenset()
        return [*self.command, *render_flags(self.flags, negatives), *(["--resume"] if resume else [])]

    def command_line(self, *, resume: bool = False) -> str:
        import shlex

        return "mascot " + " ".join(shlex.quote(a) for a in self.argv(resume=resume))


@lru_cache(maxsize=None)
def negative_flags(command: tuple[str, ...]) -> frozenset[str]:
    """The `--no-x` spellings a mascot subcommand takes (a false boolean is passed as one of them)."""
    from typer.main import get_command

    from mascot.cli import app

    click_command = get_command(app)
    for word in command:
        click_command = click_command.commands[word]  # type: ignore[attr-defined]
    return frozenset(opt for param in click_command.params for opt in getattr(param, "secondary_opts", ()))


def render_flags(flags: Flags, negatives: frozenset[str] | None = None) -> list[str]:
    """{"max_steps": 4, "lora": False, "judge": ["a", "b"]} -> --max-steps 4 --no-lora --judge a --judge b.

    A false boolean becomes `--no-x` when the command takes it (`negatives`; all when None), and is
    left out otherwise: a flag without a negative spelling is off unless given."""
    out: list[str] = []
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-").lstrip("-")
        if value is None:
            continue
        if value is True:
            out.append(flag)
        elif value is False:
            if negatives is None or "--no-" + flag[2:] in negatives:
                out.append("--no-" + flag[2:])
        elif isinstance(value, (list, tuple)):
            for item in value:
                out += [flag, str(item)]
        else:
            out += [flag, str(value)]
    return out


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
    def _data(self) -> Flags:
        s = self.settings
        return {"dataset": s.dataset, "data_file": self.data_file, "split": s.split, "limit": s.limit, "seed": s.seed}

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

    def _judge(self, key: str) -> Flags:
        s = self.settings
        return {key: s.judge_model, "judge_server_url": s.judge_url}

    def _contexts(self) -> Flags:
        """For judging episodes: where each episode's context is looked up by its id."""
        s = self.settings
        return {"dataset": s.dataset, "data_file": self.data_file, "split": s.split}

    def _training(self, name: str, model: str) -> Flags:
        return {"model": model, "dataset": self.settings.dataset, "seed": self.settings.seed, "output_dir": self.folder(name)}

    # ---- the steps
    def _build(self) -> list[Step]:
        s = self.settings
        candidates = self.run_dir("candidates")
        episodes = self.episodes_file("episodes")
        steps = [
            Step("candidates", "generation", ["generate"], {"mode": "individual", **self._data(), **self._generation_roles(trained_speaker=False, trained_director=False),
                 **self._judge("judge_model"), "output_dir": self.folder("candidates")}, self.folder("candidates")),
            Step("reward_model", "training", ["train", "reward-model"], {"data_path": candidates, **self._training("reward_model", s.reward_model)},
                 self.folder("reward_model"), [candidates]),
            Step("speaker", "training", ["train", "speaker"], {"data_path": candidates, **self._training("speaker", s.policy_model),
                 "reward_model_path": self.folder("reward_model")}, self.folder("speaker"), [candidates, self.folder("reward_model")]),
            Step("episodes", "generation", ["generate"], {"mode": "group", "generation_mode": "independent", **self._data(),
                 **self._generation_roles(trained_speaker=True, trained_director=False), "output_dir": self.folder("episodes")}, self.folder("episodes"),
                 [] if s.generation_url else [self.folder("speaker")]),
            Step("group_pairs", "judging", ["prefs", "group"], {"episodes": episodes, "mode": "episode", **self._judge("judge"), **self._contexts(),
                 "output_dir": self.folder("group_pairs")}, self.folder("group_pairs"), [episodes]),
            Step("group_reward_model", "training", ["train", "group-reward-model"], {"data_path": self.folder("group_pairs") / "group_pairs.jsonl",
                 **self._training("group_reward_model", s.reward_model)}, self.folder("group_reward_model"), [self.folder("group_pairs") / "group_pairs.jsonl"]),
            Step("director", "training", ["train", "director-grpo"], {"data_path": self.run_dir("episodes"), **self._training("director", s.policy_model),
                 "group_reward_model_path": self.folder("group_reward_model"), **self._rollouts()}, self.folder("director"),
                 [self.run_dir("episodes"), self.folder("group_reward_model")]),
            *self._evaluation(),
            Step("report", "report", [], {}, self.root),
        ]
        for step in steps:
            step.flags = _merged(step.flags, _extra(s, step.name))
        return steps

    def _rollouts(self) -> Flags:
        s = self.settings
        url = s.rollout_url or s.generation_url
        if url:
            return {"rollout_server_url": url, "rollout_model": s.policy_model, "speaker_adapter": s.speaker_served_name}
        return {"speaker_adapter": self.folder("speaker")}

    def _evaluation(self) -> list[Step]:
        steps = []
        for system, trained in (("base", False), ("trained", True)):
            name = f"eval_{system}"
            flags = {"mode": "group", "generation_mode": "directed", "system": "mascot" if trained else "base", **self._data(),
                     **self._generation_roles(trained_speaker=trained, trained_director=trained), "output_dir": self.folder(name)}
            inputs = [self.folder("speaker"), self.folder("director")] if trained and not self.settings.generation_url else []
            steps.append(Step(name, "generation", ["generate"], flags, self.folder(name), inputs))
        for system in ("base", "trained"):
            episodes = self.episodes_file(f"eval_{system}")
            flags = {"input_file": episodes, **self._judge("judge"), **self._contexts(), "output_dir": self.folder(f"judge_{system}")}
            steps.append(Step(f"judge_{system}", "judging", ["judge"], flags, self.folder(f"judge_{system}"), [episodes]))
        for system in ("base", "trained"):
            episodes = self.episodes_file(f"eval_{system}")
            # No NLI model loads offline: NLI is opt-in (metrics: {skip_nli: false}).
            flags = {"input_file": episodes, "output_file": self.folder(f"metrics_{system}") / "metrics_auto.json", "skip_nli": True}
            steps.append(Step(f"metrics_{system}", "metrics", ["metrics"], flags, self.folder(f"metrics_{system}"), [episodes]))
        return steps

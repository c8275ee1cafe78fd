"""The settings of `mascot pipeline`: one YAML config (or a shipped preset) and a few flags.

Precedence: command-line flags, then `--config FILE.yaml`, then the preset (`--preset toy|paper`,
or `preset:` inside the config file), then the defaults below. `steps` maps a step name to extra
flags of that step's command (`{speaker: {max_steps: 4}}` adds `--max-steps 4`); a value of null
removes a flag the pipeline would pass.

This module imports nothing heavy: `mascot --help` reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from mascot import vocab
from mascot.errors import MascotError, flag_json_error
from mascot.settings import default_for, require, setting
from mascot.settings_groups import DataSettings, JudgeEndpointSettings, OutputSettings, SeedSettings

CONFIG_VERSION = 1
PRESETS_DIR = Path(__file__).resolve().parent.parent / "configs"
PRESETS = ("toy", "learn", "paper")
STAGE_1 = ("candidates", "reward_model", "speaker")
STAGE_2 = ("episodes", "group_pairs", "group_reward_model", "director")
# The evaluated systems: (trained Speaker, trained Director). The last two are the ablations
# (`ablations: true`): each stage's share, on the same contexts and seeds.
# The evaluation's systems, each a `mascot eval` system of the shipped catalogue (systems_v1.yaml)
# run on this pipeline's adapters: step name -> system name.
SYSTEMS = {"base": "base", "trained": "mascot", "speaker_only": "mascot-c", "director_only": "mascot-p"}
ABLATIONS = ("speaker_only", "director_only")
EVALUATION = tuple(f"{kind}_{system}" for kind in ("eval", "judge", "metrics") for system in SYSTEMS)
STEP_NAMES = (*STAGE_1, *STAGE_2, *EVALUATION, "report")
ABLATION_STEPS = tuple(name for name in EVALUATION if name.split("_", 1)[1] in ABLATIONS)
# Keys of `steps` that apply to several steps at once.
STEP_GROUPS = {
    group: tuple(f"{kind}_{system}" for system in SYSTEMS) for group, kind in (("evaluation", "eval"), ("judging", "judge"), ("metrics", "metrics"))
}


@dataclass
class PipelineSettings:
    """Run the whole two-stage pipeline: Stage 1 (candidates, judge, pairs, persona reward model,
    Speaker GRPO), Stage 2 (episodes with the aligned Speakers, group pairs, group reward model,
    Director GRPO), the evaluation of the trained system against the base one, and a report.
    Finished steps are skipped, interrupted ones resumed."""

    preset: Optional[str] = setting(
        None,
        "Shipped config to start from: toy (embedded model, minutes on a CPU), learn (embedded model and a rule judge, a run that "
        "visibly learns on held-out contexts in about 50 minutes on a CPU) or paper (Qwen3-8B / Qwen3-0.6B on vLLM).",
    )
    version: int = setting(CONFIG_VERSION, "Version of the pipeline config format.")
    output_dir: str = default_for(
        OutputSettings, "output_dir", "outputs/pipeline", help="Folder of the whole run: one sub-folder per step, pipeline.json and report.md."
    )
    dataset: str = default_for(DataSettings, "dataset", "ESConv")
    data_file: Optional[str] = default_for(
        DataSettings,
        "data_file",
        None,
        help="Dataset file in its hub export format; `hub`: the split from the Hugging Face hub. Default (ESConv only): the contexts shipped with mascot.",
    )
    split: str = default_for(
        DataSettings, "split", "test", help="Dataset split of the training steps (Stage 1 and Stage 2), and of the evaluation unless --eval-split."
    )
    eval_split: Optional[str] = setting(
        None, "Dataset split of the evaluation (default: --split); a held-out split keeps its contexts out of every training step."
    )
    limit: Optional[int] = default_for(DataSettings, "limit", None, help="Contexts per generation step (Stage 1, Stage 2 and evaluation).")
    eval_limit: Optional[int] = setting(None, "Contexts of the evaluation (default: --limit).")
    ablations: bool = setting(False, "Also evaluate the trained Speaker with the base Director and the base Speaker with the trained Director.")
    seed: int = default_for(
        SeedSettings, "seed", 42, help="Seed of every step (the evaluation runs base and trained systems on the same contexts and seeds)."
    )
    policy_model: str = setting(
        vocab.DEFAULT_LOCAL_MODEL, "Base model of the Speaker, Director and simulated user (hub id or folder; the served id with a URL)."
    )
    reward_model: str = setting(vocab.DEFAULT_LOCAL_MODEL, "Base model of both reward models (hub id or folder).")
    judge_model: str = default_for(
        JudgeEndpointSettings,
        "judge_model",
        vocab.DEFAULT_LOCAL_MODEL,
        help="Judge model (hub id or folder; the served id with --judge-url), or a Python function: python:PATH_OR_MODULE:FUNCTION.",
        also=("--judge-model", "--judge"),
    )
    group_judge_model: Optional[str] = setting(
        None,
        "Judge of conversations: Stage 2's pairs and the evaluation (both scopes); default: --judge-model, which then judges Stage 1 alone. "
        "Two runs that differ only in it share Stage 1 (see --reuse-from).",
    )
    reuse_from: Optional[str] = setting(
        None,
        "Another pipeline folder: each step whose command is the one that folder ran (its paths read as this folder's), complete there, "
        "and whose inputs were reused too, is copied from it instead of run (e.g. Stage 1 and the base evaluation for a second judge).",
    )
    generation_url: Optional[str] = setting(None, "OpenAI-compatible endpoint (vLLM) for Director, Speakers and user; none: in-process local model.")
    judge_url: Optional[str] = setting(None, "OpenAI-compatible endpoint of the judge; none: in-process local model.")
    rollout_url: Optional[str] = setting(None, "Endpoint for the Director GRPO rollouts (default: --generation-url, or in-process).")
    speaker_served_name: str = setting("mascot-speaker", "With a URL: the name under which the server serves the trained Speaker adapter.")
    director_served_name: str = setting("mascot-director", "With a URL: the name under which the server serves the trained Director adapter.")
    until: Optional[str] = setting(None, f"Stop after this step ({', '.join(STEP_NAMES)}).")
    from_step: Optional[str] = setting(None, "Start at this step; earlier steps must be complete (their outputs are read).", flags=("--from",))
    steps: Optional[str] = setting(
        None,
        "Extra flags per step: in YAML a mapping step -> {flag: value}; on the command line the same as JSON. "
        f"Keys: the step names, plus {', '.join(STEP_GROUPS)} for both steps of a kind.",
    )

    def __post_init__(self) -> None:
        require(self.version == CONFIG_VERSION, f"--version {self.version}: this mascot reads pipeline configs of version {CONFIG_VERSION}")
        require(self.preset is None or self.preset in PRESETS, f"--preset {self.preset!r}: choose one of {', '.join(PRESETS)}")
        for flag, name in (("--until", self.until), ("--from", self.from_step)):
            require(name is None or name in STEP_NAMES, f"{flag} {name!r}: not a step (steps: {', '.join(STEP_NAMES)})")
        if self.until and self.from_step:
            require(STEP_NAMES.index(self.from_step) <= STEP_NAMES.index(self.until), f"--from {self.from_step} comes after --until {self.until}")
        require(self.limit is None or self.limit >= 1, "--limit must be at least 1")
        require(self.eval_limit is None or self.eval_limit >= 1, "--eval-limit must be at least 1")
        self.steps = parse_step_flags(self.steps)  # type: ignore[assignment]

    @property
    def step_flags(self) -> dict[str, dict[str, Any]]:
        return self.steps or {}  # type: ignore[return-value]

    @property
    def evaluation_split(self) -> str:
        return self.eval_split or self.split

    @property
    def systems(self) -> list[str]:
        """The evaluated systems (the ablations only when asked for)."""
        return [name for name in SYSTEMS if self.ablations or name not in ABLATIONS]

    def planned(self) -> list[str]:
        """Every step of this pipeline, in order (the ablation steps only when asked for)."""
        return [name for name in STEP_NAMES if self.ablations or name not in ABLATION_STEPS]

    def selected(self) -> list[str]:
        """The steps this invocation runs, in order (--from .. --until)."""
        first = STEP_NAMES.index(self.from_step) if self.from_step else 0
        last = STEP_NAMES.index(self.until) if self.until else len(STEP_NAMES) - 1
        return [name for name in self.planned() if first <= STEP_NAMES.index(name) <= last]


def parse_step_flags(value: Any) -> dict[str, dict[str, Any]]:
    """`steps` from YAML (a mapping) or the command line (JSON), checked against the step names."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise flag_json_error("--steps", value) from None
    require(isinstance(value, dict), "--steps must map step names to {flag: value} mappings")
    known = (*STEP_NAMES, *STEP_GROUPS)
    for name, flags in value.items():
        require(name in known, f"--steps: unknown step {name!r} (steps: {', '.join(known)})")
        require(flags is None or isinstance(flags, dict), f"--steps: {name} must map flag names to values")
    return {str(k): dict(v or {}) for k, v in value.items()}


def merge_step_flags(*layers: Any) -> dict[str, dict[str, Any]]:
    """Step flags of several layers (lowest first), merged step by step, flag by flag."""
    merged: dict[str, dict[str, Any]] = {}
    for layer in layers:
        for name, flags in parse_step_flags(layer).items():
            merged.setdefault(name, {}).update(flags)
    return merged


def preset_path(name: str) -> Path:
    return PRESETS_DIR / f"pipeline_{name}.yaml"


def preset_values(name: str | None) -> dict[str, Any]:
    """A shipped preset's settings ({} for none)."""
    if not name:
        return {}
    if name not in PRESETS:
        raise MascotError(f"--preset {name!r}: choose one of {', '.join(PRESETS)}")
    from mascot.settings import read_config_file

    return read_config_file(preset_path(name))


def resolve_pipeline_settings(flags: dict[str, Any], from_file: dict[str, Any]) -> PipelineSettings:
    """The settings of one pipeline: command-line `flags` (only those given) over the config file
    over the preset (named by either) over the defaults. Step flags merge per step, so a config
    entry or --steps changes one flag of a step, not the preset's whole step."""
    from mascot.settings import settings_from

    preset = flags.get("preset") or from_file.get("preset")
    below = preset_values(preset)
    steps = merge_step_flags(below.get("steps"), from_file.get("steps"), flags.get("steps"))
    values = {**below, **from_file, **flags, "preset": preset, "steps": steps}
    return settings_from(PipelineSettings, values, "--config")

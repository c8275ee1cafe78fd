"""The settings of `mascot eval` (one dataclass; the command's flags are generated from it).

This module imports nothing heavy: `mascot --help` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mascot import vocab
from mascot.dialogue.settings import EngineSettings, SamplingSettings, check_repetition_penalty
from mascot.metrics.settings import MetricsSettings
from mascot.settings import default_for, require, setting
from mascot.settings_groups import (
    JUDGE_SCORING_HELP,
    ClientLimits,
    DataSettings,
    JudgePanelSettings,
    JudgeServerSettings,
    JudgingSettings,
    OutputSettings,
    RubricSettings,
    SeedSettings,
    SpeakerEndpointSettings,
    check_judge_scoring,
)
from mascot.web.settings import WebSettings

DEFAULT_OUTPUT_ROOT = "outputs/mascot_eval"
DEFAULT_REFERENCE = "mascot_emnlp2026_v1"  # src/mascot/eval/references/<name>.yaml


@dataclass
class EvalSettings:
    """Generate, judge and measure each system on the same contexts and seeds; write the paper's tables.

    Writes OUTPUT_DIR/<dataset>/<split>/<system>/ (the episodes, judgments and metrics of each
    system) and, in OUTPUT_DIR/<dataset>/, results.json, one CSV per table, plots and report.md.
    Rerunning reuses every finished episode and cached judgment."""

    systems: str = setting(None, "Comma-separated systems (names from systems_v1.yaml or --systems-file), or a systems YAML file.", required=True)
    systems_file: Optional[str] = setting(
        None, "YAML file of extra systems and adapter locations (same layout as systems_v1.yaml; same names replace)."
    )
    dataset: str = default_for(DataSettings, "dataset", "EmpatheticDialogues")
    split: str = default_for(
        DataSettings,
        "split",
        "test",
        help="Comma-separated splits: train/valid/test or an evaluation split (ED: positive, neutral, negative; QMSum: product, academic, committee; ESConv: ood).",
    )
    data_file: Optional[str] = default_for(DataSettings, "data_file", None, help="Local dataset file or folder (otherwise the Hugging Face hub).")
    limit: Optional[int] = default_for(DataSettings, "limit", None, help="Contexts per split (the first N in file order).")
    seed: int = default_for(SeedSettings, "seed", 42, help="Seed of every system's generation (same contexts, same seeds).")
    num_turns: int = default_for(EngineSettings, "num_turns", 5, help="Rounds per episode.")
    user_response_probability: float = default_for(EngineSettings, "user_response_probability", 0.5)
    temperature: float = default_for(SamplingSettings, "temperature", 0.7, help="Sampling temperature of Speakers and User.")
    max_tokens: int = default_for(SamplingSettings, "max_tokens", 160)
    repetition_penalty: float = default_for(SamplingSettings, "repetition_penalty", 1.0, help=vocab.REPETITION_PENALTY_HELP)
    model_name: Optional[str] = default_for(SpeakerEndpointSettings, "model_name", None, help="Default model of every role a system leaves null.")
    vllm_server_url: Optional[list[str]] = default_for(
        SpeakerEndpointSettings,
        "vllm_server_url",
        None,
        help="Default OpenAI-compatible endpoint of every role a system leaves null. Repeat (or separate with commas) for several servers sharing the load.",
    )
    judges: list[str] = default_for(JudgePanelSettings, "judges", [], help="Judge model id; repeat for a panel." + vocab.PLUGIN_JUDGE_HELP)
    judges_file: Optional[str] = default_for(JudgePanelSettings, "judges_file", None, help=vocab.JUDGES_FILE_HELP)
    judge_server_url: Optional[list[str]] = default_for(
        JudgeServerSettings,
        "judge_server_url",
        None,
        help="OpenAI-compatible endpoint of the --judge models. Repeat (or separate with commas) for several servers sharing the load.",
    )
    rubric_version: str = default_for(RubricSettings, "rubric_version", vocab.DEFAULT_RUBRIC_VERSION)
    judge_scoring: str = default_for(JudgingSettings, "judge_scoring", "auto", help=JUDGE_SCORING_HELP)
    cache_dir: Optional[str] = default_for(
        JudgingSettings, "cache_dir", None, help="Judgment cache folder (default: OUTPUT_DIR/judge_cache, shared by reruns)."
    )
    nli: bool = setting(True, "Run the NLI model for the entailment/neutral/contradiction table.", flags=("--nli/--no-nli",))
    nli_model: str = default_for(MetricsSettings, "nli_model", "FacebookAI/roberta-large-mnli", help="NLI model of the automatic metrics.")
    big_five: Optional[str] = setting(None, '"all": every context under each of the ten Big Five user profiles (or one profile name).')
    user_profile: Optional[str] = default_for(
        EngineSettings, "user_profile", None, help='"all": every context under each profile of --user-profile-set (or one profile name, e.g. INTJ).'
    )
    user_profile_set: Optional[str] = default_for(
        EngineSettings,
        "user_profile_set",
        None,
        help=f"Profile set of --user-profile: {' | '.join(vocab.USER_PROFILE_SETS)} (default {vocab.DEFAULT_USER_PROFILE_SET}).",
    )
    sweep: list[str] = setting([], "Model-scale sweep, repeatable: director=MODEL,MODEL or speaker=MODEL,MODEL (every combination is run).")
    adapters: list[str] = setting(
        [], "Where a named adapter lives: NAME=PATH (repeatable), e.g. speaker_grpo=outputs/llm/my_speaker.", flags=("--adapter",)
    )
    reference: str = setting(
        DEFAULT_REFERENCE, "Published numbers set beside the measured ones: a shipped reference name, a reference YAML file, or none."
    )
    baseline: Optional[str] = setting(
        None, "Reference system of the delta table (default: the best-scoring baseline of each split).", flags=("--baseline", "--reference-system")
    )
    study: Optional[str] = default_for(
        WebSettings,
        "study",
        None,
        help="A human study (mascot study create) built from this evaluation's episodes: the report sets each judge against its people.",
    )
    bootstrap_samples: int = setting(2000, "Bootstrap resamples of contexts for the 95% intervals.")
    max_in_flight: int = default_for(ClientLimits, "max_in_flight", vocab.MAX_IN_FLIGHT)
    output_dir: str = default_for(OutputSettings, "output_dir", DEFAULT_OUTPUT_ROOT, help="Root folder of the evaluation.")
    report_only: bool = setting(False, "Rebuild the tables, plots and report from what is saved; generate and judge nothing.")

    def __post_init__(self) -> None:
        require(bool(self.systems and self.systems.strip()), "--systems: name at least one system")
        require(self.limit is None or self.limit >= 1, "--limit must be at least 1")
        require(self.num_turns >= 1, "--num-turns must be at least 1")
        check_repetition_penalty(self.repetition_penalty)
        check_judge_scoring(self.judge_scoring)
        require(0.0 <= self.user_response_probability <= 1.0, "--user-response-probability must lie between 0 and 1")
        require(self.bootstrap_samples >= 100, "--bootstrap-samples must be at least 100")
        require(not (self.judges and self.judges_file), "use either --judge or --judges-file, not both")
        require(not (self.big_five and self.user_profile), "--big-five X is --user-profile X with the Big Five set: give one of them")
        require(
            not (self.user_profile_set and not self.user_profile),
            "--user-profile-set names the set of a --user-profile study: add --user-profile all (or one profile)",
        )
        require(
            not ((self.big_five or self.user_profile) and self.sweep),
            "a user-profile study (--big-five, --user-profile) and --sweep are separate studies: run one at a time",
        )
        for item in self.sweep:
            role, sep, models = item.partition("=")
            require(
                bool(sep) and role in vocab.DIALOGUE_ROLES and bool(models.strip(",")),
                f"--sweep {item!r}: expected ROLE=MODEL,MODEL with ROLE director, speaker or user",
            )

    @property
    def split_names(self) -> list[str]:
        return [s.strip() for s in self.split.split(",") if s.strip()]

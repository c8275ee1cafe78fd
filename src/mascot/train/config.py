"""Every training default in one place, with the help text the CLI shows.

One settings dataclass per trainer. Defaults follow the paper: LoRA r=16, alpha=32, dropout 0.1 on
the attention projections; Qwen3-8B policies and Qwen3-0.6B reward models; one epoch; an effective
batch of 16 for policies and 32 for reward models (per-device batch and gradient accumulation are
derived from it, see `runtime.derive_batch`). The `mascot train ...` options are generated from
these fields, so a default or a help text is changed here and nowhere else.

This module imports nothing heavy: `mascot --help` reads it.
"""

from dataclasses import dataclass, field
from typing import Optional

from mascot import vocab
from mascot.data.registry import DATASET_CHOICES
from mascot.dialogue.settings import EngineSettings, SamplingSettings
from mascot.settings import default_for, setting
from mascot.settings_groups import DataSettings, OutputSettings, RosterSettings, RubricSettings, SeedSettings, SpeakerEndpointSettings

REFERENCE_HELP = " A registry version works too: current, previous or its id."


def registry_versions_field():
    """Which registry version each artefact flag was resolved from (recorded in the artefact's
    `source_artefacts` as `<flag>_version`); not a flag."""
    return field(default_factory=dict, repr=False, compare=False, metadata={"cli": False, "derived": True})


def resolve_registry_references(settings: "TrainSettings", **roles: str) -> None:
    """Each named artefact flag that holds a registry reference (`current`, `v3`, `speaker-v3`)
    becomes that version's folder, and the version is noted in `settings.registry_versions`."""
    from mascot.adapter_registry import resolve_adapter

    for name, role in roles.items():
        value = getattr(settings, name)
        if value:
            folder, version = resolve_adapter(str(value), role)
            setattr(settings, name, folder)
            if version:
                settings.registry_versions[name] = version


DEFAULT_POLICY_MODEL = "Qwen/Qwen3-8B"
DEFAULT_REWARD_BASE_MODEL = "Qwen/Qwen3-0.6B"
LORA_TARGET_MODULES = "q_proj,k_proj,v_proj,o_proj"
DEFAULT_OUTPUT_ROOT = "outputs"
# TRL's GRPOConfig.multi_objective_aggregation values
MULTI_OBJECTIVE_AGGREGATIONS = ("normalize_then_sum", "sum_then_normalize")
REWARD_SCALINGS = ("group", "batch", "none")


@dataclass
class TrainSettings:
    """What every trainer shares: model, data, output, schedule, batch, LoRA, resume."""

    data_path: str = setting(None, "Run directory or JSONL file with the training records.", required=True)
    model_name: str = default_for(SpeakerEndpointSettings, "model_name", DEFAULT_POLICY_MODEL, help="Base model: hub id or local folder.")
    dataset: Optional[str] = default_for(
        DataSettings, "dataset", None, help=f"Dataset name ({DATASET_CHOICES}); read from the run's run_config.json when omitted."
    )
    output_dir: Optional[str] = default_for(
        OutputSettings, "output_dir", None, help="Artefact folder. Default: derived from the stage, dataset and model under outputs/."
    )
    seed: int = default_for(SeedSettings, "seed", 42, help="Seed for data order, held-out split, LoRA init and sampling.")
    num_train_epochs: float = setting(1.0, "Passes over the training data.", flags=("--epochs",))
    max_steps: int = setting(-1, "Stop after this many optimizer steps (-1: run the epochs).")
    learning_rate: float = setting(1e-5, "Peak learning rate (linear decay).")
    batch_size: int = setting(16, "Effective batch per optimizer step (per-device batch x accumulation x devices).")
    per_device_batch_size: Optional[int] = setting(None, "Per-device batch; default: the largest that divides the batch up to the trainer's cap.")
    gradient_checkpointing: bool = setting(
        True,
        "Recompute activations in the backward pass instead of keeping them: bounded memory for long sequences, about a third more compute.",
        flags=("--gradient-checkpointing/--no-gradient-checkpointing",),
    )
    lora: bool = setting(True, "Train a LoRA adapter (--no-lora: full fine-tuning).", flags=("--lora/--no-lora",))
    lora_r: int = setting(16, "LoRA rank.")
    lora_alpha: int = setting(32, "LoRA alpha.")
    lora_dropout: float = setting(0.1, "LoRA dropout.")
    lora_target_modules: str = setting(LORA_TARGET_MODULES, "Comma-separated module names that get LoRA.")
    limit: Optional[int] = default_for(DataSettings, "limit", None, help="Use at most this many training records (smoke runs).")
    logging_steps: int = setting(10, "Log metrics every N optimizer steps.")
    save_steps: int = setting(100, "Write a resumable checkpoint every N optimizer steps.")
    keep_checkpoints: bool = setting(False, "Keep checkpoint-* folders after the final artefact is written.")
    rubric_version: Optional[str] = default_for(
        RubricSettings, "rubric_version", None, help="Rubric version the data was judged with; read from the run when omitted."
    )
    resume: bool = default_for(OutputSettings, "resume", False, help="Continue from the last checkpoint in the output folder.")
    overwrite: bool = default_for(OutputSettings, "overwrite", False, help="Delete an existing output folder and train from scratch.")

    # Not flags: fixed per trainer.
    max_per_device_batch: int = field(default=8, metadata={"cli": False})

    @property
    def lora_targets(self) -> list[str]:
        return [m.strip() for m in self.lora_target_modules.split(",") if m.strip()]


@dataclass
class BestStepSettings:
    """The trainers with a held-out split: which step's weights become the artefact (`train.best`)."""

    eval_steps: Optional[int] = setting(
        None,
        "Measure the held-out split every N optimizer steps (and at the last) and keep the best step as the artefact, the last "
        "beside it in last/; a loss that turns NaN then stops the run and keeps the best. Default: every --save-steps; 0: keep the last step.",
    )

    patience: int = setting(
        0,
        "Stop once this many held-out measurements in a row are worse than the best (a collapsing run), keeping the best; 0: never.",
    )
    eval_fraction: float = setting(
        0.1, "Share of the data held out, whole prompts or contexts with all their examples, to measure the trainer's held-out figure."
    )

    def eval_interval(self) -> int:
        """Steps between held-out measurements (0: none)."""
        return self.save_steps if self.eval_steps is None else self.eval_steps  # type: ignore[attr-defined]


@dataclass
class RewardModelSettings(TrainSettings, BestStepSettings):
    """Stage 1: the scalar persona reward model (Bradley-Terry over judged pairs)."""

    model_name: str = default_for(TrainSettings, "model_name", DEFAULT_REWARD_BASE_MODEL, help="Reward-model base: hub id or local folder.")
    learning_rate: float = default_for(TrainSettings, "learning_rate", 1e-4)
    batch_size: int = default_for(TrainSettings, "batch_size", 32, help="Effective batch of pairs per optimizer step.")
    max_length: int = setting(
        1024, "Longest tokenized prompt + response; a longer pair loses the middle of its prompt (its start and end and the whole response stay)."
    )
    eval_fraction: float = default_for(
        BestStepSettings, "eval_fraction", help="Share of prompts held out (with all their pairs) to report pairwise accuracy."
    )
    margin_scale: float = setting(
        1.0,
        "TRL subtracts the pair's margin inside the logistic loss, -log sigmoid(r_c - r_r - margin); the rubric "
        "margin is multiplied by this (0: plain Bradley-Terry without margin).",
    )
    full_weights: bool = setting(False, "Also merge the LoRA adapter and save a full-weight checkpoint instead of the adapter.")
    head_init: str = setting(
        "probe",
        "How the score head starts: probe (fitted by logistic regression on the frozen model's features of the training pairs, "
        "then fine-tuned with the rest: LP-FT) or random.",
    )
    score_window: int = setting(
        0,
        "Score the mean of the final hidden states of the sequence's last N positions (the reply's end) instead of the last "
        "token's alone; N of at least --max-length: the mean over the whole sequence (a conversation, every turn of it); "
        "0: the last token, the stock classifier that any server scores.",
    )
    score_layers: int = setting(
        0,
        "Keep only the first N decoder layers of the base and score their output (faster; a small model's middle layers can rank replies better); 0: all.",
    )
    max_per_device_batch: int = field(default=16, metadata={"cli": False})
    # Memory follows tokens, not pairs: the per-device batch is also capped so that one device
    # holds at most this many tokens per side (8 pairs of 1,024 tokens, 2 of 4,096).
    max_tokens_per_device: int = field(default=8192, metadata={"cli": False})


@dataclass
class GroupRewardModelSettings(RewardModelSettings):
    """Stage 2: the sequence-level group reward model over (directive, whole trajectory)."""

    model_name: str = default_for(
        TrainSettings, "model_name", DEFAULT_REWARD_BASE_MODEL, help="Reward-model base: hub id or local folder.", also=("--group-reward-model-name",)
    )
    max_length: int = default_for(
        RewardModelSettings,
        "max_length",
        2048,
        help="Longest tokenized (context, trajectory) sequence; a longer pair loses the middle of its context (the trajectory stays whole).",
    )
    score_turns: bool = setting(
        False,
        "Score the first and the last companion turn side by side (the maximum of the final hidden states over each turn's "
        "positions; a head of twice the width) instead of one pooled reading: the order the companions spoke in shows. "
        "Not with --score-window or --full-weights.",
    )
    max_per_device_batch: int = field(default=8, metadata={"cli": False})


@dataclass
class BaseAnchorSettings:
    """The policy trainers' pull towards the frozen base."""

    beta: float = setting(0.04, "KL coefficient against the frozen base (0: no KL term, no reference pass).")


@dataclass
class GRPOSettings(BaseAnchorSettings, TrainSettings):
    """What the Speaker and Director GRPO trainers share."""

    num_generations: int = setting(8, "Completions sampled per prompt (the GRPO group).")
    temperature: float = default_for(SamplingSettings, "temperature", 1.0, help="Sampling temperature of the policy during training.")
    max_completion_length: int = setting(512, "Most tokens the policy generates per completion.")
    use_vllm: bool = setting(False, "Generate with vLLM (GPU only).")
    vllm_mode: str = setting("colocate", "server (a `trl vllm-serve` process) or colocate (vLLM inside each training process).")
    # Not --vllm-server-url: in `mascot generate` that flag names an OpenAI-compatible endpoint.
    trl_vllm_server_url: Optional[str] = setting(
        None,
        "Base URL of the `trl vllm-serve` process that generates for GRPO in --vllm-mode server (not an OpenAI endpoint).",
        deprecated=("--vllm-server-url", "--vllm-server-base-url"),
    )
    thinking: bool = setting(
        False, "Reasoning mode of the policy's chat template (enable_thinking) while it samples.", flags=("--thinking/--no-thinking",)
    )
    multi_objective_aggregation: str = setting(
        "normalize_then_sum",
        "How the reward functions combine into one advantage: normalize_then_sum (each reward normalised within its group, "
        "then the weighted sum normalised over the batch, as in GDPO) or sum_then_normalize (the weighted sum normalised "
        "within its group, TRL's default: the reward with the widest spread dominates).",
    )
    scale_rewards: str = setting(
        "group",
        "With sum_then_normalize: what the group's advantages are divided by - group (each group's standard deviation, TRL's "
        "default), batch (the whole batch's: a reward that barely varies within a group keeps its small weight there) or none "
        "(not divided). normalize_then_sum divides each reward by its group's deviation whatever this says.",
    )
    share_prompts: bool = setting(
        True,
        "Score a group's completions with their prompt run once (its keys and values given to each completion) instead of once per "
        "completion: the same log-probabilities and gradients, a fraction of the work when prompts are long and completions short. Applies "
        "without gradient checkpointing, ZeRO-3 or FSDP (there TRL's own pass runs).",
        flags=("--share-prompts/--no-share-prompts",),
    )
    lora_last_layers: int = setting(
        0,
        "LoRA on the last N decoder layers only (0: every layer): the backward pass stops below the lowest adapted layer, so a step "
        "over long prompts costs a fraction of its gradient work; the layers kept are named in the adapter's config.",
    )
    reuse_frozen_trunk: bool = setting(
        True,
        "With --lora-last-layers, run the layers below the adapters once per prompt in a generation batch: the first scoring pass "
        "(the reference's) keeps their keys, values and output and the policy's pass replays them, computing the adapted layers "
        "alone. The same numbers; part of the shared pass (off with --no-share-prompts too).",
        flags=("--reuse-frozen-trunk/--no-reuse-frozen-trunk",),
    )
    merged_generation: bool = setting(
        True,
        "Sample with each LoRA folded into its base weight (one matrix product per adapted layer, in eval mode) and the base weights "
        "put back bit for bit afterwards; --no-merged-generation samples with the adapter beside the base. Refused under ZeRO-3 and FSDP, "
        "whose sharded weights cannot be swapped.",
        flags=("--merged-generation/--no-merged-generation",),
    )
    compiled_decode: bool = setting(
        False,
        "Sample with a static cache and transformers' compiled forward, prompts padded to a multiple of --prompt-bucket so that it "
        "compiles once per bucket (pays a compile at the start: worth it on a GPU for long runs, see benchmarks/README.md).",
    )
    prompt_bucket: int = setting(64, "With --compiled-decode: prompts are left-padded to a multiple of this many tokens.")
    steps_per_generation: int = setting(
        1,
        "Optimizer steps taken on each generated batch: generation runs once for this many steps (TRL's steps_per_generation is this "
        "times the gradient accumulation); 1: every step samples afresh from the current policy.",
    )
    vllm_gpu_memory_utilization: float = setting(0.3, "With --use-vllm colocate: the share of GPU memory vLLM may take (weights and KV cache).")
    vllm_enable_sleep_mode: bool = setting(
        False,
        "With --use-vllm colocate: vLLM releases its GPU memory while the policy trains and takes it back to generate.",
        flags=("--vllm-enable-sleep-mode/--no-vllm-enable-sleep-mode",),
    )
    vllm_max_model_length: Optional[int] = setting(
        None, "With --use-vllm colocate: vLLM's context length (prompt + completion); default: the model's."
    )
    max_per_device_batch: int = field(default=8, metadata={"cli": False})


@dataclass
class SpeakerGRPOSettings(GRPOSettings, BestStepSettings):
    """Stage 1: the Speaker policy against the persona reward model plus two rule rewards."""

    reward_model_path: Optional[str] = setting(
        None,
        "Trained persona reward model (artefact folder). Default: where `mascot train reward-model` writes it for this dataset "
        "(outputs/reward_model/Individual_<dataset>_Qwen3-0.6B); unused when --reward-model-weight is 0." + REFERENCE_HELP,
    )
    thinking: bool = default_for(
        GRPOSettings,
        "thinking",
        True,
        help="The Speaker reasons inside <think>...</think> before replying: its prompts ask for it, its chat template enables it and the "
        "format reward requires it. --no-thinking: prompts without it, thinking disabled, and the format reward asks for a plain reply.",
    )
    algorithm: str = setting("grpo", "Policy optimisation algorithm (grpo).")
    reward_model_weight: float = setting(1.0, "Weight of the persona reward model's score.")
    format_weight: float = setting(
        0.2, "Weight of the format reward (<think>...</think> then a non-empty reply; with --no-thinking: a non-empty reply without reasoning)."
    )
    conciseness_weight: float = setting(0.2, "Weight of the conciseness reward.")
    length_budget: int = setting(80, "Words a reply may have before the conciseness reward penalises it.")
    reward_max_length: int = setting(1024, "Longest (prompt, reply) the reward model reads; longer ones keep their end.")
    eval_fraction: float = default_for(
        BestStepSettings,
        "eval_fraction",
        0.0,
        help="Share of contexts held out (every persona's prompt of each): the policy samples for them every --eval-steps and the step "
        "with the best mean reward there is kept (costs that generation); 0: none, the last step is kept.",
    )
    registry_versions: dict = registry_versions_field()

    def __post_init__(self) -> None:
        resolve_registry_references(self, reward_model_path="persona_reward_model")


@dataclass
class DirectorGRPOSettings(GRPOSettings, BestStepSettings):
    """Stage 2 (the paper's method): the Director with GRPO over prefix-suffix rollouts."""

    data_path: str = default_for(
        TrainSettings,
        "data_path",
        None,
        help="Episode run directory or episodes JSONL (schema.Episode).",
        required=True,
        also=("--episode-dataset-path",),
    )
    group_reward_model_path: Optional[str] = setting(
        None,
        "Trained group reward model (artefact folder). Default: where `mascot train group-reward-model` writes it for this dataset "
        "(outputs/reward_model/group_reward_<dataset>_Qwen3-0.6B); unused when --group-reward-weight is 0." + REFERENCE_HELP,
    )
    roster: Optional[str] = default_for(RosterSettings, "roster", None, help="Roster name or file; default: the dataset's roster.")
    rollout_server_url: Optional[str] = setting(
        None, "OpenAI-compatible endpoint for the frozen Speaker, user and later-round Director during rollouts (default: in-process local model)."
    )
    rollout_model: Optional[str] = setting(
        None, "Base model the rollouts call: served model id, or hub id / folder locally. Default: the policy being trained (--model)."
    )
    rollout_endpoints: Optional[str] = setting(None, "Comma-separated extra rollout endpoints; requests go to the one with the fewest outstanding.")
    speaker_adapter: Optional[str] = default_for(
        SpeakerEndpointSettings,
        "speaker_adapter",
        None,
        help="The trained Speaker for rollouts: its served LoRA alias (with a rollout URL) or its adapter folder (local)." + REFERENCE_HELP,
    )
    rollouts: str = setting(
        "live",
        "Where a sampled directive's reward comes from: live (its conversation rolled out to the end of --suffix-rounds and scored) | "
        "recorded (the scores of the recorded conversations that went on with the companion it names, averaged: episodes of "
        "`mascot generate --generation-mode tree` hold one for every companion at every decision point; no Speaker or user runs, so "
        "a step costs the Director's own sampling, and only the choice of companion is learnt, not the directive's wording).",
    )
    rollout_director: str = setting(
        "base",
        "Who decides a rollout's rounds after the sampled directive: base (the frozen base Director, on the rollout backend) | policy "
        "(the Director being trained, in process, as it stands at that step: each rollout is the conversation the trained Director would "
        "go on to hold, so a choice is not rewarded for what a different Director does next).",
    )
    suffix_rounds: int = setting(
        2,
        "Rounds rolled out after the Director's directive (its own included); 0: to the end of the episode the decision point comes from, "
        "so that every rollout is a whole conversation, as the episodes the group reward model learnt from.",
    )
    # The rollouts should read like the episodes the Director is judged on: same reply lengths and
    # sampling as `mascot generate` (a rollout Speaker writing 160 tokens where the episodes wrote 40
    # trains the Director on conversations it never meets, at four times the cost).
    rollout_max_tokens: int = setting(vocab.MAX_TOKENS, "Longest Speaker reply in a rollout, in tokens (as --max-tokens of `mascot generate`).")
    rollout_user_max_tokens: int = setting(vocab.USER_MAX_TOKENS, "Longest simulated-user reply in a rollout, in tokens.")
    rollout_director_max_tokens: Optional[int] = setting(
        None, "Longest later-round Director reply in a rollout (suffix rounds after the first); default: what the longest valid directive needs."
    )
    rollout_temperature: float = setting(vocab.TEMPERATURE, "Sampling temperature of the rollouts' Speakers, user and later-round Director.")
    rollout_repetition_penalty: Optional[float] = setting(
        None,
        "Repetition penalty of the rollouts' Speakers (as --repetition-penalty of `mascot generate`; 1.0: off). Default: the one "
        "the episodes were generated with (their run_config.json; 1.0 when it records none).",
    )
    decision_points_per_episode: int = setting(2, "Decision points sampled from each recorded episode.")
    eval_fraction: float = default_for(
        BestStepSettings,
        "eval_fraction",
        0.0,
        help="Share of contexts whose decision points are held out: the Director samples for them every --eval-steps, they are rewarded as "
        "in training, and the step with the best mean reward there is kept (costs that sampling and its rollouts); 0: the last step is kept.",
    )
    # The diversity term rewards not repeating the last Speaker. When most recorded prefixes end
    # with one companion, a Director that simply avoids that one earns it, and collapses onto another.
    balance_last_speaker: bool = setting(
        False,
        "Sample as many decision points after each companion's turn (and at the opening, with no companion before) as after any "
        "other, reusing a scarce kind's prefixes, so that only a Director that varies on the last Speaker earns the diversity term.",
    )
    user_response_probability: float = default_for(
        EngineSettings, "user_response_probability", 0.5, help="Chance that the simulated user speaks after a round."
    )
    group_reward_weight: float = setting(1.0, "Weight of the group's reward: the group reward model's score, or the --reward-judge's.")
    reward_judge: Optional[str] = setting(
        None,
        "Score every rollout with this judge's collective Overall (1-5) instead of the group reward model, as online RLAIF does: "
        "a Python function (python:PATH_OR_MODULE:FUNCTION) or a model (on --reward-judge-url; none: in process). One judgment per rollout.",
    )
    reward_judge_url: Optional[str] = setting(None, "OpenAI-compatible endpoint of a --reward-judge model (never the rollout endpoint's by default).")
    diversity_weight: float = setting(
        0.5,
        "Weight of the diversity term: +1 when the last Speaker before the decision and the rolled-out Speakers are not all the same persona, -1 otherwise.",
    )
    parse_failure_reward: float = setting(
        -1.0, "What a completion that does not parse as a directive scores on each reward, the group reward and the diversity term (counted)."
    )
    max_completion_length: int = default_for(GRPOSettings, "max_completion_length", 128, help="Most tokens of one directive.")
    directive_opening: bool = setting(
        True,
        "Each sampled directive continues the directive block's opening (`<directive>` and `agent:`), written at the start of the "
        "Director's answer as the local backend's Director writes it in episodes, and opens with a roster name (sampled among the names, as "
        "the local backend's slot and a server's schema hold the Director when it runs); off: the Director writes its whole answer.",
    )
    group_reward_max_length: int = setting(
        2048, "Longest (context, trajectory) the group reward model reads; as in its training, a longer one loses the middle of its context."
    )
    rollout_concurrency: Optional[int] = setting(
        None,
        "Suffix rollouts in flight at once, and the batch of the in-process rollout models; default: every completion a process "
        "samples in a step, so that each round of a step's rollouts runs as one batch (a lower bound caps memory).",
    )
    registry_versions: dict = registry_versions_field()

    def __post_init__(self) -> None:
        # A served Speaker is named as its server lists it; only a folder comes from the registry.
        speaker = {} if self.rollout_server_url else {"speaker_adapter": "speaker"}
        resolve_registry_references(self, group_reward_model_path="group_reward_model", **speaker)


@dataclass
class DirectorDPOSettings(BaseAnchorSettings, TrainSettings, BestStepSettings):
    """Stage 2 (optional offline alternative): DPO over directive-level pairs from branching episodes."""

    data_path: str = default_for(
        TrainSettings,
        "data_path",
        None,
        help="Branching run directory (with directive_pairs.jsonl) or a directive pairs JSONL.",
        required=True,
        also=("--episode-dataset-path",),
    )
    learning_rate: float = default_for(TrainSettings, "learning_rate", 5e-6, help="Peak learning rate (linear decay).")
    beta: float = default_for(BaseAnchorSettings, "beta", 0.1, help="DPO temperature: how far the policy may move from the frozen base.")
    loss_type: str = setting("sigmoid", "DPO loss (TRL loss_type; comma-separate several).")
    max_length: int = default_for(
        RewardModelSettings,
        "max_length",
        2048,
        help="Longest tokenized prompt + directive; a longer pair loses the middle of its longest prompt message (the transcript).",
    )
    eval_fraction: float = default_for(
        BestStepSettings, "eval_fraction", 0.1, help="Share of decision points held out to report preference accuracy."
    )
    max_per_device_batch: int = field(default=4, metadata={"cli": False})


@dataclass
class SFTSettings(TrainSettings, BestStepSettings):
    """The `sft` baseline (and optional Stage-1 starting policy): Speakers fine-tuned on replies with TRL's SFTTrainer."""

    data_path: str = default_for(
        TrainSettings,
        "data_path",
        None,
        help="Stage-1 run directory or candidates.jsonl (--sft-data candidates), or the dataset file (--sft-data dataset).",
        required=True,
    )
    sft_data: str = setting(
        "candidates",
        "candidates: the best-scored Stage-1 candidate per query (context, persona) | dataset: the dataset's own supporter turns, "
        "each written with a persona's Speaker prompt (personas in rotation).",
    )
    roster: Optional[str] = default_for(
        RosterSettings, "roster", None, help="Roster name or file for --sft-data dataset prompts; default: the dataset's roster."
    )
    learning_rate: float = default_for(TrainSettings, "learning_rate", 1e-4, help="Peak learning rate (linear decay).")
    max_length: int = default_for(
        RewardModelSettings,
        "max_length",
        1024,
        help="Longest tokenized prompt + reply; a longer example loses the middle of its prompt (the reply stays whole).",
    )
    eval_fraction: float = default_for(
        BestStepSettings, "eval_fraction", 0.1, help="Share of queries held out (with all their examples) to report the held-out loss."
    )


@dataclass
class MergeSettings:
    """Merge a LoRA adapter into its base and save a full model with its tokenizer (for vLLM or transformers)."""

    adapter: str = setting(None, "LoRA adapter folder (a trained artefact).", required=True)
    output: str = setting(None, "Folder for the merged full model.", required=True)
    base_model: Optional[str] = setting(None, "Base model (default: read from adapter_config.json / mascot_metadata.json).")
    dtype: str = setting("auto", "Weights dtype of the merged model: auto (the base's), bfloat16, float16 or float32.")
    overwrite: bool = default_for(OutputSettings, "overwrite", False, help="Replace an existing output folder.")

"""What every trainer does around TRL: open the output folder, run with resume, save, describe."""

from __future__ import annotations

import dataclasses
import logging
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mascot.settings import as_dict
from mascot.train import artefact
from mascot.train.artefact import ArtefactError, TrainingMetadata
from mascot.train.best import Selection, apply_best
from mascot.train.config import MULTI_OBJECTIVE_AGGREGATIONS, REWARD_SCALINGS, GRPOSettings, TrainSettings
from mascot.train.guard import non_finite_guard, require_measuring, require_schedule, require_steps_taken
from mascot.train.runtime import BatchPlan, TrainingSetupError, is_main_process, require_gpu_for_vllm, trainer_arguments
from mascot.train.screen import replace_default_progress

log = logging.getLogger(__name__)


@dataclass
class TrainOutcome:
    """What a trainer returns: its artefact folder and metadata (also written to disk)."""

    output_dir: Path
    metadata: TrainingMetadata
    extra: dict[str, Any] = field(default_factory=dict)


def open_output(settings: TrainSettings, default: Path) -> tuple[Path, Path | None]:
    """The output folder under the --resume / --overwrite rules, and the checkpoint to resume.
    Also seeds every RNG: the model (a LoRA adapter's random init) loads after this, and must be
    the same in every process for a run to be reproducible and a resumed run to match."""
    from transformers import set_seed

    require_schedule(settings)  # before the folder exists: a run of zero steps writes nothing
    require_measuring(settings)  # a negative --eval-steps or --patience, refused before the folder exists too
    set_seed(settings.seed)
    output = Path(settings.output_dir) if settings.output_dir else default
    if settings.resume and artefact.is_complete(output) and artefact.last_checkpoint(output) is None:
        raise ArtefactError(f"{output} is already complete: nothing to resume (pass --overwrite to train again)")
    checkpoint = artefact.prepare_output_dir(output, resume=settings.resume, overwrite=settings.overwrite)
    return output, checkpoint


def run_training(trainer, checkpoint: Path | None, selection: Selection | None = None) -> dict[str, Any]:
    """trainer.train() with resume; returns the figures worth keeping in the metadata. A run that
    ended at step 0 is an error here, before anything is saved. With a `selection`
    (`best.keep_best`), the best weights measured are in the model when it returns, the last ones
    in the output's `last/` folder, and a run that diverged after a measurement stops early."""

    trainer.add_callback(non_finite_guard(selection))
    started = time.monotonic()
    finished = _finished_checkpoint_state(trainer, checkpoint)
    if finished is not None:
        # Killed after its last checkpoint and before its final save: the checkpoint is the result.
        # transformers' loop would take one step past max_steps when resumed there.
        trainer._load_from_checkpoint(str(checkpoint))
        trainer.state = finished
        metrics, train_loss = {}, (logged_series(trainer, "loss") or [None])[-1]
        log.info("%s already holds all %d steps: saved as it is, no step taken", checkpoint.name, finished.global_step)
    else:
        progress = replace_default_progress(trainer)  # steps done, rate and time left (mascot.progress)
        try:
            result = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        finally:
            progress.close()
        metrics, train_loss = dict(result.metrics or {}), result.training_loss
    figures = {
        "global_steps": int(trainer.state.global_step),
        "train_loss": _finite(train_loss),
        "train_runtime_s": round(time.monotonic() - started, 2),
        "resumed_from": checkpoint.name if checkpoint else None,
    }
    require_steps_taken(figures, trainer.args.output_dir)
    record = apply_best(trainer, selection, Path(trainer.args.output_dir))
    if record is not None:
        figures["selection"] = record
    for key in ("train_samples_per_second", "train_steps_per_second"):
        if key in metrics:
            figures[key] = metrics[key]
    tokens = logged_series(trainer, "num_tokens")
    if tokens:  # TRL counts the tokens the model was trained on (prompt + response)
        figures["num_tokens"] = int(tokens[-1])
    return figures


def _finished_checkpoint_state(trainer, checkpoint: Path | None):
    """The checkpoint's trainer state when it already reached --max-steps, else None."""
    if checkpoint is None or trainer.args.max_steps <= 0:
        return None
    from transformers import TrainerState

    state = TrainerState.load_from_json(str(checkpoint / "trainer_state.json"))
    return state if state.global_step >= trainer.args.max_steps else None


def logged_series(trainer, key: str) -> list[float]:
    """Values of one logged metric over training (TRL logs e.g. 'reward', 'rewards/x/mean')."""
    return [float(entry[key]) for entry in trainer.state.log_history if key in entry and _finite(entry[key]) is not None]


def first_last(trainer, key: str) -> dict[str, float] | None:
    series = logged_series(trainer, key)
    if not series:
        return None
    return {"first": round(series[0], 4), "last": round(series[-1], 4), "num_logged": len(series)}


def reward_function_trends(trainer, reward_funcs) -> dict[str, dict[str, float]]:
    """First and last logged mean of each reward function, by the name TRL logs it under
    (`rewards/<name>/mean`), before weighting and aggregation."""
    from trl.trainer.utils import get_callable_name

    trends = {get_callable_name(fn): first_last(trainer, f"rewards/{get_callable_name(fn)}/mean") for fn in reward_funcs}
    return {name: trend for name, trend in trends.items() if trend is not None}


def save_model(trainer, output: Path, *, full_weights: bool = False, base_layers: int = 0) -> str:
    """Writes the adapter (or merged full weights) and the tokenizer into `output`.

    Full weights are merged from the saved adapter on the main process, so the same code works
    whatever sharded the model during training (DDP, ZeRO-3, FSDP)."""
    from peft import PeftModel

    is_peft = isinstance(trainer.model, PeftModel) or hasattr(trainer.model, "peft_config")
    if not (full_weights and is_peft):
        trainer.save_model(str(output))
        return "lora_adapter" if is_peft else "full"
    staging = output / ".adapter"
    trainer.save_model(str(staging))
    if is_main_process():
        from mascot.train.merge import merge_adapter

        merge_adapter(staging, output, overwrite_into_existing=True, base_layers=base_layers)
        shutil.rmtree(staging, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()
    return "full"


def policy_template_kwargs(settings: TrainSettings) -> dict[str, bool]:
    """What the policy's chat template is rendered with: Qwen3 templates think unless told
    otherwise (templates without the switch ignore it)."""
    return {} if getattr(settings, "thinking", False) else {"enable_thinking": False}


def finish(
    trainer,
    output: Path,
    meta: TrainingMetadata,
    settings: TrainSettings,
    plan: BatchPlan,
) -> TrainingMetadata:
    """Hyperparameters, versions and hardware into the metadata; metadata written; checkpoints gone."""
    meta.hyperparameters = {
        **as_dict(settings),
        "per_device_batch_size": plan.per_device,
        "gradient_accumulation_steps": plan.accumulation,
        "num_devices": plan.devices,
    }
    meta.library_versions = artefact.library_versions()
    meta.hardware = artefact.hardware_summary()
    versions = getattr(settings, "registry_versions", None) or {}
    meta.source_artefacts.update({f"{flag}_version": version for flag, version in versions.items()})
    if is_main_process():
        if meta.weights == "lora_adapter":
            from mascot.llm.models import record_hub_base

            record_hub_base(output, meta.base_model)  # peft wrote the folder the base loaded from
        artefact.write_metadata(output, meta)
        if not settings.keep_checkpoints:
            artefact.remove_checkpoints(output)
        register_artefact(output, meta)
    return meta


def register_artefact(output: Path, meta: TrainingMetadata) -> None:
    """The artefact as a version in the adapter registry, and its version id in its metadata."""
    from mascot.train.registration import register_trained

    meta.registered_as = register_trained(output)
    if meta.registered_as:
        artefact.write_metadata(output, meta)


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return round(number, 6) if math.isfinite(number) else None


def grpo_config(settings: GRPOSettings, output: Path, plan: BatchPlan, reward_weights: list[float]):
    """GRPOConfig shared by the Speaker and Director trainers.

    The batch counts completions: one optimizer step sees batch_size completions, i.e.
    batch_size / num_generations prompts; generation happens once per optimizer step."""
    from trl import GRPOConfig

    validate_grpo(settings)
    return GRPOConfig(
        **trainer_arguments(settings, str(output), plan),
        **vllm_arguments(settings),
        steps_per_generation=settings.steps_per_generation * plan.accumulation,
        pad_to_multiple_of=settings.prompt_bucket if settings.compiled_decode else None,
        num_generations=settings.num_generations,
        temperature=settings.temperature,
        max_completion_length=settings.max_completion_length,
        beta=settings.beta,
        reward_weights=reward_weights,
        multi_objective_aggregation=settings.multi_objective_aggregation,
        scale_rewards=settings.scale_rewards,
        log_completions=False,
        chat_template_kwargs=policy_template_kwargs(settings) or None,
    )


def vllm_arguments(settings: GRPOSettings) -> dict:
    """GRPOConfig's vLLM fields: none without --use-vllm; the colocated engine's memory share,
    sleep mode and context length in colocate mode; the `trl vllm-serve` URL in server mode."""
    if not settings.use_vllm:
        return {}
    arguments = {"use_vllm": True, "vllm_mode": settings.vllm_mode}
    if settings.vllm_mode == "server":
        if settings.trl_vllm_server_url:
            arguments["vllm_server_base_url"] = settings.trl_vllm_server_url
        return arguments
    arguments.update(vllm_gpu_memory_utilization=settings.vllm_gpu_memory_utilization, vllm_enable_sleep_mode=settings.vllm_enable_sleep_mode)
    if settings.vllm_max_model_length:
        arguments["vllm_max_model_length"] = settings.vllm_max_model_length
    return arguments


def grpo_trainer_class(trainer_class: type, settings: GRPOSettings) -> type:
    """TRL's GRPOTrainer, scoring each group's prompt once unless --no-share-prompts
    (`mascot.train.shared_prompt`)."""
    from mascot.train.shared_prompt import prompt_sharing

    shared = prompt_sharing(trainer_class)
    shared.share_prompts = settings.share_prompts
    shared.merged_generation = settings.merged_generation
    shared.compiled_decode = settings.compiled_decode
    shared.reuse_trunk = settings.reuse_frozen_trunk
    return shared


def generation_record(trainer, settings: GRPOSettings) -> dict:
    """How the policy sampled, for the artefact's metadata: merged or not (and how often), compiled."""
    stats = getattr(trainer, "merge_stats", None)
    record = stats.as_record(settings.merged_generation) if stats is not None else {"enabled": settings.merged_generation, "merged_calls": 0}
    engine = "vllm" if settings.use_vllm else "transformers"
    trunk = getattr(trainer, "frozen_trunk", None)
    record["frozen_trunk"] = trunk.as_record() if trunk else {"layers": 0, "enabled": settings.reuse_frozen_trunk and settings.share_prompts}
    return {**record, "engine": engine, "compiled_decode": settings.compiled_decode, "steps_per_generation": settings.steps_per_generation}


def validate_grpo(settings: GRPOSettings) -> None:
    """GRPO settings that cannot train, refused before anything is loaded or written."""

    if settings.num_generations < 2:
        raise TrainingSetupError("--num-generations must be at least 2 (GRPO compares completions within a group)")
    if settings.batch_size % settings.num_generations:
        raise TrainingSetupError(
            f"--batch-size {settings.batch_size} must be a multiple of --num-generations {settings.num_generations} "
            "(every step holds whole groups of completions)"
        )
    if settings.vllm_mode not in ("server", "colocate"):
        raise TrainingSetupError(f"--vllm-mode must be server or colocate, got {settings.vllm_mode!r}")
    if settings.multi_objective_aggregation not in MULTI_OBJECTIVE_AGGREGATIONS:
        raise TrainingSetupError(
            f"--multi-objective-aggregation must be {' or '.join(MULTI_OBJECTIVE_AGGREGATIONS)}, got {settings.multi_objective_aggregation!r}"
        )
    if settings.scale_rewards not in REWARD_SCALINGS:
        raise TrainingSetupError(
            f"--scale-rewards must be {', '.join(REWARD_SCALINGS[:-1])} or {REWARD_SCALINGS[-1]}, got {settings.scale_rewards!r}"
        )
    if settings.scale_rewards != "group" and settings.multi_objective_aggregation == "normalize_then_sum":
        raise TrainingSetupError(
            f"--scale-rewards {settings.scale_rewards} has no effect with --multi-objective-aggregation normalize_then_sum "
            "(each reward is divided by its group's deviation): choose sum_then_normalize to use it"
        )
    require_gpu_for_vllm(settings.use_vllm)
    validate_generation(settings)


# vLLM releases each TRL release declares it supports (trl.import_utils.is_vllm_available)
TRL_VLLM_SUPPORT = {"1.16": ("0.22.0", "0.31.0")}


def validate_generation(settings: GRPOSettings) -> None:
    """Generation settings that TRL would break on, refused in one line before a model loads."""
    from mascot.train.merged_sampling import refuse_unmergeable_launch

    if settings.steps_per_generation < 1:
        raise TrainingSetupError(f"--steps-per-generation must be at least 1, got {settings.steps_per_generation}")
    if settings.compiled_decode and settings.prompt_bucket < 1:
        raise TrainingSetupError(f"--prompt-bucket must be at least 1, got {settings.prompt_bucket}")
    if settings.compiled_decode and settings.use_vllm:
        raise TrainingSetupError("--compiled-decode applies to transformers' generation: vLLM compiles its own (drop one of the two flags)")
    if not 0 < settings.vllm_gpu_memory_utilization <= 1:
        raise TrainingSetupError(f"--vllm-gpu-memory-utilization must be in (0, 1], got {settings.vllm_gpu_memory_utilization}")
    refuse_unread_vllm_settings(settings)
    if settings.vllm_max_model_length is not None and settings.vllm_max_model_length <= settings.max_completion_length:
        raise TrainingSetupError(f"--vllm-max-model-length {settings.vllm_max_model_length} leaves no room for a prompt before "
                                 f"--max-completion-length {settings.max_completion_length}")  # fmt: skip
    refuse_unmergeable_launch(settings.merged_generation and not settings.use_vllm)
    if settings.use_vllm:
        warn_unsupported_vllm()


def refuse_unread_vllm_settings(settings: GRPOSettings) -> None:
    """A vLLM setting that the run's generation would not read (`vllm_arguments`) is one line, never
    accepted and ignored: the colocated engine's settings need --use-vllm in colocate mode, the
    `trl vllm-serve` URL needs server mode, and the mode itself needs --use-vllm."""
    defaults = {f.name: f.default for f in dataclasses.fields(settings)}
    given = {flag: getattr(settings, name) != defaults[name] for name, flag in VLLM_FLAGS.items()}
    colocate = [flag for flag in ("--vllm-gpu-memory-utilization", "--vllm-enable-sleep-mode", "--vllm-max-model-length") if given[flag]]
    if colocate and not (settings.use_vllm and settings.vllm_mode == "colocate"):
        verb = "set" if len(colocate) > 1 else "sets"
        raise TrainingSetupError(f"{' and '.join(colocate)} {verb} the colocated vLLM engine: add --use-vllm --vllm-mode colocate, or drop them")
    if given["--trl-vllm-server-url"] and not (settings.use_vllm and settings.vllm_mode == "server"):
        raise TrainingSetupError("--trl-vllm-server-url names the `trl vllm-serve` process: add --use-vllm --vllm-mode server, or drop it")
    if given["--vllm-mode"] and not settings.use_vllm:
        raise TrainingSetupError(f"--vllm-mode {settings.vllm_mode} chooses how vLLM generates: add --use-vllm, or drop it")


# The vLLM settings of GRPOSettings and their flags (`refuse_unread_vllm_settings`).
VLLM_FLAGS = {"vllm_mode": "--vllm-mode", "trl_vllm_server_url": "--trl-vllm-server-url", "vllm_gpu_memory_utilization": "--vllm-gpu-memory-utilization",
              "vllm_enable_sleep_mode": "--vllm-enable-sleep-mode", "vllm_max_model_length": "--vllm-max-model-length"}  # fmt: skip


def warn_unsupported_vllm() -> str | None:
    """A warning naming the range of vLLM releases the installed TRL supports, when the installed
    vLLM is outside it (TRL's own check says so once, deep in its import); returns the line."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.version import Version

    try:
        trl_version, vllm_version = version("trl"), version("vllm")
    except PackageNotFoundError:
        return None
    supported = TRL_VLLM_SUPPORT.get(".".join(trl_version.split(".")[:2]))
    if supported is None or Version(supported[0]) <= Version(Version(vllm_version).base_version) <= Version(supported[1]):
        return None
    line = (f"vLLM {vllm_version} is outside the releases TRL {trl_version} supports ({supported[0]} to {supported[1]}): "
            f"if generation fails, install vllm>={supported[0]},<={supported[1]} for training")  # fmt: skip
    log.warning(line)
    return line

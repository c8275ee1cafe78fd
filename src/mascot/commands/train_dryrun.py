"""`mascot train ... --dry-run` and `mascot merge-lora --dry-run`: the trainer's inputs checked the
way the trainer reads them (data, dataset, base model, reward models, rollout endpoints, output
folder), then the resolved settings printed. No model is loaded and nothing is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mascot.commands.dryrun import DryRunError, check_endpoints, check_model, check_new_output, check_path, print_settings
from mascot.llm.providers import RoleEndpoint
from mascot.settings import as_dict
from mascot.train import artefact, data
from mascot.train import config as cfg
from mascot.train.artefact import require_model_folder
from mascot.train.decision_points import load_decision_inputs
from mascot.train.director_grpo import resolve_group_reward_model_path, rollout_model
from mascot.train.director_rollouts import rollout_repetition_penalty
from mascot.train.guard import require_schedule
from mascot.train.models import adapter_base_model, is_adapter
from mascot.train.speaker_grpo import resolve_reward_model_path, speaker_prompts

# settings class -> (pair kind or None for episodes, output-dir kind)
_DATA = {
    cfg.RewardModelSettings: ("persona", "persona_reward_model"),
    cfg.GroupRewardModelSettings: ("episode", "group_reward_model"),
    cfg.SpeakerGRPOSettings: ("persona", "speaker"),
    cfg.DirectorGRPOSettings: (None, "director_grpo"),
    cfg.DirectorDPOSettings: ("directive", "director_dpo"),
}


def dry_run_training(command: str, settings: cfg.TrainSettings | cfg.MergeSettings) -> None:
    if isinstance(settings, cfg.MergeSettings):
        print_settings("merge-lora", _merge(settings))
        return

    require_schedule(settings)
    artefact.require_model_folder(settings.model_name, label="--model", task="causal_lm")
    if isinstance(settings, cfg.SFTSettings):
        from mascot.train.sft import dry_run_summary

        resolved = dry_run_summary(settings)
        resolved["model"] = f"{settings.model_name} ({check_model(settings.model_name, '--model')})"
        resolved["output_dir"] = check_new_output(Path(resolved["output_dir"]), resume=settings.resume, overwrite=settings.overwrite)
        print_settings(f"train {command}", {"resolved": resolved, "settings": as_dict(settings)})
        return
    resolved, records = _data_and_output(settings)
    if isinstance(settings, cfg.SpeakerGRPOSettings):
        resolved.update(_speaker_inputs(settings, resolved, records))
    if isinstance(settings, cfg.DirectorGRPOSettings):
        resolved.update(_director_inputs(settings, resolved["dataset"]))
    print_settings(f"train {command}", {"resolved": resolved, "settings": as_dict(settings)})


def _data_and_output(settings: cfg.TrainSettings) -> tuple[dict[str, Any], list]:
    """The data file, its records and dataset, the base model and the output folder; for the
    pairwise trainers also that a training record is left after the held-out split and --limit."""

    kind, output_kind = _DATA[type(settings)]
    data_file, records = data.load_episodes(settings.data_path) if kind is None else data.load_pairs(settings.data_path, kind)
    dataset = data.resolve_dataset(settings.dataset, data.run_settings(data_file))
    resolved: dict[str, Any] = {"data_file": data_file, "num_records": len(records), "dataset": dataset}
    if hasattr(settings, "eval_fraction") and kind is not None:
        train, held_out = data.split_by_prompt(records, settings.eval_fraction, settings.seed)
        train = data.limit_records(train, settings.limit, settings.seed)
        data.require_records_left(len(train), what=f"{kind} pairs", source=data_file, read=len(records), held_out=len(held_out))
        resolved.update(num_train_records=len(train), num_eval_records=len(held_out))
    resolved["model"] = f"{settings.model_name} ({check_model(settings.model_name, '--model')})"
    output = Path(settings.output_dir) if settings.output_dir else artefact.default_output_dir(output_kind, dataset, settings.model_name)
    resolved["output_dir"] = check_new_output(output, resume=settings.resume, overwrite=settings.overwrite)
    return resolved, records


def _speaker_inputs(settings: cfg.SpeakerGRPOSettings, resolved: dict[str, Any], pairs: list) -> dict[str, Any]:
    """Enough distinct prompts for one GRPO step, and a trained persona reward model."""

    prompts = speaker_prompts(settings, resolved["data_file"], pairs)
    resolve_reward_model_path(settings, resolved["dataset"])
    if settings.reward_model_weight != 0 and settings.reward_model_path:
        artefact.require_trained(settings.reward_model_path, role="persona_reward_model", label="--reward-model-path")
    return {"num_prompts": len(prompts)}


def _director_inputs(settings: cfg.DirectorGRPOSettings, dataset: str) -> dict[str, Any]:
    """Enough decision points for one GRPO step, a trained group reward model, the rollouts."""

    inputs = load_decision_inputs(settings)
    resolve_group_reward_model_path(settings, dataset)
    if settings.group_reward_weight != 0 and settings.group_reward_model_path:
        artefact.require_trained(settings.group_reward_model_path, role="group_reward_model", label="--group-reward-model-path")
    penalty = rollout_repetition_penalty(settings, inputs.run)
    return {"num_decision_points": len(inputs.points), **_director_rollouts(settings), "rollout_repetition_penalty": penalty}


def _director_rollouts(settings: cfg.DirectorGRPOSettings) -> dict[str, Any]:
    urls = [u.strip() for u in [settings.rollout_server_url or "", *(settings.rollout_endpoints or "").split(",")] if u.strip()]
    model = rollout_model(settings)
    if not urls:
        check_path(settings.speaker_adapter, "--speaker-adapter", kind="dir")
        if settings.speaker_adapter:
            artefact.require_model_folder(settings.speaker_adapter, label="--speaker-adapter", task="causal_lm", role="speaker")
        return {"rollout_model": f"{model} ({check_model(model, '--rollout-model')}, in-process)"}

    endpoints = {}
    for i, url in enumerate(urls):
        endpoints[f"rollout {i}"] = RoleEndpoint("rollout", model, url)
        if settings.speaker_adapter:
            endpoints[f"rollout speaker {i}"] = RoleEndpoint("speaker", settings.speaker_adapter, url)
    check_endpoints(endpoints)
    return {"rollout_model": f"{model} (served by {', '.join(urls)})", "rollout_speaker": settings.speaker_adapter or model}


def _merge(settings: cfg.MergeSettings) -> dict[str, Any]:
    check_path(settings.adapter, "--adapter", kind="dir")
    if not is_adapter(settings.adapter):
        raise DryRunError(f"--adapter {settings.adapter} holds no adapter_config.json (not a LoRA adapter)")

    require_model_folder(settings.adapter, label="--adapter")  # its weights are there too
    base = settings.base_model or adapter_base_model(settings.adapter)
    output = check_new_output(Path(settings.output), resume=False, overwrite=settings.overwrite, label="--output")
    return {"resolved": {"base_model": f"{base} ({check_model(base, 'base model')})", "output": output}, "settings": as_dict(settings)}

"""`mascot train ... --dry-run` and `mascot merge-lora --dry-run`: the trainer's inputs checked the
way the trainer reads them (data, dataset, base model, reward models, rollout endpoints, output
folder), then the resolved settings printed. No model is loaded and nothing is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mascot.cli.dryrun import DryRunError, check_model, check_new_output, check_path, print_settings
from mascot.train import config as cfg

# settings class -> (pair kind or None for episodes, output-dir kind)
_DATA = {
    cfg.RewardModelSettings: ("persona", "persona_reward_model"),
    cfg.GroupRewardModelSettings: ("episode", "group_reward_model"),
    cfg.SpeakerGRPOSettings: ("persona", "speaker"),
    cfg.DirectorGRPOSettings: (None, "director_grpo"),
    cfg.DirectorDPOSettings: ("directive", "director_dpo"),
}


def dry_run_training(command: str, settings: Any) -> None:
    if isinstance(settings, cfg.MergeSettings):
        print_settings("merge-lora", _merge(settings))
        return
    from mascot.train import artefact, data

    if isinstance(settings, cfg.SFTSettings):
        from mascot.train.sft import dry_run_summary

        resolved = dry_run_summary(settings)
        resolved["model"] = f"{settings.model_name} ({check_model(settings.model_name, '--model')})"
        resolved["output_dir"] = check_new_output(Path(resolved["output_dir"]), resume=settings.resume, overwrite=settings.overwrite)
        print_settings(f"train {command}", {"resolved": resolved, "settings": cfg.as_dict(settings)})
        return
    kind, output_kind = _DATA[type(settings)]
    data_file, records = data.load_episodes(settings.data_path) if kind is None else data.load_pairs(settings.data_path, kind)
    dataset = data.resolve_dataset(settings.dataset, data.run_settings(data_file))
    resolved: dict[str, Any] = {"data_file": data_file, "num_records": len(records), "dataset": dataset}
    resolved["model"] = f"{settings.model_name} ({check_model(settings.model_name, '--model')})"
    output = Path(settings.output_dir) if settings.output_dir else artefact.default_output_dir(output_kind, dataset, settings.model_name)
    resolved["output_dir"] = check_new_output(output, resume=settings.resume, overwrite=settings.overwrite)
    if isinstance(settings, cfg.GRPOSettings):
        from mascot.train.common import validate_grpo

        validate_grpo(settings)
    if isinstance(settings, cfg.SpeakerGRPOSettings):
        from mascot.train.speaker_grpo import resolve_reward_model_path

        resolve_reward_model_path(settings, dataset)
        check_path(settings.reward_model_path, "--reward-model-path", kind="dir")
    if isinstance(settings, cfg.DirectorGRPOSettings):
        resolved.update(_director_rollouts(settings, dataset))
    print_settings(f"train {command}", {"resolved": resolved, "settings": cfg.as_dict(settings)})


def _director_rollouts(settings: cfg.DirectorGRPOSettings, dataset: str) -> dict[str, Any]:
    from mascot.llm.providers import RoleEndpoint
    from mascot.train.director_grpo import resolve_group_reward_model_path, rollout_model

    resolve_group_reward_model_path(settings, dataset)
    check_path(settings.group_reward_model_path, "--group-reward-model-path", kind="dir")
    urls = [u.strip() for u in [settings.rollout_server_url or "", *(settings.rollout_endpoints or "").split(",")] if u.strip()]
    model = rollout_model(settings)
    if not urls:
        check_path(settings.speaker_adapter, "--speaker-adapter", kind="dir")
        return {"rollout_model": f"{model} ({check_model(model, '--rollout-model')}, in-process)"}
    from mascot.cli.dryrun import check_endpoints

    endpoints = {}
    for i, url in enumerate(urls):
        endpoints[f"rollout {i}"] = RoleEndpoint("rollout", model, url)
        if settings.speaker_adapter:
            endpoints[f"rollout speaker {i}"] = RoleEndpoint("speaker", settings.speaker_adapter, url)
    check_endpoints(endpoints)
    return {"rollout_model": f"{model} (served by {', '.join(urls)})", "rollout_speaker": settings.speaker_adapter or model}


def _merge(settings: cfg.MergeSettings) -> dict[str, Any]:
    from mascot.train.models import adapter_base_model, is_adapter

    check_path(settings.adapter, "--adapter", kind="dir")
    if not is_adapter(settings.adapter):
        raise DryRunError(f"--adapter {settings.adapter} holds no adapter_config.json (not a LoRA adapter)")
    base = settings.base_model or adapter_base_model(settings.adapter)
    output = check_new_output(Path(settings.output), resume=False, overwrite=settings.overwrite, label="--output")
    return {"resolved": {"base_model": f"{base} ({check_model(base, 'base model')})", "output": output}, "settings": cfg.as_dict(settings)}

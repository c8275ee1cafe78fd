"""The hardware a run finds, and the Trainer arguments that follow from it.

- No CUDA: CPU settings (use_cpu, fp32), so the same command runs on a laptop and on a GPU node.
  Gradient checkpointing is on everywhere by default (`--no-gradient-checkpointing` turns it off).
- Under `accelerate launch` (DDP, DeepSpeed, FSDP) WORLD_SIZE processes share the effective batch;
  the per-device batch and the gradient accumulation are derived from it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from functools import lru_cache

from mascot.errors import MascotError
from mascot.train.config import TrainSettings
from mascot.train.screen import checkpointing_argument, silence_library_warnings

log = logging.getLogger(__name__)


class TrainingSetupError(MascotError, ValueError):
    """Settings that cannot train (a batch that does not split, vLLM without a GPU...)."""


def world_size() -> int:
    return max(1, int(os.environ.get("WORLD_SIZE", "1")))


@lru_cache(maxsize=1)
def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


@dataclass(frozen=True)
class BatchPlan:
    per_device: int
    accumulation: int
    devices: int

    @property
    def effective(self) -> int:
        return self.per_device * self.accumulation * self.devices


def derive_batch(batch_size: int, devices: int, cap: int, per_device: int | None = None) -> BatchPlan:
    """Splits the effective batch into per-device batch x accumulation x devices, exactly.

    Without an explicit per-device batch, takes the largest divisor of (batch / devices) that is at
    most `cap`, so memory stays bounded and the effective batch is what was asked for."""
    if batch_size < 1 or devices < 1:
        raise TrainingSetupError(f"batch size {batch_size} on {devices} device(s) cannot train")
    if batch_size % devices:
        raise TrainingSetupError(f"batch size {batch_size} does not split over {devices} devices: use a multiple of {devices}")
    share = batch_size // devices
    if per_device is None:
        per_device = max(d for d in range(1, min(cap, share) + 1) if share % d == 0)
    elif share % per_device:
        raise TrainingSetupError(f"per-device batch {per_device} does not divide the batch share {share} (batch {batch_size} over {devices} devices)")
    return BatchPlan(per_device=per_device, accumulation=share // per_device, devices=devices)


def report_to() -> str:
    """Weights & Biases only when WANDB_PROJECT is set; nothing otherwise."""
    return "wandb" if os.environ.get("WANDB_PROJECT") else "none"


def trainer_arguments(settings: TrainSettings, output_dir: str, plan: BatchPlan) -> dict:
    """Keyword arguments every TRL config here shares (every trainer builds its config from them,
    so the library warnings that tell a user nothing are silenced here too)."""

    silence_library_warnings()
    on_gpu = cuda_available()
    return {
        "output_dir": output_dir,
        "seed": settings.seed,
        "data_seed": settings.seed,
        "num_train_epochs": settings.num_train_epochs,
        "max_steps": settings.max_steps,
        "learning_rate": settings.learning_rate,
        "lr_scheduler_type": "linear",
        "per_device_train_batch_size": plan.per_device,
        "per_device_eval_batch_size": plan.per_device,
        "gradient_accumulation_steps": plan.accumulation,
        "logging_steps": settings.logging_steps,
        "save_strategy": "steps",
        "save_steps": settings.save_steps,
        "save_total_limit": 2,
        "report_to": report_to(),
        "use_cpu": not on_gpu,
        "bf16": on_gpu,
        # On every device: long sequences on a CPU run out of memory without it just as on a GPU.
        checkpointing_argument(): settings.gradient_checkpointing,
        # LoRA dropout 0.1 is part of the recipe: keep dropout layers active.
        "disable_dropout": False,
        "ddp_find_unused_parameters": False,
        "dataloader_num_workers": 0,
        "disable_tqdm": not is_main_process(),
    }


def model_dtype():
    import torch

    return torch.bfloat16 if cuda_available() else torch.float32


def require_gpu_for_vllm(use_vllm: bool) -> None:
    if use_vllm and not cuda_available():
        raise TrainingSetupError("--use-vllm needs a CUDA GPU; without one, drop the flag to generate with transformers")

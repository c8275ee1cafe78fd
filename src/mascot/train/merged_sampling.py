"""The policy samples as one merged model: each LoRA folded into its base weight while it generates.

Unmerged, every decode step of a LoRA policy runs the base projection and then, beside it, dropout,
A, B, the scale and the add, on every adapted layer: many small operations per token, which is what
bounds a GRPO step on a GPU (per-token latency, not memory bandwidth). Merged, each adapted layer is
one matrix product again.

PEFT's merge adds the delta into the base weight and its unmerge subtracts it again; in bf16 the
two roundings do not cancel, and the base weights drift a little with every generation. Here the
base weight is never written: the merged weight is a new tensor put in the parameter's place for the
duration of generation, and the original tensor is put back afterwards, so the base weights are
bit-identical to what was loaded however many times the policy samples. The merged copies of the
adapted projections are the memory this costs while generating (about 3 GiB for Qwen3-8B's
q/k/v/o in bf16).

Only plain LoRA on linear layers is folded (no DoRA or other variant, no LoRA bias, no quantised
base): a policy with any other layer samples unmerged, and the run records it. Sharded parameters
(ZeRO-3, FSDP) cannot be swapped in place: those runs are refused up front
(`refuse_unmergeable_launch`) unless --no-merged-generation.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass
class GenerationStats:
    """What the artefact's metadata records about how the policy sampled: merged or not, and how fast."""

    merged_calls: int = 0  # generations run with every adapter folded in
    unmerged_calls: int = 0  # generations run with the adapters beside the base (setting off, or a layer that cannot fold)
    folded_layers: int = 0  # adapted layers folded in the last merged generation
    reason_unmerged: str | None = None
    generation_s: float = 0.0  # wall time of every generation (prefill and decode)
    decode_positions: int = 0  # tokens of the longest completion, summed over generations: the sequential decode steps
    completion_tokens: int = 0  # every completion's tokens

    def timed(self, seconds: float, completions: list[list[int]]) -> None:
        self.generation_s += seconds
        self.decode_positions += max((len(c) for c in completions), default=0)
        self.completion_tokens += sum(len(c) for c in completions)

    def as_record(self, enabled: bool) -> dict:
        record = {"enabled": enabled, "merged_calls": self.merged_calls, "unmerged_calls": self.unmerged_calls, "folded_layers": self.folded_layers,
                  "generation_s": round(self.generation_s, 3), "completion_tokens": self.completion_tokens}  # fmt: skip
        if self.decode_positions:  # per sequential position, prefill included: the latency a step is bound by
            record["ms_per_decode_step"] = round(1000 * self.generation_s / self.decode_positions, 2)
        if self.reason_unmerged:
            record["reason_unmerged"] = self.reason_unmerged
        return record


def trainer_stats(trainer) -> GenerationStats:
    """The trainer's one GenerationStats (its own sampling and, with --rollout-director policy, the
    rollouts' later rounds count together), made at first use."""
    if getattr(trainer, "merge_stats", None) is None:
        trainer.merge_stats = GenerationStats()
    return trainer.merge_stats


def sharded_launch() -> str | None:
    """The sharding the launcher set up for this process (accelerate's environment), or None."""
    if os.environ.get("ACCELERATE_USE_FSDP", "").lower() in ("1", "true"):
        return "FSDP"
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() in ("1", "true") and os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") == "3":
        return "DeepSpeed ZeRO-3"
    return None


def refuse_unmergeable_launch(enabled: bool) -> None:
    """Merged generation swaps whole weights in place, which sharded parameters do not allow."""
    from mascot.train.runtime import TrainingSetupError

    sharding = sharded_launch() if enabled else None
    if sharding:
        raise TrainingSetupError(
            f"merged generation cannot hold under {sharding} (each process holds only a shard of every weight): "
            "pass --no-merged-generation to sample with the adapter beside the base"
        )


def lora_layers(model) -> list:
    """Every module that carries a LoRA adapter (PEFT's LoraLayer)."""
    from peft.tuners.lora import LoraLayer

    return [module for module in model.modules() if isinstance(module, LoraLayer)]


def unfoldable(layer) -> str | None:
    """Why this adapted layer cannot be folded here, or None when it can."""
    from peft.tuners.lora.layer import Linear

    if type(layer) is not Linear:
        return f"{type(layer).__name__} layers are not folded (only plain LoRA Linear)"
    active = [name for name in layer.active_adapters if name in layer.lora_A]
    if any(name in getattr(layer, "lora_variant", {}) for name in active):
        return "an adapter with a LoRA variant (DoRA) is not folded"
    if any(getattr(layer, "lora_bias", {}).get(name) for name in active):
        return "an adapter with a LoRA bias is not folded"
    if layer.merged or layer.disable_adapters:
        return "an adapter already merged or disabled is left as it is"
    return None


def folded_weight(layer):
    """base weight + every active adapter's delta, summed in float32 and rounded once to the
    base's dtype (a new tensor: the base weight is not touched)."""
    import torch

    base = layer.get_base_layer().weight
    total = base.detach().to(torch.float32)
    for name in layer.active_adapters:
        if name in layer.lora_A:
            total = total + layer.get_delta_weight(name).to(torch.float32)
    return total.to(base.dtype)


@contextmanager
def merged_adapters(model, stats: GenerationStats | None = None) -> Iterator[bool]:
    """Within the block, `model` computes with every adapter folded into its base weights; afterwards
    every base weight is the very tensor it was before. Yields whether the adapters were folded (a
    model without LoRA, or with a layer that cannot fold, runs as it is)."""
    import torch

    stats = stats if stats is not None else GenerationStats()
    layers = lora_layers(model)
    reason = next((why for why in map(unfoldable, layers) if why), None) if layers else "no LoRA adapter"
    if reason:
        stats.unmerged_calls += 1
        if stats.reason_unmerged is None and layers:
            log.warning("the policy samples unmerged: %s", reason)
        stats.reason_unmerged = stats.reason_unmerged or reason
        yield False
        return
    swapped = []
    try:
        with torch.no_grad():
            for layer in layers:
                weight = layer.get_base_layer().weight
                merged = folded_weight(layer)
                swapped.append((layer, weight, weight.data))
                weight.data = merged
                # PEFT's forward runs the base layer alone for a merged layer
                layer.merged_adapters = [name for name in layer.active_adapters if name in layer.lora_A]
        stats.merged_calls += 1
        stats.folded_layers = len(swapped)
        yield True
    finally:
        for layer, weight, original in reversed(swapped):
            weight.data = original
            layer.merged_adapters = []

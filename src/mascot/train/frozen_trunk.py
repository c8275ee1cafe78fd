"""The layers below the lowest adapter, run once per prompt in a step instead of once per pass.

With `--lora-last-layers N` (the Director's default in the presets) the first layers of the policy
carry no adapter and nothing in them trains. Within one GRPO step the same prompts then go through
those layers twice: in the reference pass (adapter off) and in the policy's own pass (adapter on),
and a layer without an adapter computes the same keys, values and output either way. Here the first
of those passes records, for each distinct prompt, every such layer's keys and values and the last
one's output; a later pass over the same prompts replays them in place of the layers (each layer's
keys and values go into the pass's cache, the last one hands on its output) and computes only the
adapted layers. On the learning preset's Director (10 adapted of 30 layers, 700-token prompts) this
is two thirds of the policy pass over its prompts.

It holds only where the replayed numbers are the ones the layers would compute: no trainable
parameter and no LoRA module at or below the trunk (embeddings included), no dropout there, and the
whole trunk on one process. The record lives for one generation batch (`forget`), so it never
outlives the prompts it was made from.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

log = logging.getLogger(__name__)


def decoder_layers(model) -> torch.nn.ModuleList | None:
    """The decoder's layer list of a causal LM (through PEFT and DDP wrappers), or None."""
    inner = getattr(model, "module", model)
    if hasattr(inner, "get_base_model"):
        inner = inner.get_base_model()
    decoder = inner.get_decoder() if hasattr(inner, "get_decoder") else getattr(inner, "model", None)
    layers = getattr(decoder, "layers", None)
    return layers if isinstance(layers, torch.nn.ModuleList) else None


def _frozen(module: torch.nn.Module) -> bool:
    """Nothing in it trains, no adapter in it (which disabling would change), no active dropout."""
    for name, parameter in module.named_parameters():
        if parameter.requires_grad or "lora_" in name:
            return False
    return not any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in module.modules())


def trunk_depth(model) -> int:
    """How many leading decoder layers form a frozen trunk (0 where none can be replayed): every
    parameter before them (the embeddings) and in them frozen and adapter-free, no attention dropout."""
    layers = decoder_layers(model)
    if layers is None or len(layers) < 2:
        return 0
    inner = getattr(model, "module", model)
    config = getattr(inner, "config", None)
    if getattr(config, "attention_dropout", 0.0) or getattr(config, "hidden_dropout", 0.0):
        return 0
    embeddings = inner.get_input_embeddings() if hasattr(inner, "get_input_embeddings") else None
    if embeddings is not None and not _frozen(embeddings):
        return 0
    depth = 0
    while depth < len(layers) - 1 and _frozen(layers[depth]):
        depth += 1
    return depth


@dataclass
class _Prompt:
    output: torch.Tensor  # the trunk's last layer's output over the prompt's columns: (columns, hidden)
    keys: list[torch.Tensor]  # per trunk layer: (kv heads, columns, head dim)
    values: list[torch.Tensor]


@dataclass
class FrozenTrunk:
    """Records and replays the trunk of one model for the prompts of the current generation batch."""

    layers: torch.nn.ModuleList
    depth: int
    prompts: dict[tuple, _Prompt] = field(default_factory=dict)
    recorded: int = 0  # prompt passes that ran the trunk and kept it
    replayed: int = 0  # prompt passes that replayed it

    @classmethod
    def of(cls, model) -> FrozenTrunk | None:
        depth = trunk_depth(model)
        return cls(decoder_layers(model), depth) if depth else None

    def forget(self) -> None:
        self.prompts.clear()

    @contextmanager
    def pass_over(self, keys: list[tuple]):
        """Around a prompt pass (`use_cache=True`) over the rows `keys` name: replays the trunk when
        every row was recorded, otherwise runs it and records it. Yields a function to call with the
        pass's cache once the pass is done (it reads the trunk's keys and values from it)."""
        if not keys:  # no rows: nothing to run or record
            yield lambda cache: None
            return
        if all(key in self.prompts for key in keys):
            with self._replaying(keys):
                yield lambda cache: None
            self.replayed += 1
            return
        captured: list[torch.Tensor] = []
        handle = self.layers[self.depth - 1].register_forward_hook(lambda _m, _a, output: captured.append(output))
        try:
            yield lambda cache: self._record(keys, captured, cache)
        finally:
            handle.remove()

    def _record(self, keys: list[tuple], captured: list[torch.Tensor], cache) -> None:
        if len(captured) != 1 or not hasattr(cache, "layers"):
            return
        output = captured[0].detach()
        kept = [(layer.keys.detach(), layer.values.detach()) for layer in cache.layers[: self.depth]]
        for row, key in enumerate(keys):
            self.prompts[key] = _Prompt(output[row], [k[row] for k, _ in kept], [v[row] for _, v in kept])
        self.recorded += 1

    @contextmanager
    def _replaying(self, keys: list[tuple]):
        rows = [self.prompts[key] for key in keys]
        last = self.depth - 1

        def replay(index: int):
            keys_in = torch.stack([p.keys[index] for p in rows])
            values_in = torch.stack([p.values[index] for p in rows])
            output = torch.stack([p.output for p in rows]) if index == last else None
            layer_idx = getattr(getattr(self.layers[index], "self_attn", None), "layer_idx", index)

            def forward(hidden_states, *args, cache=None, past_key_values=None, **kwargs):
                target = cache if cache is not None else past_key_values
                if target is not None:
                    target.update(keys_in, values_in, layer_idx)
                return output if output is not None else hidden_states

            return forward

        for index in range(self.depth):
            self.layers[index].forward = replay(index)
        try:
            yield
        finally:
            for index in range(self.depth):
                del self.layers[index].forward  # the class's forward again

    def as_record(self) -> dict:
        return {"enabled": True, "layers": self.depth, "recorded_passes": self.recorded, "replayed_passes": self.replayed}

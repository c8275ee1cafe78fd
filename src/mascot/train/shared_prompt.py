"""GRPO that runs each prompt once per group, not once per completion.

GRPO scores every completion by a forward pass over prompt and completion together, and a group's
`num_generations` completions share one prompt. With the short completions of this project (a
directive of 10-30 tokens after a 500-token Director prompt, a 40-token reply after a 300-token
Speaker prompt) nearly all of that work is the same prompt again. The keys and values of a prompt do
not depend on what follows it (attention is causal), so here the prompt runs once per distinct row,
its cache is given to each of its completions, and only the completions (with the prompt's last
token, whose output predicts the first completion token) run per row. The log-probabilities and
their gradients are those of the whole-sequence pass up to float rounding: the prompt's activations
now receive the gradients of all its completions at once, as their sum, which is what the separate
passes added up.

It applies where it can hold: text-only batches, no gradient checkpointing (which drops the cache),
and no sharded parameters (ZeRO-3, FSDP); elsewhere TRL's own pass runs. `--no-share-prompts`
turns it off. With LoRA dropout on, a group's completions now see one dropout draw on their prompt
instead of one each: both are unbiased.

With --lora-last-layers, the layers below the adapters run once per prompt in a generation batch:
the reference pass records their keys, values and output, the policy's pass replays them
(`mascot.train.frozen_trunk`; --no-reuse-frozen-trunk turns it off).

Sampling (TRL's transformers path) runs in eval mode, not with dropout on, with the adapters folded
into the base weights (`mascot.train.merged_sampling`, unless --no-merged-generation), from a cache
in which each shared prompt beginning ran once (or, with --compiled-decode, a static cache and a
compiled forward), and, where the trainer names a choice slot (the Director's roster names after its
`agent:`), with the completion's opening held to the slot's choices.
"""

from __future__ import annotations

import time
from typing import Any

import torch

# Multimodal inputs TRL may pass: their presence sends a batch down TRL's own path.
_MULTIMODAL = ("pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask", "spatial_shapes", "num_tiles", "image_sizes",
               "token_type_ids", "mm_token_type_ids", "image_position_ids")  # fmt: skip


def distinct_rows(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[list[int], torch.Tensor]:
    """The first row of each distinct (prompt, mask) and, per row, the index of its distinct row."""
    firsts, index, _ = _distinct(prompt_ids, prompt_mask)
    return firsts, index


def _distinct(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[list[int], torch.Tensor, list[tuple]]:
    """`distinct_rows`, and each distinct row's (ids, mask) key."""
    seen: dict[tuple, int] = {}
    index = []
    firsts: list[int] = []
    for row, (ids, mask) in enumerate(zip(prompt_ids.tolist(), prompt_mask.tolist(), strict=True)):
        key = (tuple(ids), tuple(mask))
        if key not in seen:
            seen[key] = len(firsts)
            firsts.append(row)
        index.append(seen[key])
    return firsts, torch.tensor(index, device=prompt_ids.device), list(seen)


def _cache_of(output) -> Any:
    return getattr(output, "cache", None) or output.past_key_values


def _expand(cache, index: torch.Tensor) -> None:
    """Each row's copy of its distinct prompt's keys and values (indexing keeps the graph)."""
    for layer in cache.layers:
        layer.keys = layer.keys.index_select(0, index)
        layer.values = layer.values.index_select(0, index)


def shared_prompt_logps(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int, *, autocast, cache_keyword: str,
                        trunk=None):  # fmt: skip
    """The fused head's output for the last `logits_to_keep` tokens of each row (its completion),
    each distinct prompt run once. Positions follow the columns, as in the whole-sequence pass.
    With `trunk` (a `frozen_trunk.FrozenTrunk`), the layers below the adapters run once per prompt
    in a generation batch: recorded by the first pass over it, replayed by the later ones."""
    from contextlib import nullcontext

    split = input_ids.size(1) - logits_to_keep  # the prompt: every column before the completion
    firsts, index, keys = _distinct(input_ids[:, :split], attention_mask[:, :split])
    head = torch.tensor(firsts, device=input_ids.device)
    over_trunk = trunk.pass_over(keys) if trunk is not None else nullcontext(lambda cache: None)
    with autocast(), over_trunk as keep:  # the output layer at one position only: the cache is what is wanted
        prompt = model(input_ids=input_ids[head, : split - 1], attention_mask=attention_mask[head, : split - 1], use_cache=True, logits_to_keep=1)
    cache = _cache_of(prompt)
    keep(cache)
    _expand(cache, index)
    tail = input_ids[:, split - 1 :]  # the prompt's last token, then the completion (the head scores what follows each position)
    labels = tail.masked_fill(attention_mask[:, split - 1 :] == 0, -100)
    with autocast():
        return model(input_ids=tail, attention_mask=attention_mask, labels=labels, fused_lm_head=True, **{cache_keyword: cache})


def unsharded(trainer) -> bool:
    """Parameters whole on this process (no ZeRO-3 or FSDP shards to gather)."""
    plugin = trainer.accelerator.state
    return getattr(plugin, "deepspeed_plugin", None) is None and getattr(plugin, "fsdp_plugin", None) is None


def sharing_applies(trainer, kwargs: dict) -> bool:
    """Text only, a cache the forward can keep (no gradient checkpointing), unsharded parameters."""
    if any(kwargs.get(name) is not None for name in _MULTIMODAL) or kwargs.get("compute_aux_loss"):
        return False
    return not trainer.args.gradient_checkpointing and unsharded(trainer)


def _policy_generate(model, generate, pad_id: int, *, constraint=None, share: bool = True, merge=None, compiled: bool = False):
    """`generate` as the policy samples: in eval mode (the policy being optimised, not a
    dropout-perturbed copy of it); with its adapters folded into the base weights when `merge` (a
    GenerationStats) is given (`mascot.train.merged_sampling`: the base weights come back bit
    for bit); starting (`share`) from a cache in which each shared prompt beginning ran once;
    `constraint(rows, width)`, when given, makes the logits processor a completion's first tokens
    are held to; `compiled`: a static cache and a compiled forward (no shared cache then: the static
    cache is allocated by generate itself)."""
    from contextlib import nullcontext
    from types import SimpleNamespace

    from transformers import LogitsProcessorList

    from mascot.llm.local_decoding import compiled as compiled_config
    from mascot.llm.shared_prefix import cache_keyword, shared_prompt_cache
    from mascot.train.merged_sampling import merged_adapters

    def sampling(*args, input_ids=None, attention_mask=None, **kwargs):
        was_training = model.training
        model.eval()
        try:
            with merged_adapters(model, merge) if merge is not None else nullcontext():
                rows = [ids[mask.bool()].tolist() for ids, mask in zip(input_ids, attention_mask, strict=True)]
                loaded = SimpleNamespace(net=model, pad_id=pad_id, device=input_ids.device)
                cache = shared_prompt_cache(loaded, rows, input_ids.size(1)) if share and not compiled else None
                extra = {cache_keyword(): cache} if cache is not None else {}
                if constraint is not None:
                    extra["logits_processor"] = LogitsProcessorList(
                        [*(kwargs.pop("logits_processor", None) or []), constraint(len(rows), input_ids.size(1))]
                    )
                if compiled and kwargs.get("generation_config") is not None:
                    kwargs["generation_config"] = compiled_config(kwargs["generation_config"])
                return generate(*args, input_ids=input_ids, attention_mask=attention_mask, **extra, **kwargs)
        finally:
            model.train(was_training)

    return sampling


def choice_constraint(tokenizer, slot):
    """A `constraint` for `_policy_generate`: every row's completion opens with one of the slot's
    choices (a roster name after the Director's `agent:`), as the in-process Director and a server's
    structured outputs hold it when it runs, so that training samples what it will be asked for."""
    from mascot.llm.local_decoding import ChoiceConstraint

    return lambda rows, width: ChoiceConstraint(tokenizer, [slot] * rows, width)


def grouped_shuffle(batch: dict) -> dict:
    """TRL's shuffle of a generation batch before it is cut into micro-batches, by whole groups: the
    groups (rows of one prompt) come in a random order and each group's rows stay together, so a
    micro-batch holds as few distinct prompts as it can and the shared pass runs each of them once
    (shuffled row by row, a micro-batch of 8 rows from groups of 4 held up to 4 prompts instead of 2,
    and its forward and backward passes cost up to twice as much). The loss is the same: TRL's
    token-level losses divide every micro-batch by the whole generation batch's token count, and an
    optimizer step accumulates all the micro-batches of its generation."""
    if batch.get("prompt_ids") is None:
        return _permuted(batch, torch.randperm(len(next(v for v in batch.values() if v is not None))))
    _, group = distinct_rows(batch["prompt_ids"], batch["prompt_mask"])
    order = torch.randperm(int(group.max()) + 1)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel())
    permutation = torch.argsort(rank[group.cpu()] * group.numel() + torch.arange(group.numel()))
    return _permuted(batch, permutation)


def _permuted(batch: dict, permutation: torch.Tensor) -> dict:
    """Every sequence of `batch` reordered by `permutation` (scalars and None kept), as TRL's shuffle does."""

    def permute(value):
        if value is None or (isinstance(value, torch.Tensor) and value.ndim == 0):
            return value
        if isinstance(value, torch.Tensor):
            return value[permutation.to(value.device)]
        return [value[i] for i in permutation.tolist()]

    return {key: permute(value) for key, value in batch.items()}


def policy_trunk(trainer, model):
    """The trainer's FrozenTrunk for a scoring pass over `model` when that is the policy's own model
    (its adapter on or off) and the policy has a trunk; made on the first call."""
    if not trainer.reuse_trunk:
        return None
    from mascot.train.frozen_trunk import FrozenTrunk, decoder_layers

    if trainer.frozen_trunk is None:
        trainer.frozen_trunk = FrozenTrunk.of(trainer.accelerator.unwrap_model(trainer.model)) or False
    if not trainer.frozen_trunk:
        return None
    return trainer.frozen_trunk if decoder_layers(model) is trainer.frozen_trunk.layers else None


def prompt_sharing(trainer_class: type) -> type:
    """`trainer_class` (TRL's GRPOTrainer) with the per-token log-probabilities computed as above
    over micro-batches of whole prompt groups, and its own sampling (transformers' generate) in eval
    mode with the adapters folded in, from a shared-prompt cache (or compiled), timed."""

    class PromptSharingGRPOTrainer(trainer_class):
        share_prompts = True
        choice_slot = None  # a ChoiceSlot every completion opens with (the Director's name), or None
        merged_generation = True  # sample with the adapters folded in (mascot.train.merged_sampling)
        compiled_decode = False  # sample with a static cache and a compiled forward
        merge_stats = None  # a GenerationStats per trainer (merged_sampling.trainer_stats)
        reuse_trunk = True  # the layers below the adapters once per prompt in a generation batch (mascot.train.frozen_trunk)
        frozen_trunk = None  # its FrozenTrunk, made on the first shared pass (False: the model has none)

        def _generate_and_score_completions(self, inputs):
            if self.frozen_trunk:
                self.frozen_trunk.forget()  # a new generation batch: new prompts
            return super()._generate_and_score_completions(inputs)

        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs):
            plain = not (self.use_vllm or self.use_transformers_continuous_batching or images or multimodal_fields)
            if not (plain and unsharded(self)):
                return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs)
            from mascot.train.merged_sampling import trainer_stats

            stats = trainer_stats(self)
            model = self.accelerator.unwrap_model(self.model_wrapped)
            original = model.generate
            constraint = choice_constraint(self._tokenizer, self.choice_slot) if self.choice_slot is not None else None
            static = self.compiled_decode or bool(self.args.cache_implementation)
            model.generate = _policy_generate(model, original, self._tokenizer.pad_token_id, constraint=constraint, share=self.share_prompts and not static,
                                              merge=stats if self.merged_generation else None, compiled=self.compiled_decode)  # fmt: skip
            started = time.perf_counter()
            try:
                completions, logprobs = super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs)
            finally:
                del model.generate  # the class's generate again
            stats.timed(time.perf_counter() - started, completions)
            return completions, logprobs

        def _prepare_inputs(self, generation_batch):
            """TRL's, with the generation batch shuffled by whole groups (`grouped_shuffle`) when the
            shared pass runs: TRL calls its module's `shuffle_sequence_dict` there, replaced for the call."""
            import trl.trainer.grpo_trainer as trl_grpo

            applies = self.share_prompts and self.model.training and self.args.steps_per_generation > 1
            if not (applies and hasattr(trl_grpo, "shuffle_sequence_dict")):  # a TRL that shuffles elsewhere keeps its own
                return super()._prepare_inputs(generation_batch)

            row_shuffle = trl_grpo.shuffle_sequence_dict
            trl_grpo.shuffle_sequence_dict = grouped_shuffle
            try:
                return super()._prepare_inputs(generation_batch)
            finally:
                trl_grpo.shuffle_sequence_dict = row_shuffle

        def _get_per_token_logps_and_entropies(
            self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False, **kwargs
        ):
            if not (self.share_prompts and sharing_applies(self, kwargs)) or input_ids.size(1) - logits_to_keep < 2:
                return super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size, compute_entropy=compute_entropy, **kwargs
                )
            from mascot.llm.shared_prefix import forward_cache_keyword

            batch_size = batch_size or input_ids.size(0)
            logps, entropies = [], []
            for start in range(0, input_ids.size(0), batch_size):
                rows = slice(start, start + batch_size)
                out = shared_prompt_logps(model, input_ids[rows], attention_mask[rows], logits_to_keep, autocast=self.accelerator.autocast,
                                          cache_keyword=forward_cache_keyword(model), trunk=policy_trunk(self, model))  # fmt: skip
                logps.append(out.log_probs[:, -logits_to_keep:])
                if compute_entropy:
                    entropies.append(out.entropy[:, -logits_to_keep:])
            return torch.cat(logps, dim=0), (torch.cat(entropies, dim=0) if compute_entropy else None), None

    PromptSharingGRPOTrainer.__name__ = trainer_class.__name__  # TRL names its model card and tags after it
    return PromptSharingGRPOTrainer

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

Sampling (TRL's transformers path) runs in eval mode, not with dropout on, from a cache in which
each shared prompt beginning ran once, and, where the trainer names a choice slot (the Director's
roster names after its `agent:`), with the completion's opening held to the slot's choices.
"""

from __future__ import annotations

from typing import Any

import torch

# Multimodal inputs TRL may pass: their presence sends a batch down TRL's own path.
_MULTIMODAL = ("pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask", "spatial_shapes", "num_tiles", "image_sizes",
               "token_type_ids", "mm_token_type_ids", "image_position_ids")  # fmt: skip


def distinct_rows(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[list[int], torch.Tensor]:
    """The first row of each distinct (prompt, mask) and, per row, the index of its distinct row."""
    firsts: list[int] = []
    seen: dict[tuple, int] = {}
    index = []
    for row, (ids, mask) in enumerate(zip(prompt_ids.tolist(), prompt_mask.tolist(), strict=True)):
        key = (tuple(ids), tuple(mask))
        if key not in seen:
            seen[key] = len(firsts)
            firsts.append(row)
        index.append(seen[key])
    return firsts, torch.tensor(index, device=prompt_ids.device)


def _cache_of(output) -> Any:
    return getattr(output, "cache", None) or output.past_key_values


def _expand(cache, index: torch.Tensor) -> None:
    """Each row's copy of its distinct prompt's keys and values (indexing keeps the graph)."""
    for layer in cache.layers:
        layer.keys = layer.keys.index_select(0, index)
        layer.values = layer.values.index_select(0, index)


def shared_prompt_logps(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int, *, autocast, cache_keyword: str):
    """The fused head's output for the last `logits_to_keep` tokens of each row (its completion),
    each distinct prompt run once. Positions follow the columns, as in the whole-sequence pass."""
    split = input_ids.size(1) - logits_to_keep  # the prompt: every column before the completion
    firsts, index = distinct_rows(input_ids[:, :split], attention_mask[:, :split])
    head = torch.tensor(firsts, device=input_ids.device)
    with autocast():  # the output layer at one position only: the cache is what is wanted
        prompt = model(input_ids=input_ids[head, : split - 1], attention_mask=attention_mask[head, : split - 1], use_cache=True, logits_to_keep=1)
    cache = _cache_of(prompt)
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


def _sharing_generate(model, generate, pad_id: int, constraint=None, *, share: bool = True):
    """`generate` in eval mode (the policy being optimised samples, not a dropout-perturbed copy of
    it), starting (`share`) from a cache in which each shared prompt beginning ran once; `constraint(rows,
    width)`, when given, makes the logits processor a completion's first tokens are held to."""
    from types import SimpleNamespace

    from transformers import LogitsProcessorList

    from mascot.llm.shared_prefix import cache_keyword, shared_prompt_cache

    def sharing(*args, input_ids=None, attention_mask=None, **kwargs):
        was_training = model.training
        model.eval()
        try:
            rows = [ids[mask.bool()].tolist() for ids, mask in zip(input_ids, attention_mask, strict=True)]
            loaded = SimpleNamespace(net=model, pad_id=pad_id, device=input_ids.device)
            cache = shared_prompt_cache(loaded, rows, input_ids.size(1)) if share else None
            extra = {cache_keyword(): cache} if cache is not None else {}
            if constraint is not None:
                extra["logits_processor"] = LogitsProcessorList([*(kwargs.pop("logits_processor", None) or []), constraint(len(rows), input_ids.size(1))])
            return generate(*args, input_ids=input_ids, attention_mask=attention_mask, **extra, **kwargs)
        finally:
            model.train(was_training)

    return sharing


def choice_constraint(tokenizer, slot):
    """A `constraint` for `_sharing_generate`: every row's completion opens with one of the slot's
    choices (a roster name after the Director's `agent:`), as the in-process Director and a server's
    structured outputs hold it when it runs, so that training samples what it will be asked for."""
    from mascot.llm.local_decoding import ChoiceConstraint

    return lambda rows, width: ChoiceConstraint(tokenizer, [slot] * rows, width)


def prompt_sharing(trainer_class: type) -> type:
    """`trainer_class` (TRL's GRPOTrainer) with the per-token log-probabilities computed as above,
    and its own sampling (transformers' generate) in eval mode from a shared-prompt cache."""

    class PromptSharingGRPOTrainer(trainer_class):
        share_prompts = True
        choice_slot = None  # a ChoiceSlot every completion opens with (the Director's name), or None

        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs):
            plain = not (self.use_vllm or self.use_transformers_continuous_batching or images or multimodal_fields or self.args.cache_implementation)
            if not ((self.share_prompts or self.choice_slot is not None) and plain and unsharded(self)):
                return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs)
            model = self.accelerator.unwrap_model(self.model_wrapped)
            original = model.generate
            constraint = choice_constraint(self._tokenizer, self.choice_slot) if self.choice_slot is not None else None
            model.generate = _sharing_generate(model, original, self._tokenizer.pad_token_id, constraint, share=self.share_prompts)
            try:
                return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs)
            finally:
                del model.generate  # the class's generate again

        def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False, **kwargs):
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
                                          cache_keyword=forward_cache_keyword(model))  # fmt: skip
                logps.append(out.log_probs[:, -logits_to_keep:])
                if compute_entropy:
                    entropies.append(out.entropy[:, -logits_to_keep:])
            return torch.cat(logps, dim=0), (torch.cat(entropies, dim=0) if compute_entropy else None), None

    PromptSharingGRPOTrainer.__name__ = trainer_class.__name__  # TRL names its model card and tags after it
    return PromptSharingGRPOTrainer

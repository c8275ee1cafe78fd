"""GRPO's per-token log-probabilities with each prompt run once per group (`mascot.train.shared_prompt`):
the same numbers and the same gradients as TRL's whole-sequence pass, on a tiny random Qwen3 with
LoRA, left-padded prompts of different lengths and right-padded completions as TRL builds them."""

from __future__ import annotations

import pytest
import torch

from mascot.train.shared_prompt import distinct_rows, shared_prompt_logps


def lora_model(dropout: float = 0.0, *, layers: int = 2, adapted_last: int | None = None, **config):
    """A tiny random Qwen3 with LoRA on q/k/v/o of every layer (`adapted_last`: of the last that many)."""
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(
        Qwen3Config(
            vocab_size=97,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            **config,
        )  # fmt: skip
    )
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    adapted = list(range(layers - adapted_last, layers)) if adapted_last else None
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], layers_to_transform=adapted)
    peft = get_peft_model(model, lora)
    for name, param in peft.named_parameters():  # LoRA's B starts at zero: move it, so that the adapter matters
        if "lora_B" in name:
            param.data.normal_(0, 0.5)
    return peft


def grpo_batch(generations: int = 3, lengths: tuple[int, int] = (9, 6)):
    """Two prompts (left-padded), `generations` completions each (right-padded)."""
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(2, 97, (n,), generator=g) for n in lengths]
    width = max(lengths)
    rows, masks = [], []
    for prompt in prompts:
        for k in range(generations):
            completion = torch.randint(2, 97, (5 - k % 2 * 2,), generator=g)  # lengths 5 and 3
            ids = torch.zeros(width + 5, dtype=torch.long)
            mask = torch.zeros(width + 5, dtype=torch.long)
            ids[width - len(prompt) : width], mask[width - len(prompt) : width] = prompt, 1
            ids[width : width + len(completion)], mask[width : width + len(completion)] = completion, 1
            rows.append(ids)
            masks.append(mask)
    return torch.stack(rows), torch.stack(masks), 5


def whole_logps(model, ids, mask, keep):
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-keep] = -100
    out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    return out.log_probs[:, -keep:], out.entropy[:, -keep:]


def cache_keyword(model) -> str:
    from mascot.llm.shared_prefix import forward_cache_keyword

    return forward_cache_keyword(model)


def test_identical_prompt_rows_are_found_once_each():
    ids = torch.tensor([[0, 1, 2], [0, 1, 2], [0, 3, 4], [0, 1, 2]])
    mask = torch.tensor([[0, 1, 1]] * 4)
    firsts, index = distinct_rows(ids, mask)
    assert firsts == [0, 2] and index.tolist() == [0, 0, 1, 0]


def test_the_shared_pass_gives_the_whole_sequence_log_probabilities_entropies_and_gradients():
    from contextlib import nullcontext

    model = lora_model()
    ids, mask, keep = grpo_batch()
    whole, whole_entropy = whole_logps(model, ids, mask, keep)
    (whole * mask[:, -keep:]).sum().backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    model.zero_grad()

    out = shared_prompt_logps(model, ids, mask, keep, autocast=nullcontext, cache_keyword=cache_keyword(model))
    shared = out.log_probs[:, -keep:]
    assert shared.shape == whole.shape
    assert torch.allclose(shared, whole, atol=1e-5) and torch.allclose(out.entropy[:, -keep:], whole_entropy, atol=1e-5)
    (shared * mask[:, -keep:]).sum().backward()
    for name, grad in expected.items():
        got = dict(model.named_parameters())[name].grad
        assert torch.allclose(got, grad, atol=1e-5, rtol=1e-4), name


def test_each_distinct_prompt_runs_once(monkeypatch):
    from contextlib import nullcontext

    model = lora_model()
    ids, mask, keep = grpo_batch(generations=4)
    widths = []
    base = model.get_base_model()
    forward = base.model.forward

    def recording(*args, **kwargs):
        widths.append(tuple((kwargs.get("input_ids") if kwargs.get("input_ids") is not None else args[0]).shape))
        return forward(*args, **kwargs)

    monkeypatch.setattr(base.model, "forward", recording)
    with torch.no_grad():
        shared_prompt_logps(model, ids, mask, keep, autocast=nullcontext, cache_keyword=cache_keyword(model))
    assert widths == [(2, ids.size(1) - keep - 1), (8, keep + 1)]  # two prompts once; eight completions with their prompt's last token


@pytest.mark.parametrize("flags", [{"gradient_checkpointing": True}, {"share_prompts": False}])
def test_trl_s_own_pass_runs_where_sharing_cannot_hold(flags):
    from types import SimpleNamespace

    from mascot.train.shared_prompt import prompt_sharing

    calls = []

    class Base:
        def _get_per_token_logps_and_entropies(self, *args, **kwargs):
            calls.append("trl")
            return "trl"

    trainer = prompt_sharing(Base)()
    trainer.args = SimpleNamespace(gradient_checkpointing=flags.get("gradient_checkpointing", False))
    trainer.accelerator = SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=None, fsdp_plugin=None))
    trainer.share_prompts = flags.get("share_prompts", True)
    ids, mask, keep = grpo_batch()
    assert trainer._get_per_token_logps_and_entropies(None, ids, mask, keep) == "trl" and calls == ["trl"]


def test_sampling_runs_in_eval_mode_from_a_shared_prompt_cache_and_decodes_as_plain_generate():
    """TRL samples with the policy in train mode (LoRA dropout on): here the policy being optimised
    samples, in eval mode, each distinct prompt's prefill run once; greedy tokens are plain generate's."""
    from transformers import GenerationConfig

    from mascot.train.shared_prompt import _policy_generate

    model = lora_model(dropout=0.3)
    model.train()
    ids, mask, keep = grpo_batch(generations=3, lengths=(45, 38))  # long enough to share (mascot.llm.shared_prefix.MIN_SHARED_TOKENS)
    prompt_ids, prompt_mask = ids[:, :-keep], mask[:, :-keep]
    config = GenerationConfig(max_new_tokens=4, do_sample=False, pad_token_id=0, eos_token_id=1)
    seen = []
    original = model.generate

    def watched(*args, **kwargs):
        seen.append((model.training, kwargs.get("cache") is not None or kwargs.get("past_key_values") is not None))
        return original(*args, **kwargs)

    sharing = _policy_generate(model, watched, pad_id=0)
    with torch.no_grad():
        shared = sharing(input_ids=prompt_ids, attention_mask=prompt_mask, generation_config=config)
        model.eval()
        plain = original(input_ids=prompt_ids, attention_mask=prompt_mask, generation_config=config)
    assert seen == [(False, True)]  # eval mode, with the shared cache
    assert shared.tolist() == plain.tolist()
    model.train()
    with torch.no_grad():
        sharing(input_ids=prompt_ids, attention_mask=prompt_mask, generation_config=config)
    assert model.training  # the mode it had before


def test_a_generation_batch_is_shuffled_by_whole_groups_so_each_micro_batch_holds_as_few_prompts_as_it_can():
    from mascot.train.shared_prompt import distinct_rows, grouped_shuffle

    ids, mask, keep = grpo_batch(generations=4, lengths=(9, 6))
    ids, mask = ids[:, :-keep], mask[:, :-keep]  # the prompts: two, four rows each
    ids = torch.cat([ids, ids.flip(1)])  # four prompts of four rows each
    mask = torch.cat([mask, mask.flip(1)])
    batch = {"prompt_ids": ids, "prompt_mask": mask, "advantages": torch.arange(16.0), "row": list(range(16)), "num_items_in_batch": torch.tensor(5)}
    orders = set()
    for seed in range(6):
        torch.manual_seed(seed)
        shuffled = grouped_shuffle(batch)
        assert sorted(shuffled["row"]) == list(range(16)) and shuffled["advantages"].tolist() == [float(r) for r in shuffled["row"]]
        assert shuffled["num_items_in_batch"] is batch["num_items_in_batch"]
        for start in (0, 8):  # two micro-batches of 8 rows: two whole groups each
            firsts, _ = distinct_rows(shuffled["prompt_ids"][start : start + 8], shuffled["prompt_mask"][start : start + 8])
            assert len(firsts) == 2
        orders.add(tuple(shuffled["row"][::4]))
    assert len(orders) > 1  # the groups' order is random


def test_the_cache_keyword_is_read_through_a_ddp_wrapper():
    """Under DDP the model the trainer scores with is a wrapper whose forward takes anything: the
    keyword is the wrapped model's (the old one made transformers warn in every process)."""
    from types import SimpleNamespace

    from mascot.llm.shared_prefix import forward_cache_keyword

    model = lora_model()
    assert forward_cache_keyword(SimpleNamespace(module=model)) == forward_cache_keyword(model) == cache_keyword(model.get_base_model())

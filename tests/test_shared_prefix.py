"""The probability judge's prompts share everything before the criterion (judge_v2), and the local
backend runs a shared beginning once: the probabilities equal whole-prompt passes."""

import random

import pytest

from mascot.judge.prompt import JudgeItem, criterion_messages, judge_messages
from mascot.llm.shared_prefix import MIN_SHARED_TOKENS, prefix_groups
from mascot.rubrics import load_rubric_set


def tiny_model():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from mascot.llm.local_loading import LoadedModel

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    net = LlamaForCausalLM(config).eval()
    return LoadedModel(name="tiny", net=net, tokenizer=None, device=torch.device("cpu"), eos_ids=[1], pad_id=0)


def test_prompts_sharing_a_beginning_are_grouped_and_keep_a_token_of_their_own():
    head = list(range(2, 2 + MIN_SHARED_TOKENS + 8))
    prompts = [head + [50, 51], head + [60], list(range(40, 80)), head, head[:10] + [70]]
    groups = {tuple(sorted(rows)): shared for shared, rows in prefix_groups(prompts)}
    assert groups == {(0, 1, 3): len(head) - 1, (2,): 39, (4,): 10}


def test_items_interleaved_in_a_batch_keep_their_long_shared_beginnings():
    """Two conversations' criterion prompts, mixed (as concurrent items fill a batch): the common
    system prompt alone must not pull them into one group with a short shared part."""
    system = list(range(2, 42))
    first, second = system + [50] * 300, system + [60] * 300
    prompts = [base + [k, 90 + k] for k in range(5) for base in (first, second)]
    groups = sorted((shared, sorted(rows)) for shared, rows in prefix_groups(prompts))
    assert groups == [(len(first), list(range(0, 10, 2))), (len(second), list(range(1, 10, 2)))]


def test_shared_prefix_probabilities_equal_whole_prompt_passes():
    from mascot.llm.local_decoding import next_token_probs
    from mascot.llm.shared_prefix import shared_prefix_probs

    loaded = tiny_model()
    rng = random.Random(3)
    conversation = [rng.randrange(2, 97) for _ in range(60)]
    other = [rng.randrange(2, 97) for _ in range(45)]
    prompts = [conversation + [rng.randrange(2, 97) for _ in range(rng.randint(3, 9))] for _ in range(5)]
    prompts += [other + [5, 6, 7], other + [8], [9, 10, 11]]  # a second conversation, and one alone
    whole = next_token_probs(loaded, prompts)
    shared = shared_prefix_probs(loaded, prompts, lambda ps: next_token_probs(loaded, ps))
    assert shared.shape == whole.shape
    assert float((shared - whole).abs().max()) < 1e-5


@pytest.mark.parametrize("scope", ["agent", "collective"])
def test_judge_v2_keeps_judge_v1_json_prompts_and_puts_the_criterion_last(scope):
    rubric = load_rubric_set("paper_v2").rubric("emotional_support", scope)
    item = JudgeItem(
        item_id="e1#3", scope=scope, domain="emotional_support", context="I lost my job today.", history=[("User", "I lost my job today.")],
        response="That sounds hard.", turns=[("The Anchor", "That sounds hard."), ("User", "It is.")],
    )  # fmt: skip
    assert judge_messages(item, rubric, "judge_v2") == judge_messages(item, rubric, "judge_v1")
    first, second = (criterion_messages(item, rubric, key, "judge_v2") for key in rubric.keys[:2])
    assert first[0] == second[0]  # one system prompt for every criterion
    shared = first[1]["content"].split("Criterion [")[0]
    assert second[1]["content"].startswith(shared) and len(shared) > 100
    assert first[1]["content"].rstrip().endswith("Answer with one digit from 1 to 5.")


def _record_forward_shapes(net):
    shapes = []
    forward = net.forward

    def recording(*args, **kwargs):
        shapes.append(tuple(kwargs["input_ids"].shape))
        return forward(*args, **kwargs)

    net.forward = recording
    return shapes


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_rows_repeating_a_prompt_share_one_prefill_and_decode_as_without_it(temperature):
    """The n samples of a request are rows with one prompt: its prefill runs once, and every row
    decodes the tokens it decodes without sharing."""
    from mascot.llm.base import ChatRequest

    loaded = tiny_model()
    long_prompt, short_prompt = list(range(2, 40)), list(range(50, 62))
    prompts = [long_prompt, short_prompt, long_prompt, long_prompt]
    requests = [ChatRequest(messages=[], temperature=temperature, max_tokens=8, seed=3) for _ in prompts]
    shapes, prefill = decoded_alike_with_and_without_sharing(loaded, prompts, requests)
    assert sorted(prefill) == [(1, len(short_prompt) - 1), (1, len(long_prompt) - 1)]  # each distinct prompt once, all but its last token
    assert all(width == 1 for _, width in shapes[len(prefill) :])  # generate itself only decodes


def decoded_alike_with_and_without_sharing(loaded, prompts, requests) -> tuple[list, list]:
    """Checks that sharing the prefill decodes what the rows decode alone; returns the forward
    passes' (rows, width) of the shared run and those of them that prefilled."""
    from mascot.llm.local_decoding import generate

    alone = generate(loaded, prompts, requests, share_prefill=False)
    shapes = _record_forward_shapes(loaded.net)
    shared = generate(loaded, prompts, requests)
    assert shared.tolist() == alone.tolist()
    return shapes, [s for s in shapes if s[1] > 1]


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_rows_sharing_a_long_beginning_run_it_once_and_decode_as_without_it(temperature):
    """Director prompts of one roster: the same rules, then each conversation's own lines. The rules
    run once, each ending once, and every row decodes what it decodes without sharing."""
    from mascot.llm.base import ChatRequest

    loaded = tiny_model()
    rng = random.Random(5)
    rules = [rng.randrange(2, 97) for _ in range(60)]
    persona = [rng.randrange(2, 97) for _ in range(45)]
    prompts = [rules + [rng.randrange(2, 97) for _ in range(rng.randint(2, 12))] for _ in range(4)]
    prompts += [persona + [7, 8, 9], persona + [10], [11, 12, 13], rules + [5, 6]]
    requests = [ChatRequest(messages=[], temperature=temperature, max_tokens=6, seed=4) for _ in prompts]
    _, prefill = decoded_alike_with_and_without_sharing(loaded, prompts, requests)
    assert (1, len(rules)) in prefill and (1, len(persona)) in prefill  # each shared beginning once
    assert sum(rows * width for rows, width in prefill) < sum(len(p) - 1 for p in prompts) / 2


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_repeated_prompts_that_share_rules_run_the_rules_once_and_each_distinct_ending_once(temperature):
    """A GRPO generation batch: four Director prompts of one roster (the same rules, each its own
    conversation), each repeated for its group's samples. The rules run once and each distinct
    ending once, not once per row, and every row decodes what it decodes without sharing."""
    from mascot.llm.base import ChatRequest

    loaded = tiny_model()
    rng = random.Random(6)
    rules = [rng.randrange(2, 97) for _ in range(60)]
    endings = [[rng.randrange(2, 97) for _ in range(n)] for n in (20, 14, 25, 9)]
    prompts = [rules + ending for ending in endings for _ in range(4)]
    requests = [ChatRequest(messages=[], temperature=temperature, max_tokens=6, seed=4) for _ in prompts]
    _, prefill = decoded_alike_with_and_without_sharing(loaded, prompts, requests)
    assert prefill == [(1, len(rules)), (4, max(map(len, endings)) - 1)]


def test_rows_with_distinct_prompts_get_no_shared_cache():
    from mascot.llm.shared_prefix import shared_prompt_cache

    loaded = tiny_model()
    assert shared_prompt_cache(loaded, [[2, 3, 4], [5, 6]], 3) is None

"""The local backend's reasoning switch: `ChatRequest.thinking` reaches the chat template as
`enable_thinking` (a Qwen3-style template over a byte-level tokenizer built here), and reasoning
in a reply is kept apart from its text."""

from __future__ import annotations

import types

import pytest

from mascot.llm.base import ChatRequest
from mascot.llm.local import LocalClient, _Job
from mascot.llm.local_decoding import RowOutput

# What Qwen3's template does with the switch: thinking off pre-fills an empty reasoning block.
QWEN3_STYLE_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)


@pytest.fixture(scope="module")
def byte_tokenizer():
    tokenizers = pytest.importorskip("tokenizers")
    from transformers import PreTrainedTokenizerFast

    alphabet = tokenizers.pre_tokenizers.ByteLevel.alphabet()
    model = tokenizers.models.BPE(vocab={ch: i for i, ch in enumerate(sorted(alphabet))}, merges=[])
    raw = tokenizers.Tokenizer(model)
    raw.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = tokenizers.decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw)
    tokenizer.chat_template = QWEN3_STYLE_TEMPLATE
    return tokenizer


def client_with(tokenizer) -> LocalClient:
    client = LocalClient("tiny-qwen3-style")
    client._loaded = types.SimpleNamespace(tokenizer=tokenizer)  # the template is all this test needs
    return client


@pytest.mark.parametrize("thinking, prefilled", [(False, True), (True, False), (None, False)])
def test_thinking_reaches_the_chat_template(byte_tokenizer, thinking, prefilled):
    ids = client_with(byte_tokenizer).encode([{"role": "user", "content": "hi"}], thinking)
    prompt = byte_tokenizer.decode(ids)
    assert prompt.startswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert prompt.endswith("<think>\n\n</think>\n\n") is prefilled


def test_a_template_without_the_switch_ignores_it(byte_tokenizer):
    plain = byte_tokenizer.__class__(tokenizer_object=byte_tokenizer.backend_tokenizer)
    plain.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    assert plain.decode(client_with(plain).encode([{"role": "user", "content": "hi"}], False)) == "hi"


async def test_local_replies_keep_reasoning_apart():
    import asyncio

    job = _Job(ChatRequest(messages=[], n=2), [1, 2], asyncio.get_running_loop().create_future(), rows=2)
    job.fill(0, RowOutput("<think>weigh it</think>\n\nHello.", 5, "stop"), "m")
    job.fill(1, RowOutput("<think>still thinking", 5, "length"), "m")
    response = job.future.result()
    assert response.texts == ["Hello.", ""] and response.reasoning == ["weigh it", "still thinking"]

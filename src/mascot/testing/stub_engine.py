"""What the stub server models of a real engine's insides: how many tokens a prompt has, the
context limit it refuses prompts past (vLLM's HTTP 400), and a prefix cache that charges time
only for the prompt tokens it has not computed before (vLLM's automatic prefix caching).

Tokens are counted like a byte-pair tokenizer on English text (a word with the space before it,
long words in pieces of five characters: about four characters a token) plus four for each
message's chat-template framing; the client's own estimate
(`mascot.llm.context_fit`) is deliberately more cautious, as it must be against a real tokenizer.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Sequence

TEMPLATE_TOKENS_PER_MESSAGE = 4
CACHE_BLOCK_TOKENS = 16  # vLLM's default block size: only whole blocks are cached and shared
_PIECE = re.compile(r"\s?\S{1,5}|\s+")  # a word with the space before it, long words in pieces


def prompt_pieces(messages: Sequence[dict]) -> list[str]:
    """The prompt as the stub's tokens: each message's framing, then its text's pieces."""
    pieces: list[str] = []
    for message in messages:
        pieces += [f"<|{message.get('role', 'user')}|>", "\n", "", ""]
        pieces += _PIECE.findall(str(message.get("content", "")))
    return pieces


def prompt_tokens(messages: Sequence[dict]) -> int:
    return len(prompt_pieces(messages))


def context_refusal(messages: Sequence[dict], max_model_len: int | None) -> str | None:
    """vLLM 0.32's reason for a prompt longer than the context, or None when it fits (a
    completion budget past the context is capped silently, as vLLM does)."""
    if not max_model_len:
        return None
    tokens = prompt_tokens(messages)
    if tokens <= max_model_len:
        return None
    return (
        f"This model's maximum context length is {max_model_len} tokens. However, your prompt contains at least "
        f"{max_model_len + 1} input tokens ({tokens} in the messages). Please reduce the length of the input prompt."
    )


class PrefixCache:
    """Blocks of prompt tokens, each named by a hash of everything up to its end (so a block is
    shared only by prompts that agree up to there), kept least recently used first."""

    def __init__(self, capacity_blocks: int = 4096) -> None:
        self.capacity = capacity_blocks
        self.blocks: OrderedDict[str, None] = OrderedDict()
        self.queries = 0  # prompt tokens asked for (vLLM's prefix_cache_queries)
        self.hits = 0  # of those, found computed (vLLM's prefix_cache_hits)

    def _chain(self, pieces: list[str]) -> list[str]:
        names, digest = [], hashlib.sha256()
        for start in range(0, len(pieces) - len(pieces) % CACHE_BLOCK_TOKENS, CACHE_BLOCK_TOKENS):
            digest.update("\x00".join(pieces[start : start + CACHE_BLOCK_TOKENS]).encode())
            names.append(digest.copy().hexdigest())
        return names

    def _store(self, names: list[str]) -> None:
        for name in names:
            self.blocks[name] = None
            self.blocks.move_to_end(name)
        while len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)

    def lookup(self, pieces: list[str]) -> int:
        """Tokens of the prompt that must be computed; its whole blocks are cached afterwards."""
        names = self._chain(pieces)
        cached = next((i for i, name in enumerate(names) if name not in self.blocks), len(names))
        self._store(names)
        self.queries += len(pieces)
        self.hits += cached * CACHE_BLOCK_TOKENS
        return len(pieces) - cached * CACHE_BLOCK_TOKENS

    def remember(self, pieces: list[str]) -> None:
        """Caches a finished request's prompt and reply together (the next turn starts with both)."""
        self._store(self._chain(pieces))

    def prometheus(self, model: str) -> str:
        """The counters under the names vLLM's /metrics uses, so that a benchmark reads both alike."""
        label = f'{{model_name="{model}"}}'
        return (
            f"# TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total{label} {self.queries}\n"
            f"# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total{label} {self.hits}\n"
        )


def prefill_seconds(uncached_tokens: int, seconds_per_token: float) -> float:
    return max(0.0, uncached_tokens * seconds_per_token)

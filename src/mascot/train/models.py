"""Loading models and tokenizers for training: hub ids or local folders, plain or LoRA artefacts."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from mascot.errors import MascotError
from mascot.train.artefact import read_metadata
from mascot.train.config import TrainSettings

log = logging.getLogger(__name__)

ADAPTER_CONFIG = "adapter_config.json"


class ModelLoadError(MascotError, OSError):
    """A model or tokenizer that cannot be loaded (wrong id, no network, not a model folder)."""


def model_ref(name: str) -> str:
    """A local folder becomes an absolute path, so adapters record a base that reloads anywhere.

    The embedded default (SmolLM2-135M-Instruct) trains offline too: when the hub cannot give it,
    it resolves to its converted checkpoint, as on the local generation backend."""
    path = Path(name).expanduser()
    if path.exists():
        return str(path.resolve())
    from mascot.llm.base import DEFAULT_LOCAL_MODEL

    if name == DEFAULT_LOCAL_MODEL:
        from mascot.llm.local import resolve_local_model

        return str(resolve_local_model(name))
    return name


def is_adapter(folder: str | Path) -> bool:
    return (Path(folder) / ADAPTER_CONFIG).is_file()


def adapter_base_model(folder: str | Path) -> str:
    """The base an adapter was trained on: adapter_config.json, else mascot_metadata.json."""
    folder = Path(folder)
    config = folder / ADAPTER_CONFIG
    if config.is_file():
        base = json.loads(config.read_text(encoding="utf-8")).get("base_model_name_or_path")
        if base:
            return base
    meta = read_metadata(folder)
    if meta is not None:
        return meta.base_model
    raise ModelLoadError(f"{folder}: cannot tell the base model (no adapter_config.json base or mascot_metadata.json); pass --base-model")


def _load(loader, name: str, **kwargs):
    try:
        return loader(name, **kwargs)
    except (OSError, ValueError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelLoadError(f"cannot load {name!r}: {first_line}") from None


def load_tokenizer(name: str):
    """The tokenizer of a model or artefact; the pad token falls back to eos (needed for batching)."""
    from transformers import AutoTokenizer

    tokenizer = _load(AutoTokenizer.from_pretrained, model_ref(name))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(name: str):
    from transformers import AutoModelForCausalLM

    from mascot.train.runtime import model_dtype

    return _load(AutoModelForCausalLM.from_pretrained, model_ref(name), dtype=model_dtype())


def load_sequence_classifier(name: str, pad_token_id: int | None):
    """A one-logit sequence classifier on top of a causal LM checkpoint (the head starts random)."""
    from transformers import AutoModelForSequenceClassification

    from mascot.train.runtime import model_dtype

    model = _load(AutoModelForSequenceClassification.from_pretrained, model_ref(name), num_labels=1, dtype=model_dtype())
    model.config.pad_token_id = pad_token_id
    return model


def lora_config(settings: TrainSettings, task_type: str):
    """LoRA on the attention projections; a reward model's score head is trained and saved whole."""
    from peft import LoraConfig

    return LoraConfig(
        r=settings.lora_r,
        lora_alpha=settings.lora_alpha,
        lora_dropout=settings.lora_dropout,
        target_modules=settings.lora_targets,
        task_type=task_type,
        modules_to_save=["score"] if task_type == "SEQ_CLS" else None,
    )


def load_reward_model(path: str, device=None):
    """A trained reward model for scoring: merged LoRA artefact or full weights, in eval mode."""
    from transformers import AutoModelForSequenceClassification

    from mascot.train.runtime import model_dtype

    tokenizer = load_tokenizer(path)
    if is_adapter(path):
        from peft import PeftModel

        base = load_sequence_classifier(adapter_base_model(path), tokenizer.pad_token_id)
        model = PeftModel.from_pretrained(base, model_ref(path))
        model = model.merge_and_unload()
    else:
        model = _load(AutoModelForSequenceClassification.from_pretrained, model_ref(path), num_labels=1, dtype=model_dtype())
    model.config.pad_token_id = tokenizer.pad_token_id
    if device is not None:
        model.to(device)
    model.eval()
    return model, tokenizer


def count_parameters(model) -> dict[str, int | float]:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return {"trainable_parameters": trainable, "total_parameters": total, "trainable_share": round(trainable / max(total, 1), 6)}

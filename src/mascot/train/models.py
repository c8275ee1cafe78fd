"""Loading models and tokenizers for training: hub ids or local folders, plain or LoRA artefacts.

Names resolve through `mascot.llm.models.resolve_model`, as on the local generation backend: the
embedded model's hub id trains offline, and artefacts record hub ids as their base model."""

from __future__ import annotations

import logging
from pathlib import Path

from mascot.errors import MascotError
from mascot.llm import models as resolver
from mascot.train.config import TrainSettings
from mascot.train.runtime import model_dtype
from mascot.train.screen import quiet_load_report, report_loading, silence_library_warnings

log = logging.getLogger(__name__)

ADAPTER_CONFIG = "adapter_config.json"


class ModelLoadError(MascotError, OSError):
    """A model or tokenizer that cannot be loaded (wrong id, no network, not a model folder)."""


def model_ref(name: str) -> str:
    """What `from_pretrained` loads for `name`: an absolute folder (an adapter folder stays itself,
    so adapters record a base that reloads anywhere) or a hub id that loads now; the embedded
    default resolves to its converted checkpoint when the hub cannot give it."""
    try:
        resolved = resolver.resolve_model(name)
    except MascotError as exc:
        raise ModelLoadError(str(exc)) from None
    return resolved.adapter or resolved.source


def base_model_id(name: str) -> str:
    """What an artefact trained from `name` records as its base model: the hub id when the weights
    have one (also when they load from the converted embedded checkpoint), else the folder."""
    try:
        return resolver.base_model_id(name)
    except MascotError as exc:
        raise ModelLoadError(str(exc)) from None


def is_adapter(folder: str | Path) -> bool:
    return resolver.is_adapter(folder)


def adapter_base_model(folder: str | Path) -> str:
    """The base an adapter was trained on: adapter_config.json, else mascot_metadata.json."""
    try:
        return resolver.adapter_base_name(folder)
    except MascotError as exc:
        raise ModelLoadError(str(exc)) from None


def _load(loader, name: str, **kwargs):
    silence_library_warnings()  # before PEFT and TRL first touch a model
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


    return _load(AutoModelForCausalLM.from_pretrained, model_ref(name), dtype=model_dtype())


def load_sequence_classifier(name: str, pad_token_id: int | None, *, new_head_expected: bool = True):
    """A one-logit sequence classifier on top of a causal LM checkpoint (the head starts random).

    transformers' loading report (a table saying `score.weight` is MISSING) is replaced by one line
    when the new head is news (`new_head_expected`), and by nothing when an adapter's trained head
    replaces it right after; other weights that did not load are still reported."""
    from transformers import AutoModelForSequenceClassification


    source = model_ref(name)
    with quiet_load_report():
        model, info = _load(AutoModelForSequenceClassification.from_pretrained, source, num_labels=1, dtype=model_dtype(), output_loading_info=True)
    report_loading(info, source, new_head_expected=new_head_expected)
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


    tokenizer = load_tokenizer(path)
    if is_adapter(path):
        from peft import PeftModel

        base = load_sequence_classifier(adapter_base_model(path), tokenizer.pad_token_id, new_head_expected=False)  # the adapter holds the head
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

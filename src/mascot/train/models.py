"""Loading models and tokenizers for training: hub ids or local folders, plain or LoRA artefacts.

Names resolve through `mascot.llm.models.resolve_model`, as on the local generation backend: the
embedded model's hub id trains offline, and artefacts record hub ids as their base model."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from mascot.errors import MascotError
from mascot.llm import models as resolver
from mascot.train.config import TrainSettings
from mascot.train.runtime import TrainingSetupError, model_dtype
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


def load_sequence_classifier(name: str, pad_token_id: int | None, *, new_head_expected: bool = True, num_layers: int = 0, dtype=None):
    """A one-logit sequence classifier on top of a causal LM checkpoint (the head starts random),
    keeping only its first `num_layers` decoder layers when that is above 0 (`--score-layers`).

    transformers' loading report (a table saying `score.weight` is MISSING) is replaced by one line
    when the new head is news (`new_head_expected`), and by nothing when an adapter's trained head
    replaces it right after; other weights that did not load are still reported."""
    from transformers import AutoModelForSequenceClassification

    source = model_ref(name)
    kwargs = {"config": truncated_config(source, num_layers)} if num_layers > 0 else {"num_labels": 1}
    with quiet_load_report():
        model, info = _load(
            AutoModelForSequenceClassification.from_pretrained, source, dtype=dtype or model_dtype(), output_loading_info=True, **kwargs
        )
    info["unexpected_keys"] = [k for k in info.get("unexpected_keys") or [] if not dropped_layer_key(k, num_layers)]
    report_loading(info, source, new_head_expected=new_head_expected)
    model.config.pad_token_id = pad_token_id
    return model


def truncated_config(source: str, num_layers: int):
    """The checkpoint's config with its decoder cut to the first `num_layers` layers, one logit."""
    from transformers import AutoConfig

    config = _load(AutoConfig.from_pretrained, source)
    total = config.num_hidden_layers
    if num_layers > total:
        raise ModelLoadError(f"--score-layers {num_layers}: {source} has only {total} decoder layers")
    config.num_hidden_layers = num_layers
    if isinstance(getattr(config, "layer_types", None), list):  # per-layer attention kinds (Qwen3, Gemma): one per kept layer
        config.layer_types = config.layer_types[:num_layers]
    config.num_labels = 1
    return config


def dropped_layer_key(key: str, num_layers: int) -> bool:
    """Whether a checkpoint weight belongs to a decoder layer that `--score-layers` dropped."""
    match = re.search(r"\blayers\.(\d+)\.", key)
    return num_layers > 0 and match is not None and int(match.group(1)) >= num_layers


def lora_config(settings: TrainSettings, task_type: str, model=None):
    """LoRA on the attention projections; a reward model's score head is trained and saved whole.
    With `lora_last_layers` (GRPO), only the model's last that many decoder layers are adapted."""
    from peft import LoraConfig

    return LoraConfig(
        r=settings.lora_r,
        lora_alpha=settings.lora_alpha,
        lora_dropout=settings.lora_dropout,
        target_modules=settings.lora_targets,
        task_type=task_type,
        modules_to_save=["score"] if task_type == "SEQ_CLS" else None,
        layers_to_transform=last_layers(model, getattr(settings, "lora_last_layers", 0)),
    )


def last_layers(model, wanted: int) -> list[int] | None:
    """The indices of the model's last `wanted` decoder layers (None: all of them)."""
    if wanted <= 0:
        return None
    total = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    if not total:
        raise TrainingSetupError("--lora-last-layers needs a model whose config names its number of layers (num_hidden_layers)")
    return list(range(max(0, total - wanted), total))


def load_reward_model(path: str, device=None):
    """A trained reward model for scoring: merged LoRA artefact or full weights, in eval mode."""
    from transformers import AutoModelForSequenceClassification

    from mascot.train.artefact import read_metadata
    from mascot.train.score_turns import install_turn_pooling
    from mascot.train.score_window import install_score_window

    tokenizer = load_tokenizer(path)
    meta = read_metadata(Path(path)) if Path(path).is_dir() else None
    window = meta.score_window if meta is not None else 0  # the pooling it was trained with
    if is_adapter(path):
        from peft import PeftModel

        layers = meta.score_layers if meta is not None else 0  # full weights carry their depth in config.json; an adapter's base does not
        base = load_sequence_classifier(
            adapter_base_model(path), tokenizer.pad_token_id, new_head_expected=False, num_layers=layers
        )  # the adapter holds the head
        install_score_window(base, window)
        install_turn_pooling(base, tokenizer, meta.score_turns if meta is not None else [])  # the head's width the adapter saved
        model = PeftModel.from_pretrained(base, model_ref(path))
        model = model.merge_and_unload()
    else:
        model = _load(AutoModelForSequenceClassification.from_pretrained, model_ref(path), num_labels=1, dtype=model_dtype())
        install_score_window(model, window)
    model.config.pad_token_id = tokenizer.pad_token_id
    if device is not None:
        model.to(device)
    model.eval()
    return model, tokenizer


def count_parameters(model) -> dict[str, int | float]:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return {"trainable_parameters": trainable, "total_parameters": total, "trainable_share": round(trainable / max(total, 1), 6)}

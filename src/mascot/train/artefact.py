"""Trained artefacts: one folder each, the weights plus `mascot_metadata.json`.

The metadata says what the folder is (role, base model, LoRA adapter or full weights), what it was
trained on (dataset, roster or persona, rubric version, data files with their sha256), how
(hyperparameters, library versions, hardware) and how well (its evaluation figures). Serving,
merging and the next stage read it instead of guessing from folder names.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from mascot.errors import MascotError
from mascot.files import StoreError, ensure_writable_dir, write_json_atomic
from mascot.schema import SCHEMA_VERSION, Record, utc_now
from mascot.train.config import DEFAULT_OUTPUT_ROOT
from mascot.train.runtime import is_main_process, world_size

log = logging.getLogger(__name__)

METADATA_FILE = "mascot_metadata.json"
CHECKPOINT_PREFIX = "checkpoint-"
TRACKED_LIBRARIES = ("mascot", "torch", "transformers", "trl", "peft", "accelerate", "datasets", "deepspeed", "vllm")

Role = Literal["persona_reward_model", "group_reward_model", "speaker", "director"]


class ArtefactError(MascotError, ValueError):
    """An output folder that cannot be used as asked (exists, incomplete, not an artefact)."""


class DataFile(Record):
    path: str
    sha256: str
    records: int | None = None


class TrainingMetadata(Record):
    schema_version: str = SCHEMA_VERSION
    created_at: str = Field(default_factory=utc_now)
    role: Role
    trainer: str = Field(description="reward | grpo | dpo | sft | merge")
    weights: Literal["lora_adapter", "full"] = "lora_adapter"
    task: Literal["causal_lm", "sequence_classification"] = "causal_lm"
    base_model: str
    dataset: str | None = None
    roster: str | None = None
    personas: list[str] = Field(default_factory=list)
    rubric_version: str | None = None
    data_files: list[DataFile] = Field(default_factory=list)
    num_train_records: int | None = None
    num_eval_records: int | None = None
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    library_versions: dict[str, str] = Field(default_factory=dict)
    hardware: dict[str, Any] = Field(default_factory=dict)
    evaluation: dict[str, Any] = Field(default_factory=dict)
    train_metrics: dict[str, Any] = Field(default_factory=dict)
    source_artefacts: dict[str, str] = Field(default_factory=dict)
    score_window: int = Field(0, description="a reward model's score reads the mean of its last N positions (0: the last token)")
    score_layers: int = Field(0, description="a reward model keeps the first N decoder layers of its base (0: all of them)")
    score_turns: list[str] = Field(
        default_factory=list, description="a group reward model reads the first and last turns of these companions side by side (empty: not)"
    )
    trajectory_format: int | None = Field(
        None, description="a group reward model: how its pairs wrote a conversation (mascot.prefs.group; None: format 1, written before the field)"
    )
    registered_as: str | None = Field(None, description="its version in the adapter registry (`mascot adapters list`), once registered")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def data_file_entry(path: Path, records: int | None = None) -> DataFile:
    return DataFile(path=str(Path(path).resolve()), sha256=sha256_file(path), records=records)


def library_versions() -> dict[str, str]:
    versions = {}
    for name in TRACKED_LIBRARIES:
        try:
            versions[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            continue
    return versions


def hardware_summary() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"world_size": world_size(), "device": "cpu"}
    if torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name(0)
        info["gpus_visible"] = torch.cuda.device_count()
    return info


def write_metadata(folder: Path, meta: TrainingMetadata) -> Path:
    path = Path(folder) / METADATA_FILE
    write_json_atomic(path, json.loads(meta.model_dump_json(exclude_none=True)))
    return path


def read_metadata(folder: Path) -> TrainingMetadata | None:
    path = Path(folder) / METADATA_FILE
    if not path.exists():
        return None
    try:
        return TrainingMetadata.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as exc:
        raise ArtefactError(f"{path}: not valid training metadata ({exc.errors()[0]['msg']})") from None


ADAPTER_CONFIG = "adapter_config.json"
WEIGHT_FILES = {
    "lora_adapter": ("adapter_model.safetensors", "adapter_model.bin"),
    "full": ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json"),
}


def require_trained(folder: str | Path, *, role: str, label: str) -> TrainingMetadata:
    """The metadata of a finished artefact of `role` in `folder`, or one line saying what is wrong
    (not a folder, no metadata - an empty or cut-short folder -, another role, weights missing)."""
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise ArtefactError(f"{label} {path} is not a folder")
    meta = read_metadata(path)
    if meta is None:
        raise ArtefactError(f"{label} {path} holds no trained model: no {METADATA_FILE} (train one first, or the run was cut short)")
    if meta.role != role:
        raise ArtefactError(f"{label} {path} holds a {meta.role.replace('_', ' ')}, not a {role.replace('_', ' ')}")
    require_weights(path, meta, label)
    return meta


def require_weights(path: Path, meta: TrainingMetadata, label: str) -> None:
    """The files `meta.weights` promises are in `path`."""
    needed = WEIGHT_FILES[meta.weights]
    if meta.weights == "lora_adapter" and not (path / ADAPTER_CONFIG).is_file():
        raise ArtefactError(f"{label} {path}: {METADATA_FILE} says lora_adapter but {ADAPTER_CONFIG} is missing")
    if not any((path / name).is_file() for name in needed):
        raise ArtefactError(f"{label} {path}: {METADATA_FILE} says {meta.weights} but its weights are missing (none of {', '.join(needed)})")


def require_model_folder(folder: str | Path, *, label: str, task: str | None = None, role: str | None = None) -> None:
    """A folder given as a model or adapter holds one: a complete adapter (with its weights, and of
    `task` and `role` when its metadata says) or a model (config.json). Hub ids are not checked here."""
    path = Path(folder).expanduser()
    if not path.is_dir():
        return
    meta = read_metadata(path)
    if (path / ADAPTER_CONFIG).is_file():
        weights = WEIGHT_FILES["lora_adapter"]
        if not any((path / name).is_file() for name in weights):
            raise ArtefactError(f"{label} {path} holds {ADAPTER_CONFIG} but no adapter weights (none of {', '.join(weights)})")
    elif meta is not None:
        require_weights(path, meta, label)
    elif not (path / "config.json").is_file():
        raise ArtefactError(f"{label} {path} holds no model: neither config.json nor {ADAPTER_CONFIG}")
    if meta is not None and task is not None and meta.task != task:
        raise ArtefactError(f"{label} {path} holds a {meta.role.replace('_', ' ')} ({meta.task}), not a {task} model")
    if meta is not None and role is not None and meta.role != role:
        raise ArtefactError(f"{label} {path} holds a {meta.role.replace('_', ' ')}, not a {role.replace('_', ' ')}")


def last_checkpoint(folder: Path) -> Path | None:
    """The newest `checkpoint-N` folder that holds a readable Trainer state. A checkpoint whose
    trainer_state.json is torn (a kill while it was saved) is skipped, with a warning, for the one
    before it."""
    candidates = []
    for child in Path(folder).glob(f"{CHECKPOINT_PREFIX}*"):
        step = child.name[len(CHECKPOINT_PREFIX) :]
        if child.is_dir() and step.isdigit() and (child / "trainer_state.json").exists():
            candidates.append((int(step), child))
    for _, child in sorted(candidates, reverse=True):
        if _readable_state(child / "trainer_state.json"):
            return child
        log.warning("%s: trainer_state.json is unreadable (cut short?); resuming from an earlier checkpoint", child)
    return None


def _readable_state(path: Path) -> bool:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(state, dict)


def _has_contents(folder: Path) -> bool:
    return folder.exists() and any(folder.iterdir())


def prepare_output_dir(folder: Path, *, resume: bool, overwrite: bool) -> Path | None:
    """Applies the --resume / --overwrite rules; returns the checkpoint to resume from, if any.

    Without either flag an existing, non-empty folder is an error: nothing is overwritten silently.
    Only the main process deletes; the others wait for it."""

    folder = Path(folder)
    if resume and overwrite:
        raise ArtefactError("--resume and --overwrite exclude each other: pick one")
    if _has_contents(folder) and not (resume or overwrite):
        raise ArtefactError(f"{folder} already exists: pass --resume to continue training or --overwrite to start over")
    if overwrite and folder.exists() and is_main_process():
        shutil.rmtree(folder)
    _wait_for_everyone()
    try:
        ensure_writable_dir(folder, "training output folder")
    except StoreError as exc:
        raise ArtefactError(str(exc)) from None
    if not resume:
        return None
    checkpoint = last_checkpoint(folder)
    if checkpoint is None:
        log.warning("%s has no checkpoint to resume from: training starts from scratch", folder)
    return checkpoint


def is_complete(folder: Path) -> bool:
    return (Path(folder) / METADATA_FILE).exists()


def remove_checkpoints(folder: Path) -> None:
    if not is_main_process():
        return
    for child in Path(folder).glob(f"{CHECKPOINT_PREFIX}*"):
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)


def _wait_for_everyone() -> None:
    if world_size() > 1:
        from accelerate import PartialState

        PartialState().wait_for_everyone()


def model_slug(model_name: str) -> str:
    """`Qwen/Qwen3-8B` -> `Qwen3-8B`; a local folder -> its name."""
    return Path(str(model_name).rstrip("/")).name or str(model_name)


def default_output_dir(kind: str, dataset: str, model_name: str, root: str = DEFAULT_OUTPUT_ROOT) -> Path:
    """The folder names users of the research code know."""
    slug = model_slug(model_name)
    names = {
        "persona_reward_model": Path(root, "reward_model", f"Individual_{dataset}_{slug}"),
        "group_reward_model": Path(root, "reward_model", f"group_reward_{dataset}_{slug}"),
        "speaker": Path(root, "llm", f"grpo_Speaker_individual_{dataset}_{slug}"),
        "speaker_sft": Path(root, "llm", f"sft_Speaker_{dataset}_{slug}"),
        "director_grpo": Path(root, "llm", f"grpo_Director_{dataset}_{slug}"),
        "director_dpo": Path(root, "llm", f"dpo_Director_{dataset}_{slug}"),
    }
    return names[kind]

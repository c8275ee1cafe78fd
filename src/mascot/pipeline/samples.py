"""The contexts shipped with mascot (`mascot/samples/contexts.jsonl`) as an ESConv file, so that
the pipeline's generation steps read them through `--data-file` like any dataset file."""

from __future__ import annotations

import json
from pathlib import Path

from mascot.errors import MascotError

SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "contexts.jsonl"
_SPEAKER = {"user": "usr", "supporter": "sys"}


def write_esconv_samples(folder: Path) -> Path:
    """The shipped ESConv contexts in ESConv's export format (situation, emotion_type, problem_type, dialog)."""
    from mascot.schema import Context
    from mascot.store import read_jsonl

    lines = []
    for context in read_jsonl(SAMPLES, Context):
        if context.dataset != "ESConv":
            continue
        dialog = [{"speaker": _SPEAKER.get(t.speaker, "usr"), "text": t.text} for t in context.opening_turns]
        record = {"situation": context.situation, "emotion_type": context.emotion, "problem_type": context.problem_type, "dialog": dialog}
        lines.append(json.dumps(record, ensure_ascii=False))
    if not lines:
        raise MascotError(f"{SAMPLES} holds no ESConv contexts")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "samples.jsonl"
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


HUB = "hub"


def pipeline_data_file(dataset: str, data_file: str | None, folder: Path) -> Path | None:
    """The dataset file every generation step reads: the given one, the shipped ESConv samples when
    none is given, or None for `hub` (the split is read from the Hugging Face hub)."""
    if data_file == HUB:
        return None
    if data_file:
        return Path(data_file)
    from mascot.data import canonical_dataset_name

    if canonical_dataset_name(dataset) != "ESConv":
        raise MascotError(f"--data-file is needed for {dataset}: mascot ships sample contexts for ESConv only")
    return write_esconv_samples(folder)

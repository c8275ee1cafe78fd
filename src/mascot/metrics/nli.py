"""NLI between agent responses with a sequence-classification model (transformers, lazy import).

Label order differs between NLI models (roberta-large-mnli: contradiction, neutral, entailment;
others put entailment first), so labels are read by name from `config.id2label`
(contradiction / entailment / neutral, case-insensitive), never by position.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mascot import hub
from mascot.errors import MascotError

DEFAULT_NLI_MODEL = "FacebookAI/roberta-large-mnli"
NLI_LABELS = ("contradiction", "entailment", "neutral")
SKIP_FLAG = "--skip-nli"  # `mascot metrics`; `mascot eval` says --no-nli


def skip_hint(skip_flag: str = SKIP_FLAG) -> str:
    return f"pass {skip_flag} to compute the other metrics without NLI, or --nli-model FOLDER for a model on disk"


class NLIUnavailable(MascotError):
    """The NLI model cannot be loaded. The message ends with the way out, in the flags of the
    command that was run: `with_flag` gives it for another command (`mascot eval --no-nli`)."""

    def __init__(self, reason: str, skip_flag: str = SKIP_FLAG) -> None:
        self.reason = reason
        super().__init__(f"{reason}: {skip_hint(skip_flag)}")

    def with_flag(self, skip_flag: str) -> NLIUnavailable:
        return NLIUnavailable(self.reason, skip_flag)


def require_reachable(name: str, skip_flag: str = SKIP_FLAG) -> None:
    """Fails at once, with the way out, when the NLI model is neither on disk nor downloadable
    (offline, the hub client would otherwise retry for about a minute before failing)."""
    from huggingface_hub import try_to_load_from_cache

    if Path(name).expanduser().exists():
        return
    try:
        cached = isinstance(try_to_load_from_cache(name, "config.json"), str)
    except Exception:  # noqa: BLE001 - a malformed id is simply not cached
        cached = False
    if not cached and not hub.hub_online():
        raise NLIUnavailable(f"NLI model {name!r} is not on this machine and the Hugging Face hub is unreachable", skip_flag)


def label_indices(id2label: dict) -> dict[str, int]:
    """{"contradiction": i, "entailment": j, "neutral": k} from a config's id2label, by name."""
    found: dict[str, int] = {}
    for idx, name in id2label.items():
        key = str(name).strip().lower()
        for label in NLI_LABELS:
            if key == label or key.startswith(label[:7]):  # "contradiction", "entailment", "neutral"
                found[label] = int(idx)
    missing = [label for label in NLI_LABELS if label not in found]
    if missing:
        raise MascotError(f"the NLI model's config.id2label {dict(id2label)} names no {', '.join(missing)} label: use an NLI (MNLI-style) model")
    return found


@dataclass
class NLIScorer:
    """Predicts contradiction / entailment / neutral for (premise, hypothesis) pairs in batches."""

    model: object
    tokenizer: object
    labels: dict[str, int]
    batch_size: int = 32
    max_length: int = 256
    device: str = "cpu"

    @classmethod
    def load(cls, name: str = DEFAULT_NLI_MODEL, *, batch_size: int = 32, device: str | None = None) -> NLIScorer:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        require_reachable(name)
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        try:
            tokenizer = AutoTokenizer.from_pretrained(name)
            model = AutoModelForSequenceClassification.from_pretrained(name)
        except OSError as exc:
            raise NLIUnavailable(f"cannot load NLI model {name!r} (offline or not a model): {str(exc).splitlines()[0]}") from None
        model.to(device).eval()
        return cls(model, tokenizer, label_indices(model.config.id2label), batch_size=batch_size, device=device)

    def predict(self, pairs: list[tuple[str, str]]) -> list[str]:
        """One label name per pair. Pairs are sorted by length so that batches pad little."""
        import torch

        index_to_label = {i: label for label, i in self.labels.items()}
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
        out: list[str] = [""] * len(pairs)
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                batch = order[start : start + self.batch_size]
                encoded = self.tokenizer(  # type: ignore[operator]
                    [pairs[i][0] for i in batch],
                    [pairs[i][1] for i in batch],
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                ).to(self.device)
                logits = self.model(**encoded).logits  # type: ignore[operator]
                for i, predicted in zip(batch, logits.argmax(dim=-1).tolist()):
                    out[i] = index_to_label.get(predicted, "other")
        return out

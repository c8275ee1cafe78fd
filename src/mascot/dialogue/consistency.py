"""Self-Consistency for dialogue: of several replies sampled for one turn, keep the most central.

Rule `consistency_v1` (the reasons are in docs/baselines.md): a reply's consistency is its mean
similarity to the other non-empty samples; the highest wins, ties going to the earliest sample.
Similarity is a character n-gram F-score (chrF with beta 1, n = 1..6, case and whitespace
ignored): symmetric, free of any model, and tolerant of the inflections two paraphrases differ by.
This is minimum-Bayes-risk selection with chrF as the utility: the sampled reply the others agree
with most, which is what a majority vote becomes when answers are free text.
"""

from __future__ import annotations

from collections import Counter

CONSISTENCY_RULE = "consistency_v1"
MAX_NGRAM = 6


def _char_ngrams(text: str, n: int) -> Counter:
    chars = "".join(text.lower().split())
    return Counter(chars[i : i + n] for i in range(len(chars) - n + 1))


def similarity(a: str, b: str) -> float:
    """Mean over n of the character n-gram F1 (Dice) of `a` and `b`, in [0, 1]; orders with no
    n-grams in either text are left out (short texts)."""
    scores = []
    for n in range(1, MAX_NGRAM + 1):
        grams_a, grams_b = _char_ngrams(a, n), _char_ngrams(b, n)
        total = sum(grams_a.values()) + sum(grams_b.values())
        if total:
            scores.append(2 * sum((grams_a & grams_b).values()) / total)
    return sum(scores) / len(scores) if scores else 0.0


def consistency_scores(replies: list[str]) -> list[float | None]:
    """Each non-empty reply's mean similarity to the other non-empty replies (None for an empty
    one); a lone non-empty reply scores 1."""
    live = [i for i, text in enumerate(replies) if text.strip()]
    scores: list[float | None] = [None] * len(replies)
    for i in live:
        others = [similarity(replies[i], replies[j]) for j in live if j != i]
        # rounded, so that replies equally central up to float noise count as a tie
        scores[i] = round(sum(others) / len(others), 9) if others else 1.0
    return scores


def most_consistent(replies: list[str]) -> int | None:
    """The index of the most central non-empty reply (ties: the earliest); None when all are empty."""
    scores = consistency_scores(replies)
    best: int | None = None
    for i, score in enumerate(scores):
        if score is not None and (best is None or score > scores[best]):  # type: ignore[operator]
            best = i
    return best

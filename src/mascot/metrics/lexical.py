"""Lexical diversity among an episode's agent responses: Self-BLEU and distinct-n.

Self-BLEU: for each response, sentence BLEU (sacrebleu, tokenizer 13a, n-grams up to 4, "exp"
smoothing, effective order) against all the other responses as references; the episode's value is
the mean over its responses (0-100; higher = more repetitive). Needs two responses or more.

distinct-n: distinct n-grams / all n-grams over the episode's responses, tokenised with sacrebleu's
13a tokenizer and lower-cased (higher = more diverse).
"""

from __future__ import annotations

from functools import lru_cache

SELF_BLEU_SETTINGS = {
    "library": "sacrebleu",
    "tokenizer": "13a",
    "max_ngram_order": 4,
    "smooth_method": "exp",
    "effective_order": True,
    "lowercase": False,
    "definition": "mean over responses of sentence BLEU(response, other responses of the episode), 0-100",
}
DISTINCT_SETTINGS = {"tokenizer": "13a", "lowercase": True, "definition": "distinct n-grams / total n-grams over the episode's agent responses"}


@lru_cache(maxsize=1)
def _bleu():
    from sacrebleu.metrics import BLEU

    s = SELF_BLEU_SETTINGS
    return BLEU(tokenize=s["tokenizer"], max_ngram_order=s["max_ngram_order"], smooth_method=s["smooth_method"], effective_order=s["effective_order"], lowercase=s["lowercase"])


@lru_cache(maxsize=1)
def _tokenizer():
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    return Tokenizer13a()


def self_bleu(responses: list[str]) -> float | None:
    if len(responses) < 2:
        return None
    bleu = _bleu()
    scores = [bleu.sentence_score(hyp, responses[:i] + responses[i + 1 :]).score for i, hyp in enumerate(responses)]
    return sum(scores) / len(scores)


def tokens(text: str) -> list[str]:
    return _tokenizer()(text.lower()).split()


def distinct_n(responses: list[str], n: int) -> float | None:
    grams: list[tuple[str, ...]] = []
    for text in responses:
        toks = tokens(text)
        grams.extend(tuple(toks[i : i + n]) for i in range(len(toks) - n + 1))
    if not grams:
        return None
    return len(set(grams)) / len(grams)

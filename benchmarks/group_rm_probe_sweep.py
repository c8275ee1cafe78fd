"""How far the group reward model's frozen-feature probe generalises, penalty by penalty.

Reads a pipeline folder's Stage-2 pairs (`group_pairs/group_pairs.jsonl`), splits them as
`mascot train group-reward-model` does (whole contexts held out), encodes every conversation once
with the reward model's frozen base (its layers and pooling window), then refits the probe's
Bradley-Terry head for each L2 penalty and prints its held-out accuracy beside a grouped
cross-validation over the training contexts (the figure a penalty could be chosen by).

    python benchmarks/group_rm_probe_sweep.py DIR            # DIR: a `mascot pipeline` output folder
    python benchmarks/group_rm_probe_sweep.py DIR --score-layers 20 --score-window 64

CPU, a few minutes for the learning preset's ~450 pairs (the encoding; the fits take seconds).
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

PENALTIES = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)


def encode(args) -> tuple:
    """(training differences, held-out differences, each training pair's context key)."""
    import torch

    from mascot.train import data
    from mascot.train.head_probe import pooled_features
    from mascot.train.models import load_sequence_classifier, load_tokenizer
    from mascot.train.score_window import install_score_window

    _, pairs = data.load_pairs(str(Path(args.run) / "group_pairs" / "group_pairs.jsonl"), "episode")
    train, held = data.split_by_prompt(pairs, args.eval_fraction, args.seed)
    tokenizer = load_tokenizer(args.model)
    rows_train, _ = data.tokenized_pair_rows(train, tokenizer, args.max_length)
    rows_held, _ = data.tokenized_pair_rows(held, tokenizer, args.max_length)
    model = load_sequence_classifier(args.model, tokenizer.pad_token_id, num_layers=args.score_layers)
    install_score_window(model, args.score_window)
    sequences = {tuple(ids) for row in rows_train + rows_held for ids in (row["chosen_ids"], row["rejected_ids"])}
    features = pooled_features(model, sorted(sequences, key=len), tokenizer.pad_token_id)

    def differences(rows):
        return torch.stack([features[tuple(r["chosen_ids"])] - features[tuple(r["rejected_ids"])] for r in rows]).double()

    return differences(rows_train), differences(rows_held), [data.prompt_key(p.prompt) for p in train]


def fit(x, penalty: float):
    """The probe's head for one penalty (`head_probe.bradley_terry_head`), in double precision."""
    from mascot.train.head_probe import bradley_terry_head

    return bradley_terry_head(x, l2=penalty)[0].double()


def accuracy(w, x) -> float:
    return float((x @ w > 0).double().mean())


def grouped_cv(x, keys: list[str], penalty: float, folds: int = 4, seed: int = 0) -> float:
    """Mean accuracy on held-out training contexts, each fold holding out a quarter of them."""
    import torch

    contexts = sorted(set(keys))
    random.Random(seed).shuffle(contexts)
    scores = []
    for fold in range(folds):
        held = set(contexts[fold::folds])
        test = torch.tensor([k in held for k in keys])
        if test.any() and (~test).any():
            scores.append(accuracy(fit(x[~test], penalty), x[test]))
    return sum(scores) / len(scores)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", help="a `mascot pipeline` output folder holding group_pairs/")
    parser.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    parser.add_argument("--score-layers", type=int, default=20)
    parser.add_argument("--score-window", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=320)
    parser.add_argument("--eval-fraction", type=float, default=0.25)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    train, held, keys = encode(args)
    print(f"{len(train)} training pairs from {len(set(keys))} contexts, {len(held)} held out")
    print("| L2 | train | held out | grouped CV |\n|---|---|---|---|")
    for penalty in PENALTIES:
        w = fit(train, penalty)
        print(f"| {penalty:g} | {accuracy(w, train):.3f} | {accuracy(w, held):.3f} | {grouped_cv(train, keys, penalty):.3f} |")


if __name__ == "__main__":
    main()

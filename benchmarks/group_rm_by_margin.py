"""Where the trained group reward model ranks pairs right, by how far apart the judge put them.

Reads a pipeline folder's Stage-2 pairs (`group_pairs/group_pairs.jsonl`) and its trained group
reward model (`group_reward_model/`), splits the pairs as the trainer did (its recorded seed and
held-out share: whole contexts held out), scores both sides of every held-out pair and of as many
training pairs, and prints the pairwise accuracy per band of the judge's margin. A model that ranks
the wide-margin pairs right and the narrow ones at chance is held back by label noise (a higher
--score-margin in `mascot prefs group` would help); one that ranks every training band right and
every held-out band at chance has memorised its training contexts (more contexts would help).

    python benchmarks/group_rm_by_margin.py DIR          # DIR: a `mascot pipeline` output folder

CPU, about a minute for the learning preset's ~450 pairs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

BANDS = ((0.0, 1.0), (1.0, 1.5), (1.5, 2.0), (2.0, float("inf")))


def band_accuracy(pairs, chosen, rejected) -> list[tuple[str, int, float | None]]:
    rows = []
    for low, high in BANDS:
        right = [c > r for p, c, r in zip(pairs, chosen, rejected) if low <= (p.margin or 0.0) < high]
        label = f"[{low:g}, {high:g})" if high != float("inf") else f">= {low:g}"
        rows.append((label, len(right), sum(right) / len(right) if right else None))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a `mascot pipeline` output folder")
    args = parser.parse_args()

    from mascot.train import data
    from mascot.train.models import load_reward_model
    from mascot.train.scoring import RewardModelScorer, score_pair_sides

    model_dir = args.folder / "group_reward_model"
    settings = json.loads((model_dir / "mascot_metadata.json").read_text(encoding="utf-8"))["hyperparameters"]
    _, pairs = data.load_pairs(str(args.folder / "group_pairs" / "group_pairs.jsonl"), "episode")
    train, held_out = data.split_by_prompt(pairs, settings["eval_fraction"], settings["seed"])
    model, tokenizer = load_reward_model(str(model_dir))
    scorer = RewardModelScorer(model, tokenizer, max_length=settings["max_length"], batch_size=8)
    print(f"{len(pairs)} pairs: {len(train)} trained on, {len(held_out)} held out (whole contexts)")
    print("| pairs | judge's margin | n | accuracy |\n|---|---|---|---|")
    for name, subset in (("held out", held_out), ("trained on", train[: len(held_out)])):
        chosen, rejected = score_pair_sides(scorer, subset)
        for label, n, accuracy in band_accuracy(subset, chosen, rejected):
            print(f"| {name} | {label} | {n} | {'-' if accuracy is None else f'{accuracy:.3f}'} |")


if __name__ == "__main__":
    main()

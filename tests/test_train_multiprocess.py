"""Every trainer in two processes (`torchrun --nproc_per_node 2`, gloo on the CPU) against the same
run in one process with the same global batch: the artefact records world size 2, the same number
of optimizer steps, and the same training.

What "the same" means, per trainer. The update is measured on the LoRA B matrices, which start at
zero: their values are what training wrote (the A matrices start random and would hide it). LoRA
dropout is off: its masks depend on the batch's shape and on each process's RNG.
- reward models, Director DPO, SFT: data order, batches and LoRA init are seeded the same and DDP
  averages the two halves' gradients, so the trained B matrices must equal the one-process ones up
  to float rounding: ||B2 - B1|| / ||B1|| under 1e-4 (measured: 3e-7 at most) and the train loss
  within 1e-5 relative. A missing all-reduce trains each process on its own half, a different split
  or batch changes the data: either moves the update by tens of percent;
- Speaker and Director GRPO: each process samples its own completions, so the runs cannot be
  identical (their updates point elsewhere): both must train on the same prompts and count the same
  completions, and the update norms ||B|| must be non-zero and agree within 20% (measured 0.2% and
  6%; Adam's steps follow the learning rate, so a run that skipped a step is off by about half, and
  one whose group advantages were all zero did not move at all).

Marked `multiprocess` (make test-multiprocess); runs under the shared heavy-job lock when one exists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_train_director import directive, directive_pairs, episode
from test_train_sft import candidates
from train_helpers import keyword_pairs, sft_warm_start, tiny_model, write_jsonl, write_run_config

pytestmark = pytest.mark.multiprocess

SRC = Path(__file__).resolve().parents[1] / "src"
TORCHRUN = Path(sys.executable).parent / "torchrun"
LOSS_TOLERANCE = 1e-5  # measured: equal to the 6 digits the metadata keeps
UPDATE_TOLERANCE = 1e-4  # measured: at most 3e-7 (float rounding of the split batch and the all-reduce)
SAMPLED_NORM_TOLERANCE = 0.20  # measured: 0.2% (Speaker) and 6% (Director) apart
NOISE = ("FutureWarning", "LOAD REPORT", "MISSING")
# LoRA dropout off: its random masks depend on the batch's shape and each process's RNG, so with it
# on, one process and two could not train the same even with the same data and gradients.
COMMON = ["--max-steps", "2", "--logging-steps", "1", "--batch-size", "8", "--no-gradient-checkpointing", "--lora-dropout", "0"]
GRPO = ["--num-generations", "2", "--max-completion-length", "12", "--learning-rate", "1e-2"]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("multiprocess")
    tiny_model(root / "tiny")
    runs = {
        "pairs": (root / "individual_ED_tiny", "pairs.jsonl", keyword_pairs(40, 1)),
        "group_pairs": (root / "group_ED_tiny", "group_pairs.jsonl", keyword_pairs(40, 1, kind="episode")),
        "directive_pairs": (root / "branching_ED_tiny", "directive_pairs.jsonl", directive_pairs(24)),
        "candidates": (root / "sft_ED_tiny", "candidates.jsonl", candidates(24)),
        "episodes": (root / "directed_ED_tiny", "episodes.jsonl", [episode(i) for i in range(8)]),
    }
    for folder, name, records in runs.values():
        write_jsonl(folder / name, records)
        write_run_config(folder, dataset="EmpatheticDialogues")
    director_policy(root / "director-policy", runs["episodes"][2])
    return root


def director_policy(folder: Path, episodes: list) -> Path:
    """A tiny Director that answers its prompts with directives (personas in rotation): a random
    one never parses, every completion earns the same reward and GRPO has nothing to follow."""
    from mascot.rosters import load_roster
    from mascot.train.decision_points import sample_decision_points

    names = load_roster("emotional_support").names
    prompts = [p.prompt() for p in sample_decision_points(episodes, per_episode=2, seed=42)[0]]
    replies = [directive(names[i % len(names)]) for i in range(len(prompts))]
    return sft_warm_start(tiny_model(folder), prompts, replies, steps=60)


def launch(work: Path, processes: int, argv: list[str]) -> dict:
    """`mascot train ...` in one process or under torchrun; its metadata, output and wall time."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    head = [sys.executable, "-m"] if processes == 1 else [str(TORCHRUN), "--standalone", "--nproc_per_node", str(processes), "-m"]
    started = time.monotonic()
    done = subprocess.run(
        [*head, "mascot", "train", *argv], env=env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-4000:]
    output = Path(argv[argv.index("--output-dir") + 1])
    meta = json.loads((output / "mascot_metadata.json").read_text())
    return {"meta": meta, "output": done.stdout, "seconds": round(time.monotonic() - started, 1), "update": lora_update(output)}


def lora_update(folder: Path) -> dict:
    """The trained LoRA B matrices of an artefact (zero before training)."""
    from safetensors.torch import load_file

    tensors = load_file(str(folder / "adapter_model.safetensors"))
    return {name: t.float() for name, t in tensors.items() if "lora_B" in name}


def norm(tensors: dict) -> float:
    return float(sum(float(t.pow(2).sum()) for t in tensors.values()) ** 0.5)


def update_difference(one: dict, two: dict) -> float:
    """||B2 - B1|| / ||B1|| over all LoRA B matrices."""
    assert one["update"].keys() == two["update"].keys() and one["update"]
    return norm({k: two["update"][k] - one["update"][k] for k in one["update"]}) / max(norm(one["update"]), 1e-12)


def both(work: Path, name: str, argv: list[str]) -> tuple[dict, dict]:
    one = launch(work, 1, [*argv, "--output-dir", str(work / f"{name}-1")])
    two = launch(work, 2, [*argv, "--output-dir", str(work / f"{name}-2")])
    print(
        f"\n{name}: 1 process {one['seconds']} s, 2 processes {two['seconds']} s; "
        f"loss {one['meta']['train_metrics'].get('train_loss')} vs {two['meta']['train_metrics'].get('train_loss')}; "
        f"update norm {norm(one['update']):.6f} vs {norm(two['update']):.6f}, difference {update_difference(one, two):.2e}"
    )
    for run, world in ((one, 1), (two, 2)):
        assert run["meta"]["hardware"]["world_size"] == world and run["meta"]["hyperparameters"]["num_devices"] == world
        assert not [n for n in NOISE if n in run["output"]], run["output"][-3000:]
    assert one["meta"]["train_metrics"]["global_steps"] == two["meta"]["train_metrics"]["global_steps"] == 2
    for run in (one, two):  # the same global batch, however it is split
        hyper = run["meta"]["hyperparameters"]
        assert hyper["per_device_batch_size"] * hyper["gradient_accumulation_steps"] * hyper["num_devices"] == 8
    return one, two


def relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def assert_same_training(one: dict, two: dict) -> None:
    loss = (one["meta"]["train_metrics"]["train_loss"], two["meta"]["train_metrics"]["train_loss"])
    assert relative(*loss) < LOSS_TOLERANCE, loss
    assert norm(one["update"]) > 0 and update_difference(one, two) < UPDATE_TOLERANCE, update_difference(one, two)


@pytest.fixture(scope="module")
def reward_models(work):
    base = ["--model", str(work / "tiny"), *COMMON, "--learning-rate", "1e-2", "--eval-fraction", "0.1"]
    persona = both(work, "reward-model", ["reward-model", "--data-path", str(work / "individual_ED_tiny"), *base])
    group = both(work, "group-reward-model", ["group-reward-model", "--data-path", str(work / "group_ED_tiny"), *base])
    return persona, group


def test_reward_models_train_the_same_in_two_processes(reward_models):
    for one, two in reward_models:
        assert_same_training(one, two)
        assert one["meta"]["evaluation"]["heldout_pairs"] == two["meta"]["evaluation"]["heldout_pairs"] > 0


def test_director_dpo_trains_the_same_in_two_processes(work):
    one, two = both(
        work,
        "director-dpo",
        [
            "director-dpo",
            "--episode-dataset-path",
            str(work / "branching_ED_tiny"),
            "--model",
            str(work / "tiny"),
            *COMMON,
            "--learning-rate",
            "1e-2",
        ],
    )
    assert_same_training(one, two)


def test_sft_trains_the_same_in_two_processes(work):
    one, two = both(work, "sft", ["sft", "--data-path", str(work / "sft_ED_tiny"), "--model", str(work / "tiny"), *COMMON, "--learning-rate", "1e-2"])
    assert_same_training(one, two)


def assert_same_update_size(one: dict, two: dict) -> None:
    assert one["meta"]["num_train_records"] == two["meta"]["num_train_records"]
    sizes = (norm(one["update"]), norm(two["update"]))
    assert min(sizes) > 0 and relative(*sizes) < SAMPLED_NORM_TOLERANCE, sizes


def test_speaker_grpo_trains_in_two_processes(work, reward_models):
    persona_rm = reward_models[0][0]["meta"]  # the one-process reward model scores both runs
    rm_folder = work / "reward-model-1"
    assert persona_rm["role"] == "persona_reward_model"
    one, two = both(
        work,
        "speaker",
        [
            "speaker",
            "--data-path",
            str(work / "individual_ED_tiny"),
            "--model",
            str(work / "tiny"),
            *COMMON,
            *GRPO,
            "--reward-model-path",
            str(rm_folder),
        ],
    )
    assert_same_update_size(one, two)


def test_director_grpo_trains_in_two_processes(work, reward_models):
    one, two = both(
        work,
        "director-grpo",
        [
            "director-grpo",
            "--episode-dataset-path",
            str(work / "directed_ED_tiny"),
            "--model",
            str(work / "director-policy"),
            *COMMON,
            *GRPO,
            "--group-reward-model-path",
            str(work / "group-reward-model-1"),
            "--suffix-rounds",
            "1",
            "--user-response-probability",
            "0",
        ],
    )
    assert_same_update_size(one, two)
    for run in (one, two):
        assert run["meta"]["evaluation"]["num_completions"] == 16  # 2 steps x 8 completions, counted over both processes

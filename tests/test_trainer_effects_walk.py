"""Every flag of every trainer changes what a real run of it does (`effect_walk`): the artefact it
writes (weights, adapter config, metadata, checkpoints), the arguments it hands TRL, what it prints,
or it is refused in one line that names the flag. There is no list of exceptions.

Each trainer runs for real on a tiny random model, once per flag: slow (about N minutes on two
cores), so behind its own marker: `make test-walk`."""

from __future__ import annotations

from pathlib import Path

import pytest
from effect_walk import FIXTURES, Walk, require_effects
from test_train_director import warm_director  # noqa: F401 (a fixture)
from test_train_merge import adapter  # noqa: F401 (a fixture)
from train_helpers import base, keyword_pairs, keyword_pairs_run, one_thread_per_module, tiny_model, write_jsonl, write_run_config  # noqa: F401 (fixtures)

pytestmark = pytest.mark.walk
ESCONV = FIXTURES / "esconv_sample.jsonl"


@pytest.fixture(scope="module")
def other_base(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("models") / "other", seed=1)


@pytest.fixture(scope="module")
def persona_pairs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("pairs")
    return keyword_pairs_run(root / "run", n_prompts=12), keyword_pairs_run(root / "other", n_prompts=10)


def occupied_output(root: Path) -> None:
    """An earlier run's folder where the trainer writes: refused unless overwritten."""
    (root / "out").mkdir()
    (root / "out" / "notes.txt").write_text("an earlier run")


# Values for the flags every trainer shares (TrainSettings), on these tiny runs.
SHARED = {"num_train_epochs": 2.0, "learning_rate": 3e-3, "batch_size": 8, "per_device_batch_size": 2, "lora_r": 4, "lora_alpha": 8,
          "lora_dropout": 0.3, "lora_target_modules": "q_proj,v_proj", "limit": 6, "logging_steps": 2, "save_steps": 1,
          "eval_fraction": 0.4, "dataset": "ESConv", "output_dir": "elsewhere", "eval_steps": 1, "patience": 1, "rubric_version": "paper_v2"}  # fmt: skip
SHARED_BASE = {"output_dir": "out", "max_steps": 2, "batch_size": 4, "learning_rate": 1e-3, "logging_steps": 1, "save_steps": 10}
SHARED_COMPANIONS = {"num_train_epochs": {"max_steps": -1}, "patience": {"eval_steps": 1}}


def trainer_walk(word: str, base_values: dict, values: dict, companions: dict | None = None) -> Walk:
    from mascot.commands import command
    from mascot.settings import settings_from

    entry = command("train", word)
    base = {**SHARED_BASE, **base_values}

    def interrupted_run(root: Path) -> None:
        """An earlier run of one step whose checkpoint is still there: what --resume continues."""
        earlier = {**base, "output_dir": str(root / "out"), "max_steps": 1, "save_steps": 1, "keep_checkpoints": True}
        entry.runner()(settings_from(entry.settings_class(), earlier, "earlier run"))

    return Walk(
        entry.settings_class(), entry.runner(), base, values={**SHARED, **values},
        companions={**SHARED_COMPANIONS, **(companions or {})}, setups={"overwrite": occupied_output, "resume": interrupted_run},
    )  # fmt: skip


def test_every_reward_model_flag_changes_the_reward_model(tmp_path, base, other_base, persona_pairs):
    pairs, other = persona_pairs
    walk = trainer_walk(
        "reward-model", {"data_path": str(pairs), "model_name": str(base), "max_length": 64},
        {"data_path": str(other), "model_name": str(other_base), "max_length": 32, "margin_scale": 0.5, "head_init": "random", "score_window": 4,
         "score_layers": 1},
    )  # fmt: skip
    require_effects(walk, tmp_path)


@pytest.fixture(scope="module")
def episode_pairs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("episode_pairs")
    runs = []
    for name, n in (("run", 12), ("other", 10)):
        write_jsonl(root / name / "group_pairs.jsonl", keyword_pairs(n_prompts=n, kind="episode"))
        write_run_config(root / name, dataset="EmpatheticDialogues", rubric_version="paper_v1")
        runs.append(root / name)
    return runs[0], runs[1]


def test_every_group_reward_model_flag_changes_the_group_reward_model(tmp_path, base, other_base, episode_pairs):
    pairs, other = episode_pairs
    walk = trainer_walk(
        "group-reward-model", {"data_path": str(pairs), "model_name": str(base), "max_length": 64},
        {"data_path": str(other), "model_name": str(other_base), "max_length": 32, "margin_scale": 0.5, "head_init": "random", "score_window": 4,
         "score_layers": 1},
    )  # fmt: skip
    require_effects(walk, tmp_path)


@pytest.fixture(scope="module")
def directive_runs(tmp_path_factory) -> tuple[Path, Path]:
    from test_train_director import directive_pairs

    root = tmp_path_factory.mktemp("directive_pairs")
    runs = []
    for name, n in (("run", 10), ("other", 8)):
        write_jsonl(root / name / "directive_pairs.jsonl", directive_pairs(n))
        write_run_config(root / name, dataset="EmpatheticDialogues")
        runs.append(root / name)
    return runs[0], runs[1]


def test_every_director_dpo_flag_changes_the_director(tmp_path, base, other_base, directive_runs):
    pairs, other = directive_runs
    walk = trainer_walk(
        "director-dpo", {"data_path": str(pairs), "model_name": str(base), "max_length": 256},
        {"data_path": str(other), "model_name": str(other_base), "max_length": 128, "beta": 0.5, "loss_type": "ipo"},
    )  # fmt: skip
    require_effects(walk, tmp_path)


@pytest.fixture(scope="module")
def candidate_runs(tmp_path_factory) -> tuple[Path, Path]:
    from test_train_sft import candidates

    root = tmp_path_factory.mktemp("candidates")
    runs = []
    for name, n in (("run", 10), ("other", 8)):
        write_jsonl(root / name / "candidates.jsonl", candidates(n))
        write_run_config(root / name, dataset="EmpatheticDialogues", rubric_version="paper_v1", roster="emotional_support@1.0")
        runs.append(root / name)
    return runs[0], runs[1]


def test_every_sft_flag_changes_the_speaker(tmp_path, base, other_base, candidate_runs):
    run, other = candidate_runs
    walk = trainer_walk(
        "sft", {"data_path": str(run), "model_name": str(base), "max_length": 128},
        {"data_path": str(other), "model_name": str(other_base), "max_length": 40, "sft_data": "dataset", "roster": "emotional_support_four"},
        companions={"sft_data": {"data_path": str(ESCONV), "dataset": "ESConv"}, "roster": {"sft_data": "dataset", "data_path": str(ESCONV), "dataset": "ESConv"}},
    )  # fmt: skip
    require_effects(walk, tmp_path)


# Values for the flags both GRPO trainers share (GRPOSettings), on these tiny runs.
GRPO = {"num_generations": 4, "temperature": 0.5, "max_completion_length": 4, "vllm_mode": "server", "trl_vllm_server_url": "http://127.0.0.1:9",
        "multi_objective_aggregation": "sum_then_normalize", "scale_rewards": "batch", "lora_last_layers": 1, "prompt_bucket": 16,
        "steps_per_generation": 2, "vllm_gpu_memory_utilization": 0.5, "vllm_max_model_length": 256, "beta": 0.5, "algorithm": "ppo"}  # fmt: skip
GRPO_BASE = {"num_generations": 2, "max_completion_length": 8, "thinking": False, "gradient_checkpointing": False}
# the switches the base turns off: the walk turns them on; a held-out split for the settings that measure on it
GRPO_SWITCHES = {"thinking": True, "gradient_checkpointing": True}
GRPO_COMPANIONS = {"scale_rewards": {"multi_objective_aggregation": "sum_then_normalize"}, "prompt_bucket": {"compiled_decode": True},
                   "eval_steps": {"eval_fraction": 0.4}, "patience": {"eval_fraction": 0.4, "eval_steps": 1}}  # fmt: skip


@pytest.fixture(scope="module")
def persona_reward_models(tmp_path_factory, base, other_base, persona_pairs) -> tuple[Path, Path]:
    from mascot.settings import settings_from
    from mascot.train.config import RewardModelSettings
    from mascot.train.reward_model import train_reward_model

    root = tmp_path_factory.mktemp("reward_models")
    for name, model in (("first", base), ("second", other_base)):
        values = {"data_path": str(persona_pairs[0]), "model_name": str(model), "output_dir": str(root / name), "max_steps": 2, "batch_size": 4}
        train_reward_model(settings_from(RewardModelSettings, values, "reward model"))
    return root / "first", root / "second"


def test_every_speaker_grpo_flag_changes_the_speaker(tmp_path, base, other_base, persona_pairs, persona_reward_models):
    pairs, other = persona_pairs
    first, second = persona_reward_models
    walk = trainer_walk(
        "speaker", {"data_path": str(pairs), "model_name": str(base), "reward_model_path": str(first), "reward_max_length": 64, **GRPO_BASE},
        {**GRPO, **GRPO_SWITCHES, "data_path": str(other), "model_name": str(other_base), "reward_model_path": str(second), "reward_max_length": 32,
         "reward_model_weight": 0.5, "format_weight": 0.5, "conciseness_weight": 0.5, "length_budget": 2},
        companions=GRPO_COMPANIONS,
    )  # fmt: skip
    require_effects(walk, tmp_path)


@pytest.fixture(scope="module")
def director_inputs(tmp_path_factory, warm_director) -> dict:
    """Recorded episodes (two runs), a plug-in judge and a group reward model, for the warmed-up
    tiny Director of test_train_director."""
    from test_train_director import episode, judge_file, write_episode_run

    from mascot.settings import settings_from
    from mascot.train.config import GroupRewardModelSettings
    from mascot.train.reward_model import train_group_reward_model

    root = tmp_path_factory.mktemp("director")
    run = write_episode_run(root / "directed_ED_tiny", [episode(i) for i in range(4)])
    other = write_episode_run(root / "other_ED_tiny", [episode(i, speakers=("The Catalyst", "The Anchor")) for i in range(4, 7)])
    grm, pairs = root / "group_reward_model", root / "grm_pairs"
    write_jsonl(pairs / "group_pairs.jsonl", keyword_pairs(n_prompts=8, kind="episode"))
    write_run_config(pairs, dataset="EmpatheticDialogues")
    train_group_reward_model(settings_from(GroupRewardModelSettings, {"data_path": str(pairs), "model_name": str(warm_director), "output_dir": str(grm),
                                                                       "max_steps": 1, "batch_size": 4}, "group reward model"))  # fmt: skip
    return {"run": run, "other": other, "model": warm_director, "judge": judge_file(root), "grm": grm}


def test_every_director_grpo_flag_changes_the_director(tmp_path, other_base, director_inputs):
    d = director_inputs
    no_judge = {"reward_judge": None, "group_reward_model_path": str(d["grm"])}
    walk = trainer_walk(
        "director-grpo",
        {"data_path": str(d["run"]), "model_name": str(d["model"]), "reward_judge": d["judge"], "directive_opening": False, "suffix_rounds": 1,
         **GRPO_BASE},
        {**GRPO, **GRPO_SWITCHES, "data_path": str(d["other"]), "model_name": str(other_base), "group_reward_model_path": str(d["grm"]), "roster": "emotional_support_four",
         "rollout_server_url": "http://127.0.0.1:9/v1", "rollout_model": "some/rollout-model", "rollout_endpoints": "http://127.0.0.1:9/v1",
         "speaker_adapter": str(FIXTURES / "lora_adapter"), "rollouts": "recorded", "rollout_director": "policy", "rollout_temperature": 0.2,
         "rollout_repetition_penalty": 1.2, "decision_points_per_episode": 1, "user_response_probability": 0.5, "group_reward_weight": 0.5,
         "reward_judge": "python:mascot.judge.rules:persona_rules", "reward_judge_url": "http://127.0.0.1:9/v1", "diversity_weight": 0.5,
         "parse_failure_reward": -2.0, "group_reward_max_length": 32, "rollout_concurrency": 1, "max_completion_length": 6},
        companions={**GRPO_COMPANIONS, "group_reward_model_path": {"reward_judge": None}, "group_reward_max_length": no_judge,
                    "reward_judge_url": {"reward_judge": "some/judge-model"}, "rollout_endpoints": {"rollout_server_url": "http://127.0.0.1:9/v1"}},
    )  # fmt: skip
    require_effects(walk, tmp_path)


def test_every_merge_lora_flag_changes_the_merged_model(tmp_path, adapter, other_base):
    import shutil

    from safetensors.torch import load_file, save_file

    from mascot.commands.train import run_merge
    from mascot.train.config import MergeSettings

    _, folder, _ = adapter
    other = tmp_path / "inputs" / "other_adapter"  # the same adapter with other weights
    shutil.copytree(folder, other)
    weights = load_file(other / "adapter_model.safetensors")
    save_file({name: tensor * 2 for name, tensor in weights.items()}, other / "adapter_model.safetensors")
    walk = Walk(
        MergeSettings, run_merge, {"adapter": str(folder), "output": "merged"},
        values={"adapter": str(other), "output": "elsewhere", "base_model": str(other_base), "dtype": "bfloat16"},
        setups={"overwrite": lambda root: (root / "merged").mkdir() or (root / "merged" / "notes.txt").write_text("an earlier merge")},
    )  # fmt: skip
    require_effects(walk, tmp_path / "walk")

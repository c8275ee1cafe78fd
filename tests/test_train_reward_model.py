"""Reward models learn a learnable preference, report held-out accuracy, and reload for scoring."""

from __future__ import annotations

import json

import pytest
from train_helpers import (  # noqa: F401 - fixtures
    KEYWORD,
    base,
    keyword_pairs,
    keyword_pairs_run,
    one_thread_per_module,
    single_thread,
    tiny_model,
    write_jsonl,
    write_run_config,
)

from mascot.train.artefact import read_metadata
from mascot.train.config import GroupRewardModelSettings, RewardModelSettings
from mascot.train.reward_model import train_group_reward_model, train_reward_model
from mascot.train.scoring import RewardModelScorer


@pytest.fixture(scope="module")
def stage1_run(tmp_path_factory):
    return keyword_pairs_run(tmp_path_factory.mktemp("runs") / "individual_ED_tiny", n_prompts=80)


@pytest.fixture(scope="module")
def trained(base, stage1_run, tmp_path_factory):
    settings = RewardModelSettings(
        data_path=str(stage1_run),
        model_name=str(base),
        output_dir=str(tmp_path_factory.mktemp("out") / "rm"),
        batch_size=16,
        learning_rate=3e-3,
        eval_fraction=0.25,
    )
    return train_reward_model(settings)


def test_reward_model_learns_the_preference_on_held_out_prompts(trained):
    evaluation = trained.metadata.evaluation
    assert evaluation["heldout_pairs"] == 40  # 20 of 80 prompts, both their pairs
    assert evaluation["heldout_pairwise_accuracy"] >= 0.9
    assert evaluation["heldout_mean_score_gap"] > 0


def test_artefact_is_an_adapter_with_a_trained_score_head_and_metadata(trained, stage1_run, base):
    out = trained.output_dir
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert adapter["task_type"] == "SEQ_CLS" and "score" in adapter["modules_to_save"]
    assert adapter["r"] == 16 and adapter["lora_alpha"] == 32 and set(adapter["target_modules"]) == {"q_proj", "k_proj", "v_proj", "o_proj"}
    meta = read_metadata(out)
    assert meta.role == "persona_reward_model" and meta.weights == "lora_adapter" and meta.task == "sequence_classification"
    assert meta.base_model == str(base) and meta.dataset == "EmpatheticDialogues"
    assert meta.rubric_version == "paper_v1" and meta.roster == "emotional_support@1.0" and meta.personas == ["The Anchor"]
    assert meta.data_files[0].path.endswith("pairs.jsonl") and len(meta.data_files[0].sha256) == 64
    assert meta.hyperparameters["gradient_accumulation_steps"] * meta.hyperparameters["per_device_batch_size"] == 16
    assert {"torch", "transformers", "trl", "peft"} <= set(meta.library_versions)
    assert not list(out.glob("checkpoint-*"))


def test_reloaded_reward_model_scores_like_the_trained_one(trained):
    scorer = RewardModelScorer.from_path(str(trained.output_dir))
    prompt = [{"role": "user", "content": "About work: I feel stuck (999)."}]
    good, bad = scorer.score(
        [prompt + [{"role": "assistant", "content": f"let us {KEYWORD} together"}], prompt + [{"role": "assistant", "content": "well, that is work"}]]
    )
    assert good > bad


def test_group_reward_model_full_weights(base, tmp_path):
    run = tmp_path / "group_ED_tiny"
    write_jsonl(run / "group_pairs.jsonl", keyword_pairs(n_prompts=12, per_prompt=1, kind="episode"))
    write_run_config(run, dataset="EmpatheticDialogues")
    settings = GroupRewardModelSettings(
        data_path=str(run), model_name=str(base), output_dir=str(tmp_path / "grm"), batch_size=8, max_steps=2, full_weights=True, eval_fraction=0.2
    )
    outcome = train_group_reward_model(settings)
    out = outcome.output_dir
    assert (out / "model.safetensors").exists() and not (out / "adapter_config.json").exists()
    assert not (out / ".adapter").exists()
    meta = read_metadata(out)
    assert (meta.role, meta.weights, meta.trainer) == ("group_reward_model", "full", "reward")
    assert meta.evaluation["heldout_pairs"] > 0
    assert meta.trajectory_format == 1  # pairs written without the field: format 1, which the Director's scorer then renders
    assert len(RewardModelScorer.from_path(str(out)).score([[{"role": "user", "content": "hi"}]])) == 1


def test_episode_pairs_in_two_trajectory_formats_are_refused_before_a_model_loads(tmp_path):
    from mascot.train.runtime import TrainingSetupError

    run = tmp_path / "group_ED_tiny"
    pairs = keyword_pairs(n_prompts=4, per_prompt=1, kind="episode")
    pairs[0] = pairs[0].model_copy(update={"trajectory_format": 2})
    write_jsonl(run / "group_pairs.jsonl", pairs)
    write_run_config(run, dataset="EmpatheticDialogues")
    settings = GroupRewardModelSettings(data_path=str(run), model_name=str(tmp_path / "no-model"), output_dir=str(tmp_path / "grm"))
    with pytest.raises(TrainingSetupError, match=r"trajectory formats \[1, 2\]"):
        train_group_reward_model(settings)


def test_resume_continues_from_the_last_checkpoint(base, stage1_run, tmp_path):
    common = dict(
        data_path=str(stage1_run), model_name=str(base), output_dir=str(tmp_path / "rm"), batch_size=16, save_steps=2, keep_checkpoints=True
    )
    first = train_reward_model(RewardModelSettings(**common, max_steps=2))
    (first.output_dir / "mascot_metadata.json").unlink()  # as if the run had been killed after its checkpoint
    resumed = train_reward_model(RewardModelSettings(**common, max_steps=4, resume=True))
    assert resumed.metadata.train_metrics["resumed_from"] == "checkpoint-2"
    assert resumed.metadata.train_metrics["global_steps"] == 4
    from mascot.errors import MascotError

    with pytest.raises(MascotError, match="already exists"):
        train_reward_model(RewardModelSettings(**common, max_steps=4))


def test_resume_from_the_final_checkpoint_takes_no_step_past_max_steps(base, stage1_run, tmp_path):
    common = dict(
        data_path=str(stage1_run), model_name=str(base), output_dir=str(tmp_path / "rm"), batch_size=16, save_steps=2, keep_checkpoints=True
    )
    first = train_reward_model(RewardModelSettings(**common, max_steps=2))
    scores = RewardModelScorer.from_path(str(first.output_dir)).score(
        [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": KEYWORD}]]
    )
    (first.output_dir / "mascot_metadata.json").unlink()  # killed after its last checkpoint, before its final save
    for name in ("adapter_model.safetensors", "model.safetensors"):
        (first.output_dir / name).unlink(missing_ok=True)
    resumed = train_reward_model(RewardModelSettings(**common, max_steps=2, resume=True))
    assert resumed.metadata.train_metrics["resumed_from"] == "checkpoint-2"
    assert resumed.metadata.train_metrics["global_steps"] == 2  # not 3
    again = RewardModelScorer.from_path(str(resumed.output_dir)).score(
        [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": KEYWORD}]]
    )
    assert again == pytest.approx(scores, abs=1e-4)  # the checkpoint's weights, saved as the result
    assert resumed.metadata.evaluation["heldout_pairs"] > 0


def test_cli_trains_and_reports_held_out_accuracy(base, stage1_run, tmp_path):
    from typer.testing import CliRunner

    from mascot.cli.app import app

    out = tmp_path / "cli_rm"
    args = [
        "train",
        "reward-model",
        "--data-path",
        str(stage1_run),
        "--model",
        str(base),
        "--output-dir",
        str(out),
        "--max-steps",
        "2",
        "--batch-size",
        "8",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "held-out pairwise accuracy" in result.output and str(out) in result.output
    meta = read_metadata(out)
    assert meta.train_metrics["global_steps"] == 2 and meta.hyperparameters["batch_size"] == 8


def test_pairwise_accuracy_scores_each_distinct_conversation_once():
    from mascot.schema import PreferencePair
    from mascot.train.scoring import pairwise_accuracy

    class LengthScorer:  # a longer reply scores higher; records what it was asked to score
        def __init__(self):
            self.seen = []

        def score(self, conversations):
            self.seen.extend(conversations)
            return [float(len(c[-1]["content"])) for c in conversations]

    prompt = [{"role": "user", "content": "hi"}]
    replies = ["a", "bb", "ccc"]

    def pair(chosen, rejected):
        return PreferencePair(
            prompt=prompt, chosen=[{"role": "assistant", "content": chosen}], rejected=[{"role": "assistant", "content": rejected}], margin=1.0
        )

    pairs = [pair("ccc", "a"), pair("ccc", "bb"), pair("bb", "a"), pair("a", "bb")]  # 4 pairs of 3 distinct replies
    scorer = LengthScorer()
    result = pairwise_accuracy(scorer, pairs)
    assert sorted(c[-1]["content"] for c in scorer.seen) == replies  # each once
    assert result == {"pairwise_accuracy": 0.75, "mean_score_gap": 0.75, "num_pairs": 4}  # gaps 2, 1, 1, -1


def test_held_out_accuracy_is_also_given_per_kind_when_cross_persona_pairs_are_held_out(monkeypatch):
    from mascot.train import reward_model as rm

    pairs = keyword_pairs(n_prompts=5, per_prompt=1)
    held_out = pairs[:2] + [p.model_copy(update={"rejected_written_for": "The Beacon"}) for p in pairs[2:]]
    monkeypatch.setattr(rm, "score_pair_sides", lambda scorer, pairs: ([1.0, 0.0, 1.0, 1.0, 0.0], [0.5] * 5))
    monkeypatch.setattr(rm, "pairwise_accuracy", lambda scorer, pairs: {"pairwise_accuracy": None, "num_pairs": 0})
    evaluation = rm.evaluate_pairs(None, None, held_out, [], 128)
    assert evaluation["heldout_pairwise_accuracy"] == 0.6 and evaluation["heldout_pairs"] == 5
    assert evaluation["heldout_by_kind"] == {"own": {"pairs": 2, "accuracy": 0.5}, "cross_persona": {"pairs": 3, "accuracy": 0.6667}}
    assert "heldout_by_kind" not in rm.evaluate_pairs(None, None, pairs, [], 128)  # no cross-persona pair: no split

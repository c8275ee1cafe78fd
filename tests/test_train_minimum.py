"""No success for doing nothing: every trainer given too little to make one optimizer step stops
before training with one line (what it had, what one step needs, what to change), writes nothing,
and the CLI exits non-zero; a run that still ends at step 0 fails instead of saving an artefact."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from test_train_director import directive_pairs, episode
from test_train_sft import candidates
from train_helpers import base, keyword_pairs, one_thread_per_module, write_jsonl, write_run_config  # noqa: F401 - fixtures

from mascot.errors import MascotError
from mascot.train import config as cfg
from mascot.train.data import TrainingDataError
from mascot.train.guard import NothingTrained, group_prompts_per_step, require_schedule


def pairs_run(folder: Path, pairs, name: str = "pairs.jsonl") -> Path:
    write_jsonl(folder / name, pairs)
    write_run_config(folder, dataset="EmpatheticDialogues")
    return folder


def one_line(exc: BaseException) -> str:
    message = str(exc)
    assert "\n" not in message, message
    return message


def cli(*argv: str):
    from typer.testing import CliRunner

    from mascot.cli.app import app

    return CliRunner().invoke(app, list(argv))


def test_one_grpo_step_needs_batch_over_generations_prompts():
    assert group_prompts_per_step(cfg.SpeakerGRPOSettings(data_path="x")) == 2  # 16 completions, 8 per prompt
    assert group_prompts_per_step(cfg.DirectorGRPOSettings(data_path="x", batch_size=12, num_generations=4)) == 3


@pytest.mark.parametrize(
    "changes, flag", [({"max_steps": 0}, "--max-steps 0"), ({"num_train_epochs": 0.0}, "--epochs 0"), ({"num_train_epochs": -1.0}, "--epochs -1")]
)
def test_a_schedule_of_zero_steps_is_refused(changes, flag):
    with pytest.raises(TrainingDataError, match=flag):
        require_schedule(cfg.RewardModelSettings(data_path="x", **changes))
    require_schedule(cfg.RewardModelSettings(data_path="x", max_steps=3, num_train_epochs=0.0))  # --max-steps wins over epochs


def test_speaker_with_fewer_prompts_than_one_step_stops_before_anything_is_written(base, tmp_path):
    run = pairs_run(tmp_path / "individual_ED_tiny", keyword_pairs(n_prompts=1, per_prompt=3))
    out = tmp_path / "speaker"
    result = cli("train", "speaker", "--data-path", str(run), "--model", str(base), "--output-dir", str(out), "--reward-model-weight", "0")
    assert result.exit_code != 0
    message = one_line(result.exception)
    assert "1 distinct prompts in 3 pairs" in message and "one step needs 2" in message and "--batch-size" in message
    assert not out.exists()
    limited = cli(
        "train",
        "speaker",
        "--data-path",
        str(pairs_run(tmp_path / "many", keyword_pairs(n_prompts=6, per_prompt=1))),
        "--model",
        str(base),
        "--output-dir",
        str(out),
        "--reward-model-weight",
        "0",
        "--batch-size",
        "8",
        "--num-generations",
        "2",
        "--limit",
        "3",
    )
    assert limited.exit_code != 0 and "6 distinct prompts in 6 pairs" in str(limited.exception) and "3 kept by --limit" in str(limited.exception)
    assert "one step needs 4" in str(limited.exception) and not out.exists()


def test_director_grpo_with_fewer_decision_points_than_one_step_stops(base, tmp_path):
    from mascot.train.director_grpo import train_director_grpo

    run = tmp_path / "directed_ED_tiny"
    write_jsonl(run / "episodes.jsonl", [episode(0, speakers=("The Anchor",))])  # one Speaker round: one decision point
    write_run_config(run, dataset="EmpatheticDialogues")
    settings = cfg.DirectorGRPOSettings(
        data_path=str(run), model_name=str(base), output_dir=str(tmp_path / "director"), batch_size=4, num_generations=2, group_reward_weight=0.0
    )
    with pytest.raises(TrainingDataError) as caught:
        train_director_grpo(settings, rollout_clients={})
    message = one_line(caught.value)
    assert "too few decision points" in message and "1 sampled from 1 episodes" in message and "one step needs 2" in message
    assert "--decision-points-per-episode" in message and not (tmp_path / "director").exists()


@pytest.mark.parametrize(
    "command, file, records",
    [
        ("reward-model", "pairs.jsonl", lambda: keyword_pairs(4, 1)),
        ("group-reward-model", "group_pairs.jsonl", lambda: keyword_pairs(4, 1, kind="episode")),
        ("director-dpo", "directive_pairs.jsonl", lambda: directive_pairs(4)),
        ("sft", "candidates.jsonl", lambda: candidates(4)),
    ],
)
def test_pairwise_and_sft_trainers_with_no_record_left_stop_with_the_counts(base, tmp_path, command, file, records):
    run = pairs_run(tmp_path / "run", records(), name=file)
    out = tmp_path / "out"
    data_flag = "--episode-dataset-path" if command == "director-dpo" else "--data-path"
    common = ["train", command, data_flag, str(run), "--model", str(base), "--output-dir", str(out)]
    result = cli(*common, "--limit", "0")
    assert result.exit_code != 0 and isinstance(result.exception, TrainingDataError)
    message = one_line(result.exception)
    assert "left to train on" in message and "4 read from" in message and "one optimizer step needs at least 1" in message
    assert "--eval-fraction" in message and not out.exists()
    zero_steps = cli(*common, "--max-steps", "0")
    assert zero_steps.exit_code != 0 and "--max-steps 0 trains zero optimizer steps" in one_line(zero_steps.exception) and not out.exists()


class StubTrainer:
    """A Trainer that 'trains' without taking a step (what TRL does when its loader yields nothing)."""

    def __init__(self, output: Path) -> None:
        self.args = SimpleNamespace(output_dir=str(output))
        self.state = SimpleNamespace(global_step=0, log_history=[])
        self.callbacks = []

    def add_callback(self, callback) -> None:
        self.callbacks.append(callback)

    def remove_callback(self, kind) -> None:
        self.callbacks = [c for c in self.callbacks if not isinstance(c, kind)]

    def train(self, resume_from_checkpoint=None):
        return SimpleNamespace(metrics={}, training_loss=0.0)


def test_the_backstop_fails_a_run_that_ended_at_step_zero(tmp_path):
    from mascot.train.common import run_training

    out = tmp_path / "empty"
    out.mkdir()
    with pytest.raises(NothingTrained, match="0 optimizer steps"):
        run_training(StubTrainer(out), None)
    assert not out.exists()  # the empty folder the run opened is gone: no artefact, no leftover


def test_a_real_grpo_run_that_takes_no_step_is_a_failure_not_an_adapter(base, tmp_path, monkeypatch):
    """The pre-check switched off: TRL's sampler drops the incomplete group and the run ends at
    step 0; the backstop turns that into an error and no metadata is written."""
    from mascot.train import speaker_grpo
    from mascot.train.artefact import METADATA_FILE

    monkeypatch.setattr(speaker_grpo, "require_group_prompts", lambda *a, **k: None)
    run = pairs_run(tmp_path / "individual_ED_tiny", keyword_pairs(n_prompts=1, per_prompt=1))
    out = tmp_path / "speaker"
    settings = cfg.SpeakerGRPOSettings(
        data_path=str(run),
        model_name=str(base),
        output_dir=str(out),
        reward_model_weight=0.0,
        batch_size=4,
        num_generations=2,
        max_steps=2,
        max_completion_length=4,
    )
    with pytest.raises(MascotError, match="ended after 0 optimizer steps"):
        speaker_grpo.train_speaker(settings)
    assert not (out / METADATA_FILE).exists() and not list(out.glob("adapter_*"))

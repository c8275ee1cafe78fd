"""Best, not last: trainers with a held-out split keep the step that measured best, the last one
beside it, and a run whose learning rate blows up stops early keeping its best weights."""

from __future__ import annotations

import math

import pytest
from train_helpers import base, keyword_pairs_run, one_thread_per_module  # noqa: F401 - fixtures

from mascot.train import reward_model
from mascot.train.artefact import read_metadata
from mascot.train.best import LAST_FOLDER
from mascot.train.config import DirectorDPOSettings, RewardModelSettings, SFTSettings
from mascot.train.reward_model import train_reward_model
from mascot.train.scoring import RewardModelScorer


@pytest.fixture(scope="module")
def pairs_run(tmp_path_factory):
    return keyword_pairs_run(tmp_path_factory.mktemp("runs") / "individual_ED_tiny", n_prompts=32)


def adapter_tensors(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def settings_for(pairs_run, base, out, **changes) -> RewardModelSettings:
    common = dict(
        data_path=str(pairs_run),
        model_name=str(base),
        output_dir=str(out),
        batch_size=4,
        learning_rate=3e-3,
        eval_fraction=0.25,
        max_steps=8,
        save_steps=4,
        eval_steps=2,
        logging_steps=1,
        head_init="random",
    )
    return RewardModelSettings(**{**common, **changes})


def test_the_best_measured_step_is_the_artefact_and_the_last_is_kept_beside_it(base, pairs_run, tmp_path, monkeypatch):
    measured = iter([0.6, 0.9, 0.7, 0.5])  # steps 2, 4, 6, 8: step 4 is the best
    monkeypatch.setattr(reward_model, "heldout_accuracy", lambda *a, **k: next(measured))
    outcome = train_reward_model(settings_for(pairs_run, base, tmp_path / "rm", keep_checkpoints=True))

    selection = outcome.metadata.train_metrics["selection"]
    assert selection["measurements"] == [[2, 0.6], [4, 0.9], [6, 0.7], [8, 0.5]]
    assert (selection["best_step"], selection["best_value"], selection["last_step"], selection["last_value"]) == (4, 0.9, 8, 0.5)
    assert selection["last_saved_in"] == LAST_FOLDER and selection["stopped_early"] is None
    best, at_step_4, last = (adapter_tensors(f) for f in (outcome.output_dir, outcome.output_dir / "checkpoint-4", outcome.output_dir / LAST_FOLDER))
    assert best.keys() == at_step_4.keys() == last.keys()
    assert all(best[k].equal(at_step_4[k]) for k in best)  # the artefact holds the weights of step 4, exactly
    assert any(not best[k].equal(last[k]) for k in best)
    assert read_metadata(outcome.output_dir).train_metrics["selection"]["best_step"] == 4
    assert "kept step 4 of 8 (best held-out pairwise accuracy; the last is in last/)" in reward_model.describe(outcome)


def test_eval_steps_0_keeps_the_last_step(base, pairs_run, tmp_path, monkeypatch):
    monkeypatch.setattr(reward_model, "heldout_accuracy", lambda *a, **k: pytest.fail("measured with --eval-steps 0"))
    outcome = train_reward_model(settings_for(pairs_run, base, tmp_path / "rm", eval_steps=0))
    assert "selection" not in outcome.metadata.train_metrics and not (outcome.output_dir / LAST_FOLDER).exists()


def test_a_learning_rate_that_blows_up_stops_the_run_early_and_keeps_the_best_weights(base, pairs_run, tmp_path, monkeypatch, capsys):
    from transformers import TrainerCallback

    class BlowUp(TrainerCallback):  # from step 5 on, every optimizer step runs at a learning rate of 1e30
        def on_step_begin(self, args, state, control, optimizer=None, **kwargs):
            if state.global_step >= 4:
                for group in optimizer.param_groups:
                    group["lr"] = 1e30

    real_keep_best = reward_model.keep_best

    def keep_best_and_blow_up(trainer, **kwargs):
        trainer.add_callback(BlowUp())
        return real_keep_best(trainer, **kwargs)

    monkeypatch.setattr(reward_model, "keep_best", keep_best_and_blow_up)
    outcome = train_reward_model(settings_for(pairs_run, base, tmp_path / "rm", max_steps=12))

    selection = outcome.metadata.train_metrics["selection"]
    stopped_at = outcome.metadata.train_metrics["global_steps"]
    assert stopped_at in (5, 6)  # weights of 1e30 overflow at the next forward pass at the latest
    assert selection["stopped_early"].startswith(f"training stopped at step {stopped_at}: ")
    assert "not a finite number" in selection["stopped_early"] or "became NaN or infinite" in selection["stopped_early"]
    assert selection["best_step"] in (2, 4) and selection["last_saved_in"] is None and selection["diverged"]  # NaN weights are not kept
    assert "kept the best weights, step" in capsys.readouterr().out
    assert all(bool(t.isfinite().all()) for t in adapter_tensors(outcome.output_dir).values())
    scores = RewardModelScorer.from_path(str(outcome.output_dir)).score(
        [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]]
    )
    assert math.isfinite(scores[0])
    assert outcome.metadata.evaluation["heldout_pairwise_accuracy"] == selection["best_value"]  # the final figure is the kept step's


def test_every_trainer_measures_every_save_steps_unless_told_and_the_grpo_ones_hold_out_only_when_asked():
    from mascot.train.config import DirectorGRPOSettings, SpeakerGRPOSettings

    for settings in (RewardModelSettings, DirectorDPOSettings, SFTSettings, SpeakerGRPOSettings, DirectorGRPOSettings):
        assert settings(data_path="x", save_steps=25).eval_interval() == 25
        assert settings(data_path="x", eval_steps=0).eval_interval() == 0
    for settings in (SpeakerGRPOSettings, DirectorGRPOSettings):  # sampling for held-out contexts costs generation: asked for
        assert settings(data_path="x").eval_fraction == 0
    from mascot.train.guard import require_measuring
    from mascot.train.runtime import TrainingSetupError

    with pytest.raises(TrainingSetupError, match="--eval-steps and --patience must be 0 or more, got -3 and 0"):
        require_measuring(RewardModelSettings(data_path="x", eval_steps=-3))


def test_patience_stops_a_run_whose_held_out_figure_keeps_falling_and_keeps_the_best(base, pairs_run, tmp_path, monkeypatch):
    measured = iter([0.8, 0.7, 0.6, 0.5, 0.4])  # steps 2, 4, 6: worse twice in a row after step 2
    monkeypatch.setattr(reward_model, "heldout_accuracy", lambda *a, **k: next(measured))
    outcome = train_reward_model(settings_for(pairs_run, base, tmp_path / "rm", max_steps=12, patience=2))
    selection = outcome.metadata.train_metrics["selection"]
    assert outcome.metadata.train_metrics["global_steps"] == 6 and selection["best_step"] == 2
    assert selection["stopped_early"] == (
        "training stopped at step 6: held-out pairwise accuracy 0.6000 is worse than the best (0.8000 at step 2) for 2 measurements in a row (--patience)"
    )
    assert not selection["diverged"] and selection["last_saved_in"] == LAST_FOLDER  # a finite last step is kept beside the best


class Killed(Exception):
    """Stands for the process dying mid-run."""


def test_a_resumed_run_still_chooses_among_the_steps_it_measured_before_it_was_killed(base, pairs_run, tmp_path, monkeypatch):
    def measures(*values):
        it = iter(values)

        def measure(*a, **k):
            value = next(it)
            if isinstance(value, Exception):
                raise value
            return value

        return measure

    monkeypatch.setattr(reward_model, "heldout_accuracy", measures(0.6, 0.9, Killed()))  # killed at step 6, after checkpoint-4
    settings = settings_for(pairs_run, base, tmp_path / "rm", keep_checkpoints=True)
    with pytest.raises(Killed):
        train_reward_model(settings)
    assert (tmp_path / "rm" / ".best" / "best.pt").is_file()  # the best so far, step 4, on disk

    monkeypatch.setattr(reward_model, "heldout_accuracy", measures(0.7, 0.5))  # steps 6 and 8 after the resume: both worse
    outcome = train_reward_model(settings_for(pairs_run, base, tmp_path / "rm", keep_checkpoints=True, resume=True))
    selection = outcome.metadata.train_metrics["selection"]
    assert outcome.metadata.train_metrics["resumed_from"] == "checkpoint-4"
    assert selection["measurements"] == [[2, 0.6], [4, 0.9], [6, 0.7], [8, 0.5]] and selection["best_step"] == 4
    best, at_step_4 = adapter_tensors(outcome.output_dir), adapter_tensors(outcome.output_dir / "checkpoint-4")
    assert all(best[k].equal(at_step_4[k]) for k in best)
    assert not (outcome.output_dir / ".best").exists()


def test_a_best_file_that_does_not_load_is_set_aside_with_a_warning(tmp_path, caplog):
    from mascot.train.best import BEST_FILE, Selection, load_best_state

    (tmp_path / BEST_FILE).write_bytes(b"not a torch file")
    selection = Selection(figure="held-out pairwise accuracy", higher_is_better=True, every=2)
    with caplog.at_level("WARNING", logger="mascot.train.best"):
        assert load_best_state(tmp_path, selection) is False
    assert "does not load" in caplog.text and selection.best_step is None and selection.snapshot is None

"""A reward model that scores the mean of its last N positions (`--score-window`)."""

from __future__ import annotations

import dataclasses

import pytest
from train_helpers import base, keyword_pairs, one_thread_per_module, single_thread, write_jsonl, write_run_config  # noqa: F401 - fixtures

from mascot.train.config import RewardModelSettings
from mascot.train.reward_model import train_reward_model


def trained_on_keyword_pairs(base, tmp_path, **pooling):
    """One step of reward-model training on a learnable pair set: the pairs, the settings, the outcome."""
    run = tmp_path / "individual_ED_tiny"
    pairs = keyword_pairs(n_prompts=16, per_prompt=2)
    write_jsonl(run / "pairs.jsonl", pairs)
    write_run_config(run, dataset="EmpatheticDialogues")
    settings = RewardModelSettings(
        data_path=str(run), model_name=str(base), batch_size=8, max_steps=1, eval_fraction=0.25, output_dir=str(tmp_path / "rm"), **pooling
    )
    return pairs, settings, train_reward_model(settings)


def test_the_moving_average_covers_the_last_n_positions_up_to_each():
    import torch

    from mascot.train.score_window import moving_average

    hidden = torch.arange(12, dtype=torch.float32).reshape(1, 6, 2)  # positions 0..5, features (2t, 2t+1)
    out = moving_average(hidden, 3)
    assert out.shape == hidden.shape
    assert out[0, 0].tolist() == [0.0, 1.0]  # one position so far
    assert out[0, 1].tolist() == [1.0, 2.0]  # mean of positions 0 and 1
    assert out[0, 5].tolist() == pytest.approx([8.0, 9.0])  # mean of positions 3, 4 and 5
    assert moving_average(hidden.half(), 3).dtype == torch.float16


def test_a_windowed_classifier_scores_the_mean_of_the_last_positions_of_each_padded_row(base):
    import torch

    from mascot.train.models import load_sequence_classifier
    from mascot.train.score_window import install_score_window

    model = load_sequence_classifier(str(base), 0)
    model.eval()
    short, long = [5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15]
    with torch.no_grad():
        states = {len(s): model.model(input_ids=torch.tensor([s])).last_hidden_state[0] for s in (short, long)}
        install_score_window(model, 3)
        install_score_window(model, 3)  # installing twice is a no-op, not a second average
        ids = torch.tensor([short + [0] * 3, long])
        mask = torch.tensor([[1] * 4 + [0] * 3, [1] * 7])
        scores = model(input_ids=ids, attention_mask=mask).logits[:, 0]
    expected = [model.score(states[n][-3:].mean(0)).item() for n in (4, 7)]
    assert scores.tolist() == pytest.approx(expected, abs=1e-5)
    with pytest.raises(ValueError, match="already scores a window of 3"):
        install_score_window(model, 5)


def test_a_windowed_reward_model_records_its_window_and_reloads_to_the_same_scores(base, tmp_path):
    from mascot.train.artefact import read_metadata
    from mascot.train.data import split_by_prompt
    from mascot.train.scoring import RewardModelScorer, pairwise_accuracy

    pairs, settings, outcome = trained_on_keyword_pairs(base, tmp_path, score_window=6)
    meta = read_metadata(outcome.output_dir)
    assert meta.score_window == 6 and meta.hyperparameters["score_window"] == 6
    scorer = RewardModelScorer.from_path(str(outcome.output_dir), max_length=settings.max_length)
    _, held_out = split_by_prompt(pairs, 0.25, settings.seed)
    reloaded = pairwise_accuracy(scorer, held_out)  # what training measured on the model in memory
    assert reloaded["pairwise_accuracy"] == meta.evaluation["heldout_pairwise_accuracy"] and reloaded["num_pairs"] == meta.evaluation["heldout_pairs"]
    conversations = [p.prompt + p.chosen for p in pairs[:4]]
    windowed = scorer.score(conversations)
    meta.score_window = 0  # the same weights read at the last token: other scores
    (outcome.output_dir / "mascot_metadata.json").write_text(meta.model_dump_json(), encoding="utf-8")
    last_token = RewardModelScorer.from_path(str(outcome.output_dir)).score(conversations)
    assert windowed != pytest.approx(last_token, abs=1e-4)


def test_a_negative_score_window_is_one_line_and_writes_nothing(tmp_path):
    from mascot.errors import MascotError

    with pytest.raises(MascotError, match="--score-window must be 0 .* got -2"):
        train_reward_model(
            RewardModelSettings(data_path=str(tmp_path / "none"), model_name="unused", output_dir=str(tmp_path / "out"), score_window=-2)
        )
    assert not (tmp_path / "out").exists()


def test_a_reward_model_on_the_first_layers_keeps_them_through_reload_and_merge(base, tmp_path):
    from mascot.train.artefact import read_metadata
    from mascot.train.merge import merge_adapter
    from mascot.train.models import load_reward_model
    from mascot.train.scoring import RewardModelScorer

    pairs, settings, outcome = trained_on_keyword_pairs(base, tmp_path, score_layers=1, score_window=4)
    assert read_metadata(outcome.output_dir).score_layers == 1
    assert 0 <= outcome.metadata.train_metrics["probe_heldout_accuracy"] <= 1  # the head alone, before fine-tuning
    model, _ = load_reward_model(str(outcome.output_dir))
    assert len(model.model.layers) == 1 and model.config.num_hidden_layers == 1
    merged = merge_adapter(outcome.output_dir, tmp_path / "merged")
    assert read_metadata(merged).score_layers == 1 and read_metadata(merged).score_window == 4
    conversations = [p.prompt + p.chosen for p in pairs[:4]]
    adapter_scores = RewardModelScorer.from_path(str(outcome.output_dir)).score(conversations)
    assert RewardModelScorer.from_path(str(merged)).score(conversations) == pytest.approx(adapter_scores, abs=1e-4)
    with pytest.raises(Exception, match="--score-layers 9: .* has only 2 decoder layers"):
        train_reward_model(dataclasses.replace(settings, score_layers=9, output_dir=str(tmp_path / "deep")))

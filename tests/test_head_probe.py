"""The reward head fitted on the frozen model before fine-tuning (`--head-init probe`, LP-FT)."""

from __future__ import annotations

import pytest
from train_helpers import base, keyword_pairs, one_thread_per_module, single_thread, write_jsonl, write_run_config  # noqa: F401 - fixtures

from mascot.train.config import RewardModelSettings
from mascot.train.reward_model import train_reward_model


def test_the_fitted_head_ranks_the_pairs_it_was_fitted_on():
    import torch

    from mascot.train.head_probe import bradley_terry_head

    generator = torch.Generator().manual_seed(0)
    noise = torch.randn(200, 6, generator=generator)
    differences = noise * torch.tensor([1.0, 100.0, 1.0, 1.0, 1.0, 1.0])  # feature 1 is noise on a larger scale
    differences[:, 0] = 0.5 + 0.1 * torch.rand(200, generator=generator)  # feature 0 always favours the chosen reply
    weight, accuracy = bradley_terry_head(differences)
    assert accuracy == 1.0
    assert weight[0] > 0 and float((differences @ weight > 0).float().mean()) == 1.0  # returned in the features' own units
    assert abs(weight[1]) * 100 < weight[0]  # the noise gets no weight for its scale


def test_the_probe_writes_the_head_the_classifier_then_scores_with(base):
    import torch
    from transformers import AutoTokenizer

    from mascot.train.data import tokenized_pair_rows
    from mascot.train.head_probe import fit_head_by_probe
    from mascot.train.models import load_sequence_classifier

    tokenizer = AutoTokenizer.from_pretrained(str(base))
    rows, _ = tokenized_pair_rows(keyword_pairs(n_prompts=30, per_prompt=2), tokenizer, 128)
    model = load_sequence_classifier(str(base), tokenizer.pad_token_id)
    before, mode = model.score.weight.detach().clone(), model.training
    figures = fit_head_by_probe(model, rows, tokenizer.pad_token_id)
    assert not torch.equal(before, model.score.weight)
    assert figures["probe_sequences"] == len({tuple(r[k]) for r in rows for k in ("chosen_ids", "rejected_ids")})
    assert isinstance(model.score, torch.nn.Linear) and model.training == mode  # the head and the mode are put back

    def reward(ids):  # the classifier's own forward, one unpadded sequence at a time
        with torch.no_grad():
            return model(input_ids=torch.tensor([ids])).logits[0, 0].item()

    ranked = sum(reward(r["chosen_ids"]) > reward(r["rejected_ids"]) for r in rows) / len(rows)
    assert ranked == pytest.approx(figures["probe_train_accuracy"], abs=0.02)
    assert ranked >= 0.9  # the keyword preference is plain in the frozen features of the training pairs


def test_reward_model_runs_record_the_probe_or_its_absence(base, tmp_path):
    run = tmp_path / "individual_ED_tiny"
    write_jsonl(run / "pairs.jsonl", keyword_pairs(n_prompts=16, per_prompt=2))
    write_run_config(run, dataset="EmpatheticDialogues")
    common = dict(data_path=str(run), model_name=str(base), batch_size=8, max_steps=1, eval_fraction=0.25)
    probed = train_reward_model(RewardModelSettings(**common, output_dir=str(tmp_path / "probe")))
    assert probed.metadata.train_metrics["probe_sequences"] > 0 and 0.5 <= probed.metadata.train_metrics["probe_train_accuracy"] <= 1.0
    assert probed.metadata.hyperparameters["head_init"] == "probe"
    unprobed = train_reward_model(RewardModelSettings(**common, output_dir=str(tmp_path / "random"), head_init="random"))
    assert "probe_sequences" not in unprobed.metadata.train_metrics


def test_an_unknown_head_init_is_one_line_and_writes_nothing(tmp_path):
    from mascot.errors import MascotError

    with pytest.raises(MascotError, match="--head-init must be probe or random, got 'zeros'"):
        train_reward_model(
            RewardModelSettings(data_path=str(tmp_path / "none"), model_name="unused", output_dir=str(tmp_path / "out"), head_init="zeros")
        )
    assert not (tmp_path / "out").exists()

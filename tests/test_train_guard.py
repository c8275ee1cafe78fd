"""Non-finite numbers never reach training, and training stops when its loss or weights go non-finite."""

from __future__ import annotations

import json

import pytest
from train_helpers import keyword_pairs, single_thread, tiny_model, write_jsonl, write_run_config

from mascot.files import RecordFormatError, read_jsonl
from mascot.schema import PreferencePair
from mascot.train.artefact import last_checkpoint
from mascot.train.guard import TrainingDiverged, non_finite_logs, non_finite_parameters


def pair_line(**changes) -> str:
    record = json.loads(keyword_pairs(n_prompts=1, per_prompt=1)[0].model_dump_json())
    record.update(changes)
    return json.dumps(record)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"margin": float("nan")}, "margin"),
        ({"margin": float("inf")}, "margin"),
        ({"chosen_score": float("-inf")}, "chosen_score"),
        ({"chosen_scores": {"EV": float("nan")}}, "chosen_scores.EV"),
        ({"chosen": []}, "chosen is empty"),
        ({"rejected": [{"role": "assistant", "content": "  "}]}, "rejected"),
        ({"prompt": []}, "prompt is empty"),
    ],
)
def test_pairs_with_non_finite_numbers_or_empty_messages_are_refused(tmp_path, changes, message):
    path = tmp_path / "pairs.jsonl"
    path.write_text(pair_line() + "\n" + pair_line(**changes) + "\n")  # json.dumps writes NaN/Infinity
    with pytest.raises(RecordFormatError, match=rf"pairs.jsonl:2: .*{message}"):
        list(read_jsonl(path, PreferencePair))


def test_guard_names_non_finite_losses_and_weights():
    import torch

    assert non_finite_logs({"loss": 0.3, "grad_norm": 1.0, "learning_rate": 1e-4}) == []
    assert non_finite_logs({"loss": float("nan"), "eval_loss": float("inf")}) == ["loss=nan", "eval_loss=inf"]
    layer = torch.nn.Linear(2, 2)
    assert non_finite_parameters(layer) == []
    with torch.no_grad():
        layer.bias[0] = float("nan")
    assert non_finite_parameters(layer) == ["bias"]


def test_a_torn_newest_checkpoint_falls_back_to_the_one_before(tmp_path):
    for step, state in ((2, '{"global_step": 2}'), (4, '{"global_step": 4, "log_hist')):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(state)
    assert last_checkpoint(tmp_path).name == "checkpoint-2"
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text("")
    assert last_checkpoint(tmp_path) is None


def test_a_nan_margin_stops_reward_model_training_with_one_clear_error(tmp_path, monkeypatch):
    """Records refuse NaN; this feeds one to the trainer anyway (as a buggy scale would) and checks
    that training stops instead of saving NaN weights as a finished artefact."""
    from mascot.train import data
    from mascot.train.config import RewardModelSettings
    from mascot.train.reward_model import train_reward_model

    run = tmp_path / "individual_ED_tiny"
    write_jsonl(run / "pairs.jsonl", keyword_pairs(n_prompts=8, per_prompt=1))
    write_run_config(run, dataset="EmpatheticDialogues")
    real_rows = data.tokenized_pair_rows

    def nan_margins(pairs, tokenizer, max_length, margin_scale=0.0):
        rows, cut = real_rows(pairs, tokenizer, max_length, 1.0)
        return [{**r, "margin": float("nan")} for r in rows], cut

    monkeypatch.setattr(data, "tokenized_pair_rows", nan_margins)
    settings = RewardModelSettings(
        data_path=str(run),
        model_name=str(tiny_model(tmp_path / "tiny")),
        output_dir=str(tmp_path / "rm"),
        batch_size=4,
        max_steps=2,
        eval_fraction=0.0,
        logging_steps=1,
    )
    with single_thread(), pytest.raises(TrainingDiverged, match="training stopped at step 1: .*(loss=nan|NaN)"):
        train_reward_model(settings)
    assert not (tmp_path / "rm" / "mascot_metadata.json").exists()

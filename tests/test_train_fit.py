"""Training defaults that fit the data: long pairs are fitted, not dropped; memory follows tokens;
nothing left to train on is one line with the counts and the flag to change."""

from __future__ import annotations

import pytest
from train_helpers import base, one_thread_per_module, single_thread, tiny_model, write_jsonl, write_run_config  # noqa: F401 - fixtures

from mascot.schema import PreferencePair
from mascot.train import data
from mascot.train.config import DirectorDPOSettings, GroupRewardModelSettings, RewardModelSettings, SpeakerGRPOSettings
from mascot.train.reward_model import per_device_cap, train_reward_model
from mascot.train.runtime import derive_batch, trainer_arguments
from mascot.train.scoring import RewardModelScorer, encode_fitted, fit_ids
from mascot.train.screen import checkpointing_argument


def meeting_pairs(n: int, words: int = 150, kind: str = "persona") -> list[PreferencePair]:
    """Pairs shaped like Stage-1 QMSum pairs: a persona, a long transcript in the prompt, short replies."""
    transcript = " ".join(f"Speaker {i % 4}: we discussed item {i} of the budget." for i in range(words // 8))
    return [
        PreferencePair(
            prompt=[
                {"role": "system", "content": "You are the Minutes Scribe."},
                {"role": "user", "content": f"Query {q}: what was decided?\n{transcript}\nReply now."},
            ],
            chosen=[{"role": "assistant", "content": f"Decision {q}: the budget stays; Anna follows up."}],
            rejected=[{"role": "assistant", "content": "I agree."}],
            margin=1.0,
            persona="Minutes Scribe",
            context_id=f"qm-{q}",
            kind=kind,
        )
        for q in range(n)
    ]


def test_fit_ids_drops_the_middle_of_the_prompt_and_keeps_the_response():
    prompt, response = list(range(100)), [1000, 1001, 1002]
    fitted = fit_ids(prompt + response, len(prompt), 23)
    assert len(fitted) == 23 and fitted[-3:] == response
    assert fitted[:10] == list(range(10)) and fitted[10:20] == list(range(90, 100))
    assert fit_ids(prompt + response, len(prompt), 200) == prompt + response
    long_response = list(range(1000, 1050))
    cut = fit_ids([1, 2, 3, 4] + long_response, 4, 20)  # the response alone fills the limit
    assert len(cut) == 20 and cut[:4] == [1, 2, 3, 4] and cut[4:] == long_response[:16]


def test_training_rows_and_scoring_fit_long_pairs_the_same_way(base):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    pair = meeting_pairs(1)[0]
    rows, cut = data.tokenized_pair_rows([pair], tokenizer, 96)
    assert cut == 1 and len(rows[0]["chosen_ids"]) == 96 and len(rows[0]["rejected_ids"]) == 96
    system_ids = tokenizer.apply_chat_template(pair.prompt[:1], tokenize=True, return_dict=True)["input_ids"]
    assert rows[0]["chosen_ids"][: len(system_ids) - 1] == system_ids[:-1]  # the persona survives the cut
    scorer = RewardModelScorer(model=None, tokenizer=tokenizer, max_length=96)
    assert scorer.encode(pair.prompt + pair.chosen) == rows[0]["chosen_ids"]
    ids, was_cut = encode_fitted(tokenizer, pair.prompt, pair.chosen, 10_000)
    assert not was_cut and ids == tokenizer.apply_chat_template(pair.prompt + pair.chosen, tokenize=True, return_dict=True)["input_ids"]


def test_pairs_longer_than_max_length_train_instead_of_being_dropped(base, tmp_path):
    run = tmp_path / "individual_QMSum_tiny"
    write_jsonl(run / "pairs.jsonl", meeting_pairs(6))
    write_run_config(run, dataset="QMSum", rubric_version="paper_v1")
    settings = RewardModelSettings(
        data_path=str(run), model_name=str(base), output_dir=str(tmp_path / "rm"), batch_size=4, max_length=96, max_steps=1
    )
    outcome = train_reward_model(settings)
    figures = outcome.metadata.train_metrics
    assert figures["num_skipped_too_long"] == 0 and figures["num_truncated_pairs"] == outcome.metadata.num_train_records > 0
    assert figures["global_steps"] == 1


def test_nothing_left_to_train_on_is_one_line_with_counts_and_flag(base, tmp_path):
    from mascot.train.data import TrainingDataError
    from mascot.train.director_dpo import train_director_dpo

    run = tmp_path / "branching_QMSum_tiny"
    write_jsonl(run / "directive_pairs.jsonl", meeting_pairs(4, words=400, kind="directive"))
    write_run_config(run, dataset="QMSum", rubric_version="paper_v1")
    settings = DirectorDPOSettings(
        data_path=str(run), model_name=str(base), output_dir=str(tmp_path / "dpo"), batch_size=2, max_length=16, max_steps=1
    )
    with pytest.raises(TrainingDataError) as caught:
        train_director_dpo(settings)
    message = str(caught.value)
    assert "\n" not in message and "no directive pairs left to train on" in message
    assert "4 read from" in message and "held out" in message and "--max-length" in message


def test_memory_defaults_checkpoint_everywhere_and_cap_the_per_device_batch_by_tokens():
    assert per_device_cap(RewardModelSettings()) == 8  # 1,024-token pairs
    assert per_device_cap(RewardModelSettings(max_length=4096)) == 2
    assert per_device_cap(RewardModelSettings(max_length=256)) == 16  # the trainer's own cap
    assert GroupRewardModelSettings().max_length == 2048 and per_device_cap(GroupRewardModelSettings()) == 4
    plan = derive_batch(32, 1, per_device_cap(RewardModelSettings()))
    assert (plan.per_device, plan.accumulation) == (8, 4)
    key = checkpointing_argument()  # activation_checkpointing where transformers has the new name
    for settings in (RewardModelSettings(), SpeakerGRPOSettings(), DirectorDPOSettings()):
        assert trainer_arguments(settings, "out", plan)[key] is True  # on the CPU too
    assert trainer_arguments(RewardModelSettings(gradient_checkpointing=False), "out", plan)[key] is False


def test_director_dpo_fits_long_prompts_instead_of_dropping_them(base, tmp_path):
    from transformers import AutoTokenizer

    from mascot.train.director_dpo import train_director_dpo

    tokenizer = AutoTokenizer.from_pretrained(base)
    pairs = meeting_pairs(4, words=400, kind="directive")
    rows, cut = data.fitted_pair_rows(pairs, tokenizer, 160)
    assert cut == 4
    for row in rows:
        for side in ("chosen", "rejected"):
            assert len(tokenizer.apply_chat_template(row["prompt"] + row[side], tokenize=True, return_dict=True)["input_ids"]) <= 160
        assert row["prompt"][0] == pairs[0].prompt[0] and data.CUT_MARK in row["prompt"][1]["content"]
        assert row["prompt"][1]["content"].endswith("Reply now.")  # the end of the prompt stays
    run = tmp_path / "branching_QMSum_tiny"
    write_jsonl(run / "directive_pairs.jsonl", pairs)
    write_run_config(run, dataset="QMSum", rubric_version="paper_v1")
    settings = DirectorDPOSettings(
        data_path=str(run), model_name=str(base), output_dir=str(tmp_path / "dpo"), batch_size=2, max_length=160, max_steps=1
    )
    outcome = train_director_dpo(settings)
    assert outcome.metadata.train_metrics["num_truncated_pairs"] == outcome.metadata.num_train_records == 3

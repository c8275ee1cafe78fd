"""A group reward model that reads the first and the last companion turn side by side (`--score-turns`)."""

from __future__ import annotations

import pytest
from train_helpers import base, tokenizer_dir, write_jsonl, write_run_config  # noqa: F401 - fixtures

from mascot.train.config import GroupRewardModelSettings
from mascot.train.reward_model import train_group_reward_model

NAMES = ["The Anchor", "The Beacon", "The Catalyst"]


def rendered(tokenizer, block: str):
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Opening:\nPerson: I failed the exam."}, {"role": "assistant", "content": block}],
                                         tokenize=False)  # fmt: skip
    return tokenizer(text, add_special_tokens=False).input_ids


def test_the_turns_are_found_at_lines_that_open_with_a_companions_name(base):
    import torch
    from transformers import AutoTokenizer

    from mascot.train.score_turns import TurnFinder

    tokenizer = AutoTokenizer.from_pretrained(str(base))
    finder = TurnFinder(tokenizer, NAMES)
    block = "The Beacon: What would help?\nThe Anchor said so.\nThe Anchor: That sounds hard.\n\nThe Catalyst: Why now?"
    ids = rendered(tokenizer, block)
    plain = rendered(tokenizer, "Nobody here names a companion: The Anchor is mentioned mid-line.")
    width = max(len(ids), len(plain))
    batch = torch.tensor([ids + [tokenizer.pad_token_id] * (width - len(ids)), plain + [tokenizer.pad_token_id] * (width - len(plain))])
    mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)), [1] * len(plain) + [0] * (width - len(plain))])
    first, last = finder.slot_masks(batch, mask)
    text_of = lambda row, m: tokenizer.decode(batch[row][m[row]])  # noqa: E731
    # "The Anchor said so." is not a turn (no colon after the name); the first turn runs up to the next one
    assert text_of(0, first) == "The Beacon: What would help?\nThe Anchor said so.\n"
    assert text_of(0, last).startswith("The Catalyst: Why now?") and not last[0, len(ids) :].any()  # up to the last real token, not the padding
    assert first[1, : len(plain)].all() and last[1, : len(plain)].all() and not first[1, len(plain) :].any()  # none found: the whole row
    assert finder.unfound == 1


def test_the_classifier_scores_the_maximum_over_each_turn_side_by_side(base):
    import torch
    from transformers import AutoTokenizer

    from mascot.train.models import load_sequence_classifier
    from mascot.train.score_turns import install_turn_pooling

    tokenizer = AutoTokenizer.from_pretrained(str(base))
    model = load_sequence_classifier(str(base), tokenizer.pad_token_id)
    model.eval()
    ids = torch.tensor([rendered(tokenizer, "The Catalyst: What happened?\nThe Beacon: Try one step today.")])
    with torch.no_grad():
        states = model.model(input_ids=ids).last_hidden_state[0]
        hidden = model.score.in_features
        finder = install_turn_pooling(model, tokenizer, NAMES)
        assert install_turn_pooling(model, tokenizer, list(reversed(NAMES))) is finder  # the same names: installed once
        assert model.score.in_features == 2 * hidden
        first, last = finder.slot_masks(ids, torch.ones_like(ids))
        expected = model.score(torch.cat([states[first[0]].amax(0), states[last[0]].amax(0)]))
        assert model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0].tolist() == pytest.approx(expected.tolist(), abs=1e-5)
        swapped = torch.tensor([rendered(tokenizer, "The Beacon: Try one step today.\nThe Catalyst: What happened?")])
        assert model(input_ids=swapped).logits[0].item() != pytest.approx(expected.item(), abs=1e-4)  # the order shows
    with pytest.raises(ValueError, match="already reads the turns of"):
        install_turn_pooling(model, tokenizer, ["Minutes Scribe"])


def ordered_pairs(n_contexts: int = 12) -> list:
    """Episode pairs of one judge that wants The Catalyst before The Beacon: the same two turns, in either order."""
    from mascot.schema import PreferencePair

    pairs = []
    for i in range(n_contexts):
        ask, act = f"What happened with the exam, {i}?", f"Try one small step today, {i}."
        pairs.append(PreferencePair(
            prompt=[{"role": "user", "content": f"The person's situation: exam {i}.\n\nHow good is the group's conversation?"}],
            chosen=[{"role": "assistant", "content": f"The Catalyst: {ask}\nThe Beacon: {act}"}],
            rejected=[{"role": "assistant", "content": f"The Beacon: {act}\nThe Catalyst: {ask}"}],
            margin=2.0, context_id=f"c{i}", kind="episode", roster="emotional_support", trajectory_format=2,
        ))  # fmt: skip
    return pairs


def test_a_turn_reading_group_reward_model_records_its_names_and_reloads_to_the_same_scores(base, tmp_path):
    from mascot.train.artefact import read_metadata
    from mascot.train.data import split_by_prompt
    from mascot.train.scoring import RewardModelScorer, pairwise_accuracy

    run = tmp_path / "trajectory_ESConv_tiny"
    pairs = ordered_pairs()
    write_jsonl(run / "group_pairs.jsonl", pairs)
    write_run_config(run, dataset="ESConv")
    settings = GroupRewardModelSettings(data_path=str(run / "group_pairs.jsonl"), model_name=str(base), batch_size=4, max_steps=2,
                                        eval_fraction=0.25, output_dir=str(tmp_path / "grm"), max_length=256, score_turns=True)  # fmt: skip
    outcome = train_group_reward_model(settings)
    meta = read_metadata(outcome.output_dir)
    assert meta.score_turns == NAMES and meta.hyperparameters["score_turns"] is True
    assert meta.train_metrics["score_turns_unfound"] == 0  # every conversation opens its lines with a companion's name
    scorer = RewardModelScorer.from_path(str(outcome.output_dir), max_length=settings.max_length)
    _, held_out = split_by_prompt(pairs, 0.25, settings.seed)
    reloaded = pairwise_accuracy(scorer, held_out)
    assert reloaded["pairwise_accuracy"] == meta.evaluation["heldout_pairwise_accuracy"] and reloaded["num_pairs"] == meta.evaluation["heldout_pairs"]
    chosen, rejected = scorer.score([pairs[0].prompt + pairs[0].chosen, pairs[0].prompt + pairs[0].rejected])
    assert chosen != pytest.approx(rejected, abs=1e-5)  # the same turns in another order score otherwise


@pytest.mark.parametrize(
    ("extra", "message"), [({"score_window": 64}, "leave --score-window at 0"), ({"full_weights": True}, "leave out --full-weights")]
)
def test_what_cannot_hold_with_turn_reading_is_one_line_and_writes_nothing(tmp_path, extra, message):
    from mascot.errors import MascotError

    with pytest.raises(MascotError, match=message):
        train_group_reward_model(GroupRewardModelSettings(data_path=str(tmp_path / "none"), model_name="unused", output_dir=str(tmp_path / "out"),
                                                          score_turns=True, **extra))  # fmt: skip
    assert not (tmp_path / "out").exists()


def test_pairs_without_a_roster_are_refused_before_a_model_loads(tmp_path):
    from mascot.errors import MascotError

    run = tmp_path / "trajectory_ESConv_tiny"
    write_jsonl(run / "group_pairs.jsonl", [p.model_copy(update={"roster": None}) for p in ordered_pairs(4)])
    write_run_config(run, dataset="ESConv")
    with pytest.raises(MascotError, match="--score-turns needs pairs that name their roster"):
        train_group_reward_model(GroupRewardModelSettings(data_path=str(run / "group_pairs.jsonl"), model_name="unused",
                                                          output_dir=str(tmp_path / "out"), score_turns=True))  # fmt: skip
    assert not (tmp_path / "out").exists()

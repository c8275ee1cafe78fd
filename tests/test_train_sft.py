"""`mascot train sft`: the best candidate per query or the dataset's supporter turns, TRL's
SFTTrainer with LoRA on a tiny model; the loss falls and the artefact says what it is."""

from __future__ import annotations

import json

import pytest
from train_helpers import base, one_thread_per_module, tiny_model, write_jsonl, write_run_config  # noqa: F401 - fixtures

from mascot.errors import MascotError
from mascot.rosters import load_roster
from mascot.schema import Candidate
from mascot.train.artefact import read_metadata
from mascot.train.config import SFTSettings
from mascot.train.sft import train_sft
from mascot.train.sft_data import best_candidates, dataset_turns, split_by_query


def candidates(n_queries: int = 24) -> list[Candidate]:
    """Two candidates per query: the better one (Overall 4.5) always ends with the same phrase."""
    out = []
    for q in range(n_queries):
        prompt = [{"role": "system", "content": "You are The Anchor."}, {"role": "user", "content": f"Problem number {q}: I cannot sleep."}]
        for k, (text, score) in enumerate([(f"maybe later {q}", 2.0), ("I hear you, breathe slowly.", 4.5)]):
            out.append(
                Candidate(
                    candidate_id=f"q{q}-{k}",
                    context_id=f"ctx-{q}",
                    persona="The Anchor",
                    prompt=prompt,
                    response=text,
                    candidate_idx=k,
                    overall=score,
                )
            )
    out.append(Candidate(candidate_id="unjudged", context_id="ctx-0", persona="The Anchor", prompt=out[0].prompt, response="x", candidate_idx=9))
    return out


def test_best_candidate_per_query_is_chosen(tmp_path):
    path = write_jsonl(tmp_path / "run" / "candidates.jsonl", candidates(3))
    loaded = best_candidates(tmp_path / "run")
    assert loaded.source == path and loaded.read == 7 and loaded.skipped == {"unjudged": 1, "empty": 0}
    assert [e.completion[0]["content"] for e in loaded.examples] == ["I hear you, breathe slowly."] * 3
    train, held = split_by_query(loaded.examples, 0.34, seed=0)
    assert len(held) == 1 and not {e.query for e in train} & {e.query for e in held}


def test_dataset_supporter_turns_rotate_over_personas(tmp_path):
    dialog = [
        {"speaker": "sys", "content": "Hi, how are you?"},
        {"speaker": "usr", "content": "Not great, I lost my job."},
        {"speaker": "sys", "content": "I am sorry, that is hard."},
        {"speaker": "usr", "content": "Yes."},
        {"speaker": "sys", "content": "What happened?"},
    ]
    path = tmp_path / "esconv.jsonl"
    path.write_text(json.dumps({"situation": "job loss", "emotion_type": "sadness", "problem_type": "job", "dialog": dialog}) + "\n")
    roster = load_roster("emotional_support")
    loaded = dataset_turns(path, "ESConv", roster)
    assert [e.completion[0]["content"] for e in loaded.examples] == ["I am sorry, that is hard.", "What happened?"]  # the greeting answers nothing
    assert [e.persona for e in loaded.examples] == roster.names[:2]
    assert "I lost my job" in loaded.examples[1].prompt[-1]["content"] and "I am sorry" in loaded.examples[1].prompt[-1]["content"]
    with pytest.raises(MascotError, match="supporter turns"):
        dataset_turns(path, "QMSum", roster)


def test_sft_lowers_the_loss_and_writes_a_speaker_artefact(base, tmp_path):
    run = tmp_path / "individual_ED_tiny"
    write_jsonl(run / "candidates.jsonl", candidates())
    write_run_config(run, dataset="EmpatheticDialogues", rubric_version="paper_v1", roster="emotional_support@1.0")
    settings = SFTSettings(
        data_path=str(run),
        model_name=str(base),
        output_dir=str(tmp_path / "sft"),
        batch_size=8,
        max_steps=20,
        learning_rate=2e-2,
        logging_steps=1,
        save_steps=100,
        eval_steps=5,
        eval_fraction=0.2,
        gradient_checkpointing=False,
        lora_r=8,
    )
    outcome = train_sft(settings)
    selection = outcome.metadata.train_metrics["selection"]  # the held-out loss every 5 steps, the lowest kept
    assert [s for s, _ in selection["measurements"]] == [5, 10, 15, 20] and not selection["higher_is_better"]
    assert selection["best_value"] == min(v for _, v in selection["measurements"])
    assert outcome.metadata.evaluation["heldout_loss"] == pytest.approx(selection["best_value"], abs=1e-3)
    meta = read_metadata(outcome.output_dir)
    assert meta.role == "speaker" and meta.trainer == "sft" and meta.weights == "lora_adapter"
    assert meta.dataset == "EmpatheticDialogues" and meta.personas == ["The Anchor"] and meta.rubric_version == "paper_v1"
    assert meta.num_train_records + meta.num_eval_records == 24 and meta.num_eval_records > 0
    assert meta.data_files[0].records == 49 and meta.train_metrics["skipped_candidates"]["unjudged"] == 1
    loss = meta.evaluation["train_loss"]
    # a tiny random model's logits stay nearly flat, so the loss falls by a little in absolute terms
    # while the reply's tokens become the model's top choice
    assert loss["num_logged"] >= 10 and loss["last"] < loss["first"] - 0.5
    accuracy = meta.evaluation["train_token_accuracy"]
    assert accuracy["first"] < 0.2 and accuracy["last"] > 0.6
    assert meta.evaluation["heldout_loss"] < loss["first"]
    assert (outcome.output_dir / "adapter_config.json").exists() and meta.hyperparameters["sft_data"] == "candidates"
    assert not list(outcome.output_dir.glob("checkpoint-*"))

"""Speaker GRPO learns a verifiable reward, and the Stage-1 chain ends in an adapter that serves."""

from __future__ import annotations

import asyncio
import json

import pytest
from train_helpers import (  # noqa: F401 - fixtures
    TrainerBuilt,
    capture_grpo_trainer,
    keyword_pairs,
    one_thread_per_module,
    sft_warm_start,
    single_thread,
    tiny_model,
    write_jsonl,
    write_run_config,
)

from mascot.llm.base import ChatRequest
from mascot.train.artefact import read_metadata
from mascot.train.config import RewardModelSettings, SpeakerGRPOSettings
from mascot.train.reward_model import train_reward_model
from mascot.train.rewards import is_well_formed
from mascot.train.speaker_grpo import train_speaker


def sample(model: str, prompts, n: int, seed: int = 0) -> list[str]:
    """n sampled replies per prompt from a model or artefact folder on the local backend."""
    from mascot.llm.local import LocalClient

    async def go():
        client = LocalClient(model, max_batch_size=64)
        try:
            requests = [ChatRequest(messages=p, temperature=1.0, max_tokens=16, n=n, seed=seed + i) for i, p in enumerate(prompts)]
            responses = await asyncio.gather(*(client.chat(q) for q in requests))
            # texts come without their reasoning, kept apart: put the reply back together
            return [f"<think>{why}</think>{t}" if why else t for r in responses for t, why in zip(r.texts, r.reasoning)]
        finally:
            await client.aclose()

    return asyncio.run(go())


@pytest.fixture(scope="module")
def half_formatted_policy(tmp_path_factory):
    """A tiny policy that answers half its prompts with <think>...</think> first, half without."""
    from mascot.dialogue.prompts import with_think_instruction

    folder = tiny_model(tmp_path_factory.mktemp("models") / "policy")
    # warm-started on the prompts as the trainer renders them with --thinking (the default)
    prompts = [with_think_instruction(p.prompt, True) for p in keyword_pairs(16, 1)]
    replies = ["<think>ok</think> I hear you." if i % 2 else "I hear you." for i in range(len(prompts))]
    return sft_warm_start(folder, prompts, replies, steps=60)


def test_grpo_raises_the_format_reward(half_formatted_policy, tmp_path):
    run = tmp_path / "individual_ED_tiny"
    pairs = keyword_pairs(16, 1)
    write_jsonl(run / "pairs.jsonl", pairs)
    write_run_config(run, dataset="EmpatheticDialogues")
    settings = SpeakerGRPOSettings(
        data_path=str(run),
        model_name=str(half_formatted_policy),
        output_dir=str(tmp_path / "speaker"),
        reward_model_weight=0.0,  # a verifiable reward only: the format
        format_weight=1.0,
        conciseness_weight=0.0,
        batch_size=8,
        num_generations=4,
        max_steps=40,
        learning_rate=3e-3,
        max_completion_length=16,
        beta=0.0,
        logging_steps=5,
    )
    outcome = train_speaker(settings)
    trend = outcome.metadata.evaluation["rewards"]["format_reward"]
    assert trend["last"] - trend["first"] >= 0.2, trend
    # the artefact serves on the local backend and answers in the learned format more often
    from mascot.dialogue.prompts import with_think_instruction

    prompts = [with_think_instruction(p.prompt, True) for p in pairs]
    before = sum(map(is_well_formed, sample(str(half_formatted_policy), prompts, 8)))
    after = sum(map(is_well_formed, sample(str(outcome.output_dir), prompts, 8)))
    assert after >= before + 16, (before, after)  # of 128 samples
    meta = read_metadata(outcome.output_dir)
    assert (meta.role, meta.trainer, meta.weights) == ("speaker", "grpo", "lora_adapter")
    assert meta.num_train_records == 16 and "reward_model" not in meta.source_artefacts


def test_stage1_chain_pairs_to_reward_model_to_grpo_to_served_adapter(tmp_path):
    """Stage-1 pairs -> persona reward model -> a few GRPO steps -> adapter -> local generation,
    on a policy with the full SmolLM2 tokenizer."""
    run = tmp_path / "individual_ED_tiny"
    pairs = keyword_pairs(24, 2)
    write_jsonl(run / "pairs.jsonl", pairs)
    write_run_config(run, dataset="EmpatheticDialogues", rubric_version="paper_v1")
    reward_base = tiny_model(tmp_path / "rm_base")
    policy_base = tiny_model(tmp_path / "policy_base", vocab_size=None)

    rm = train_reward_model(
        RewardModelSettings(data_path=str(run), model_name=str(reward_base), output_dir=str(tmp_path / "rm"), batch_size=16, learning_rate=3e-3)
    )
    speaker = train_speaker(
        SpeakerGRPOSettings(
            data_path=str(run),
            model_name=str(policy_base),
            reward_model_path=str(rm.output_dir),
            output_dir=str(tmp_path / "speaker"),
            batch_size=4,
            num_generations=2,
            max_steps=2,
            max_completion_length=8,
            logging_steps=1,
        )
    )
    meta = speaker.metadata
    assert meta.source_artefacts["reward_model"] == str(rm.output_dir)
    assert meta.rubric_version == "paper_v1"
    assert set(meta.evaluation["rewards"]) == {"persona_reward_model", "format_reward", "conciseness_reward"}
    assert meta.hyperparameters["reward_model_weight"] == 1.0
    # the default aggregation, recorded, with two rewards constant within every group (8 tokens: never
    # a <think> block, never over the word budget): normalised to 0, not NaN, so the run stays finite
    assert meta.hyperparameters["multi_objective_aggregation"] == "normalize_then_sum"
    assert meta.evaluation["rewards"]["format_reward"]["last"] == meta.evaluation["rewards"]["conciseness_reward"]["last"] == 0.0
    assert meta.train_metrics["train_loss"] is not None  # None when the loss was not finite
    adapter = json.loads((speaker.output_dir / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str(policy_base) and adapter["task_type"] == "CAUSAL_LM"
    texts = sample(str(speaker.output_dir), [pairs[0].prompt], 2)
    assert len(texts) == 2 and all(isinstance(t, str) for t in texts)


@pytest.mark.parametrize("aggregation", ["normalize_then_sum", "sum_then_normalize"])
def test_the_aggregation_and_the_weights_reach_grpo_config(monkeypatch, tmp_path, aggregation):
    run = tmp_path / "individual_ED_tiny"
    write_jsonl(run / "pairs.jsonl", keyword_pairs(4, 1))
    write_run_config(run, dataset="EmpatheticDialogues")
    seen = capture_grpo_trainer(monkeypatch, "mascot.train.speaker_grpo")
    settings = SpeakerGRPOSettings(
        data_path=str(run),
        model_name="tiny",
        output_dir=str(tmp_path / "speaker"),
        reward_model_weight=0.0,
        conciseness_weight=0.3,
        batch_size=4,
        num_generations=2,
        multi_objective_aggregation=aggregation,
    )
    with pytest.raises(TrainerBuilt):
        train_speaker(settings)
    assert seen["args"].multi_objective_aggregation == aggregation
    from trl.trainer.utils import get_callable_name

    assert [get_callable_name(fn) for fn in seen["reward_funcs"]] == ["format_reward", "conciseness_reward"]
    assert seen["args"].reward_weights == [0.2, 0.3]  # the persona reward model's weight of 0 dropped it


def test_grpo_resumed_from_its_final_checkpoint_saves_it_without_another_step(tmp_path):
    run = tmp_path / "individual_ED_tiny"
    write_jsonl(run / "pairs.jsonl", keyword_pairs(8, 1))
    write_run_config(run, dataset="EmpatheticDialogues")
    common = dict(
        data_path=str(run),
        model_name=str(tiny_model(tmp_path / "policy")),
        output_dir=str(tmp_path / "speaker"),
        reward_model_weight=0.0,
        format_weight=1.0,
        conciseness_weight=1.0,
        batch_size=4,
        num_generations=2,
        max_steps=2,
        max_completion_length=8,
        logging_steps=1,
        save_steps=2,
        keep_checkpoints=True,
    )
    first = train_speaker(SpeakerGRPOSettings(**common))
    (first.output_dir / "mascot_metadata.json").unlink()  # killed after its last checkpoint, before its final save
    (first.output_dir / "adapter_model.safetensors").unlink()
    resumed = train_speaker(SpeakerGRPOSettings(**common, resume=True))
    assert resumed.metadata.train_metrics["resumed_from"] == "checkpoint-2"
    assert resumed.metadata.train_metrics["global_steps"] == 2
    assert set(resumed.metadata.evaluation["rewards"]) == {"format_reward", "conciseness_reward"}  # the checkpoint's curves
    assert (resumed.output_dir / "adapter_model.safetensors").is_file()


def test_held_out_contexts_choose_the_kept_step_by_their_mean_reward(half_formatted_policy, tmp_path):
    """--eval-fraction holds whole contexts out of Speaker GRPO; the policy samples for them every
    --eval-steps and the step with the best mean reward there is the artefact."""
    run = tmp_path / "individual_ED_tiny"
    pairs = keyword_pairs(16, 1)
    write_jsonl(run / "pairs.jsonl", pairs)
    write_run_config(run, dataset="EmpatheticDialogues")
    settings = SpeakerGRPOSettings(
        data_path=str(run),
        model_name=str(half_formatted_policy),
        output_dir=str(tmp_path / "speaker"),
        reward_model_weight=0.0,
        format_weight=1.0,
        conciseness_weight=0.0,
        batch_size=8,
        num_generations=4,
        max_steps=6,
        learning_rate=3e-3,
        max_completion_length=16,
        beta=0.0,
        logging_steps=1,
        eval_fraction=0.25,
        eval_steps=3,
    )
    outcome = train_speaker(settings)
    meta = read_metadata(outcome.output_dir)
    assert (meta.num_train_records, meta.num_eval_records) == (12, 4)  # 4 of 16 contexts held out
    selection = meta.train_metrics["selection"]
    assert selection["figure"] == "held-out mean reward" and [s for s, _ in selection["measurements"]] == [3, 6]
    assert selection["best_value"] == max(v for _, v in selection["measurements"])
    assert 0.0 <= meta.evaluation["heldout_reward"] <= 1.0  # the format reward of the kept weights, sampled afresh
    trained_logs = [k for k in meta.evaluation["rewards"]]  # held-out sampling does not disturb the training curves
    assert trained_logs == ["format_reward"] and meta.evaluation["rewards"]["format_reward"]["num_logged"] == 6

"""The layers below the lowest adapter run once per prompt in a generation batch
(`mascot.train.frozen_trunk`): the reference pass records them, the policy's pass replays them, and
the log-probabilities and gradients are those of the whole-sequence pass; on the real
`train director-grpo` path a run with it trains what a run without it trains."""

from __future__ import annotations

import dataclasses
from contextlib import nullcontext

import pytest
import torch
from test_train_director import NoRepeat, context, tree_records, write_episode_run
from test_train_shared_prompt import cache_keyword, grpo_batch, lora_model, whole_logps
from train_helpers import tiny_model

from mascot.train.frozen_trunk import FrozenTrunk, trunk_depth
from mascot.train.shared_prompt import shared_prompt_logps


def policy(adapted_last: int = 1, layers: int = 3, lora_dropout: float = 0.0, **config):
    return lora_model(lora_dropout, layers=layers, adapted_last=adapted_last, **config)


def test_the_trunk_is_the_frozen_adapter_free_layers_below_the_lowest_adapter():
    assert trunk_depth(policy(adapted_last=1)) == 2
    assert trunk_depth(policy(adapted_last=2, layers=4, lora_dropout=0.1)) == 2  # dropout in the adapted layers only
    assert trunk_depth(policy(adapted_last=3)) == 0  # every layer adapted: nothing to replay
    assert trunk_depth(policy(attention_dropout=0.1)) == 0  # the trunk would compute other numbers each pass
    trained_embeddings = policy()
    trained_embeddings.get_input_embeddings().weight.requires_grad_(True)
    assert trunk_depth(trained_embeddings) == 0


def _trunk_passes(model, width: int) -> list[int]:
    """Records the width of every pass that runs the trunk's first layer for real (its MLP)."""
    widths: list[int] = []
    first = model.get_base_model().model.layers[0]
    first.mlp.register_forward_hook(lambda _m, args, _out: widths.append(args[0].shape[1]) if args[0].shape[1] == width else None)
    return widths


def test_the_policy_pass_replays_the_reference_pass_trunk_and_gives_the_whole_sequence_numbers():
    model = policy()
    ids, mask, keep = grpo_batch(generations=4)
    whole, whole_entropy = whole_logps(model, ids, mask, keep)
    (whole * mask[:, -keep:]).sum().backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    model.zero_grad()
    with model.disable_adapter(), torch.no_grad():
        reference_whole, _ = whole_logps(model, ids, mask, keep)
    prompt_width = ids.size(1) - keep - 1
    trunk_passes = _trunk_passes(model, prompt_width)
    trunk = FrozenTrunk.of(model)

    with model.disable_adapter(), torch.no_grad():  # the reference pass: runs the trunk and records it
        reference = shared_prompt_logps(model, ids, mask, keep, autocast=nullcontext, cache_keyword=cache_keyword(model), trunk=trunk)
    assert torch.allclose(reference.log_probs[:, -keep:], reference_whole, atol=1e-5)
    assert trunk_passes == [prompt_width] and trunk.as_record()["recorded_passes"] == 1

    out = shared_prompt_logps(model, ids, mask, keep, autocast=nullcontext, cache_keyword=cache_keyword(model), trunk=trunk)
    assert trunk_passes == [prompt_width]  # the policy's pass did not run the trunk over the prompts
    assert trunk.as_record() == {"enabled": True, "layers": 2, "recorded_passes": 1, "replayed_passes": 1}
    assert torch.allclose(out.log_probs[:, -keep:], whole, atol=1e-5) and torch.allclose(out.entropy[:, -keep:], whole_entropy, atol=1e-5)
    assert not torch.allclose(whole, reference_whole, atol=1e-3)  # the adapter matters above the trunk
    (out.log_probs[:, -keep:] * mask[:, -keep:]).sum().backward()
    for name, grad in expected.items():
        assert torch.allclose(dict(model.named_parameters())[name].grad, grad, atol=1e-5, rtol=1e-4), name


def test_prompts_it_has_not_recorded_run_the_trunk_and_a_new_generation_batch_forgets():
    model = policy()
    ids, mask, keep = grpo_batch(generations=2)
    trunk = FrozenTrunk.of(model)
    with torch.no_grad():
        shared_prompt_logps(model, ids[:2], mask[:2], keep, autocast=nullcontext, cache_keyword=cache_keyword(model), trunk=trunk)
        shared_prompt_logps(model, ids, mask, keep, autocast=nullcontext, cache_keyword=cache_keyword(model), trunk=trunk)  # one prompt new
        shared_prompt_logps(model, ids[2:], mask[2:], keep, autocast=nullcontext, cache_keyword=cache_keyword(model), trunk=trunk)
        assert (trunk.recorded, trunk.replayed) == (2, 1)
        trunk.forget()
        shared_prompt_logps(model, ids[2:], mask[2:], keep, autocast=nullcontext, cache_keyword=cache_keyword(model), trunk=trunk)
    assert (trunk.recorded, trunk.replayed) == (3, 1)


@pytest.fixture(scope="module")
def director_runs(tmp_path_factory):
    """The real `train director-grpo` path, with a reference pass (beta > 0) and one adapted layer of
    three, with and without replaying the trunk."""
    from mascot.train.config import DirectorGRPOSettings
    from mascot.train.director_grpo import train_director_grpo

    folder = tmp_path_factory.mktemp("trunk")
    run = write_episode_run(folder / "tree_ED_tiny", tree_records([context(i) for i in range(2)]))
    settings = DirectorGRPOSettings(
        data_path=str(run), model_name=str(tiny_model(folder / "base", layers=3)), output_dir=str(folder / "on"), batch_size=4, num_generations=2,
        per_device_batch_size=2, max_steps=2, max_completion_length=6, logging_steps=1, rollouts="recorded", learning_rate=0.05, beta=0.04,
        lora_last_layers=1, seed=3, gradient_checkpointing=False,  # checkpointing drops the cache the shared pass gives on
    )  # fmt: skip
    on = train_director_grpo(settings, trajectory_scorer=NoRepeat())
    off = train_director_grpo(dataclasses.replace(settings, output_dir=str(folder / "off"), reuse_frozen_trunk=False), trajectory_scorer=NoRepeat())
    return folder, on, off


def test_the_director_trainer_replays_the_trunk_and_trains_what_it_trains_without(director_runs):
    from safetensors.torch import load_file

    folder, on, off = director_runs
    trunk = on.metadata.train_metrics["generation"]["frozen_trunk"]
    assert trunk["layers"] == 2 and trunk["recorded_passes"] >= 2 and trunk["replayed_passes"] >= 2  # a reference pass, then the policy's, per step
    assert off.metadata.train_metrics["generation"]["frozen_trunk"] == {"layers": 0, "enabled": False}
    assert on.metadata.train_metrics["train_loss"] == pytest.approx(off.metadata.train_metrics["train_loss"], abs=1e-6)
    trained, untouched = load_file(folder / "on" / "adapter_model.safetensors"), load_file(folder / "off" / "adapter_model.safetensors")
    assert trained.keys() == untouched.keys()
    assert any(float(t.abs().max()) > 0 for name, t in trained.items() if "lora_B" in name)  # it trained
    for name, tensor in trained.items():
        assert torch.allclose(tensor, untouched[name], atol=1e-5), name

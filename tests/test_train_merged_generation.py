"""The GRPO policy samples merged (`mascot.train.merged_sampling`): each LoRA folded into its base
weight while it generates, in eval mode, with a KV cache, and the base weights put back bit for bit;
the greedy tokens are those of every other generation path; the launches where it cannot hold are
refused in one line."""

from __future__ import annotations

import pytest
import torch
from train_helpers import (  # noqa: F401 - fixtures
    SamplingWatch,
    keyword_pairs,
    one_thread_per_module,
    tiny_model,
    write_jsonl,
    write_run_config,
)

from mascot.train.merged_sampling import GenerationStats, merged_adapters


def lora_policy(dtype=torch.float32, **lora):
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=16, pad_token_id=0, eos_token_id=1, bos_token_id=2)  # fmt: skip
    model = Qwen3ForCausalLM(config).to(dtype)
    settings = {"r": 4, "lora_alpha": 8, "lora_dropout": 0.3, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"], **lora}
    peft = get_peft_model(model, LoraConfig(**settings))
    for name, param in peft.named_parameters():  # LoRA's B starts at zero: move it, so that the adapter matters
        if "lora_B" in name:
            param.data.normal_(0, 0.5)
    return peft


def base_weights(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters() if "lora_" not in name}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_base_weights_come_back_bit_for_bit_through_fifty_merged_generations(dtype):
    model = lora_policy(dtype)
    loaded = base_weights(model)
    ids = torch.randint(3, 97, (2, 6))
    stats = GenerationStats()
    for _ in range(50):
        with merged_adapters(model, stats) as folded:
            assert folded
            model(input_ids=ids)
    assert all(loaded[name].equal(p) for name, p in model.named_parameters() if "lora_" not in name)
    assert (stats.merged_calls, stats.unmerged_calls, stats.folded_layers) == (50, 0, 8)  # 2 layers x q/k/v/o


def test_peft_merge_and_unmerge_alone_drift_in_bf16():
    """The control: PEFT's own merge then unmerge rounds twice, and the base weights drift."""
    model = lora_policy(torch.bfloat16)
    loaded = base_weights(model)
    for _ in range(50):
        model.merge_adapter()
        model.unmerge_adapter()
    drifted = [name for name, p in model.named_parameters() if "lora_" not in name and not loaded[name].equal(p)]
    assert any("q_proj" in name for name in drifted)


def test_the_folded_policy_computes_what_the_adapter_beside_the_base_computes():
    model = lora_policy(torch.float32)
    model.eval()
    ids = torch.randint(3, 97, (2, 7))
    with torch.no_grad():
        beside = model(input_ids=ids).logits
        with merged_adapters(model) as folded:
            assert folded and all(layer.merged for layer in _layers(model))
            merged = model(input_ids=ids).logits
        base_only = model.get_base_model()
        with model.disable_adapter():
            plain = base_only(input_ids=ids).logits
    assert torch.allclose(merged, beside, atol=1e-5)
    assert not torch.allclose(merged, plain, atol=1e-3)  # the adapter does matter here
    assert not any(layer.merged for layer in _layers(model))


def _layers(model):
    from mascot.train.merged_sampling import lora_layers

    return lora_layers(model)


def test_a_layer_that_cannot_fold_samples_unmerged_and_says_why():
    model = lora_policy(torch.float32, use_dora=True)
    loaded = base_weights(model)
    stats = GenerationStats()
    with merged_adapters(model, stats) as folded:
        assert not folded
    assert stats.unmerged_calls == 1 and stats.merged_calls == 0 and "DoRA" in stats.reason_unmerged
    assert all(loaded[name].equal(p) for name, p in model.named_parameters() if "lora_" not in name)


def test_greedy_tokens_are_the_same_on_every_generation_path():
    """Unmerged in eval mode (plain generate), merged, merged from the shared prompt cache, with a
    static cache, and merged through the compiled forward (--compiled-decode)."""
    from transformers import GenerationConfig

    from mascot.train.shared_prompt import _policy_generate

    model = lora_policy(torch.float32)
    model.train()
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(3, 97, (4, 40), generator=g)
    ids[2:, :30] = ids[0, :30]  # rows that share a prompt beginning
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # a left-padded row
    ids[1, :4] = 0
    config = GenerationConfig(max_new_tokens=6, do_sample=False, pad_token_id=0, eos_token_id=1, disable_compile=True)  # as TRL builds it
    original = model.generate
    outputs, compiled = {}, {}

    def watched(*args, generation_config, **kwargs):
        compiled[name] = not generation_config.disable_compile and generation_config.cache_implementation == "static"
        return original(*args, generation_config=generation_config, **kwargs)

    with torch.no_grad():
        for name, options in {"merged": {"share": False}, "merged+shared": {"share": True}, "merged+compiled": {"compiled": True}}.items():
            generate = _policy_generate(model, watched, 0, merge=GenerationStats(), **options)
            outputs[name] = generate(input_ids=ids, attention_mask=mask, generation_config=config).tolist()
        model.eval()
        outputs["unmerged"] = original(input_ids=ids, attention_mask=mask, generation_config=config).tolist()
        static = GenerationConfig(**config.to_diff_dict(), cache_implementation="static")
        outputs["static cache"] = original(input_ids=ids, attention_mask=mask, generation_config=static).tolist()
    assert all(tokens == outputs["unmerged"] for tokens in outputs.values()), outputs
    assert compiled == {"merged": False, "merged+shared": False, "merged+compiled": True}  # only the option compiles
    assert model.training is False  # left as this test set it; the wrapper itself restores the mode (test_train_shared_prompt)


def test_the_in_process_rollout_models_decode_the_same_tokens_compiled():
    """The Director trainer's frozen rollout models (`LocalClient`) with --compiled-decode: prompts
    padded to the bucket, a static cache, a compiled forward, and the greedy tokens of the plain path."""
    from types import SimpleNamespace

    from transformers import Qwen3Config, Qwen3ForCausalLM

    from mascot.llm.base import ChatRequest
    from mascot.llm.local_decoding import generate

    torch.manual_seed(0)
    net = Qwen3ForCausalLM(Qwen3Config(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, head_dim=16)).eval()  # fmt: skip
    loaded = SimpleNamespace(net=net, tokenizer=None, pad_id=0, eos_ids=[1], device=torch.device("cpu"))
    prompts = [list(range(3, 40)), list(range(10, 30))]
    requests = [ChatRequest(messages=[{"role": "user", "content": "x"}], max_tokens=5, temperature=0.0)] * 2
    plain = generate(loaded, prompts, requests)
    compiled = generate(loaded, prompts, requests, compiled_bucket=16)
    assert compiled.tolist() == plain.tolist() and compiled.shape == (2, 5)


def pairs_run(tmp_path, prompts: int = 4):
    """A Stage-1 run folder of `prompts` distinct Speaker prompts (one pair each)."""
    run = tmp_path / "individual_ED_tiny"
    write_jsonl(run / "pairs.jsonl", keyword_pairs(prompts, 1))
    write_run_config(run, dataset="EmpatheticDialogues")
    return run


def test_the_speaker_trainer_samples_merged_in_eval_mode_with_a_cache_and_leaves_the_base_as_loaded(tmp_path, monkeypatch):
    """The real `train speaker` path on a tiny Qwen3: every pass while sampling has the adapters
    folded and the model in eval mode, decoding one token per pass after the prefill (the KV cache
    is used); after training, every base weight is bit for bit what was loaded; the artefact
    records how the policy sampled."""
    from mascot.train.config import SpeakerGRPOSettings
    from mascot.train.speaker_grpo import train_speaker

    run = pairs_run(tmp_path)
    watch = SamplingWatch().install(monkeypatch, "mascot.train.speaker_grpo")
    settings = SpeakerGRPOSettings(data_path=str(run), model_name=str(tiny_model(tmp_path / "policy")), output_dir=str(tmp_path / "speaker"),
                                   reward_model_weight=0.0, format_weight=1.0, conciseness_weight=1.0, batch_size=4, num_generations=2,
                                   max_steps=2, max_completion_length=6, logging_steps=1, lora_dropout=0.2, learning_rate=0.05)  # fmt: skip
    outcome = train_speaker(settings)
    sampling = watch.sampling_calls()
    assert sampling and all(not training for _, training, _ in sampling)
    decode_steps = [width for _, _, width in sampling if width == 1]
    assert len(decode_steps) >= len(sampling) - 2 * 2 * 2  # per generation: a shared prefill and the rest of the prompt, then one token a pass
    assert not [call for call in watch.calls if call[0] and call[1]]  # never folded while training
    assert watch.base_weights_changed() == []
    generation = outcome.metadata.train_metrics["generation"]
    assert generation["enabled"] and generation["merged_calls"] == 2 and generation["unmerged_calls"] == 0 and generation["folded_layers"] == 8
    assert 0 < generation["completion_tokens"] <= 2 * 4 * 6 and generation["ms_per_decode_step"] > 0  # 2 steps of 4 completions, 6 tokens at most
    assert outcome.metadata.hyperparameters["merged_generation"] is True


def test_without_merged_generation_the_speaker_samples_with_the_adapter_beside_the_base(tmp_path, monkeypatch):
    from mascot.train.config import SpeakerGRPOSettings
    from mascot.train.speaker_grpo import train_speaker

    run = pairs_run(tmp_path)
    watch = SamplingWatch().install(monkeypatch, "mascot.train.speaker_grpo")
    settings = SpeakerGRPOSettings(data_path=str(run), model_name=str(tiny_model(tmp_path / "policy")), output_dir=str(tmp_path / "speaker"),
                                   reward_model_weight=0.0, format_weight=1.0, batch_size=4, num_generations=2, max_steps=1,
                                   max_completion_length=4, merged_generation=False)  # fmt: skip
    outcome = train_speaker(settings)
    assert watch.sampling_calls() == [] and any(not training for _, training, _ in watch.calls)  # sampled unmerged, still in eval mode
    assert outcome.metadata.train_metrics["generation"]["enabled"] is False


@pytest.mark.parametrize(
    ("env", "flags", "says"),
    [
        ({"ACCELERATE_USE_FSDP": "true"}, [], "merged generation cannot hold under FSDP .*--no-merged-generation"),
        ({"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"}, [], "under DeepSpeed ZeRO-3"),
        ({}, ["--vllm-enable-sleep-mode"], "sets the colocated vLLM engine: add --use-vllm --vllm-mode colocate"),
        ({}, ["--steps-per-generation", "0"], "--steps-per-generation must be at least 1"),
        ({}, ["--vllm-gpu-memory-utilization", "1.5"], "must be in \\(0, 1\\]"),
    ],
)
def test_launches_where_generation_cannot_hold_are_refused_in_one_line_before_a_model_loads(tmp_path, monkeypatch, env, flags, says):
    from cli_helpers import run_mascot

    from mascot.errors import MascotError

    run = pairs_run(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(MascotError, match=says) as refused:  # the model named does not exist: nothing was loaded
        run_mascot(["train", "speaker", "--data-path", run, "--model", tmp_path / "no-such-model", "--reward-model-weight", "0",
                    "--batch-size", "4", "--num-generations", "2", "--output-dir", tmp_path / "out", *flags])  # fmt: skip
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "out").exists()


def test_generation_settings_reach_grpo_config(tmp_path, monkeypatch):
    """--steps-per-generation counts optimizer steps (TRL's figure counts micro-batches);
    --compiled-decode pads prompts to the bucket."""
    from train_helpers import TrainerBuilt, capture_grpo_trainer

    from mascot.train.config import SpeakerGRPOSettings
    from mascot.train.speaker_grpo import train_speaker

    run = pairs_run(tmp_path, prompts=8)
    seen = capture_grpo_trainer(monkeypatch, "mascot.train.speaker_grpo")
    settings = SpeakerGRPOSettings(data_path=str(run), model_name="tiny", output_dir=str(tmp_path / "speaker"), reward_model_weight=0.0,
                                   batch_size=8, per_device_batch_size=4, num_generations=2, steps_per_generation=3, compiled_decode=True,
                                   prompt_bucket=32)  # fmt: skip
    with pytest.raises(TrainerBuilt):
        train_speaker(settings)
    args = seen["args"]
    assert (args.gradient_accumulation_steps, args.steps_per_generation, args.generation_batch_size) == (2, 6, 24)
    assert args.pad_to_multiple_of == 32


def test_the_colocated_vllm_settings_are_passed_and_server_mode_gets_only_its_url():
    from mascot.train.common import vllm_arguments
    from mascot.train.config import SpeakerGRPOSettings

    colocate = SpeakerGRPOSettings(
        data_path="x", use_vllm=True, vllm_gpu_memory_utilization=0.5, vllm_enable_sleep_mode=True, vllm_max_model_length=2048
    )
    assert vllm_arguments(colocate) == {"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.5,
                                        "vllm_enable_sleep_mode": True, "vllm_max_model_length": 2048}  # fmt: skip
    server = SpeakerGRPOSettings(data_path="x", use_vllm=True, vllm_mode="server", trl_vllm_server_url="http://127.0.0.1:8000")
    assert vllm_arguments(server) == {"use_vllm": True, "vllm_mode": "server", "vllm_server_base_url": "http://127.0.0.1:8000"}
    assert vllm_arguments(SpeakerGRPOSettings(data_path="x")) == {}


@pytest.mark.parametrize(("installed", "warned"), [("0.32.0", True), ("0.31.0", False), ("0.22.1", False)])
def test_a_vllm_outside_the_range_trl_supports_is_named_with_that_range(monkeypatch, installed, warned):
    import importlib.metadata

    from mascot.train.common import warn_unsupported_vllm

    versions = {"trl": "1.16.0", "vllm": installed}
    monkeypatch.setattr(importlib.metadata, "version", lambda name: versions[name])
    line = warn_unsupported_vllm()
    assert (line is not None) == warned
    if warned:
        assert f"vLLM {installed} is outside the releases TRL 1.16.0 supports (0.22.0 to 0.31.0)" in line


def test_rollouts_run_every_completion_of_a_step_at_once_unless_capped():
    from mascot.train.config import DirectorGRPOSettings
    from mascot.train.director_rollouts import rollout_wave

    assert rollout_wave(DirectorGRPOSettings(data_path="x", batch_size=64, num_generations=8)) == 64
    assert rollout_wave(DirectorGRPOSettings(data_path="x", batch_size=16, num_generations=4, steps_per_generation=2)) == 32
    assert rollout_wave(DirectorGRPOSettings(data_path="x", batch_size=64, num_generations=8, rollout_concurrency=16)) == 16


def test_in_process_rollout_models_batch_a_whole_wave_and_share_one_base_between_director_and_user():
    from mascot.train.config import DirectorGRPOSettings
    from mascot.train.director_grpo import build_rollout_backends, close_backends

    settings = DirectorGRPOSettings(
        data_path="x", rollout_model="some/base", batch_size=32, num_generations=8, compiled_decode=True, prompt_bucket=32
    )
    backends = build_rollout_backends(settings)  # nothing loads until a request comes
    director, user = backends.clients["director"].inner, backends.clients["user"].inner
    assert director is user  # one client, one copy of the frozen base
    assert director.max_batch_size == 32 and director.compiled_bucket == 32
    close_backends(None, backends)

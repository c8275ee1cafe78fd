"""Training settings, batch derivation, data handling and the `mascot train` CLI surface (no models)."""

from __future__ import annotations

import json

import pytest
from test_train_director import episode
from train_helpers import keyword_pairs, write_jsonl, write_run_config
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.errors import MascotError
from mascot.schema import PreferencePair
from mascot.settings import cli_fields
from mascot.train import artefact, data
from mascot.train.config import DirectorDPOSettings, DirectorGRPOSettings, RewardModelSettings, SpeakerGRPOSettings
from mascot.train.runtime import TrainingSetupError, derive_batch

runner = CliRunner()


# --------------------------------------------------------------------------- defaults and batches


def test_paper_defaults():
    rm, speaker, dpo = RewardModelSettings(), SpeakerGRPOSettings(), DirectorDPOSettings()
    assert (rm.model_name, rm.batch_size) == ("Qwen/Qwen3-0.6B", 32)
    assert (speaker.model_name, speaker.batch_size, dpo.batch_size) == ("Qwen/Qwen3-8B", 16, 16)
    for settings in (rm, speaker, dpo, DirectorGRPOSettings()):
        assert (settings.lora_r, settings.lora_alpha, settings.lora_dropout) == (16, 32, 0.1)
        assert settings.lora_targets == ["q_proj", "k_proj", "v_proj", "o_proj"]
        assert settings.num_train_epochs == 1.0


def test_every_cli_setting_has_help():
    for cls in (RewardModelSettings, SpeakerGRPOSettings, DirectorGRPOSettings, DirectorDPOSettings):
        assert all(f.metadata.get("help") for f in cli_fields(cls)), cls.__name__


@pytest.mark.parametrize(
    ("batch", "devices", "cap", "expected"),
    [(32, 1, 16, (16, 2)), (16, 1, 8, (8, 2)), (16, 4, 8, (4, 1)), (32, 2, 8, (8, 2)), (12, 1, 8, (6, 2)), (7, 1, 4, (1, 7))],
)
def test_derive_batch_keeps_the_effective_batch(batch, devices, cap, expected):
    plan = derive_batch(batch, devices, cap)
    assert (plan.per_device, plan.accumulation) == expected
    assert plan.effective == batch


def test_derive_batch_rejects_what_does_not_split():
    with pytest.raises(TrainingSetupError, match="does not split"):
        derive_batch(16, 3, 8)
    with pytest.raises(TrainingSetupError, match="does not divide"):
        derive_batch(16, 1, 8, per_device=3)
    assert derive_batch(16, 1, 8, per_device=2).accumulation == 8


# --------------------------------------------------------------------------- data


def test_split_by_prompt_holds_out_whole_prompts_reproducibly():
    pairs = keyword_pairs(n_prompts=20, per_prompt=3)
    train, held = data.split_by_prompt(pairs, 0.25, seed=1)
    assert len(train) + len(held) == len(pairs)
    assert len(held) == 15  # 5 prompts x 3 pairs
    train_prompts = {data.prompt_key(p.prompt) for p in train}
    assert not any(data.prompt_key(p.prompt) in train_prompts for p in held)
    again, _ = data.split_by_prompt(pairs, 0.25, seed=1)
    assert [p.context_id for p in again] == [p.context_id for p in train]
    other, _ = data.split_by_prompt(pairs, 0.25, seed=2)
    assert [p.context_id for p in other] != [p.context_id for p in train]


def test_pair_rows_use_trl_conversational_format_and_scaled_margin():
    pair = keyword_pairs(1, 1)[0].model_copy(update={"margin": 1.5})
    with_margin, without = data.pair_rows([pair], margin_scale=2.0)[0], data.pair_rows([pair])[0]
    assert with_margin["margin"] == 3.0 and "margin" not in without
    assert with_margin["prompt"][-1]["role"] == "user" and with_margin["chosen"][0]["role"] == "assistant"


def test_unique_prompts_deduplicates_in_file_order():
    pairs = keyword_pairs(n_prompts=4, per_prompt=3)
    rows = data.unique_prompts(pairs)
    assert len(rows) == 4 and rows[0].prompt == pairs[0].prompt and rows[0].persona == "The Anchor"


def test_load_pairs_from_run_dir_filters_kind(tmp_path):
    run = tmp_path / "run"
    pairs = keyword_pairs(3, 1) + keyword_pairs(2, 1, kind="directive")
    write_jsonl(run / "pairs.jsonl", pairs)
    write_run_config(run, dataset="qmsum", rubric_version="paper_v1")
    file, persona = data.load_pairs(run, "persona")
    assert file.name == "pairs.jsonl" and len(persona) == 3
    assert data.resolve_dataset(None, data.run_settings(file)) == "QMSum"
    with pytest.raises(MascotError, match="no preference pairs of kind 'episode'"):
        data.load_pairs(run / "pairs.jsonl", "episode")
    with pytest.raises(MascotError, match="holds none of"):
        data.load_pairs(tmp_path, "directive")


def test_bad_pair_line_is_a_one_line_error(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"prompt": "not a list"}) + "\n")
    with pytest.raises(MascotError, match=r"pairs.jsonl:1: not a valid PreferencePair"):
        data.load_pairs(path, "persona")


# --------------------------------------------------------------------------- output folders


def test_output_dir_rules(tmp_path):
    out = tmp_path / "out"
    assert artefact.prepare_output_dir(out, resume=False, overwrite=False) is None
    (out / "adapter_config.json").write_text("{}")
    with pytest.raises(MascotError, match="already exists: pass --resume"):
        artefact.prepare_output_dir(out, resume=False, overwrite=False)
    (out / "checkpoint-2").mkdir()
    (out / "checkpoint-2" / "trainer_state.json").write_text("{}")
    (out / "checkpoint-10").mkdir()  # incomplete: no trainer state
    assert artefact.prepare_output_dir(out, resume=True, overwrite=False).name == "checkpoint-2"
    assert artefact.prepare_output_dir(out, resume=False, overwrite=True) is None
    assert list(out.iterdir()) == []
    with pytest.raises(MascotError, match="exclude each other"):
        artefact.prepare_output_dir(out, resume=True, overwrite=True)


def test_default_output_names_follow_the_research_layout():
    assert str(artefact.default_output_dir("persona_reward_model", "QMSum", "Qwen/Qwen3-0.6B")) == "outputs/reward_model/Individual_QMSum_Qwen3-0.6B"
    assert str(artefact.default_output_dir("speaker", "QMSum", "Qwen/Qwen3-8B")) == "outputs/llm/grpo_Speaker_individual_QMSum_Qwen3-8B"
    assert str(artefact.default_output_dir("director_dpo", "ESConv", "Qwen/Qwen3-8B")) == "outputs/llm/dpo_Director_ESConv_Qwen3-8B"


# --------------------------------------------------------------------------- CLI


def test_train_help_lists_every_stage():
    result = runner.invoke(app, ["train", "--help"])
    assert result.exit_code == 0
    for name in ("reward-model", "speaker", "group-reward-model", "director-grpo", "director-dpo"):
        assert name in result.output
    assert "merge-lora" in runner.invoke(app, ["--help"]).output


def capture(seen: dict):
    """Stands in for a trainer: keeps the settings the CLI built and stops."""

    def trainer(settings):
        seen["settings"] = settings
        raise MascotError("stop")

    return trainer


def test_flags_come_from_the_settings(monkeypatch):
    seen: dict = {}
    monkeypatch.setattr("mascot.train.speaker_grpo.train_speaker", capture(seen))
    result = runner.invoke(
        app,
        ["train", "speaker", "--data-path", "run", "--reward-model-path", "rm", "--beta", "0.1", "--num-generations", "4", "--no-lora", "--resume"],
    )
    settings = seen["settings"]
    assert isinstance(result.exception, MascotError)
    assert (settings.beta, settings.num_generations, settings.lora, settings.resume) == (0.1, 4, False, True)
    assert settings.temperature == SpeakerGRPOSettings().temperature


def test_config_file_fills_settings_and_flags_win(monkeypatch, tmp_path):
    seen: dict = {}
    monkeypatch.setattr("mascot.train.director_dpo.train_director_dpo", capture(seen))
    config = tmp_path / "dpo.yaml"
    config.write_text("episode-dataset-path: runs/branching\nbeta: 0.3\nlearning_rate: 1.0e-4\n")
    runner.invoke(app, ["train", "director-dpo", "--config", str(config), "--beta", "0.2"])
    settings = seen["settings"]
    assert (settings.data_path, settings.beta, settings.learning_rate) == ("runs/branching", 0.2, 1e-4)
    config.write_text("bogus: 1\n")
    result = runner.invoke(app, ["train", "director-dpo", "--config", str(config)])
    assert isinstance(result.exception, MascotError) and "unknown settings bogus" in str(result.exception)


@pytest.mark.parametrize(
    ("command", "data_flag", "records"),
    [
        ("speaker", "--data-path", lambda: keyword_pairs(4, 1)),
        ("director-grpo", "--episode-dataset-path", lambda: [episode(i) for i in range(2)]),
    ],
)
def test_an_unknown_aggregation_is_one_line_before_anything_is_written(tmp_path, command, data_flag, records):
    run = tmp_path / "run"
    write_jsonl(run / ("pairs.jsonl" if command == "speaker" else "episodes.jsonl"), records())
    write_run_config(run, dataset="EmpatheticDialogues")
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        [
            "train",
            command,
            data_flag,
            str(run),
            "--model",
            "not-loaded",
            "--output-dir",
            str(out),
            "--batch-size",
            "4",
            "--num-generations",
            "2",
            "--reward-model-weight" if command == "speaker" else "--group-reward-weight",
            "0",
            "--multi-objective-aggregation",
            "mean",
        ],
    )
    assert isinstance(result.exception, TrainingSetupError) and not out.exists()
    assert str(result.exception) == "--multi-objective-aggregation must be normalize_then_sum or sum_then_normalize, got 'mean'"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--scale-rewards", "std"], "--scale-rewards must be group, batch or none, got 'std'"),
        (["--scale-rewards", "batch"], "--scale-rewards batch has no effect with --multi-objective-aggregation normalize_then_sum"),
    ],
)
def test_a_reward_scaling_that_is_unknown_or_would_be_ignored_is_one_line(tmp_path, extra, message):
    run = tmp_path / "run"
    write_jsonl(run / "episodes.jsonl", [episode(i) for i in range(2)])
    write_run_config(run, dataset="EmpatheticDialogues")
    out = tmp_path / "out"
    result = runner.invoke(app, ["train", "director-grpo", "--episode-dataset-path", str(run), "--model", "not-loaded", "--output-dir", str(out),
                                 "--batch-size", "4", "--num-generations", "2", "--group-reward-weight", "0", *extra])  # fmt: skip
    assert isinstance(result.exception, TrainingSetupError) and not out.exists()
    assert str(result.exception).startswith(message)


def test_missing_required_setting_is_a_one_line_error():
    result = runner.invoke(app, ["train", "reward-model", "--seed", "1"])
    assert isinstance(result.exception, MascotError) and "--data-path" in str(result.exception)


def test_existing_output_without_resume_or_overwrite_is_refused(tmp_path):
    run = tmp_path / "run"
    write_jsonl(run / "pairs.jsonl", keyword_pairs(4, 1))
    out = tmp_path / "out"
    out.mkdir()
    (out / "adapter_model.safetensors").write_bytes(b"x")
    result = runner.invoke(app, ["train", "reward-model", "--data-path", str(run), "--dataset", "ED", "--output-dir", str(out)])
    assert isinstance(result.exception, MascotError) and "already exists" in str(result.exception)
    assert (out / "adapter_model.safetensors").read_bytes() == b"x"


def test_vllm_needs_a_gpu_here(tmp_path):
    from mascot.train.common import grpo_config
    from mascot.train.runtime import cuda_available

    if cuda_available():
        pytest.skip("this machine has a GPU")
    settings = SpeakerGRPOSettings(data_path="x", use_vllm=True, batch_size=8, num_generations=4)
    with pytest.raises(TrainingSetupError, match="needs a CUDA GPU"):
        grpo_config(settings, tmp_path, derive_batch(8, 1, 8), [1.0])
    with pytest.raises(TrainingSetupError, match="multiple of --num-generations"):
        grpo_config(SpeakerGRPOSettings(data_path="x", batch_size=12), tmp_path, derive_batch(12, 1, 8), [1.0])


def test_pairs_of_schema_round_trip(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", keyword_pairs(2, 1))
    _, loaded = data.load_pairs(path, "persona")
    assert all(isinstance(p, PreferencePair) for p in loaded)


def test_lora_defaults_train_the_papers_share_of_qwen3_8b():
    """LoRA r=16 on q/k/v/o of the Qwen3-8B shape trains 0.187% of the parameters, as reported."""
    import torch
    from peft import get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from mascot.train.models import count_parameters, lora_config

    config = Qwen3Config(
        vocab_size=151936,
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=False,
    )
    with torch.device("meta"):  # shapes only, no memory
        model = get_peft_model(Qwen3ForCausalLM(config), lora_config(SpeakerGRPOSettings(), "CAUSAL_LM"))
    assert round(count_parameters(model)["trainable_share"] * 100, 3) == 0.187


def test_the_train_commands_import_nothing_heavy():
    import subprocess
    import sys

    code = "import sys, mascot.commands.train; print(sorted(m for m in ('torch', 'transformers', 'trl', 'peft', 'datasets') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"

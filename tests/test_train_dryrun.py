"""`mascot train ... --dry-run` refuses, in one line, a reward model, group reward model or adapter
folder that holds no trained model of the right kind, and data too small for one optimizer step.
The real run refuses the same reward-model folders before it loads anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_train_director import episode
from train_helpers import keyword_pairs, write_jsonl, write_run_config

from mascot.train.artefact import METADATA_FILE, ArtefactError, TrainingMetadata
from mascot.train.config import SpeakerGRPOSettings

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the embedded model: resolves offline without loading


def artefact(folder: Path, role: str, *, weights: bool = True, kind: str = "lora_adapter") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    task = "causal_lm" if role in ("speaker", "director") else "sequence_classification"
    meta = TrainingMetadata(role=role, trainer="reward", base_model=MODEL, task=task, weights=kind)
    (folder / METADATA_FILE).write_text(meta.model_dump_json(exclude_none=True), encoding="utf-8")
    if kind == "lora_adapter":
        (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": MODEL}), encoding="utf-8")
    if weights:
        (folder / ("adapter_model.safetensors" if kind == "lora_adapter" else "model.safetensors")).write_bytes(b"")
    return folder


def dry_run(*argv: str):
    from typer.testing import CliRunner

    from mascot.cli.app import app

    return CliRunner().invoke(app, [*argv, "--dry-run"])


def refused(result, *fragments: str) -> None:
    assert result.exit_code != 0, result.output
    message = str(result.exception)
    assert "\n" not in message and all(f in message for f in fragments), message


@pytest.fixture
def stage1_run(tmp_path):
    run = tmp_path / "individual_ED_x"
    write_jsonl(run / "pairs.jsonl", keyword_pairs(n_prompts=4, per_prompt=1))
    write_run_config(run, dataset="EmpatheticDialogues")
    return run


def test_speaker_dry_run_checks_that_the_reward_model_folder_holds_a_trained_reward_model(stage1_run, tmp_path):
    speaker = ("train", "speaker", "--data-path", str(stage1_run), "--model", MODEL, "--output-dir", str(tmp_path / "out"))
    empty = tmp_path / "empty_rm"
    empty.mkdir()
    refused(dry_run(*speaker, "--reward-model-path", str(empty)), "--reward-model-path", "holds no trained model", METADATA_FILE)
    group = artefact(tmp_path / "grm", "group_reward_model")
    refused(dry_run(*speaker, "--reward-model-path", str(group)), "holds a group reward model, not a persona reward model")
    no_weights = artefact(tmp_path / "cut_short", "persona_reward_model", weights=False)
    refused(dry_run(*speaker, "--reward-model-path", str(no_weights)), "says lora_adapter but its weights are missing")
    full = artefact(tmp_path / "full_rm", "persona_reward_model", kind="full", weights=False)
    refused(dry_run(*speaker, "--reward-model-path", str(full)), "says full but its weights are missing", "model.safetensors")
    ok = dry_run(*speaker, "--reward-model-path", str(artefact(tmp_path / "rm", "persona_reward_model")))
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout[ok.stdout.index("{") :])["resolved"]["num_prompts"] == 4
    refused(
        dry_run(*speaker, "--reward-model-path", str(artefact(tmp_path / "rm2", "persona_reward_model")), "--batch-size", "40"), "one step needs 5"
    )
    assert not (tmp_path / "out").exists()


def test_director_grpo_dry_run_checks_its_group_reward_model_and_speaker_adapter(tmp_path):
    run = tmp_path / "directed_ED_x"
    write_jsonl(run / "episodes.jsonl", [episode(i) for i in range(2)])
    write_run_config(run, dataset="EmpatheticDialogues")
    director = ("train", "director-grpo", "--episode-dataset-path", str(run), "--model", MODEL, "--output-dir", str(tmp_path / "out"))
    empty = tmp_path / "empty_grm"
    empty.mkdir()
    refused(dry_run(*director, "--group-reward-model-path", str(empty)), "--group-reward-model-path", "holds no trained model")
    persona = artefact(tmp_path / "rm", "persona_reward_model")
    refused(dry_run(*director, "--group-reward-model-path", str(persona)), "holds a persona reward model, not a group reward model")
    grm = artefact(tmp_path / "grm", "group_reward_model")
    wrong_adapter = artefact(tmp_path / "director_adapter", "director")
    refused(
        dry_run(*director, "--group-reward-model-path", str(grm), "--speaker-adapter", str(wrong_adapter)),
        "--speaker-adapter",
        "holds a director, not a speaker",
    )
    bare_adapter = tmp_path / "bare_adapter"
    bare_adapter.mkdir()
    (bare_adapter / "adapter_config.json").write_text("{}")
    refused(
        dry_run(*director, "--group-reward-model-path", str(grm), "--speaker-adapter", str(bare_adapter)),
        "holds adapter_config.json but no adapter weights",
    )
    ok = dry_run(*director, "--group-reward-model-path", str(grm), "--speaker-adapter", str(artefact(tmp_path / "speaker", "speaker")))
    assert ok.exit_code == 0, ok.output
    refused(dry_run(*director, "--group-reward-model-path", str(grm), "--batch-size", "48"), "too few decision points", "one step needs 6")


def test_any_trainer_dry_run_checks_a_model_folder_or_adapter_given_as_model(stage1_run, tmp_path):
    empty = tmp_path / "empty_model"
    empty.mkdir()
    refused(
        dry_run("train", "reward-model", "--data-path", str(stage1_run), "--model", str(empty)),
        "--model",
        "holds no model: neither config.json nor adapter_config.json",
    )
    reward_model = artefact(tmp_path / "rm", "persona_reward_model")
    refused(
        dry_run("train", "sft", "--data-path", str(stage1_run), "--model", str(reward_model)),
        "holds a persona reward model (sequence_classification), not a causal_lm model",
    )
    cut_short = artefact(tmp_path / "sft_adapter", "speaker", weights=False)
    refused(
        dry_run("train", "speaker", "--data-path", str(stage1_run), "--model", str(cut_short), "--reward-model-weight", "0"), "no adapter weights"
    )


def test_the_real_speaker_run_refuses_an_empty_reward_model_folder_before_loading(stage1_run, tmp_path):
    from mascot.train.speaker_grpo import train_speaker

    empty = tmp_path / "empty_rm"
    empty.mkdir()
    settings = SpeakerGRPOSettings(data_path=str(stage1_run), model_name=MODEL, output_dir=str(tmp_path / "out"), reward_model_path=str(empty))
    with pytest.raises(ArtefactError, match="holds no trained model"):
        train_speaker(settings)
    assert not (tmp_path / "out").exists()


def test_merge_lora_dry_run_checks_that_the_adapter_holds_its_weights(tmp_path):
    cut_short = artefact(tmp_path / "speaker", "speaker", weights=False)
    refused(dry_run("merge-lora", "--adapter", str(cut_short), "--output", str(tmp_path / "merged")), "--adapter", "no adapter weights")
    ok = dry_run("merge-lora", "--adapter", str(artefact(tmp_path / "complete", "speaker")), "--output", str(tmp_path / "merged"))
    assert ok.exit_code == 0, ok.output

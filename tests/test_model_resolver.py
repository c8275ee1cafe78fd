"""One resolver for every command that loads weights: hub ids, folders and adapter folders resolve
the same way, the embedded model's id works offline, and artefacts record hub ids."""

from __future__ import annotations

import json

import pytest

from mascot.errors import MascotError
from mascot.llm import models
from mascot.train.models import ModelLoadError, base_model_id, model_ref
from mascot.vocab import DEFAULT_LOCAL_MODEL


@pytest.fixture
def no_hub(monkeypatch, tmp_path):
    """No hub, nothing in the HF cache, and a converted embedded model in a scratch mascot cache."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(models, "in_hf_cache", lambda model_id: False)
    converted = tmp_path / "cache" / "models" / models.EMBEDDED_DIRNAME
    converted.mkdir(parents=True)
    (converted / "config.json").write_text("{}")
    (converted / "tokenizer_config.json").write_text("{}")
    monkeypatch.setenv("MASCOT_CACHE_DIR", str(tmp_path / "cache"))
    return converted


def adapter(folder, base: str, **config):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base, **config}))
    return folder


def test_the_embedded_id_resolves_offline_to_the_converted_folder_and_records_the_id(no_hub):
    resolved = models.resolve_model(DEFAULT_LOCAL_MODEL)
    assert resolved.source == str(no_hub) and resolved.base_model == DEFAULT_LOCAL_MODEL and resolved.adapter is None
    assert model_ref(DEFAULT_LOCAL_MODEL) == str(no_hub) and base_model_id(DEFAULT_LOCAL_MODEL) == DEFAULT_LOCAL_MODEL
    # given the converted folder itself, artefacts still name the hub id
    assert base_model_id(str(no_hub)) == DEFAULT_LOCAL_MODEL


def test_an_adapter_resolves_to_its_base_plus_itself(no_hub, tmp_path):
    folder = adapter(tmp_path / "speaker", "/other/machine/.cache/mascot/models/SmolLM2-135M-Instruct")
    resolved = models.resolve_model(str(folder))
    assert resolved.adapter == str(folder.resolve()) and resolved.source == str(no_hub)
    assert resolved.base_model == DEFAULT_LOCAL_MODEL
    assert model_ref(str(folder)) == str(folder.resolve())  # trainers load adapters as folders


def test_an_adapter_without_a_base_names_it_from_the_metadata_or_asks_for_it(no_hub, tmp_path):
    folder = tmp_path / "rm"
    folder.mkdir()
    (folder / "adapter_config.json").write_text("{}")
    with pytest.raises(MascotError, match="--base-model") as info:
        models.resolve_model(str(folder))
    assert "\n" not in str(info.value)
    (folder / "mascot_metadata.json").write_text(json.dumps({"base_model": DEFAULT_LOCAL_MODEL}))
    assert models.resolve_model(str(folder)).source == str(no_hub)


def test_other_folders_and_ids(no_hub, tmp_path):
    plain = tmp_path / "my-model"
    plain.mkdir()
    assert base_model_id(str(plain)) == str(plain.resolve())  # no hub id known: the folder
    with pytest.raises(ModelLoadError, match="hub is unreachable"):
        model_ref("someone/not-cached")
    with pytest.raises(ModelLoadError, match="not found"):
        model_ref(str(tmp_path / "missing"))


def test_saved_adapters_name_the_hub_id_not_the_folder_the_base_loaded_from(tmp_path, no_hub):
    folder = adapter(tmp_path / "out", str(no_hub), task_type="SEQ_CLS")
    (folder / "README.md").write_text(f"---\nbase_model: {no_hub}\n---\n")
    models.record_hub_base(folder, DEFAULT_LOCAL_MODEL)
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == DEFAULT_LOCAL_MODEL and config["task_type"] == "SEQ_CLS"
    assert str(no_hub) not in (folder / "README.md").read_text() and DEFAULT_LOCAL_MODEL in (folder / "README.md").read_text()


@pytest.mark.slow
def test_reward_model_trains_offline_from_the_embedded_id_and_records_it(tmp_path, monkeypatch):
    """The command a user runs offline with the embedded model's own id (minutes on 2 cores)."""
    from train_helpers import keyword_pairs, write_jsonl, write_run_config
    from typer.testing import CliRunner

    from mascot.cli.app import app
    from mascot.train.artefact import read_metadata

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    run = tmp_path / "individual_ED_x"
    write_jsonl(run / "pairs.jsonl", keyword_pairs(n_prompts=12, per_prompt=2))
    write_run_config(run, dataset="EmpatheticDialogues", rubric_version="paper_v1")
    out = tmp_path / "rm"
    args = [
        "train",
        "reward-model",
        "--data-path",
        str(run),
        "--model-name",
        DEFAULT_LOCAL_MODEL,
        "--output-dir",
        str(out),
        "--max-steps",
        "1",
        "--batch-size",
        "4",
        "--max-length",
        "128",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert read_metadata(out).base_model == DEFAULT_LOCAL_MODEL
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == DEFAULT_LOCAL_MODEL

"""Trainer flag names that cannot be confused with `mascot generate`'s, and their old spellings."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.errors import MascotError

runner = CliRunner()


def capture(seen: dict):
    def trainer(settings):
        seen["settings"] = settings
        raise MascotError("stop")

    return trainer


@pytest.mark.parametrize(
    "command, target", [("speaker", "mascot.train.speaker_grpo.train_speaker"), ("director-grpo", "mascot.train.director_grpo.train_director_grpo")]
)
def test_trl_vllm_server_url_names_the_trl_server(monkeypatch, command, target):
    seen: dict = {}
    monkeypatch.setattr(target, capture(seen))
    runner.invoke(app, ["train", command, "--data-path", "run", "--trl-vllm-server-url", "http://gpu:8000"])
    assert seen["settings"].trl_vllm_server_url == "http://gpu:8000"
    help_text = runner.invoke(app, ["train", command, "--help"], env={"COLUMNS": "200"}).output
    assert "--trl-vllm-server-url" in help_text
    assert "--vllm-server-url" not in help_text and "--vllm-server-base-url" not in help_text  # hidden old names


@pytest.mark.parametrize("old", ["--vllm-server-url", "--vllm-server-base-url"])
def test_old_spellings_still_work_and_warn(monkeypatch, old):
    seen: dict = {}
    monkeypatch.setattr("mascot.train.speaker_grpo.train_speaker", capture(seen))
    result = runner.invoke(app, ["train", "speaker", "--data-path", "run", old, "http://gpu:8000"])
    assert seen["settings"].trl_vllm_server_url == "http://gpu:8000"
    assert f"warning: {'/'.join(('--vllm-server-url', '--vllm-server-base-url'))} is deprecated" in result.output
    assert "use --trl-vllm-server-url" in result.output


def test_the_new_flag_wins_over_an_old_spelling(monkeypatch):
    seen: dict = {}
    monkeypatch.setattr("mascot.train.speaker_grpo.train_speaker", capture(seen))
    runner.invoke(app, ["train", "speaker", "--data-path", "run", "--vllm-server-url", "http://old:1", "--trl-vllm-server-url", "http://new:2"])
    assert seen["settings"].trl_vllm_server_url == "http://new:2"


def test_a_setting_on_by_default_can_be_turned_off_from_the_command_line(monkeypatch):
    seen: dict = {}
    monkeypatch.setattr("mascot.train.director_grpo.train_director_grpo", capture(seen))
    runner.invoke(app, ["train", "director-grpo", "--data-path", "run", "--no-directive-opening"])
    assert seen["settings"].directive_opening is False
    runner.invoke(app, ["train", "director-grpo", "--data-path", "run"])
    assert seen["settings"].directive_opening is True

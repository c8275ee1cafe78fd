import pytest

from mascot.cli.invoke import run_command
from mascot.errors import MascotError


def test_runs_a_command_in_process(capsys):
    run_command(["data", "--help"])
    assert "Usage" in capsys.readouterr().out


def test_usage_error_is_one_line():
    with pytest.raises(MascotError, match="No such option"):
        run_command(["train", "reward-model", "--no-such-flag"])


def test_missing_required_setting_is_a_mascot_error():
    with pytest.raises(MascotError, match="--data-path"):
        run_command(["train", "reward-model", "--dry-run"])

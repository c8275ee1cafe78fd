"""An NLI model that cannot load: each command names its own way out (`mascot metrics --skip-nli`,
`mascot eval --no-nli`)."""

from __future__ import annotations

from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.errors import MascotError
from mascot.metrics.nli import NLIUnavailable


def eval_args(tmp_path, nli_model: str) -> list[str]:
    return ["eval", "--systems", "zero-shot", "--dataset", "ED", "--nli-model", nli_model, "--output-dir", str(tmp_path / "eval")]


def test_eval_without_its_nli_model_names_no_nli_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setattr("mascot.hub.hub_online", lambda: False)
    result = CliRunner().invoke(app, eval_args(tmp_path, "no-such-org/no-such-nli"))
    assert isinstance(result.exception, MascotError)
    message = str(result.exception)
    assert "pass --no-nli" in message and "--skip-nli" not in message and "no-such-org/no-such-nli" in message and "\n" not in message
    assert not (tmp_path / "eval").exists()  # refused before any system was generated


def test_an_nli_failure_inside_the_metrics_step_names_evals_flag(tmp_path, monkeypatch):
    import mascot.eval.run as eval_run

    def metrics_step_fails(settings):
        raise NLIUnavailable("cannot load NLI model 'on-disk' (offline or not a model): no config.json")

    monkeypatch.setattr(eval_run, "run_eval", metrics_step_fails)
    result = CliRunner().invoke(app, eval_args(tmp_path, str(tmp_path)))  # a folder: the early check passes
    message = str(result.exception)
    assert (
        message
        == "cannot load NLI model 'on-disk' (offline or not a model): no config.json: pass --no-nli to compute the other metrics without NLI, or --nli-model FOLDER for a model on disk"
    )
    assert "--skip-nli" in str(NLIUnavailable("x"))  # what `mascot metrics` says

"""A training run's output holds what informs and nothing else: no library FutureWarning, no
"score.weight MISSING" loading report; one line of ours says the reward head is new."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from train_helpers import base, keyword_pairs, one_thread_per_module, write_jsonl, write_run_config  # noqa: F401 - fixtures

from mascot.train.screen import report_loading

SRC = Path(__file__).resolve().parents[1] / "src"
HEAD_LINE = "reward head initialised (new score layer)"
NOISE = ("FutureWarning", "LOAD REPORT", "MISSING", "is deprecated", "were not sharded")


def mascot(*argv: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """The CLI in its own process, stdout and stderr together, as a user sees them."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "default"}
    return subprocess.run(
        [sys.executable, "-m", "mascot", *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def stage1_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "individual_ED_tiny"
    write_jsonl(run / "pairs.jsonl", keyword_pairs(n_prompts=8, per_prompt=1))
    write_run_config(run, dataset="EmpatheticDialogues")
    return run


def assert_quiet(output: str) -> None:
    for noise in NOISE:
        assert noise not in output, f"{noise!r} in the run's output:\n{output}"


def test_reward_model_and_speaker_runs_print_no_library_noise(base, stage1_run, tmp_path):
    rm = tmp_path / "rm"
    trained = mascot(
        "train",
        "reward-model",
        "--data-path",
        str(stage1_run),
        "--model",
        str(base),
        "--output-dir",
        str(rm),
        "--batch-size",
        "4",
        "--max-steps",
        "1",
    )
    assert trained.returncode == 0, trained.stdout
    assert_quiet(trained.stdout)
    assert trained.stdout.count(HEAD_LINE) == 1 and "persona reward model: held-out pairwise accuracy" in trained.stdout
    # GRPO: the reward model reloads with its trained head (no "initialised" line), generation
    # toggles checkpointing inside TRL (its deprecation warnings are the ones filtered)
    speaker = mascot(
        "train",
        "speaker",
        "--data-path",
        str(stage1_run),
        "--model",
        str(base),
        "--output-dir",
        str(tmp_path / "speaker"),
        "--reward-model-path",
        str(rm),
        "--batch-size",
        "4",
        "--num-generations",
        "2",
        "--max-completion-length",
        "4",
        "--max-steps",
        "1",
    )
    assert speaker.returncode == 0, speaker.stdout
    assert_quiet(speaker.stdout)
    assert HEAD_LINE not in speaker.stdout and "speaker: mean reward" in speaker.stdout


def test_weights_other_than_the_new_head_that_did_not_load_are_still_reported(caplog, capsys):
    with caplog.at_level(logging.WARNING, logger="mascot.train.screen"):
        report_loading(
            {"missing_keys": {"score.weight", "model.norm.weight"}, "unexpected_keys": {"lm_head.weight"}, "mismatched_keys": set()},
            "m",
            new_head_expected=True,
        )
    assert HEAD_LINE in capsys.readouterr().err
    assert "1 missing (model.norm.weight); 1 unexpected (lm_head.weight)" in caplog.text
    caplog.clear()
    report_loading({"missing_keys": {"score.weight"}}, "m", new_head_expected=False)  # an adapter brings the trained head
    assert HEAD_LINE not in capsys.readouterr().err and not caplog.text

"""What a person at the command line meets: help that fits 80 columns, progress while long steps
run, Ctrl-C answered at once, failed runs that do not block their retry, counts in plain words."""

from __future__ import annotations

import asyncio
import io
import json
import re
import shutil
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console
from typer.testing import CliRunner

from mascot import progress
from mascot.cli.app import app
from mascot.dialogue.run import generate_group
from mascot.dialogue.run_settings import GroupEpisodeSettings
from mascot.errors import MascotError
from mascot.files import StoreError, read_jsonl
from mascot.runs.store import RunStore
from mascot.schema import Episode
from mascot.settings import cli_fields, flag_name
from mascot.testing.players import group_client

FIXTURES = Path(__file__).parent / "fixtures"
RUN = "directed_ESConv_SmolLM2-135M-Instruct"


def plain_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=120, force_terminal=False, color_system=None), out


def scripted_clients() -> dict:
    return {"director": group_client(), "speaker": group_client(), "user": group_client()}


@pytest.fixture(autouse=True)
def fresh_interrupts(monkeypatch):
    monkeypatch.delenv(progress.QUIET_ENV, raising=False)
    progress._Interrupts.presses = 0
    yield
    progress._Interrupts.presses = 0
    progress._ACTIVE.clear()


# ---------------------------------------------------------------------------- help


def declared_flags(settings_cls: type) -> set[str]:
    flags = set()
    for f in cli_fields(settings_cls):
        if f.metadata.get("hidden"):
            continue
        spellings = [s for flag in f.metadata.get("flags") or () for s in flag.split("/")]
        flags.update(spellings if any("/" in flag for flag in f.metadata.get("flags") or ()) else [flag_name(f.name), *spellings])
    return flags


def test_generate_help_at_80_columns_lists_every_flag_name_whole():
    result = CliRunner().invoke(app, ["generate", "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert "…" not in result.output  # nothing cut
    shown = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*(?![\w-])", result.output))
    missing = declared_flags(GroupEpisodeSettings) - shown
    assert not missing, missing
    assert len(declared_flags(GroupEpisodeSettings)) > 60
    help_row = next(line for line in lines if re.search(r"│ --help\b", line))
    assert "<bool>" not in help_row and "BOOL" not in help_row


def test_generate_help_groups_options_into_panels_and_shows_defaults():
    output = CliRunner().invoke(app, ["generate", "--help"], env={"COLUMNS": "80"}).output
    titles = re.findall(r"╭─ ([A-Za-z ]+?) ─", output)
    for title in ("Data", "Models and endpoints", "Director", "Speakers", "Simulated user", "Generation", "Safety", "Judging", "Output", "Run"):
        assert title in titles, titles
    assert "Judge" not in titles  # a group run judges nothing: its judge flags belong to --mode individual
    stage_1 = CliRunner().invoke(app, ["generate", "--mode", "individual", "--help"], env={"COLUMNS": "80"}).output
    stage_1_titles = re.findall(r"╭─ ([A-Za-z ]+?) ─", stage_1)
    assert {"Speakers", "Judge", "Judging"} <= set(stage_1_titles) and not {"Director", "Simulated user", "Safety"} & set(stage_1_titles), (
        stage_1_titles
    )
    director = output[output.index("╭─ Director") : output.index("╭─ Speakers")]
    assert "--director-server-url" in director and "--speaker-model" not in director
    text = " ".join(output.replace("│", " ").split())  # descriptions wrap
    assert "[default: 1500]" in text and "Also: --token-budget." in text
    assert "Off: --no-user-simulation. [default: on]" in text


# ---------------------------------------------------------------------------- run folders


def failed_run(root: Path, *, records: int, error: str) -> Path:
    run = root / RUN
    run.mkdir(parents=True)
    lines = "".join(json.dumps({"episode_id": f"e{i}"}) + "\n" for i in range(records))
    (run / "episodes.jsonl").write_text(lines)
    (run / "run_summary.json").write_text(json.dumps({"run_id": RUN, "status": "failed", "error": error, "num_records": records}))
    return run


def test_a_failed_start_does_not_stop_the_dry_run_from_naming_the_real_problem(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    failed_run(tmp_path / "runs", records=0, error="MascotError: adapter folder not found")
    data = ["--dataset", "ESConv", "--data-file", str(FIXTURES / "esconv_sample.jsonl"), "--output-dir", "runs", "--dry-run"]
    missing = CliRunner().invoke(app, ["generate", "--mode", "group", *data, "--director-adapter", "outputs/no_lora"])
    assert missing.exit_code != 0 and "outputs/no_lora" in str(missing.exception)
    assert "already exists" not in str(missing.exception)
    fixed = CliRunner().invoke(app, ["generate", "--mode", "group", *data])
    assert fixed.exit_code == 0, fixed.output
    assert "(new)" in json.loads(fixed.stdout)["resolved"]["run_dir"]


def test_a_missing_adapter_is_refused_before_the_run_folder_is_made(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["generate", "--mode", "group", "--dataset", "ESConv", "--data-file", str(FIXTURES / "esconv_sample.jsonl"), "--output-dir", "runs"]
    result = CliRunner().invoke(app, [*args, "--director-adapter", "outputs/no_lora"])
    assert result.exit_code != 0 and "--director-adapter outputs/no_lora does not exist" in str(result.exception)
    assert not (tmp_path / "runs").exists()


def test_the_rerun_of_a_failed_run_says_it_failed_and_why(tmp_path):
    run = failed_run(tmp_path, records=2, error="GenerationFailed: every judgment failed")
    with pytest.raises(StoreError) as refused:
        RunStore(run).open()
    message = str(refused.value)
    assert message == (
        f"the earlier run in {run} failed (GenerationFailed: every judgment failed, 2 records written): "
        "pass --resume to continue it or --overwrite to start over"
    )
    dry = CliRunner().invoke(app, ["generate", "--mode", "group", "--dataset", "ESConv", "--output-dir", str(tmp_path), "--dry-run"])
    assert dry.exit_code != 0 and str(dry.exception) == message  # the dry run refuses it with the same words


def test_a_run_without_records_in_the_folder_starts_over_it(tmp_path):
    run = failed_run(tmp_path, records=0, error="MascotError: the speaker endpoint is unreachable")
    with RunStore(run) as store:
        assert store.summary.num_records == 0
    assert json.loads((run / "run_summary.json").read_text())["status"] == "completed"


# ---------------------------------------------------------------------------- data


def test_the_split_comes_from_the_file_name_and_a_conflict_is_refused(tmp_path):
    valid = tmp_path / "valid.jsonl"
    shutil.copy(FIXTURES / "esconv_sample.jsonl", valid)
    result = CliRunner().invoke(app, ["data", "preview", "--dataset", "ESConv", "--data-file", str(valid), "--limit", "1", "--jsonl"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.splitlines()[0])["split"] == "valid"
    both = CliRunner().invoke(app, ["data", "preview", "--dataset", "ESConv", "--data-file", str(valid), "--split", "valid", "--jsonl"])
    assert both.exit_code == 0
    conflict = CliRunner().invoke(app, ["data", "preview", "--dataset", "ESConv", "--data-file", str(valid), "--split", "test"])
    assert conflict.exit_code != 0 and "named for the valid split but --split is test" in str(conflict.exception)
    plain = GroupEpisodeSettings(dataset="ESConv", data_file=FIXTURES / "esconv_sample.jsonl")
    assert plain.split == "test" and GroupEpisodeSettings(dataset="ESConv").split == "test"


def test_the_hub_error_names_the_split_asked_for(monkeypatch):
    from mascot.data import sources

    def offline(*args, **kwargs):
        raise ConnectionError("offline")

    monkeypatch.setitem(__import__("sys").modules, "datasets", SimpleNamespace(load_dataset=offline))
    with pytest.raises(MascotError) as failed:
        list(__import__("mascot.data.loaders", fromlist=["iter_contexts"]).iter_contexts("QMSum", split="val"))
    assert "split 'val'" in str(failed.value) and "'train'" not in str(failed.value)
    assert sources.load_hub_split  # the one loader every hub split goes through


# ---------------------------------------------------------------------------- words


def test_counts_agree_with_their_nouns():
    assert progress.plural(1, "episode") == "1 episode"
    assert progress.plural(0, "episode") == "0 episodes"
    assert progress.plural(3, "reply") == "3 replies" and progress.plural(2, "day") == "2 days"
    assert progress.plural(2, "query", "queries") == "2 queries"
    assert progress.singular("queries") == "query" and progress.singular("episodes") == "episode"
    assert progress.duration(42) == "42 s" and progress.duration(185) == "3 min 5 s" and progress.duration(120) == "2 min"
    assert progress.duration(1500) == "25 min" and progress.duration(4320) == "1 h 12 min"


def test_the_generation_footer_says_one_episode_and_zero_plainly(tmp_path, es_contexts):
    console, out = plain_console()
    cfg = GroupEpisodeSettings(dataset="ESConv", num_turns=1, seed=1, output_dir=tmp_path)
    asyncio.run(generate_group(cfg, contexts=es_contexts[:1], clients=scripted_clients(), console=console))
    assert "wrote 1 episode to " in out.getvalue()
    again, out_again = plain_console()
    cfg.resume = True
    asyncio.run(generate_group(cfg, contexts=es_contexts[:1], clients=scripted_clients(), console=again))
    assert "wrote 0 new episodes: all 1 were already written" in out_again.getvalue()


def test_data_that_gives_no_context_fails_before_the_run_folder(tmp_path):
    cfg = GroupEpisodeSettings(dataset="ESConv", num_turns=1, output_dir=tmp_path / "runs")
    with pytest.raises(MascotError, match="gave no context"):
        asyncio.run(generate_group(cfg, contexts=[], clients=scripted_clients(), console=plain_console()[0]))
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------------------- progress


def test_progress_lines_appear_when_stderr_is_not_a_terminal(monkeypatch, capsys):
    monkeypatch.setenv(progress.INTERVAL_ENV, "0.05")
    with progress.ProgressLine("candidates", 32, unit="candidates", console=plain_console()[0]) as line:
        line.update(8)
        __import__("time").sleep(0.3)
    err = capsys.readouterr().err
    assert "candidates: 8/32 (25%)" in err and "left" in err and "so far" in err
    assert err.strip().splitlines()[-1].startswith("candidates: 8/32 in ")
    detail = {"calls": 0}
    with progress.ProgressLine("episodes", 2, unit="episodes", detail=lambda: f"{detail['calls']} model calls", console=plain_console()[0]):
        detail["calls"] = 7  # within an unfinished episode: the line still moves
        __import__("time").sleep(0.3)
    assert "episodes: 0/2 (0%), 0 s so far; 7 model calls" in capsys.readouterr().err


def test_quiet_mode_shows_no_progress(monkeypatch, capsys):
    monkeypatch.setenv(progress.INTERVAL_ENV, "0.05")
    with progress.quiet_mode(True):
        with progress.ProgressLine("candidates", 32, unit="candidates", console=plain_console()[0]) as line:
            line.update(8)
            __import__("time").sleep(0.2)
    assert progress.QUIET_ENV not in __import__("os").environ  # restored after the block
    assert capsys.readouterr().err == ""


def test_group_generation_reports_progress_and_the_quiet_flag_silences_it(tmp_path, es_contexts, monkeypatch, capsys):
    monkeypatch.setenv(progress.INTERVAL_ENV, "0.05")
    cfg = GroupEpisodeSettings(dataset="ESConv", num_turns=1, seed=1, output_dir=tmp_path)
    asyncio.run(generate_group(cfg, contexts=es_contexts[:2], clients=scripted_clients(), console=plain_console()[0]))
    err = capsys.readouterr().err
    assert "episodes: 2/2 in " in err
    assert re.search(r"episodes: 2/2 in \d+ s; \d+ model calls, \d+ tokens, failures 0", err)
    quiet = CliRunner().invoke(app, ["data", "preview", "--dataset", "ESConv", "--data-file", str(FIXTURES / "esconv_sample.jsonl"), "--quiet"])
    assert quiet.exit_code == 0, quiet.output  # every generated command takes --quiet


def test_missing_emotions_are_named_as_warnings_not_counted_as_failures(tmp_path, es_contexts, monkeypatch, capsys):
    from mascot.testing.scripted import ScriptedClient

    monkeypatch.setenv(progress.INTERVAL_ENV, "0.05")
    console, out = plain_console()
    prose_user = ScriptedClient(fn=lambda request: "I don't know, it still feels heavy.")  # never reports an emotion
    cfg = GroupEpisodeSettings(dataset="ESConv", num_turns=2, seed=1, user_response_probability=1.0, output_dir=tmp_path)
    asyncio.run(generate_group(cfg, contexts=es_contexts[:2], clients={**scripted_clients(), "user": prose_user}, console=console))
    counters = json.loads((tmp_path / RUN / "run_summary.json").read_text())["counters"]
    missing = counters["num_user_emotions_missing"]
    assert missing > 0 and counters["num_generation_failures"] == counters["num_directive_parse_failures"] == 0
    err = capsys.readouterr().err
    assert re.search(rf"episodes: 2/2 in \d+ s; .*failures 0, warnings {missing}$", err, re.MULTILINE), err
    assert f"; no failures; warnings: user emotions missing {missing}; contexts 0 dropped" in out.getvalue()

    cfg.resume = True  # a resume with nothing left to do: it counted nothing, and says so
    again, out_again = plain_console()
    asyncio.run(generate_group(cfg, contexts=es_contexts[:2], clients={**scripted_clients(), "user": prose_user}, console=again))
    assert re.search(r"episodes: 0/0 in \d+ s; no model call answered yet, failures 0$", capsys.readouterr().err, re.MULTILINE)
    closing = out_again.getvalue()
    assert (
        "0 new episodes" in closing and f"this session: no failures; the whole run: no failures; warnings: user emotions missing {missing}" in closing
    )


def test_a_directive_example_copy_is_a_failure_and_truncations_are_warnings():
    from mascot.dialogue.tally import Tally, describe_counters
    from mascot.schema import Counters

    tally = Tally()
    tally.count("num_director_truncations", "cut")
    tally.note("num_turn_limit_overrides", "limit")
    assert (tally.failures, tally.warnings) == (0, 2) and tally.progress_note() == "failures 0, warnings 2"
    assert tally.describe() == "no failures; warnings: director truncations 1, turn limit overrides 1"
    if "num_directive_example_copies" in Counters.model_fields:  # an unusable Director answer, like a parse failure
        tally.count("num_directive_example_copies", "copied")
        assert tally.failures == 1 and tally.describe().startswith("directive example copies 1; warnings: ")
    assert describe_counters(Counters(), skipped_lines=2) == "no failures; warnings: malformed lines skipped 2"


def test_the_progress_display_keeps_its_counts_readable_at_80_columns():
    console = Console(width=80, record=True, color_system=None)
    display = progress._new_progress(console)  # what a terminal of 80 columns shows of a running step
    step = display.add_task("ESConv episodes", total=40, note="")
    display.update(step, completed=12, note="3.1 episodes/min  128 model calls, 40512 tokens, failures 0, warnings 3")
    console.print(display.get_renderable())
    shown = console.export_text()
    assert "ESConv episodes: 12/40 (30%)" in shown and "…" not in shown
    assert all(len(row) <= 80 for row in shown.splitlines())
    assert "failures 0, warnings 3" in " ".join(shown.split())  # folded at a space if at all, never cut


def test_a_poll_reads_the_count_each_refresh(monkeypatch, capsys):
    monkeypatch.setenv(progress.INTERVAL_ENV, "0.05")
    seen = {"n": 0}
    with progress.ProgressLine("judgments", 4, unit="judgments", poll=lambda: seen["n"]):
        seen["n"] = 3
        __import__("time").sleep(0.3)
    assert "judgments: 3/4 in " in capsys.readouterr().err


def test_the_nli_progress_gives_the_labels_of_the_plain_scorer(monkeypatch, capsys):
    from mascot.commands.metrics import CountingNLI

    class Scorer:
        batch_size = 2
        labels = {"neutral": 0}
        calls: list[int] = []

        def predict(self, pairs):
            self.calls.append(len(pairs))
            return [f"{a}>{b}" for a, b in pairs]

    pairs = [(f"p{'x' * (i % 5)}", f"h{i}") for i in range(19)]
    counted = CountingNLI(Scorer())
    assert counted.predict(pairs) == Scorer().predict(pairs) and counted.labels == {"neutral": 0}
    assert Scorer.calls[:3] == [8, 8, 3]  # whole batches at a time
    assert "NLI pairs: 19/19 in " in capsys.readouterr().err


def test_the_training_callback_counts_optimizer_steps(monkeypatch, capsys):
    pytest.importorskip("transformers")
    from mascot.train.screen import progress_callback

    monkeypatch.setenv(progress.INTERVAL_ENV, "0.05")
    callback = progress_callback()
    state = SimpleNamespace(is_world_process_zero=True, max_steps=10, global_step=2)  # resumed at step 2
    callback.on_train_begin(None, state, None)
    state.global_step = 6
    callback.on_step_end(None, state, None)
    callback.on_log(None, state, None, logs={"loss": 0.5})
    __import__("time").sleep(0.2)
    callback.on_train_end(None, state, None)
    err = capsys.readouterr().err
    assert "training steps: 4/8 (50%)" in err and "loss 0.5" in err


# ---------------------------------------------------------------------------- Ctrl-C


def test_the_first_ctrl_c_drains_and_says_how_to_resume_the_second_stops_at_once(monkeypatch, capsys):
    exits = []
    monkeypatch.setattr(progress.os, "_exit", lambda code: exits.append(code))
    progress._Interrupts.hint = "resume with `mascot generate --resume`"
    with progress.ProgressLine("episodes", 10, unit="episodes", already=2, drains=True, console=plain_console()[0]) as line:
        line.update(3)
        progress._on_interrupt(signal.SIGINT, None)  # no KeyboardInterrupt: the step drains
        assert progress.stop_requested()
        first = capsys.readouterr().err
        assert "stopping after the records in flight; 5 episodes saved; resume with `mascot generate --resume`" in first
        progress._on_interrupt(signal.SIGINT, None)
    assert exits == [130]
    with pytest.raises(KeyboardInterrupt):
        progress.raise_if_stopped()


def test_ctrl_c_in_a_step_that_cannot_drain_stops_it_where_it_is(capsys):
    counted = {"n": 0}
    with progress.ProgressLine("judgments", 10, unit="judgments", poll=lambda: counted["n"], console=plain_console()[0]):
        counted["n"] = 6  # not yet read by a refresh: the answer reads it now
        with pytest.raises(KeyboardInterrupt):
            progress._on_interrupt(signal.SIGINT, None)
    assert "stopping; 6 judgments done" in capsys.readouterr().err  # written when the step ends: not "saved"


def test_a_drained_generation_keeps_its_episodes_and_ends_interrupted(tmp_path, es_contexts):
    cfg = GroupEpisodeSettings(dataset="ESConv", num_turns=1, seed=1, max_concurrent_episodes=1, output_dir=tmp_path)

    def press_ctrl_c(_episode: Episode) -> None:
        if not progress.stop_requested():
            progress._on_interrupt(signal.SIGINT, None)

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(generate_group(cfg, contexts=es_contexts[:4], clients=scripted_clients(), console=plain_console()[0], on_episode=press_ctrl_c))
    run = tmp_path / RUN
    assert len(list(read_jsonl(run / "episodes.jsonl", Episode))) == 1  # no new context started after the first
    assert json.loads((run / "run_summary.json").read_text())["status"] == "interrupted"


def test_the_resume_hint_is_the_command_as_given_with_resume(monkeypatch):
    from mascot.cli.settings_cli import rerun_hint
    from mascot.commands.judge import JudgeSettings

    def context(*words: str):
        ctx = SimpleNamespace(info_name="python -m mascot", parent=None)
        for word in words:
            ctx = SimpleNamespace(info_name=word, parent=ctx)
        return ctx

    monkeypatch.setattr("sys.argv", ["/x/mascot/__main__.py", "generate", "--mode", "individual", "--limit", "2"])
    assert rerun_hint(context("generate"), GroupEpisodeSettings) == "resume with `mascot generate --mode individual --limit 2 --resume`"
    monkeypatch.setattr("sys.argv", ["mascot", "judge", "--input-file", "e.jsonl"])
    assert rerun_hint(context("judge"), JudgeSettings) == "rerun `mascot judge --input-file e.jsonl` (cached judgments are reused)"
    monkeypatch.setattr("sys.argv", ["mascot", "pipeline", "--preset", "toy"])  # a step run by the pipeline: the pipeline's line
    assert rerun_hint(context("generate"), GroupEpisodeSettings) == "resume with `mascot generate ... --resume`"


def test_no_command_help_cuts_a_name_at_80_columns():
    from test_command_settings import leaf_commands

    groups = [(), ("train",), ("data",), ("prefs",), ("eval",), ("study",)]
    for path in [*groups, *(p for p, _command in leaf_commands())]:
        result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
        assert result.exit_code == 0, path
        assert "…" not in result.output and all(len(line) <= 80 for line in result.output.splitlines()), path
        assert "<bool>" not in result.output, path


def test_a_real_sigint_is_answered_and_the_handler_restored_after_the_command(capsys):
    import os
    import time

    before = signal.getsignal(signal.SIGINT)
    with progress.interrupt_handling("resume with `mascot generate --resume`"):
        with progress.ProgressLine("episodes", 4, unit="episodes", drains=True, console=plain_console()[0]):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            assert progress.stop_requested()
    assert signal.getsignal(signal.SIGINT) is before
    assert not progress.stop_requested() and progress.interrupt_announced()  # a later run starts afresh
    assert "stopping after the records in flight; 0 episodes saved" in capsys.readouterr().err


def _generate_process(server_url: str, data: Path, out: Path, *extra: str):
    import subprocess
    import sys

    args = [
        "generate",
        "--mode",
        "group",
        "--dataset",
        "ESConv",
        "--data-file",
        str(data),
        "--model-name",
        "stub-model",
        "--vllm-server-url",
        server_url,
        "--output-dir",
        str(out),
        "--num-turns",
        "2",
        "--seed",
        "7",
        "--max-concurrent-episodes",
        "2",
        *extra,
    ]
    env = {**__import__("os").environ, progress.INTERVAL_ENV: "0.2"}
    return subprocess.Popen([sys.executable, "-m", "mascot", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)


def _contexts_file(tmp_path: Path, count: int) -> Path:
    record = json.loads((FIXTURES / "esconv_sample.jsonl").read_text().splitlines()[0])
    path = tmp_path / "esconv.jsonl"
    path.write_text("".join(json.dumps({**record, "situation": f"{record['situation']} ({i})"}) + "\n" for i in range(count)))
    return path


def _wait_for_records(path: Path, count: int, timeout_s: float = 120) -> None:
    import time

    deadline = time.time() + timeout_s
    while time.time() < deadline and (not path.exists() or path.read_text().count("\n") < count):
        time.sleep(0.05)


def _resume_finishes(server_url: str, data: Path, out: Path, episodes: Path, total: int) -> None:
    """`--resume` exits 0 with every context's episode written exactly once."""
    resumed = _generate_process(server_url, data, out, "--resume")
    assert resumed.wait(timeout=120) == 0
    ids = [json.loads(line)["episode_id"] for line in episodes.read_text().splitlines()]
    assert len(ids) == len(set(ids)) == total


def test_ctrl_c_in_a_real_process_says_at_once_what_was_saved_and_resume_finishes(tmp_path):
    import os
    import threading
    import time

    from mascot.testing.players import stub_responder
    from mascot.testing.stub_server import start_stub_server

    server = start_stub_server(port=0, latency_s=0.05, responder=stub_responder)
    try:
        data, out = _contexts_file(tmp_path, 40), tmp_path / "out"
        episodes = out / RUN.replace("SmolLM2-135M-Instruct", "stub-model") / "episodes.jsonl"
        proc = _generate_process(server.url, data, out)
        lines: list[tuple[float, str]] = []
        reader = threading.Thread(target=lambda: lines.extend((time.monotonic(), line) for line in proc.stderr), daemon=True)
        reader.start()
        _wait_for_records(episodes, 2)
        pressed = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 130
        reader.join(timeout=5)
        answer = next((t, line) for t, line in lines if line.startswith("stopping: the requests in flight are cancelled"))
        assert answer[0] - pressed < 2.0  # answered at once, not when the run ends
        assert "episodes saved; resume with `mascot generate --mode group" in answer[1] and answer[1].rstrip().endswith(
            "--resume` (Ctrl-C again stops at once)"
        )
        assert any(line.startswith("episodes: ") for _, line in lines)  # progress lines: stderr is a pipe
        summary = json.loads((episodes.parent / "run_summary.json").read_text())
        assert summary["status"] == "interrupted" and 2 <= summary["num_records"] < 40
        _resume_finishes(server.url, data, out, episodes, 40)
    finally:
        server.stop()


def test_a_second_ctrl_c_marks_the_open_run_interrupted_before_exiting_at_once(tmp_path, monkeypatch, capsys):
    """The process ends at once (os._exit): the run folder still says interrupted, never running.
    (tests/test_interrupts.py presses twice in real processes.)"""
    exits = []
    monkeypatch.setattr(
        progress.os, "_exit", lambda code: exits.append((code, json.loads((tmp_path / "run" / "run_summary.json").read_text())["status"]))
    )
    with RunStore(tmp_path / "run", command="test") as store:
        assert json.loads(store.path("run_summary.json").read_text())["status"] == "running"
        with progress.ProgressLine("episodes", 4, unit="episodes", drains=True, console=plain_console()[0]):
            progress._on_interrupt(signal.SIGINT, None)
            progress._on_interrupt(signal.SIGINT, None)
        assert exits == [(130, "interrupted")]
    assert "stopped at once" in capsys.readouterr().err
    assert not progress._Interrupts.exit_hooks  # a closed run is no longer marked by a later press


def test_sigterm_ends_a_real_run_as_interrupted_and_resume_finishes_it(tmp_path):
    """`kill`, `timeout` or a scheduler's preemption: the summary says interrupted, never running."""
    import os

    from mascot.testing.players import stub_responder
    from mascot.testing.stub_server import start_stub_server

    server = start_stub_server(port=0, latency_s=0.2, responder=stub_responder)
    try:
        data, out = _contexts_file(tmp_path, 20), tmp_path / "out"
        episodes = out / RUN.replace("SmolLM2-135M-Instruct", "stub-model") / "episodes.jsonl"
        proc = _generate_process(server.url, data, out)
        _wait_for_records(episodes, 1)
        os.kill(proc.pid, signal.SIGTERM)
        code, err = proc.wait(timeout=30), proc.stderr.read()
        assert code == 143 and "terminated (SIGTERM): stopping; " in err, err[-2000:]
        summary = json.loads((episodes.parent / "run_summary.json").read_text())
        assert summary["status"] == "interrupted" and 1 <= summary["num_records"] < 20
        _resume_finishes(server.url, data, out, episodes, 20)
    finally:
        server.stop()


def test_mascot_judge_shows_its_judgments_and_counts_them_in_words(tmp_path, monkeypatch):
    from judge_helpers import sample_episode, write_episodes

    from mascot.testing.players import stub_judge_responder
    from mascot.testing.stub_server import start_stub_server

    monkeypatch.setenv(progress.INTERVAL_ENV, "0.05")
    path = tmp_path / "episodes.jsonl"
    write_episodes(path, [sample_episode("c1:e0", context_id="c1")])
    with start_stub_server(latency_s=0.0, responder=stub_judge_responder) as server:
        args = ["judge", "--input-file", str(path), "--judge-server-url", server.url, "--judge", "stub-model", "--cache-dir", str(tmp_path / "cache")]
        result = CliRunner().invoke(app, args)
        quiet = CliRunner().invoke(app, [*args, "--quiet"])
    assert result.exit_code == 0, result.output
    assert "judgments: 4/4 in " in result.stderr and "judged 4 items with 1 judge: 4 model calls" in " ".join(result.stderr.split())
    with path.open("a") as fh:
        fh.write('{"episode_id": "broken"\n')  # a malformed line: skipped with a warning, and named in the closing line
    with start_stub_server(latency_s=0.0, responder=stub_judge_responder) as server:
        skipped = CliRunner().invoke(
            app,
            ["judge", "--input-file", str(path), "--judge-server-url", server.url, "--judge", "stub-model", "--cache-dir", str(tmp_path / "cache")],
        )
    assert skipped.exit_code == 0, skipped.output
    closing = " ".join(skipped.stderr.split()).split("judged ", 1)[1]  # not the warning above it
    assert "skipped 1 malformed line of episodes.jsonl" in closing
    assert quiet.exit_code == 0 and "judgments: " not in quiet.stderr and "judged 4 items with 1 judge" in " ".join(quiet.stderr.split())
    empty = CliRunner().invoke(app, [*args, "--scope", "collective", "--limit", "0"])
    assert empty.exit_code != 0 and "nothing to judge" in str(empty.exception)


def test_version_prints_the_installed_version():
    from importlib.metadata import version

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output == f"mascot {version('mascot')}\n"


def test_strict_mode_stops_at_a_failure_and_goes_on_past_a_warning():
    from mascot.dialogue.tally import WARNINGS, StrictModeStop, Tally

    tally = Tally(strict=True)
    for name in sorted(WARNINGS):
        tally.count(name, "worth naming, no failure")
    assert tally.warnings == len(WARNINGS) and tally.failures == 0
    with pytest.raises(StrictModeStop, match="num_directive_parse_failures"):
        tally.count("num_directive_parse_failures", "no agent named")

"""Ctrl-C in real `mascot generate` and `mascot eval` processes: the requests in flight are
cancelled, the run folder says `interrupted` after one press and after two, the closing line says
what was saved, and `--resume` (or a rerun of the eval) completes with each record exactly once.

The stub server answers at once until the run has saved a record, then holds every request (the
`Gate`): an episode is in flight, partly generated, when SIGINT arrives, and a run that waited
for it would wait as long as the gate holds (a minute), far past the bound on the exit."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mascot import progress
from mascot.testing.players import stub_responder

FIXTURES = Path(__file__).parent / "fixtures"
EXIT_BOUND_S = 10  # a waited-for episode would take the gate's whole minute
HELD_S = 60


class Gate:
    """A responder that answers at once until `holding()` turns true, then holds each request
    until released (or a minute passes); counts the requests it held."""

    def __init__(self, holding, answer=stub_responder) -> None:
        self.holding, self.answer, self.released, self.held = holding, answer, False, 0

    async def __call__(self, messages: list[dict], request: dict) -> str:
        if not self.released and self.holding():
            self.held += 1
            deadline = time.monotonic() + HELD_S
            while not self.released and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        return self.answer(messages, request)


def lines_in(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def wait_until(condition, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert proc.poll() is None, "the run ended before it could be interrupted"
        assert time.monotonic() < deadline, "the run never reached the point to interrupt"
        time.sleep(0.05)


def interrupt(proc: subprocess.Popen, presses: int, log: Path) -> str:
    """SIGINT `presses` times (back to back); the process must be gone within the bound."""
    for _ in range(presses):
        os.kill(proc.pid, signal.SIGINT)
    try:
        code = proc.wait(timeout=EXIT_BOUND_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"still running {EXIT_BOUND_S} s after Ctrl-C: {log.read_text(errors='replace')[-2000:]}") from None
    err = log.read_text(errors="replace")
    # a second press either exits at once (130) or lands after the first one's stop: the default handler
    assert code in ((130,) if presses == 1 else (130, -signal.SIGINT)), err[-2000:]
    return err


def spawn(args: list[str], log: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        progress.INTERVAL_ENV: "0.2",
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    with open(log, "wb") as sink:  # a file, not a pipe: a full pipe would stall the child
        return subprocess.Popen([sys.executable, "-m", "mascot", *args], stdout=sink, stderr=sink, env=env)


def contexts_file(tmp_path: Path, count: int) -> Path:
    record = json.loads((FIXTURES / "esconv_sample.jsonl").read_text().splitlines()[0])
    path = tmp_path / "esconv.jsonl"
    path.write_text("".join(json.dumps({**record, "situation": f"{record['situation']} ({i})"}) + "\n" for i in range(count)))
    return path


def episode_ids(path: Path) -> list[str]:
    return [json.loads(line)["episode_id"] for line in path.read_text().splitlines()]


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_cancels_a_generate_run_in_flight_and_resume_completes_it(tmp_path, stub, presses):
    episodes = tmp_path / "out" / "directed_ESConv_stub-model" / "episodes.jsonl"
    gate = Gate(lambda: lines_in(episodes) >= 1)
    server = stub(responder=gate)
    data = contexts_file(tmp_path, 6)
    args = ["generate", "--mode", "group", "--dataset", "ESConv", "--data-file", str(data), "--model-name", "stub-model", "--vllm-server-url",
            server.url, "--output-dir", str(tmp_path / "out"), "--num-turns", "2", "--seed", "7", "--max-concurrent-episodes", "2"]  # fmt: skip
    proc = spawn(args, tmp_path / "run.log")
    wait_until(lambda: gate.held >= 1, proc)  # an episode is in flight, partly generated
    err = interrupt(proc, presses, tmp_path / "run.log")
    summary = json.loads((episodes.parent / "run_summary.json").read_text())
    saved = lines_in(episodes)  # the episodes finished before the gate held (one, or two finished together)
    assert summary["status"] == "interrupted" and summary["num_records"] == saved and 1 <= saved < 6
    assert f"stopping: the requests in flight are cancelled; {progress.plural(saved, 'episode')} saved" in err
    if presses == 1:
        assert f"interrupted: {progress.plural(saved, 'episode')} saved; resume with `mascot generate --mode group" in err
        assert "failed requests" not in err and "request failed" not in err  # a cancelled request is no failure
    gate.released = True
    resumed = subprocess.run([sys.executable, "-m", "mascot", *args, "--resume"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    ids = episode_ids(episodes)
    assert len(ids) == len(set(ids)) == 6  # the cancelled episodes were made by --resume, none twice
    assert json.loads((episodes.parent / "run_summary.json").read_text())["status"] == "completed"


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_cancels_an_eval_in_flight_and_a_rerun_completes_it(tmp_path, stub, presses):
    from test_eval import Judge, eval_args, write_ed

    out = tmp_path / "eval"
    gate = Gate(lambda: any(lines_in(p) for p in out.rglob("episodes.jsonl")), answer=Judge())
    server = stub(responder=gate)
    (tmp_path / "systems.yaml").write_text("systems_version: 1\nsystems:\n  toy-director:\n    turn_policy: director\n")
    toy = {"url": server.url, "data": write_ed(tmp_path / "test.csv"), "out": out, "systems": tmp_path / "systems.yaml"}
    args = [str(a) for a in eval_args(toy)]
    args[args.index("--systems") + 1] = "toy-director"
    proc = spawn(args, tmp_path / "eval.log")
    wait_until(lambda: gate.held >= 1, proc)  # the first cell's second episode is in flight
    interrupt(proc, presses, tmp_path / "eval.log")
    (episodes,) = [p for p in out.rglob("episodes.jsonl")]
    summary = json.loads((episodes.parent / "run_summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["num_records"] == lines_in(episodes) < 2  # a split has 2 or 3 contexts
    gate.released = True
    rerun = subprocess.run([sys.executable, "-m", "mascot", *args], capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    runs = sorted(p.parent for p in out.rglob("episodes.jsonl"))
    counts = {}
    for run in runs:
        ids = episode_ids(run / "episodes.jsonl")
        assert len(ids) == len(set(ids)), run  # nothing written twice
        counts[run] = len(ids)
        assert json.loads((run / "run_summary.json").read_text())["status"] == "completed"
    assert sum(counts.values()) == 5  # every ED context of both splits, the interrupted one's included

"""Fault injection: real `mascot` processes killed with SIGKILL at seeded points, again and again,
then resumed; the final outputs equal an uninterrupted run's and the summary's counters add up.

The default suite kills group generation, Stage-1 generation and judging a few times each; the
`slow` variant kills more often and also kills reward-model training between checkpoints.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from mascot.testing.players import stub_judge_responder, stub_responder
from mascot.testing.stub_server import start_stub_server

ESCONV_SAMPLE = Path(__file__).parent / "fixtures" / "esconv_sample.jsonl"
MASCOT = [sys.executable, "-m", "mascot"]


def respond(messages: list[dict], request: dict) -> str:
    """Dialogue roles and the judge, deterministically, from one stub server."""
    return stub_judge_responder(messages, request) if request["role"] == "judge" else stub_responder(messages, request)


@pytest.fixture(scope="module")
def server():
    handle = start_stub_server(port=0, latency_s=0.005, responder=respond)
    yield handle
    handle.stop()


def contexts_file(folder: Path, count: int) -> Path:
    record = json.loads(ESCONV_SAMPLE.read_text().splitlines()[0])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "esconv.jsonl"
    path.write_text("".join(json.dumps({**record, "situation": f"{record['situation']} ({i})"}) + "\n" for i in range(count)))
    return path


def lines_in(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


class KillSchedule:
    """Runs a command to completion under seeded SIGKILLs: each attempt is killed once `progress()`
    reaches the next drawn value (or, for stages without streamed output, after a drawn delay), and
    rerun with `--resume` until it exits 0 by itself."""

    def __init__(self, seed: int, kills: int) -> None:
        self.rng = random.Random(seed)
        self.kills = kills
        self.killed = 0
        self.torn_tails = 0

    def run(self, cmd: list[str], progress=None, total: int = 0, output: Path | None = None, resume_flag: str = "--resume", env=None) -> None:
        attempt = 0
        while True:
            args = cmd + ([resume_flag] if attempt and resume_flag else [])
            if output is not None and output.exists() and output.stat().st_size and not output.read_bytes().endswith(b"\n"):
                self.torn_tails += 1
            proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
            attempt += 1
            if self.killed < self.kills and self._kill_at_next_point(proc, progress, total):
                self.killed += 1
                continue
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err.decode()[-2000:]
            return

    def _kill_at_next_point(self, proc: subprocess.Popen, progress, total: int) -> bool:
        if progress is not None and total:
            target = self.rng.randint(0, total - 1)
            deadline = time.monotonic() + 120
            while proc.poll() is None and progress() < target and time.monotonic() < deadline:
                time.sleep(0.01)
        else:
            time.sleep(self.rng.uniform(0.0, 1.5))
        if proc.poll() is not None:
            return False
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return True


def group_outputs(run: Path) -> dict:
    return {
        e["episode_id"]: {k: v for k, v in e.items() if k != "metadata"} | {"meta": {k: v for k, v in e["metadata"].items() if k != "created_at"}}
        for e in map(json.loads, (run / "episodes.jsonl").read_text().splitlines())
    }


def check_summary(run: Path, records: int, schedule: KillSchedule, reference_requests: int) -> None:
    summary = json.loads((run / "run_summary.json").read_text())
    assert summary["status"] == "completed" and summary["num_records"] == records == lines_in(run / summary_output(run))
    assert summary["num_torn_lines_dropped"] == schedule.torn_tails
    assert all(v == 0 for v in summary["counters"].values())
    # every session's usage is kept: at least the uninterrupted run's requests
    assert sum(u["requests"] for u in summary["usage"].values()) >= reference_requests


def summary_output(run: Path) -> str:
    return "episodes.jsonl" if (run / "episodes.jsonl").exists() else "candidates.jsonl"


def requests_of(run: Path) -> int:
    return sum(u["requests"] for u in json.loads((run / "run_summary.json").read_text())["usage"].values())


def kill_group_generation(server, tmp_path: Path, seed: int, kills: int, contexts: int) -> None:
    data = contexts_file(tmp_path, contexts)

    def cmd(out: Path) -> list[str]:
        return [
            *MASCOT,
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
            server.url,
            "--output-dir",
            str(out),
            "--num-turns",
            "3",
            "--seed",
            "7",
            "--max-concurrent-episodes",
            "2",
        ]

    subprocess.run(cmd(tmp_path / "ref"), check=True, capture_output=True, timeout=300)
    reference = tmp_path / "ref" / "directed_ESConv_stub-model"
    run = tmp_path / "killed" / "directed_ESConv_stub-model"
    schedule = KillSchedule(seed, kills)
    schedule.run(cmd(tmp_path / "killed"), progress=lambda: lines_in(run / "episodes.jsonl"), total=contexts, output=run / "episodes.jsonl")
    assert schedule.killed == kills
    assert group_outputs(run) == group_outputs(reference)
    check_summary(run, contexts, schedule, requests_of(reference))


def kill_stage1_generation(server, tmp_path: Path, seed: int, kills: int, contexts: int) -> None:
    data = contexts_file(tmp_path, contexts)

    def cmd(out: Path) -> list[str]:
        return [
            *MASCOT,
            "generate",
            "--mode",
            "individual",
            "--dataset",
            "ESConv",
            "--data-file",
            str(data),
            "--model-name",
            "stub-model",
            "--vllm-server-url",
            server.url,
            "--judge-server-url",
            server.url,
            "--judge-model",
            "stub-model",
            "--output-dir",
            str(out),
            "--num-candidates",
            "2",
            "--seed",
            "7",
        ]

    def cache(name: str) -> dict:  # each run its own judge cache: the killed one must not reuse the reference's
        return {**os.environ, "MASCOT_JUDGE_CACHE_DIR": str(tmp_path / f"cache-{name}")}

    subprocess.run(cmd(tmp_path / "ref"), check=True, capture_output=True, timeout=300, env=cache("ref"))
    reference = tmp_path / "ref" / "individual_ESConv_stub-model"
    run = tmp_path / "killed" / "individual_ESConv_stub-model"
    schedule = KillSchedule(seed, kills)
    total = contexts * 3 * 2  # contexts x personas x candidates
    schedule.run(
        cmd(tmp_path / "killed"),
        progress=lambda: lines_in(run / "candidates.jsonl"),
        total=total,
        output=run / "candidates.jsonl",
        env=cache("killed"),
    )
    for name in ("candidates.jsonl", "pairs.jsonl"):
        assert sorted((run / name).read_text().splitlines()) == sorted((reference / name).read_text().splitlines()), name
    ref_stats, stats = (json.loads((d / "pairs_stats.json").read_text()) for d in (reference, run))
    assert stats == ref_stats
    check_summary(run, total, schedule, requests_of(reference))


def cached_judgments(cache_dir: Path) -> int:
    """Rows in a judge cache (read-only; 0 while the judging process has not created it yet)."""
    from mascot.judge.cache import CACHE_FILE

    db = cache_dir / CACHE_FILE
    if not db.exists():
        return 0
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1.0)) as conn:
            return conn.execute("SELECT COUNT(*) FROM judgments").fetchone()[0]
    except sqlite3.Error:
        return 0


def kill_judging(server, tmp_path: Path, seed: int, kills: int) -> None:
    episodes = sorted((tmp_path / "ref").glob("*/episodes.jsonl"))[0]

    def cmd(out: Path) -> list[str]:
        return [
            *MASCOT,
            "judge",
            "--input-file",
            str(episodes),
            "--judge-server-url",
            server.url,
            "--judge",
            "stub-model",
            "--output-dir",
            str(out),
            "--cache-dir",
            str(out / "cache"),
            "--max-in-flight",
            "2",
        ]

    subprocess.run(cmd(tmp_path / "judge-ref"), check=True, capture_output=True, timeout=300)
    schedule = KillSchedule(seed, kills)
    total = cached_judgments(tmp_path / "judge-ref" / "cache")  # judgments are made durable through the cache
    progress = lambda: cached_judgments(tmp_path / "judge-killed" / "cache")  # noqa: E731
    schedule.run(cmd(tmp_path / "judge-killed"), progress=progress, total=total, resume_flag="")
    assert schedule.killed == kills
    for name in ("judgments_episodes.jsonl",):
        assert (tmp_path / "judge-killed" / name).read_text() == (tmp_path / "judge-ref" / name).read_text()
    ref, got = (json.loads((tmp_path / d / "metrics_episodes.json").read_text()) for d in ("judge-ref", "judge-killed"))
    for report in (ref, got):  # what this invocation asked the model: the resumed one asks less
        report.pop("counters")
        report.pop("usage")
    assert got == ref
    assert not list((tmp_path / "judge-killed").glob(".*.tmp"))


def test_sigkill_at_seeded_points_then_resume_equals_an_uninterrupted_run(server, tmp_path):
    kill_group_generation(server, tmp_path / "group", seed=1, kills=3, contexts=8)
    kill_judging(server, tmp_path / "group", seed=2, kills=1)
    kill_stage1_generation(server, tmp_path / "stage1", seed=3, kills=2, contexts=2)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_many_sigkills_in_a_row(server, tmp_path, seed):
    kill_group_generation(server, tmp_path / "group", seed=10 + seed, kills=8, contexts=24)
    kill_judging(server, tmp_path / "group", seed=20 + seed, kills=5)
    kill_stage1_generation(server, tmp_path / "stage1", seed=30 + seed, kills=6, contexts=8)


@pytest.mark.slow
def test_reward_model_training_killed_between_steps_resumes_to_the_same_weights(tmp_path):
    from train_helpers import keyword_pairs, tiny_model, write_jsonl, write_run_config

    run = tmp_path / "individual_ED_tiny"
    write_jsonl(run / "pairs.jsonl", keyword_pairs(n_prompts=24, per_prompt=1))
    write_run_config(run, dataset="EmpatheticDialogues")
    base = tiny_model(tmp_path / "tiny")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def cmd(out: Path) -> list[str]:
        return [
            *MASCOT,
            "train",
            "reward-model",
            "--data-path",
            str(run),
            "--model",
            str(base),
            "--output-dir",
            str(out),
            "--max-steps",
            "6",
            "--batch-size",
            "4",
            "--save-steps",
            "1",
            "--eval-fraction",
            "0",
            "--seed",
            "3",
            "--learning-rate",
            "1e-3",
        ]

    subprocess.run(cmd(tmp_path / "ref"), check=True, capture_output=True, timeout=600, env=env)
    out = tmp_path / "killed"
    schedule = KillSchedule(seed=5, kills=2)
    checkpoints = lambda: len(list(out.glob("checkpoint-*")))  # noqa: E731
    schedule.run(cmd(out), progress=checkpoints, total=5)
    from safetensors.torch import load_file

    reference, resumed = (load_file(str(d / "adapter_model.safetensors")) for d in (tmp_path / "ref", out))
    assert reference.keys() == resumed.keys()
    for name in reference:
        assert (reference[name] - resumed[name]).abs().max().item() < 1e-6, name

"""What a person reads at the end of a run: failure counters by name, each failure once, and
paths printed whole (a wrapped path cannot be copied)."""

from __future__ import annotations

import asyncio
import io

from rich.console import Console
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.dialogue.run import generate_group
from mascot.dialogue.run_settings import GroupEpisodeSettings
from mascot.dialogue.tally import Tally, describe_counters
from mascot.schema import Counters
from mascot.testing.players import group_client

NARROW = 40  # columns: far fewer than the paths below


def narrow_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=NARROW, force_terminal=False, color_system=None), out


def scripted_clients() -> dict:
    return {"director": group_client(), "speaker": group_client(), "user": group_client()}


def test_a_parse_failure_and_its_fallback_count_as_one_failure_and_show_by_name():
    tally = Tally(Counters())
    tally.count("num_directive_parse_failures", "unparseable")
    tally.count("num_random_agent_fallbacks", "fell back")
    assert tally.failures == 1
    assert tally.describe() == "directive parse failures 1, random agent fallbacks 1"
    assert describe_counters(Counters()) == "no failures"


def test_generation_footer_prints_the_path_whole_and_counters_by_name(tmp_path, es_contexts):
    deep = tmp_path / "a-rather-long-folder-name-for-runs" / "and-another-level-below-it"
    console, out = narrow_console()
    cfg = GroupEpisodeSettings(dataset="ESConv", num_turns=2, seed=1, output_dir=deep)
    _, store = asyncio.run(generate_group(cfg, contexts=es_contexts[:2], clients=scripted_clients(), console=console))
    text = out.getvalue()
    assert any(str(store.path()) in line for line in text.splitlines())
    assert "no failures" in text and "failures: " not in text


def test_demo_prints_records_path_unwrapped_and_its_elapsed_time(tmp_path, monkeypatch):
    import mascot.commands.demo as demo

    original = demo.run_demo

    async def scripted_demo(model_name, server_url, run_root, **kwargs):
        return await original(model_name, server_url, run_root, **{**kwargs, "clients": scripted_clients()})

    monkeypatch.setattr(demo, "run_demo", scripted_demo)
    monkeypatch.setenv("COLUMNS", str(NARROW))
    out_dir = tmp_path / "a-rather-long-folder-name-for-the-demo-records"
    import torch

    threads = str(torch.get_num_threads())  # as it is: the demo sets torch's threads for the process
    result = CliRunner().invoke(app, ["demo", "--output-dir", str(out_dir), "--num-turns", "2", "--threads", threads])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    records = [line for line in lines if line.startswith("records: ")]
    assert len(records) == 2  # one run per dataset of the samples (ESConv, QMSum)
    for line in records:
        path = line.removeprefix("records: ").split("  (")[0]
        assert path.endswith("episodes.jsonl") and str(out_dir) in path
    assert all("no failures" in line for line in records)
    assert any(line.startswith("demo finished in ") and line.endswith("s (model loading included)") for line in lines)


def test_without_a_server_the_demo_runs_every_role_of_both_datasets_on_one_client(tmp_path, monkeypatch):
    import mascot.commands.demo as demo

    client = group_client()
    closed = []
    original_aclose = client.aclose

    async def aclose():
        closed.append(True)
        await original_aclose()

    client.aclose = aclose
    monkeypatch.setattr(demo, "shared_local_client", lambda model_name: client)
    console, _ = narrow_console()
    results = asyncio.run(demo.run_demo(None, None, tmp_path, num_turns=2, seed=1, console=console))
    assert sorted(dataset for dataset, _, _ in results) == ["ESConv", "QMSum"]
    systems = {call.messages[0]["content"].split("\n")[0] for call in client.calls}
    assert any("Anchor" in s or "Catalyst" in s or "Beacon" in s for s in systems)  # the emotional-support roster
    assert any("Minutes Scribe" in s or "Decision Logger" in s or "Critic" in s or "Action Item" in s for s in systems)  # the meetings roster
    assert closed == [True]


def test_the_demo_uses_the_cores_other_processes_leave_free(monkeypatch):
    import mascot.commands.demo as demo

    monkeypatch.setattr(demo.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(demo.os, "getloadavg", lambda: (0.3, 0.0, 0.0))
    assert demo.free_cores() == 8
    monkeypatch.setattr(demo.os, "getloadavg", lambda: (3.7, 0.0, 0.0))
    assert demo.free_cores() == 5
    monkeypatch.setattr(demo.os, "cpu_count", lambda: 2)
    assert demo.free_cores() == 1  # never zero

"""Records, runs and files hold what a database promises: ids never merge, a resumed run is the run
it continues, filesystem trouble is one line, and what was counted stays counted."""

from __future__ import annotations

import asyncio
import errno
import json
import os
from pathlib import Path

import pytest
from judge_helpers import numbered_speaker, sample_episode, scoring_judge, write_episodes
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.data.loaders import load_contexts
from mascot.data.registry import DatasetError
from mascot.dialogue.run import generate_group, run_dir_for
from mascot.dialogue.run_settings import GroupEpisodeSettings
from mascot.errors import MascotError
from mascot.files import StoreError, read_jsonl, redact, write_jsonl
from mascot.judge.rubric_judge import RubricJudge
from mascot.rosters import load_roster
from mascot.runs.store import RunStore
from mascot.schema import Candidate, Context, DialogueLine, Episode, PreferencePair
from mascot.stage1.individual import OUTPUTS, run_individual
from mascot.stage1.settings import CandidateSettings
from mascot.testing.players import group_client, stub_judge_responder, stub_responder
from mascot.testing.scripted import ScriptedClient
from mascot.testing.stub_server import start_stub_server

ESCONV_SAMPLE = Path(__file__).parent / "fixtures" / "esconv_sample.jsonl"


@pytest.fixture(scope="module")
def stub():
    server = start_stub_server(port=0, latency_s=0.0, responder=stub_responder)
    yield server
    server.stop()


@pytest.fixture
def judge_stub():
    with start_stub_server(latency_s=0.0, responder=stub_judge_responder) as server:
        yield server


def generate(stub_url, out, *extra):
    args = [
        "generate",
        "--mode",
        "group",
        "--dataset",
        "ESConv",
        "--data-file",
        str(ESCONV_SAMPLE),
        "--limit",
        "2",
        "--model-name",
        "stub-model",
        "--vllm-server-url",
        stub_url,
        "--output-dir",
        str(out),
        "--num-turns",
        "3",
        "--seed",
        "7",
        *extra,
    ]
    return CliRunner().invoke(app, args)


def one_line_error(result) -> str:
    assert result.exit_code != 0
    assert isinstance(result.exception, MascotError), repr(result.exception)
    message = str(result.exception)
    assert "\n" not in message and "Traceback" not in result.output
    return message


# --------------------------------------------------------------------------- ids across systems


def test_two_systems_on_the_same_contexts_never_merge(stub, judge_stub, tmp_path):
    independent = ["--generation-mode", "independent", "--num-episodes", "2"]
    assert generate(stub.url, tmp_path, *independent).exit_code == 0
    assert generate(stub.url, tmp_path, *independent, "--turn-policy", "round-robin", "--system", "round-robin").exit_code == 0
    runs = [tmp_path / "group_ESConv_stub-model", tmp_path / "group_ESConv_stub-model_round-robin"]
    both = tmp_path / "both.jsonl"
    both.write_text("".join(run.joinpath("episodes.jsonl").read_text() for run in runs))
    episodes = list(read_jsonl(both, Episode))
    assert len(episodes) == len({e.episode_id for e in episodes}) == 8
    assert {e.conv_id for e in episodes} == {"esconv-test-1", "esconv-test-2"}  # the dataset's ids are kept as they are

    judge_args = ["--judge-server-url", judge_stub.url, "--judge", "stub", "--no-cache", "--scope", "collective"]
    result = CliRunner().invoke(app, ["judge", "--input-file", str(both), *judge_args])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "metrics_both.json").read_text())
    assert {k: v["Overall"]["n"] for k, v in report["collective"]["per_system"].items()} == {"mascot": 4, "round-robin": 4}
    judgments = [json.loads(line) for line in (tmp_path / "judgments_both.jsonl").read_text().splitlines()]
    assert len(judgments) == len({j["item_id"] for j in judgments}) == 8

    result = CliRunner().invoke(app, ["prefs", "group", "--episodes", str(both), "--mode", "episode", "--score-margin", "0", *judge_args[:-2]])
    assert result.exit_code == 0, result.output
    system_of = {e.episode_id: e.metadata.system for e in episodes}
    pairs = list(read_jsonl(tmp_path / "group_pairs.jsonl", PreferencePair))
    assert len({p.pair_id for p in pairs}) == len(pairs)
    assert all(len({system_of[i] for i in p.pair_id.split(">")}) == 1 for p in pairs)  # never one system against another
    stats = json.loads((tmp_path / "group_pairs_stats.json").read_text())
    assert stats["num_queries"] == 4 and stats["num_pairs"] == len(pairs)

    doubled = tmp_path / "doubled.jsonl"
    doubled.write_text(both.read_text() * 2)
    calls = judge_stub.stats.chat_requests
    message = one_line_error(CliRunner().invoke(app, ["judge", "--input-file", str(doubled), *judge_args]))
    assert "8 episode ids occur more than once" in message and judge_stub.stats.chat_requests == calls


# --------------------------------------------------------------------------- resume and run folders


def test_resume_refuses_other_settings_and_run_folders_name_their_variant(stub, tmp_path):
    variant = ["--turn-policy", "round-robin", "--enable-big-five"]
    assert generate(stub.url, tmp_path, *variant).exit_code == 0
    run = tmp_path / "directed_ESConv_stub-model_round-robin_big5"
    saved = {name: (run / name).read_bytes() for name in ("episodes.jsonl", "run_config.json", "run_summary.json")}
    message = one_line_error(generate(stub.url, tmp_path, *variant, "--num-turns", "2", "--resume"))
    assert "num_turns: saved 3, now 2" in message
    assert {name: (run / name).read_bytes() for name in saved} == saved  # the saved run is untouched
    assert generate(stub.url, tmp_path, *variant, "--resume").exit_code == 0
    assert json.loads((run / "run_config.json").read_text())["settings"]["max_tokens"] == 160  # a setting, not a secret

    def named(**endpoints):
        return run_dir_for(GroupEpisodeSettings(dataset="QMSum", generation_mode="independent", model_name="Qwen/Qwen3-8B", **endpoints)).name

    assert named() == "group_QMSum_Qwen3-8B"
    assert named(speaker_adapter="out/llm/grpo_Speaker/") == "group_QMSum_Qwen3-8B_speaker-grpo-Speaker"  # "_" only between parts


def test_secret_names_are_matched_exactly():
    config = {
        "max_tokens": 160,
        "judge_max_tokens": 512,
        "num_tokens": 3,
        "api_key": "sk-1",
        "api_key_env": "OPENAI_API_KEY",
        "OPENAI_API_KEY": "sk-2",
        "headers": {"Authorization": "Bearer sk-3"},
        "url": "https://me:sk-4@host:8000/v1",
    }
    assert redact(config) == {
        "max_tokens": 160,
        "judge_max_tokens": 512,
        "num_tokens": 3,
        "api_key": "***",
        "api_key_env": "OPENAI_API_KEY",
        "OPENAI_API_KEY": "***",
        "headers": {"Authorization": "***"},
        "url": "https://***@host:8000/v1",
    }


def test_a_file_named_for_another_split_is_refused(tmp_path):
    valid = tmp_path / "valid.jsonl"
    valid.write_text(ESCONV_SAMPLE.read_text())
    with pytest.raises(DatasetError, match="named for the valid split but --split is test: pass --split valid"):
        load_contexts("ESConv", data_file=valid)
    assert load_contexts("ESConv", split="valid", data_file=valid)[0].context_id == "esconv-valid-1"


# --------------------------------------------------------------------------- filesystem trouble


@pytest.fixture
def unwritable(tmp_path):
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    if writable(folder):  # root ignores modes: use a read-only system folder instead
        folder = Path("/sys/fs")
        if not folder.is_dir() or writable(folder):
            pytest.skip("no unwritable folder available")
    return folder


def writable(folder: Path) -> bool:
    try:
        (folder / ".probe").write_text("")
    except OSError:
        return False
    (folder / ".probe").unlink()
    return True


def test_unusable_paths_are_one_line_errors_before_any_work(stub, judge_stub, tmp_path, unwritable):
    episodes = tmp_path / "episodes.jsonl"
    write_episodes(episodes, [sample_episode("c1:e0", context_id="c1")])
    (tmp_path / "a-file").write_text("")
    judge = ["--judge-server-url", judge_stub.url, "--judge", "stub", "--no-cache"]
    assert "cannot write" in one_line_error(generate(stub.url, unwritable))
    assert "a-file" in one_line_error(generate(stub.url, tmp_path / "a-file"))
    assert "is a folder" in one_line_error(CliRunner().invoke(app, ["judge", "--input-file", str(tmp_path), *judge]))
    assert "cannot write" in one_line_error(
        CliRunner().invoke(app, ["judge", "--input-file", str(episodes), "--output-dir", str(unwritable), *judge])
    )
    assert "cannot write" in one_line_error(
        CliRunner().invoke(app, ["prefs", "group", "--episodes", str(episodes), "--output-dir", str(unwritable), *judge])
    )
    assert judge_stub.stats.chat_requests == 0  # refused before any model call
    assert "is a folder" in one_line_error(CliRunner().invoke(app, ["metrics", "--input-file", str(episodes), "--output-file", str(tmp_path)]))


def test_a_full_disk_fails_the_run_in_one_line_and_resume_completes_it(stub, tmp_path, monkeypatch):
    real_write = os.write
    disk = {"episodes": 0, "full_fd": None}

    def disk_fills_up(fd, data):
        if fd == disk["full_fd"]:
            raise OSError(errno.ENOSPC, "No space left on device")  # ... then nothing more does
        if bytes(data[:14]) == b'{"episode_id":':
            disk["episodes"] += 1
            if disk["episodes"] == 2:
                disk["full_fd"] = fd
                return real_write(fd, bytes(data[: len(data) // 2]))  # half of the second line fits ...
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", disk_fills_up)
    message = one_line_error(generate(stub.url, tmp_path, "--max-concurrent-episodes", "1"))
    monkeypatch.setattr(os, "write", real_write)
    run = tmp_path / "directed_ESConv_stub-model"
    assert "no space left on device" in message
    summary = json.loads((run / "run_summary.json").read_text())
    assert summary["status"] == "failed" and "no space left on device" in summary["error"]
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")]
    assert (run / "episodes.jsonl").read_text().count("\n") == 1 and (run / "episodes.jsonl").read_text().endswith("\n")
    assert generate(stub.url, tmp_path, "--max-concurrent-episodes", "1", "--resume").exit_code == 0
    assert len({e.episode_id for e in read_jsonl(run / "episodes.jsonl", Episode)}) == 2


def test_a_failed_atomic_write_leaves_no_temp_file_and_the_old_file_whole(tmp_path):
    class FullDisk(Context):
        def model_dump_json(self, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device")

    path = tmp_path / "pairs.jsonl"
    write_jsonl(path, [Context(context_id="old", dataset="ESConv")])
    with pytest.raises(StoreError, match="pairs.jsonl: no space left on device"):
        write_jsonl(path, [FullDisk(context_id="new", dataset="ESConv")])
    assert [p.name for p in tmp_path.iterdir()] == ["pairs.jsonl"] and '"old"' in path.read_text()


# --------------------------------------------------------------------------- smaller promises


def test_empty_and_malformed_episode_files_are_one_line_errors(tmp_path, judge_stub):
    judge = ["--judge-server-url", judge_stub.url, "--judge", "stub", "--no-cache"]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert "no episodes" in one_line_error(CliRunner().invoke(app, ["judge", "--input-file", str(empty), *judge]))
    record = json.loads(sample_episode().model_dump_json())
    record["metadata"] = [1, 2]
    bad = tmp_path / "bad_esconv.jsonl"
    bad.write_text(json.dumps(record) + "\n")
    message = one_line_error(CliRunner().invoke(app, ["judge", "--input-file", str(bad), *judge]))
    assert "bad_esconv.jsonl:1: the metadata block is malformed (expected an object, found list)" in message


def test_torn_lines_dropped_add_up_over_resumes(tmp_path):
    def tear_and_resume():
        with open(tmp_path / "run" / "out.jsonl", "a") as fh:
            fh.write('{"context_id": "torn')
        with RunStore(tmp_path / "run", outputs=("out.jsonl",), resume=True) as store:
            store.append(Context(context_id=f"c{store.summary.num_records}", dataset="ESConv"))
        return json.loads((tmp_path / "run" / "run_summary.json").read_text())["num_torn_lines_dropped"]

    with RunStore(tmp_path / "run", outputs=("out.jsonl",)) as store:
        store.append(Context(context_id="c0", dataset="ESConv"))
    assert [tear_and_resume(), tear_and_resume()] == [1, 2]


async def test_stage1_resume_drops_pairs_of_a_candidate_that_was_regenerated(tmp_path):
    contexts = [
        Context(
            context_id=f"esconv-test-{i}",
            dataset="ESConv",
            situation=f"Situation {i}",
            emotion="anxiety",
            opening_turns=[DialogueLine(speaker="user", text=f"I cannot sleep ({i}).")],
        )
        for i in range(2)
    ]
    settings = CandidateSettings(num_candidates=4, score_margin=0.5, personas=("The Anchor",), max_concurrent_episodes=1)

    async def run(speaker, resume=False):
        with RunStore(tmp_path / "run", outputs=OUTPUTS, resume=resume) as store:
            await run_individual(
                contexts, load_roster("emotional_support"), speaker, RubricJudge(scoring_judge(lambda t: int(t.split()[-1]) % 5 + 1)), store, settings
            )
        return store

    store = await run(numbered_speaker())
    candidates_file = store.path("candidates.jsonl")
    text = candidates_file.read_text()
    candidates_file.write_text(text[: text.rstrip("\n").rfind("\n") + 1] + text.rstrip("\n").rsplit("\n", 1)[1][:30])  # last candidate torn
    store = await run(numbered_speaker(prefix="again"), resume=True)
    candidates = {(c.candidate_id.rsplit("::", 1)[0], c.candidate_idx): c for c in read_jsonl(candidates_file, Candidate)}
    pairs = list(read_jsonl(store.path("pairs.jsonl"), PreferencePair))
    for pair in pairs:
        query, indices = pair.pair_id.rsplit("::", 1)
        chosen, rejected = (candidates[(query, int(i))] for i in indices.split(">"))
        assert (pair.chosen[0]["content"], pair.rejected[0]["content"]) == (chosen.response, rejected.response)
    assert json.loads(store.path("pairs_stats.json").read_text())["num_pairs"] == len(pairs)


async def test_usage_reaches_the_summary_while_no_record_completes(tmp_path):
    """Calls made for an episode that never finishes (a kill -9 would lose it) are in the summary."""
    slow_speaker = ScriptedClient(fn=lambda request: "a reply", latency_s=60)
    cfg = GroupEpisodeSettings(dataset="ESConv", output_dir=tmp_path, num_turns=2, enable_user_simulation=False)
    context = Context(context_id="c1", dataset="ESConv", situation="s", opening_turns=[DialogueLine(speaker="user", text="hi")])
    task = asyncio.ensure_future(generate_group(cfg, contexts=[context], clients={"director": group_client(), "speaker": slow_speaker}))
    summary_file = run_dir_for(cfg) / "run_summary.json"
    requests = 0
    for _ in range(200):  # waits for the condition (at most ~20 s), asserts nothing about speed
        await asyncio.sleep(0.1)
        if summary_file.exists():
            requests = json.loads(summary_file.read_text()).get("usage", {}).get("director", {}).get("requests", 0)
            if requests:
                break
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert requests == 1


def test_a_run_written_before_ids_had_a_tag_resumes_with_its_own_ids(stub, tmp_path):
    assert generate(stub.url, tmp_path).exit_code == 0
    run = tmp_path / "directed_ESConv_stub-model"
    first = json.loads((run / "episodes.jsonl").read_text().splitlines()[0])
    first["episode_id"] = f"{first['context_id']}:e0"  # the id an older mascot wrote
    (run / "episodes.jsonl").write_text(json.dumps(first) + "\n")
    config = json.loads((run / "run_config.json").read_text())
    del config["settings"]["run_tag"]
    config["settings"]["max_tokens"] = "***"  # and how it redacted a setting
    (run / "run_config.json").write_text(json.dumps(config))
    assert generate(stub.url, tmp_path, "--resume").exit_code == 0
    assert [e.episode_id for e in read_jsonl(run / "episodes.jsonl", Episode)] == ["esconv-test-1:e0", "esconv-test-2:e0"]

"""Runs are named by the system that wrote them: a directed and a round-robin run, both recorded as
"mascot", get distinct labels in `study create` and `eval compare`; two runs of one system are
refused with one line that says how to name them."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from judge_helpers import COLLECTIVE_KEYS, sample_episode
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.errors import MascotError
from mascot.judge.compare import load_matchups, run_compare
from mascot.judge.compare_settings import CompareSettings
from mascot.schema import EpisodeMetadata, RoleIdentity
from mascot.study.create import create_study
from mascot.study.db import StudyError, meta, opened
from mascot.system_labels import distinct_labels, system_traits
from mascot.testing.players import stub_responder
from mascot.testing.scripted import ScriptedClient
from mascot.testing.stub_server import start_stub_server

ESCONV_SAMPLE = Path(__file__).parent / "fixtures" / "esconv_sample.jsonl"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Episode files of three real `mascot generate` runs, all under the label "mascot": directed
    (seeds 1 and 2: one system twice) and round-robin."""
    out = tmp_path_factory.mktemp("runs")
    server = start_stub_server(port=0, latency_s=0.001, responder=stub_responder)
    try:
        files = {}
        for name, extra in (
            ("directed", ["--seed", "1"]),
            ("directed_again", ["--seed", "2"]),
            ("round_robin", ["--seed", "1", "--turn-policy", "round-robin"]),
        ):
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
                server.url,
                "--output-dir",
                str(out / name),
                "--num-turns",
                "2",
                *extra,
            ]
            result = CliRunner().invoke(app, args)
            assert result.exit_code == 0, result.output
            files[name] = next((out / name).glob("*/episodes.jsonl"))
        return files
    finally:
        server.stop()


def first_shown_judge() -> ScriptedClient:
    return ScriptedClient(
        fn=lambda request: json.dumps({k: {"winner": "1", "reason": "first"} for k in [*COLLECTIVE_KEYS, "overall"]}), model="judge"
    )


def test_runs_record_the_system_they_ran(runs):
    directed = json.loads(runs["directed"].read_text().splitlines()[0])["metadata"]
    round_robin = json.loads(runs["round_robin"].read_text().splitlines()[0])["metadata"]
    assert directed["system"] == round_robin["system"] == "mascot"
    assert directed["turn_policy"] == "director" and round_robin["turn_policy"] == "round-robin"
    assert system_traits(EpisodeMetadata(**directed))["turn policy"] == "directed"


def test_study_of_a_directed_and_a_round_robin_run_names_them_apart(runs, tmp_path):
    result = CliRunner().invoke(
        app, ["study", "create", "--a", str(runs["directed"]), "--b", str(runs["round_robin"]), "--out", str(tmp_path / "s.db")]
    )
    assert result.exit_code == 0, result.output
    assert "A = mascot (directed), B = mascot (round-robin)" in result.output
    with opened(tmp_path / "s.db") as conn:
        saved = meta(conn)
    assert (saved["system_a"], saved["system_b"]) == ("mascot (directed)", "mascot (round-robin)")


def test_eval_compare_of_a_directed_and_a_round_robin_run_names_them_apart(runs, tmp_path):
    settings = CompareSettings(
        systems=[str(runs["directed"]), str(runs["round_robin"])], judge=["judge"], output_dir=str(tmp_path / "out"), no_cache=True
    )
    result = run_compare(settings, clients={"judge": first_shown_judge()})
    assert result.report["systems"] == ["mascot (directed)", "mascot (round-robin)"]
    assert "# Head to head: mascot (directed) vs mascot (round-robin)" in (result.output_dir / "compare.md").read_text()


def test_two_runs_of_one_system_are_refused_with_one_line(runs, tmp_path):
    with pytest.raises(
        StudyError, match=r"^--a and --b are runs of one system \(mascot: directed, .*\): to compare them, name them with --system-a and --system-b$"
    ):
        create_study(runs["directed"], runs["directed_again"], tmp_path / "s.db", raters=1)
    with pytest.raises(
        MascotError, match=r"^two files hold runs of one system \(mascot: directed, .*\): to compare them, name them with --labels A,B$"
    ):
        load_matchups([runs["directed"], runs["directed_again"]])
    # named by the user, the same two runs are taken
    built = create_study(runs["directed"], runs["directed_again"], tmp_path / "s.db", raters=1, system_a="seed 1", system_b="seed 2")
    assert (built.system_a, built.system_b) == ("seed 1", "seed 2")
    assert load_matchups([runs["directed"], runs["directed_again"]], ["seed 1", "seed 2"])[0] == ["seed 1", "seed 2"]


def test_the_command_refuses_two_runs_of_one_system_with_exit_2(runs, tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mascot",
            "study",
            "create",
            "--a",
            str(runs["directed"]),
            "--b",
            str(runs["directed_again"]),
            "--out",
            str(tmp_path / "s.db"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "runs of one system" in done.stderr and "--system-a and --system-b" in done.stderr and not (tmp_path / "s.db").exists()


def metadata(**fields) -> EpisodeMetadata:
    return EpisodeMetadata(dataset="ESConv", prompt_version="v2", turn_policy="director", **fields)


def test_labels_use_the_first_trait_that_tells_runs_apart():
    base = metadata(roles={"speaker": RoleIdentity(base_model="Qwen/Qwen3-8B")})
    trained = metadata(roles={"speaker": RoleIdentity(base_model="Qwen/Qwen3-8B", adapter="outputs/llm/grpo_Speaker_x/")})
    sampled = metadata(self_consistency_samples=5, roles=base.roles)
    runs = [("mascot", system_traits(m)) for m in (base, trained, sampled)]
    assert distinct_labels(runs) == [
        "mascot (one reply per turn, untrained Speaker)",
        "mascot (one reply per turn, Speaker adapter grpo_Speaker_x)",
        "mascot (5 replies sampled per turn, untrained Speaker)",
    ]
    assert distinct_labels([("mascot", system_traits(base)), ("baseline", system_traits(base))]) == ["mascot", "baseline"]  # own labels kept
    assert distinct_labels([("mascot", system_traits(base)), ("mascot", system_traits(base))]) is None
    assert distinct_labels([("mascot", None), ("mascot", system_traits(base))]) is None


def test_records_written_before_the_traits_still_load(tmp_path):
    """Old records carry no turn policy nor prompt version: they load, and their traits say so."""
    old = sample_episode().model_dump(mode="json", exclude_none=True)
    assert "turn_policy" not in old["metadata"] and "self_consistency_samples" not in old["metadata"]
    traits = system_traits(EpisodeMetadata(**old["metadata"]))
    assert traits["turn policy"] == "turn policy unrecorded" and traits["prompts"] == "prompts unrecorded"


@pytest.mark.parametrize("samples", [1, 3])
def test_an_episode_records_the_replies_sampled_per_turn(es_roster, es_context, samples):
    import asyncio

    from mascot.dialogue.engine import EpisodeEngine
    from mascot.dialogue.settings import EngineSettings
    from mascot.dialogue.tally import Tally
    from mascot.testing.players import group_client

    settings = EngineSettings(num_turns=1, turn_policy="round-robin", self_consistency_samples=samples, user_response_probability=0.0)
    episode = asyncio.run(EpisodeEngine(es_roster, {"speaker": group_client()}, settings, Tally()).run_episode(es_context))
    assert episode.metadata.self_consistency_samples == (None if samples == 1 else samples)  # absent for one: earlier records unchanged
    assert system_traits(episode.metadata)["samples"] == ("one reply per turn" if samples == 1 else "3 replies sampled per turn")

"""The README walk-through runs as a chain: every command in the block marked `<!-- walkthrough -->`
runs as written, in order, in a temp folder, each reading what an earlier one wrote.

Only sizes and backends change, by flags appended to each command (the last value of a flag wins):
the dialogue roles and the judge answer from a scripted stub server on 127.0.0.1, training uses a
tiny random model installed where the embedded SmolLM2 would be (`$MASCOT_CACHE_DIR`), and the data
download is replaced by a synthetic QMSum meeting long enough that Stage-1 pairs exceed the reward
model's `--max-length`. Each `# -> PATH` line under a command names an output that must exist and
not be empty.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import time
from pathlib import Path

import pytest
from train_helpers import single_thread, tiny_model
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.testing.players import as_structured, group_reply, judge_reply
from mascot.testing.stub_server import start_stub_server

README = Path(__file__).resolve().parent.parent / "README.md"
MARKER = "<!-- walkthrough -->"
EMBEDDED = "SmolLM2-135M-Instruct"
TEST_WINDOW = 300  # estimated tokens of meeting transcript per context (default 1,500)
TEST_MAX_LENGTH = 256  # reward models' --max-length in the test (default 1,024)


# --------------------------------------------------------------------------- reading the block


def walkthrough_block(text: str) -> list[str]:
    """The lines of the fenced block right after the marker."""
    after = text.split(MARKER, 1)[1].lstrip("\n")
    match = re.match(r"```bash\n(.*?)\n```", after, re.DOTALL)
    assert match, f"{MARKER} must be followed by a ```bash block"
    return match.group(1).splitlines()


def parse_steps(lines: list[str]) -> list[tuple[list[str], list[str]]]:
    """(argv, expected outputs) per command; `\\` continuations joined, comments skipped."""
    steps: list[tuple[list[str], list[str]]] = []
    pending = ""
    for line in lines:
        stripped = line.strip()
        arrow = re.match(r"#\s*->\s*(.+)", stripped)
        if arrow:
            steps[-1][1].extend(arrow.group(1).split())
            continue
        if not stripped or stripped.startswith("#"):
            continue
        pending += stripped.rstrip("\\") + " "
        if not stripped.endswith("\\"):
            steps.append((shlex.split(pending), []))
            pending = ""
    return steps


# --------------------------------------------------------------------------- what stands in for models and data


def synthetic_meeting(turns: int = 90) -> dict:
    """A QMSum record (its hub export format) whose transcript window fills the default budget."""
    speakers = ["Project Manager", "Marketing", "Industrial Designer", "User Interface"]
    transcript = [
        {"speaker": speakers[i % 4], "content": f"On item {i} we looked at the budget , the case material and who follows up by Friday ."}
        for i in range(turns)
    ]
    return {
        "topic_list": [{"topic": "Budget", "relevant_text_span": [["0", str(turns - 1)]]}],
        "general_query_list": [{"query": "Summarize the whole meeting.", "answer": "Budget and case."}],
        "specific_query_list": [{"query": "What was decided about the budget?", "answer": "It stays.", "relevant_text_span": [["0", "5"]]}],
        "meeting_transcripts": transcript,
    }


def scripted_responder():
    """Judge prompts get valid scores; dialogue roles get valid, always different replies (so that
    candidates, episodes and branches differ and pair)."""
    counter, judgments = itertools.count(), itertools.count()

    def respond(messages: list[dict], request: dict) -> str:
        n = next(counter)
        role = request["role"]  # the role tag the client sends with each request
        if role == "judge":  # scores cycle through the scale: two judged items never tie
            score = next(judgments) % 5 + 1
            return json.dumps({k: {**v, "score": score} for k, v in json.loads(judge_reply(messages)).items()})
        if role == "director":
            names = re.findall(r"^- (.+?): ", messages[0]["content"], re.MULTILINE)
            name = names[n % len(names)]
            return as_structured(f"<directive>\nagent: {name}\naction: add what only {name} would add ({n})\ntone: warm\n</directive>", request)
        return group_reply(messages, request.get("seed"), role) + f" ({n})"

    return respond


def overrides_for_test(argv: list[str], url: str) -> list[str]:
    """Backends and sizes for the test; appended, so the README's own flags are all still parsed."""
    command = " ".join(argv[1:3])
    if argv[1] == "generate":
        window = ["--token-budget", str(TEST_WINDOW)]
        if "--speaker-adapter" in argv:  # the trained adapters run on the local backend, on the tiny model
            return [*window, "--max-tokens", "16"]
        judge = ["--judge-server-url", url] if "individual" in argv else []  # a group run has no judge
        return [*window, "--vllm-server-url", url, *judge]
    if argv[1] in ("judge", "prefs"):
        return ["--judge-server-url", url]
    if argv[1] == "metrics":
        return ["--skip-embeddings"]
    train = {
        # A short --max-length keeps the test fast and still makes every Stage-1 pair too long: fitted, not dropped.
        "train reward-model": ["--batch-size", "4", "--max-length", str(TEST_MAX_LENGTH)],
        "train group-reward-model": ["--batch-size", "4", "--max-length", str(TEST_MAX_LENGTH)],
        "train speaker": ["--batch-size", "4", "--num-generations", "2", "--max-completion-length", "8", "--max-steps", "1"],
        "train director-grpo": [
            # the walk-through's one whole episode gives one decision point: one group of 2 per step
            "--batch-size",
            "2",
            "--num-generations",
            "2",
            "--max-completion-length",
            "24",
            "--suffix-rounds",
            "1",
            "--rollout-server-url",
            url,
            "--decision-points-per-episode",
            "1",
        ],
        "train director-dpo": ["--batch-size", "2", "--max-steps", "1"],
    }
    return train.get(command, [])


def assert_written(paths: list[str], argv: list[str]) -> None:
    for name in paths:
        path = Path(name)
        assert path.exists(), f"`{' '.join(argv)}` did not write {name}"
        assert path.stat().st_size > 0, f"{name} is empty"
        if path.suffix == ".jsonl":
            assert json.loads(path.read_text(encoding="utf-8").splitlines()[0])
        if path.suffix == ".json":
            assert json.loads(path.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- the tests


def test_the_walkthrough_block_is_a_chain():
    """Each path a command reads was named as the output of an earlier command (or is the data)."""
    steps = parse_steps(walkthrough_block(README.read_text(encoding="utf-8")))
    assert steps[0][0][0] == "curl" and all(argv[0] == "mascot" for argv, _ in steps[1:])
    written = {steps[0][0][steps[0][0].index("-o") + 1]}
    reads = (
        "--data-file",
        "--data-path",
        "--episode-dataset-path",
        "--input-file",
        "--episodes",
        "--reward-model-path",
        "--group-reward-model-path",
        "--speaker-adapter",
        "--director-adapter",
    )
    for argv, outputs in steps[1:]:
        for flag, value in zip(argv, argv[1:]):
            if flag in reads:
                assert any(w == value or w.startswith(value.rstrip("/") + "/") for w in written), f"{flag} {value}: no earlier step writes it"
        written.update(outputs)
    commands = {" ".join(argv[1:3]) for argv, _ in steps[1:]}
    for stage in (
        "train reward-model",
        "train speaker",
        "train group-reward-model",
        "train director-grpo",
        "train director-dpo",
        "judge --input-file",
        "metrics --input-file",
    ):
        assert stage in commands, f"the walk-through misses {stage}"


@pytest.fixture
def walkthrough_env(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    tiny_model(cache / "models" / EMBEDDED, vocab_size=None)  # where the embedded model's checkpoint lives
    monkeypatch.setenv("MASCOT_CACHE_DIR", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("MASCOT_JUDGE_CACHE_DIR", str(tmp_path / "judge-cache"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    with start_stub_server(port=0, latency_s=0.0, responder=scripted_responder()) as server, single_thread():
        yield server.url


def test_the_readme_walkthrough_runs_end_to_end(walkthrough_env):
    url = walkthrough_env
    steps = parse_steps(walkthrough_block(README.read_text(encoding="utf-8")))
    (download, _), *commands = steps
    target = Path(download[download.index("-o") + 1])
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(synthetic_meeting()) + "\n", encoding="utf-8")
    runner = CliRunner()
    for argv, outputs in commands:
        started = time.monotonic()
        result = runner.invoke(app, argv[1:] + overrides_for_test(argv, url))
        print(f"{time.monotonic() - started:6.1f} s  {' '.join(argv[:3])}")  # shown with -s: where the time goes
        assert result.exit_code == 0, f"`{' '.join(argv)}` failed: {result.exception!r}\n{result.output[-3000:]}"
        assert result.output.strip(), f"`{' '.join(argv)}` printed nothing"
        assert_written(outputs, argv)
    rm = json.loads(Path("outputs/reward_model/Individual_QMSum_SmolLM2-135M-Instruct/mascot_metadata.json").read_text())
    assert rm["train_metrics"]["num_truncated_pairs"] > 0 and rm["train_metrics"]["num_skipped_too_long"] == 0  # long pairs fitted, not dropped

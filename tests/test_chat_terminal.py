"""The terminal chat as a person sees it: what it says while the group answers, and replies wrapped
at the terminal's width without breaking words (a real process in a pseudo-terminal of 80 columns)."""

from __future__ import annotations

import io
import random
import re
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console

from mascot.dialogue.stream_wrap import StreamWrapper
from mascot.testing.players import stub_responder
from mascot.testing.stub_server import start_stub_server

ESCONV_SAMPLE = Path(__file__).parent / "fixtures" / "esconv_sample.jsonl"
LONG_REPLY = (
    "That sounds exhausting, and it makes sense that you feel stretched thin after a week like this one. "
    "Would it help to name the one conversation with your supervisor that worries you most, so that we "
    "can think through together what you would want to say first? Carefully-hyphenated-words "
    "should stay whole too."
)


def wrapped(pieces: list[str], width: int, column: int = 0) -> str:
    wrapper = StreamWrapper(width, column)
    return "".join(wrapper.feed(piece) for piece in pieces) + wrapper.finish()


def random_pieces(text: str, seed: int) -> list[str]:
    rng, pieces, at = random.Random(seed), [], 0
    while at < len(text):
        step = rng.randint(1, 9)
        pieces.append(text[at : at + step])
        at += step
    return pieces


@pytest.mark.parametrize("seed", range(5))
def test_streamed_words_wrap_whole_within_the_width(seed):
    out = wrapped(random_pieces(LONG_REPLY, seed), 40, column=14)
    lines = out.split("\n")
    assert len(lines) > 3
    assert cell_len(lines[0]) + 14 <= 40 and all(cell_len(line) <= 40 for line in lines[1:])
    assert out.split() == LONG_REPLY.split()  # every word whole, none lost, none split


def test_line_breaks_in_the_reply_are_kept_and_restart_the_count():
    out = wrapped(["one two\nthree four five six seven"], 12)
    assert out == "one two\nthree four\nfive six\nseven"


def test_wide_characters_count_two_cells_and_an_overlong_word_is_cut_at_the_edge():
    assert wrapped(["日本語 日本語"], 10) == "日本語\n日本語"
    assert wrapped(["a " + "x" * 25], 10) == "a\n" + "x" * 10 + "\n" + "x" * 10 + "\n" + "x" * 5


def test_a_pipe_keeps_each_reply_on_one_line():
    from mascot.commands.chat import TerminalView
    from mascot.schema import Turn

    out = io.StringIO()
    view = TerminalView(Console(file=out, width=80, force_terminal=False), ["The Anchor"])
    view.reply_start("The Anchor")
    for piece in random_pieces(LONG_REPLY, 1):
        view.reply_text(piece)
    view.reply_end(Turn(turn_idx=1, round_id=0, agent_name="The Anchor", response=LONG_REPLY), False)
    view.done()
    assert out.getvalue() == f"The Anchor: {LONG_REPLY}\n"


# --------------------------------------------------------------------------- a real terminal


def long_responder(messages: list[dict], request: dict) -> str:
    return LONG_REPLY if request["role"] in ("speaker", "default") else stub_responder(messages, request)


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def screen_lines(raw: str) -> list[str]:
    """What stays on screen, line by line: control sequences removed, and a line redrawn after a
    carriage return (the spinner) replaced by what was drawn last."""
    lines = []
    for line in ANSI.sub("", raw).replace("\r\n", "\n").split("\n"):
        lines.append(line.split("\r")[-1])
    return lines


def test_the_terminal_chat_says_who_was_picked_and_wraps_the_reply(tmp_path: Path):
    pexpect = pytest.importorskip("pexpect")
    session = tmp_path / "s.jsonl"
    with start_stub_server(responder=long_responder, latency_s=0.4, chunk_delay_s=0.01) as server:
        args = ["-m", "mascot", "chat", "--vllm-server-url", server.url, "--model-name", "stub-model", "--session", str(session)]
        child = pexpect.spawn(
            sys.executable, args, dimensions=(40, 80), encoding="utf-8", timeout=60, env={"TERM": "xterm", "PATH": "/usr/bin:/bin", "NO_COLOR": "1"}
        )
        log = io.StringIO()
        child.logfile_read = log
        child.expect("You:")
        child.sendline("I had a hard week at work.")
        child.expect("choosing who answers")
        child.expect("is typing")
        child.expect("You:")  # the reply is done
        child.sendline("/quit")
        child.expect(pexpect.EOF)
        child.close()
    assert child.exitstatus == 0, log.getvalue()[-2000:]
    raw = log.getvalue()
    assert raw.index("choosing who answers") < raw.index("is typing") < raw.index("That sounds exhausting")
    lines = screen_lines(raw[raw.index("is typing") :])
    start = next(i for i, line in enumerate(lines) if "That sounds exhausting" in line)
    end = next(i for i in range(start, len(lines)) if lines[i].rstrip().endswith("too."))
    reply_lines = lines[start : end + 1]
    assert len(reply_lines) >= 4 and all(cell_len(line) <= 80 for line in reply_lines)
    label, first = reply_lines[0].split(": ", 1)
    assert label in ("The Anchor", "The Catalyst", "The Beacon")
    assert " ".join([first, *reply_lines[1:]]).split() == LONG_REPLY.split()  # no word broken across lines


def test_the_embedded_model_is_announced_as_a_smoke_test_model():
    from mascot.commands.chat import SMOKE_TEST_NOTICE, introduce
    from mascot.dialogue.chat import runs_smoke_test_model
    from mascot.dialogue.chat_settings import ChatSettings

    assert runs_smoke_test_model(ChatSettings())  # no model named: the embedded one, in process
    assert not runs_smoke_test_model(ChatSettings(vllm_server_url=["http://127.0.0.1:9/v1"], model_name="m"))

    class Session:  # what `introduce` reads of a chat session
        from mascot.rosters import load_roster

        roster = load_roster("emotional_support")
        path = Path("s.jsonl")
        context = type("Context", (), {"is_meeting": False, "situation": ""})()

    out = io.StringIO()
    introduce(Session(), Console(file=out, width=200), False, False, smoke_test_model=True)
    assert SMOKE_TEST_NOTICE in out.getvalue()
    out = io.StringIO()
    introduce(Session(), Console(file=out, width=200), False, False, smoke_test_model=False)
    assert "tiny test model" not in out.getvalue()


# --------------------------------------------------------------------------- a dead endpoint


def free_port() -> int:
    import socket

    with socket.socket() as sock:  # a port with nothing listening
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"


@pytest.mark.parametrize("command", ["generate", "chat", "web"])
def test_a_dead_endpoint_is_one_line_naming_role_url_and_cause(command, tmp_path: Path):
    import subprocess

    url = dead_url()
    endpoint = ["--vllm-server-url", url, "--model-name", "m"]
    args = {
        "generate": ["generate", "--dataset", "ESConv", "--data-file", str(ESCONV_SAMPLE), "--limit", "1", "--output-dir", str(tmp_path / "out")],
        "chat": ["chat", "--session", str(tmp_path / "s.jsonl")],
        "web": ["web", "--port", str(free_port()), "--session-dir", str(tmp_path / "sessions")],
    }[command]
    done = subprocess.run(
        [sys.executable, "-m", "mascot", *args, *endpoint], input="hello\n", capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error:") and "director endpoint" in lines[0] and url in lines[0]
    assert "connection refused" in lines[0] and "Error" not in lines[0]  # words, not the client library's exception names
    assert not (tmp_path / "out").exists() and not (tmp_path / "s.jsonl").exists()

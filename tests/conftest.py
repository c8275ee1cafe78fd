"""Shared fixtures. The suite is offline by construction: the hub libraries are told so before any
of them is imported, and every test refuses connections to anything but this machine."""

import ipaddress
import os
import socket
import tempfile

# Set at import time: huggingface_hub and transformers read these once, when first imported.
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
for _variable in OFFLINE_VARIABLES:
    os.environ[_variable] = "1"
# Trainers register what they write: fixtures broader than a test register here, never in the
# working folder's outputs/registry (each test gets its own below).
os.environ["MASCOT_REGISTRY"] = tempfile.mkdtemp(prefix="mascot-test-registry-")

import pytest  # noqa: E402

from mascot.rosters import load_roster  # noqa: E402
from mascot.schema import Context, DialogueLine  # noqa: E402

LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


class NetworkRefused(ConnectionRefusedError):
    """A test tried to reach another machine. A ConnectionRefusedError, so code that treats an
    unreachable host as offline (the hub probe) still does; the message names the host."""


def _is_local(address) -> bool:
    if not isinstance(address, tuple):  # a Unix socket path
        return True
    host = str(address[0]).split("%", 1)[0]
    if host in LOCAL_HOSTS:
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def refuse_remote(address) -> None:
    if not _is_local(address):
        raise NetworkRefused(f"the test suite is offline: connection to {address[0]}:{address[1]} refused (only localhost)")


@pytest.fixture(autouse=True)
def own_registry(monkeypatch, tmp_path):
    """Each test's trainers register into a registry of its own, never the working folder's."""
    monkeypatch.setenv("MASCOT_REGISTRY", str(tmp_path / "registry"))


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Hub offline variables for every test, and no connection beyond localhost."""
    for variable in OFFLINE_VARIABLES:
        monkeypatch.setenv(variable, "1")
    real_connect, real_connect_ex, real_create = socket.socket.connect, socket.socket.connect_ex, socket.create_connection

    def connect(sock, address):
        refuse_remote(address)
        return real_connect(sock, address)

    def connect_ex(sock, address):
        refuse_remote(address)
        return real_connect_ex(sock, address)

    def create_connection(address, *args, **kwargs):
        refuse_remote(address)
        return real_create(address, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "create_connection", create_connection)


@pytest.fixture(scope="session")
def embedded_model():
    """The embedded SmolLM2-135M-Instruct as a checkpoint folder (converted from its GGUF once).
    Tests that run the real small model name this folder, never the hub id."""
    from mascot.llm.models import embedded_model_dir

    return embedded_model_dir()


@pytest.fixture
def es_roster():
    return load_roster("emotional_support")


@pytest.fixture
def meeting_roster():
    return load_roster("meetings")


@pytest.fixture
def es_context():
    return Context(
        context_id="ctx-1",
        dataset="ESConv",
        situation="I lost my job last week.",
        emotion="anxiety",
        opening_turns=[DialogueLine(speaker="user", text="I got laid off and I keep replaying it.")],
    )


@pytest.fixture
def es_contexts():
    return [
        Context(
            context_id=f"ctx-{i}",
            dataset="ESConv",
            situation=f"situation {i}",
            emotion="sadness",
            opening_turns=[DialogueLine(speaker="user", text=f"opening {i}")],
        )
        for i in range(6)
    ]


@pytest.fixture
def meeting_context():
    return Context(
        context_id="qm-1",
        dataset="QMSum",
        meeting="m1",
        start_idx=4,
        query="What was decided about the price?",
        transcript=[DialogueLine(speaker="PM", text="We go for 25 euros."), DialogueLine(speaker="Marketing", text="Agreed.")],
    )


@pytest.fixture(autouse=True)
def isolated_judge_cache(tmp_path, monkeypatch):
    """Judgements cached by one test must never answer another (or land in the user's cache)."""
    monkeypatch.setenv("MASCOT_JUDGE_CACHE_DIR", str(tmp_path / "judge-cache"))


@pytest.fixture
def stub():
    """Starts stub servers (`stub(**options)`, no latency by default); all are stopped afterwards."""
    from mascot.testing.stub_server import start_stub_server

    servers = []

    def start(**kwargs):
        kwargs.setdefault("latency_s", 0.0)
        server = start_stub_server(**kwargs)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()

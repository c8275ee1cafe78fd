import pytest

from mascot.rosters import load_roster
from mascot.schema import Context, DialogueLine


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
        Context(context_id=f"ctx-{i}", dataset="ESConv", situation=f"situation {i}", emotion="sadness",
                opening_turns=[DialogueLine(speaker="user", text=f"opening {i}")])
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

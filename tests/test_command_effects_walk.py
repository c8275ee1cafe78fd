"""Every flag of the commands below changes what a real run of the command does (`effect_walk`):
the files it writes, what it prints, the model clients it builds and what it asks them, or it is
refused in one line that names the flag. There is no list of exceptions. `mascot generate`,
`mascot eval` and `mascot pipeline` have walks of their own (test_settings_walk.py,
test_eval_settings_walk.py, test_pipeline_settings_walk.py)."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest
from effect_walk import FIXTURES, RecordingClients, Walk, require_effects
from judge_helpers import agent_turn, episode, sample_episode, user_turn, write_episodes

ESCONV = FIXTURES / "esconv_sample.jsonl"
QMSUM = FIXTURES / "qmsum_sample.jsonl"


@pytest.fixture
def episodes(tmp_path) -> Path:
    """Two episodes of the fixture's contexts, outside every run's folder."""
    path = tmp_path / "inputs" / "episodes.jsonl"
    path.parent.mkdir(exist_ok=True)
    write_episodes(path, [sample_episode(f"esconv-test-{i}:mascot:e0", context_id=f"esconv-test-{i}") for i in (1, 2)])
    return path


@pytest.fixture
def group_episodes(tmp_path) -> Path:
    """Three episodes of each of two contexts, each worded differently: pairs for `prefs group`."""
    path = tmp_path / "inputs" / "group_episodes.jsonl"
    path.parent.mkdir(exist_ok=True)
    records = [
        episode(f"esconv-test-{c}:mascot:e{e}", [agent_turn(0, 0, name, f"{name} says {c}-{e}: how are you?"), user_turn(1, 0, "fine"),
                agent_turn(2, 1, "The Beacon", f"Next step {e * 7 + c}.")], context_id=f"esconv-test-{c}", episode_idx=e)
        for c in (1, 2) for e, name in enumerate(("The Anchor", "The Catalyst", "The Beacon"))
    ]  # fmt: skip
    write_episodes(path, records)
    return path


@pytest.fixture
def one_episode(tmp_path) -> Path:
    path = tmp_path / "inputs" / "one_episode.jsonl"
    path.parent.mkdir(exist_ok=True)
    write_episodes(path, [sample_episode("esconv-test-3:mascot:e0", context_id="esconv-test-3")])
    return path


@pytest.fixture
def judges_file(tmp_path) -> Path:
    path = tmp_path / "inputs" / "judges.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text("judges:\n  - {name: first, model: some/judge-a}\n  - {name: second, model: some/judge-b}\n", encoding="utf-8")
    return path


def judge_walk(episodes: Path, one_episode: Path, judges_file: Path) -> Walk:
    from mascot.commands.judge import JudgeSettings, run_judge

    return Walk(
        JudgeSettings, run_judge, {"input_file": episodes, "output_dir": Path("out")},
        values={"judges": ["some/judge"], "judges_file": judges_file, "provider": "openai", "dataset": "ED", "data_file": ESCONV,
                "split": "train", "scope": "agent", "limit": 1, "cache_dir": Path("cache"), "output_dir": Path("elsewhere"),
                "input_file": one_episode, "rubric_version": "paper_v1", "judge_scoring": "json"},
        companions={"data_file": {"dataset": "ESConv"}, "split": {"dataset": "ESConv", "data_file": ESCONV}},
    )  # fmt: skip


def test_every_judge_flag_changes_what_the_judge_does(tmp_path, episodes, one_episode, judges_file):
    require_effects(judge_walk(episodes, one_episode, judges_file), tmp_path / "walk")


def test_every_prefs_group_flag_changes_the_pairs_or_how_they_are_judged(tmp_path, group_episodes, one_episode, judges_file):
    from mascot.commands.judge import JudgeSettings, run_judge
    from mascot.commands.prefs import PrefsGroupSettings, run_prefs_group
    from mascot.settings import settings_from

    judged = tmp_path / "inputs" / "judged"  # judgments of these episodes, not where prefs looks by default
    with RecordingClients().installed():  # scripted judges
        run_judge(settings_from(JudgeSettings, {"input_file": group_episodes, "output_dir": judged, "scope": "collective"}, "judgments"))
    walk = Walk(
        PrefsGroupSettings, run_prefs_group, {"episodes": group_episodes, "output_dir": Path("out"), "score_margin": 0.5},
        values={"judges": ["some/judge"], "judges_file": judges_file, "provider": "openai", "dataset": "ED", "data_file": ESCONV,
                "split": "train", "cache_dir": Path("cache"), "output_dir": Path("elsewhere"), "episodes": one_episode,
                "rubric_version": "paper_v1", "judge_scoring": "json", "judgments": judged / "judgments_group_episodes.jsonl",
                "mode": "trajectory", "score_margin": 1.5},
        companions={"data_file": {"dataset": "ESConv"}, "split": {"dataset": "ESConv", "data_file": ESCONV}},
    )  # fmt: skip
    require_effects(walk, tmp_path / "walk")


def test_every_data_preview_flag_changes_what_it_shows(tmp_path):
    from mascot.commands.data import PreviewSettings, preview

    walk = Walk(
        PreviewSettings, preview, {"dataset": "ESConv", "data_file": ESCONV, "split": "test"},
        values={"dataset": "QMSum", "data_file": QMSUM, "split": "train", "limit": 1, "transcript_window": 40},
        companions={"seed": {"shuffle": True}, "dataset": {"data_file": QMSUM}, "transcript_window": {"dataset": "QMSum", "data_file": QMSUM}},
    )  # fmt: skip
    require_effects(walk, tmp_path)


def test_every_eval_compare_flag_changes_the_head_to_head(tmp_path, episodes, judges_file):
    from mascot.commands.compare import run_compare_command
    from mascot.judge.compare_settings import CompareSettings

    systems = [system_file(tmp_path, name, episodes) for name in ("alpha", "beta", "gamma")]
    walk = Walk(
        CompareSettings, run_compare_command, {"systems": [str(p) for p in systems], "output_dir": "out", "ranking_resamples": 20},
        values={"systems": [str(p) for p in systems[:2]], "labels": "A,B,C", "judge": ["some/judge"], "judges_file": str(judges_file),
                "provider": "openai", "orders": "rotations", "order_rule": "majority", "limit": 1, "output_dir": "elsewhere",
                "cache_dir": "cache"},
        reply=first_shown_wins,
    )  # fmt: skip
    require_effects(walk, tmp_path / "walk")


def first_shown_wins(request) -> str:
    from mascot.rubrics import rubric_for

    return json.dumps({k: {"winner": "1", "reason": "shown first"} for k in [*rubric_for("ESConv", "collective").keys, "overall"]})


def test_every_study_create_flag_changes_the_study(tmp_path, episodes):
    from mascot.commands.study import run_study_create
    from mascot.study.settings import StudyCreateSettings

    a, b = (system_file(tmp_path, name, episodes) for name in ("alpha", "beta"))
    walk = Walk(
        StudyCreateSettings, run_study_create, {"a": str(a), "b": str(b), "out": "study.db"},
        values={"a": str(b), "b": str(a), "out": "other.db", "system_a": "first", "system_b": "second", "base_url": "https://example.org"},
        setups={"overwrite": lambda root: (root / "study.db").write_text("an older study")},
    )  # fmt: skip
    require_effects(walk, tmp_path / "walk")


def registry_with_versions(root: Path) -> None:
    """A registry in `root/reg`: speaker-v1 promoted then speaker-v2 promoted over it (forced),
    director-v1 registered, and an unregistered speaker folder `root/art/speaker_c`."""
    from test_adapters_registry import artefact

    from mascot.adapter_registry import Registry
    from mascot.adapters.promotion import promote
    from mascot.train.registration import register

    registry = Registry.open(root / "reg")
    for name, role, weights in (("speaker_a", "speaker", b"a"), ("speaker_b", "speaker", b"b"), ("director_a", "director", b"d")):
        register(registry, artefact(root / "art" / name, role=role, weights=weights))
    artefact(root / "art" / "speaker_c", weights=b"c")
    promote(registry, "speaker-v1")
    promote(registry, "speaker-v2", force=True)


def current_director(root: Path) -> None:
    """director-v2 registered and promoted: promoting director-v1 over it needs a comparison or --force."""
    from test_adapters_registry import artefact

    from mascot.adapter_registry import Registry
    from mascot.adapters.promotion import promote
    from mascot.train.registration import register

    registry = Registry.open(root / "reg")
    register(registry, artefact(root / "art" / "director_b", role="director", weights=b"e"))
    promote(registry, "director-v2")


ADAPTER_COMMANDS = {
    "list": ({"role": "director"}, {"role": "speaker"}),
    "show": ({"version": "speaker-v2"}, {"version": "speaker-v1"}),
    "promote": ({"version": "director-v1"}, {"version": "speaker-v1"}),
    "rollback": ({"role": "speaker"}, {"role": "director"}),
    "register": ({"folders": [Path("art/speaker_c")]}, {"folders": [Path("art/speaker_a")]}),
}


@pytest.mark.parametrize("word", ADAPTER_COMMANDS)
def test_every_adapters_flag_changes_the_registry_or_what_it_shows(tmp_path, word):
    from mascot.commands import command

    base, values = ADAPTER_COMMANDS[word]
    entry = command("adapters", word)
    walk = Walk(entry.settings_class(), entry.runner(), {"registry": Path("reg"), **base}, values={"registry": Path("elsewhere"), **values},
                prepare=registry_with_versions, setups={"force": current_director})  # fmt: skip
    require_effects(walk, tmp_path)


PASSWORD = "a long enough password"


def sessions_and_an_account(root: Path) -> None:
    """The single-person app's files in `root/chat` (two sessions, one rated) and the account "root"."""
    from test_web_chat import say, start, web_client

    from mascot.commands.web_accounts import CreateUserSettings, run_create

    single = web_client(root)
    first, _ = start(single, situation="before accounts"), start(single)
    say(single, first, "an old message")
    single.post(
        f"/api/sessions/{first}/feedback", json={"turn_idx": 1, "rating": "not_helpful"}, headers={"x-csrf-token": single.cookies["mascot_csrf"]}
    )
    saved = sys.stdin
    sys.stdin = io.StringIO(PASSWORD + "\n")
    try:
        run_create(CreateUserSettings(session_dir=root / "chat", username="root", admin=True))
    finally:
        sys.stdin = saved


ACCOUNT_COMMANDS = {
    ("web", "users", "create"): ({"username": "alice"}, {"username": "bob"}),
    ("web", "users", "list"): ({}, {}),
    ("web", "users", "invite"): ({}, {}),
    ("web", "import"): ({"username": "root", "source": Path("chat")}, {"username": "alice", "source": Path("elsewhere")}),
}


@pytest.mark.parametrize("words", ACCOUNT_COMMANDS, ids=" ".join)
def test_every_accounts_flag_changes_the_database_or_what_it_shows(tmp_path, words):
    from mascot.commands import command

    base, values = ACCOUNT_COMMANDS[words]
    entry = command(*words)
    walk = Walk(entry.settings_class(), entry.runner(), {"session_dir": Path("chat"), **base},
                values={"session_dir": Path("other"), "database_url": "sqlite:///other.db", **values},
                prepare=sessions_and_an_account, stdin=PASSWORD + "\n")  # fmt: skip
    require_effects(walk, tmp_path)


def text_hash(*parts: str) -> int:
    return zlib.crc32("|".join(parts).encode())


class StandInNLI:
    """The NLI model `mascot metrics` loads: what it was loaded with is noted; labels from a hash."""

    labels = {"contradiction": 0, "neutral": 1, "entailment": 2}

    def __init__(self, name: str, batch_size: int = 32, **_: object) -> None:
        RecordingClients.note("nli", name=name, batch_size=batch_size)
        self.batch_size = batch_size

    def predict(self, pairs):
        return [list(self.labels)[text_hash(*pair) % 3] for pair in pairs]


class StandInEmbedder:
    """The redundancy embedder: noted with its settings; a unit vector from each text's hash."""

    def __init__(self, name: str, **settings: object) -> None:
        RecordingClients.note("embedder", name=name, **settings)
        self.precision = settings.get("precision", "fp32")

    def encode(self, texts):
        import numpy as np

        vectors = np.array([np.random.default_rng(text_hash(t)).normal(size=8) for t in texts]).reshape(len(texts), 8)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True) if len(texts) else vectors


def without_metadata(path: Path, *, rounds: bool = True) -> Path:
    """`path`'s episodes as a legacy file writes them: no metadata (nor round ids, with `rounds` False)."""
    legacy = path.with_name(f"legacy_{'' if rounds else 'no_rounds_'}{path.name}")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for row in rows:
        row.pop("metadata")
        for turn in row["turns"] if not rounds else []:
            turn.pop("round_id")
    legacy.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return legacy


def test_every_metrics_flag_changes_the_report(tmp_path, group_episodes, episodes, monkeypatch):
    from mascot.commands.metrics import MetricsCommandSettings, run_metrics

    monkeypatch.setattr("mascot.metrics.nli.NLIScorer.load", StandInNLI)
    monkeypatch.setattr("mascot.llm.embeddings.Embedder", StandInEmbedder)
    monkeypatch.setattr("mascot.metrics.static_embedding.StaticEmbedder", StandInEmbedder)
    walk = Walk(
        MetricsCommandSettings, run_metrics, {"input_file": group_episodes, "output_file": Path("out/metrics.json")},
        values={"pairing_mode": "same-round", "nli_direction": "bidirectional", "embedding": "static", "embedding_precision": "int8",
                "embedding_max_seq_length": 64, "input_file": episodes, "output_file": Path("elsewhere.json"), "dataset": "ED"},
        # the dataset is for files that carry none; round inference for those without round ids
        companions={"dataset": {"input_file": without_metadata(group_episodes)},
                    "allow_round_inference": {"input_file": without_metadata(group_episodes, rounds=False), "pairing_mode": "same-round"}},
    )  # fmt: skip
    require_effects(walk, tmp_path)


def test_every_study_results_flag_changes_the_figures_or_what_is_written(tmp_path, episodes):
    from test_study_library import rate_everything

    from mascot.commands.compare import run_compare_command
    from mascot.commands.judge import JudgeSettings, run_judge
    from mascot.commands.study import run_study_results
    from mascot.judge.compare_settings import CompareSettings
    from mascot.settings import settings_from
    from mascot.study.create import create_study
    from mascot.study.settings import StudyResultsSettings

    a, b = (system_file(tmp_path, name, episodes) for name in ("alpha", "beta"))
    opinions = tmp_path / "inputs" / "opinions"
    with RecordingClients().installed():  # a judge's judgments of both systems' episodes
        for path in (a, b):
            run_judge(settings_from(JudgeSettings, {"input_file": path, "output_dir": opinions / path.stem}, "judgments"))
    with RecordingClients(first_shown_wins).installed():  # and its verdicts head to head
        run_compare_command(settings_from(CompareSettings, {"systems": [str(a), str(b)], "output_dir": str(opinions / "verdicts")}, "verdicts"))

    def rated_study(root: Path) -> None:
        rate_everything(create_study(a, b, root / "study.db", raters=2, seed=3), prefer={0: "a", 1: "b"})

    walk = Walk(
        StudyResultsSettings, run_study_results, {"study": "study.db"},
        values={"study": "missing.db", "csv": "ratings.csv", "json_out": "figures.json",
                "judgments": [str(opinions / "alpha"), str(opinions / "beta")], "verdicts": [str(opinions / "verdicts")]},
        prepare=rated_study,
    )  # fmt: skip
    require_effects(walk, tmp_path / "walk")


MEETING = FIXTURES / "meeting.txt"


def test_every_chat_flag_changes_the_conversation_or_how_it_is_made(tmp_path):
    from mascot.commands.chat import run_chat_command
    from mascot.dialogue.chat_settings import ChatSettings

    walk = Walk(
        ChatSettings, run_chat_command, {"session": Path("talk/session.jsonl")},
        values={"roster": "meetings", "dataset": "QMSum", "situation": "exams next week", "session": Path("elsewhere/session.jsonl"),
                "safety": "on", "safety_locale": "en-GB", "safety_model_scope": "all", "temperature": 0.2, "meeting_file": MEETING},
        companions={"meeting_file": {"roster": "meetings"}},
        stdin="I cannot sleep before my exams\nAnd I keep checking my phone\n",
    )  # fmt: skip
    require_effects(walk, tmp_path)


class StandInServer:
    """The vLLM process `mascot serve` starts: its command line and environment are noted; it
    answers at once and exits after one look at the registry."""

    def __init__(self, plan, log_path: Path) -> None:
        from mascot.adapters.serve import server_env, vllm_command

        RecordingClients.note("vllm", command=vllm_command(plan), env=server_env(plan), log=str(log_path))
        self.polls = 0

    def poll(self):
        self.polls += 1
        return None if self.polls == 1 else 0

    def wait(self) -> int:
        return 0

    @property
    def returncode(self) -> int:
        return 0


def test_every_serve_flag_changes_the_server_it_starts_or_what_it_prints(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from mascot.adapters import serve
    from mascot.adapters.serve_command import ServeSettings, run_serve

    def ready(process, plan, log_path, timeout_s):
        RecordingClients.note("waited", timeout_s=timeout_s)
        return [plan.served_name, *(a.alias for a in plan.adapters)]

    monkeypatch.setattr(serve, "start_server", StandInServer)
    monkeypatch.setattr(serve, "wait_until_ready", ready)
    monkeypatch.setattr(serve, "start_watchdog", lambda process: SimpleNamespace(terminate=lambda: None, wait=lambda: 0))
    monkeypatch.setattr(serve, "stop_server", lambda process: False)
    monkeypatch.setattr("mascot.adapters.serve_command.signal", SimpleNamespace(signal=lambda *a: None, pthread_sigmask=lambda *a: None,
                        SIGTERM=15, SIGINT=2, SIG_IGN=None, SIG_UNBLOCK=1, default_int_handler=None))  # fmt: skip
    monkeypatch.setattr("time.sleep", lambda seconds: RecordingClients.note("slept", seconds=seconds))
    walk = Walk(
        ServeSettings, run_serve, {"artefacts": [Path("art/speaker_a"), Path("art/director_a")], "registry": Path("reg")},
        values={"artefacts": [Path("art/speaker_b")], "model": "some/base", "served_model_name": "base-x", "alias": ["mine"], "host": "0.0.0.0",
                "gpus": "0,1", "gpu_memory_utilization": 0.5, "dtype": "bfloat16", "python": "/usr/bin/python3", "log_file": Path("serve.log"),
                "served_adapters": Path("aliases.json"), "registry": Path("elsewhere")},
        companions={"registry": {"follow_registry": True}, "registry_poll": {"follow_registry": True}, "cpu_kvcache_gb": {"cpu": True}},
        prepare=registry_with_versions,
    )  # fmt: skip
    require_effects(walk, tmp_path)


def test_every_demo_flag_changes_the_demo(tmp_path, monkeypatch):
    from mascot.commands.demo import DemoSettings, demo
    from mascot.llm.providers import RoleEndpoint
    from mascot.settings_groups import ClientLimits

    monkeypatch.setattr("torch.set_num_threads", lambda n: RecordingClients.note("torch threads", n=n))
    # the demo's one in-process model, shared by every role: a recorded role player
    monkeypatch.setattr("mascot.commands.demo.shared_local_client",
                        lambda name: RecordingClients.active.factory(RoleEndpoint("local", name or "embedded"), ClientLimits(), None))  # fmt: skip
    walk = Walk(DemoSettings, demo, {"num_turns": 1}, values={"output_dir": Path("elsewhere"), "vllm_server_url": ["http://127.0.0.1:9/v1"]})
    require_effects(walk, tmp_path)


def rated_sessions(root: Path) -> None:
    """Sessions of the single-person app in `root/chat` whose companions' replies were rated: in each,
    the companion that answered most has one reply rated helpful and the others not helpful."""
    from test_web_chat import say, start, web_client

    from mascot.schema import Episode

    client = web_client(root, rounds_per_message=3, feedback_consent=True)
    for situation in ("exams next week", "a friend moved away"):
        session_id = start(client, situation=situation)
        for message in ("I cannot sleep", "I keep checking my phone", "what should I do"):
            say(client, session_id, message)
        episode = Episode.model_validate_json(client.get(f"/sessions/{session_id}/export.jsonl").content)
        by_agent: dict[str, list[int]] = {}
        for turn in episode.agent_turns:
            by_agent.setdefault(turn.agent_name, []).append(turn.turn_idx)
        turns = max(by_agent.values(), key=len)
        for i, index in enumerate(turns):
            client.post(f"/api/sessions/{session_id}/feedback", json={"turn_idx": index, "rating": "helpful" if i == 0 else "not_helpful"},
                        headers={"x-csrf-token": client.cookies["mascot_csrf"]})  # fmt: skip


def test_every_prefs_feedback_flag_changes_the_pairs(tmp_path, episodes):
    from test_study_library import rate_everything
    from train_helpers import keyword_pairs, write_jsonl

    from mascot.commands.prefs import PrefsFeedbackSettings, run_prefs_feedback
    from mascot.study.create import create_study

    a, b = (system_file(tmp_path, name, episodes) for name in ("alpha", "beta"))
    study = tmp_path / "inputs" / "study.db"
    rate_everything(create_study(a, b, study, raters=2, seed=3), prefer={0: "a", 1: "a"})
    judged = write_jsonl(tmp_path / "inputs" / "judged_pairs.jsonl", keyword_pairs(n_prompts=3))
    walk = Walk(
        PrefsFeedbackSettings, run_prefs_feedback, {"session_dir": Path("chat"), "output_dir": Path("out")},
        values={"session_dir": Path("other"), "output_dir": Path("elsewhere"), "max_pairs_per_reply": 1, "study": study, "with_pairs": [judged],
                "dataset": "EmpatheticDialogues", "database_url": "sqlite:///other.db"},
        companions={"database_url": {"accounts": True}}, prepare=rated_sessions,
    )  # fmt: skip
    require_effects(walk, tmp_path / "walk")


def web_probe(app) -> None:
    """What a person meets in the app, each answer noted: the first page and its cookies' attributes,
    a sign-up, a conversation with a reply and a rating, a message too long, a body too large, a
    second message, the study's rater page."""
    from fastapi.testclient import TestClient

    from mascot.web.security import CSRF_COOKIE

    def note(what: str, response) -> None:
        cookies = [header.split(";", 1)[-1] for header in response.headers.get_list("set-cookie")]  # the attributes, not the random value
        RecordingClients.note(what, status=response.status_code, cookies=cookies, kinds=re.findall(r"^event: (\w+)", response.text, re.M))

    with TestClient(app, base_url="http://127.0.0.1") as client:  # the lifespan opens the models: recorded role players
        note("first page", client.get("/"))
        note("login page", client.get("/login"))
        token = client.cookies.get(CSRF_COOKIE, "")
        note("sign-up", client.post("/signup", data={"username": "walker", "password": PASSWORD, "csrf_token": token}, follow_redirects=False))
        started = client.post("/sessions", data={"roster": "emotional_support", "situation": "exams", "csrf_token": token}, follow_redirects=False)
        note("session", started)
        session = started.headers.get("location", "/none").rsplit("/", 1)[1]
        headers = {"x-csrf-token": token}
        note("message", client.post(f"/api/sessions/{session}/messages", json={"text": "I cannot sleep"}, headers=headers))
        note("rating", client.post(f"/api/sessions/{session}/feedback", json={"turn_idx": 1, "rating": "helpful"}, headers=headers))
        note("long message", client.post(f"/api/sessions/{session}/messages", json={"text": "x" * 4001}, headers=headers))
        big = json.dumps({"text": "y" * 262_200})[: 262_145 - 2] + '"}'
        note("large body", client.post(f"/api/sessions/{session}/messages", content=big, headers={**headers, "content-type": "application/json"}))
        note("second message", client.post(f"/api/sessions/{session}/messages", json={"text": "still awake"}, headers=headers))
        study = getattr(app.state, "study_db", None)
        if study:
            from mascot.study.db import opened, rater_tokens

            with opened(study) as conn:
                note("study page", client.get(f"/study/r/{rater_tokens(conn)[0]}"))


def test_every_web_flag_changes_the_app_or_how_it_is_served(tmp_path, monkeypatch, episodes):
    from test_study_library import rate_everything

    from mascot.commands.web import run_web
    from mascot.study.create import create_study
    from mascot.web.settings import WebSettings

    def serve(self, sockets=None) -> None:  # uvicorn.Server.run: what it would serve with, then the app itself
        config = self.config
        RecordingClients.note("server", host=config.host, port=config.port, proxy_headers=config.proxy_headers,
                              forwarded_allow_ips=config.forwarded_allow_ips)  # fmt: skip
        web_probe(config.app)

    def processes(self) -> None:  # uvicorn's Multiprocess.run (--workers N): what it would start
        config = self.config
        RecordingClients.note("processes", workers=config.workers, host=config.host, port=config.port, app=config.app)

    monkeypatch.setattr("mascot.web.app.listening_socket", lambda host, port: io.BytesIO())
    monkeypatch.setattr("uvicorn.Server.run", serve)
    monkeypatch.setattr("uvicorn.supervisors.Multiprocess.run", processes)
    a, b = (system_file(tmp_path, name, episodes) for name in ("alpha", "beta"))
    study = tmp_path / "inputs" / "study.db"
    rate_everything(create_study(a, b, study, raters=1, seed=3), prefer={0: "a"})
    walk = Walk(
        WebSettings, run_web, {"session_dir": Path("chat")},
        values={"session_dir": Path("other"), "host": "0.0.0.0", "study": study, "database_url": "sqlite:///other.db", "signup": "open",
                "retain_days": 30.0, "message_limit": 1, "trusted_proxies": "10.0.0.1", "safety": "on", "safety_locale": "en-GB",
                "safety_model_scope": "all", "temperature": 0.2, "max_message_chars": 5000, "max_body_bytes": 300_000},
        companions={"database_url": {"accounts": True}, "signup": {"accounts": True}, "retain_days": {"accounts": True},
                    "message_limit": {"accounts": True}},
    )  # fmt: skip
    require_effects(walk, tmp_path / "walk")


def test_every_adapters_compare_flag_changes_the_comparison(tmp_path, persona_pairs_file):
    from mascot.adapters.command import CompareSettings, run_compare

    episodes_config = tmp_path / "inputs" / "episodes.yaml"
    episodes_config.write_text("num_turns: 1\n", encoding="utf-8")
    walk = Walk(
        CompareSettings, run_compare,
        {"registry": Path("reg"), "candidate": "speaker-v1", "reference": "speaker-v2", "data_file": str(ESCONV), "limit": 2, "output_dir": Path("out")},
        values={"registry": Path("elsewhere"), "candidate": "speaker-v3", "reference": "speaker-v1", "dataset": "QMSum", "data_file": str(QMSUM),
                "split": "train", "limit": 1, "judge_model": "python:mascot.judge.rules:persona_rules", "episodes_config": episodes_config,
                "pairs": persona_pairs_file, "output_dir": Path("elsewhere")},
        companions={"dataset": {"data_file": str(QMSUM)}, "data_file": {"dataset": "QMSum"}},
        prepare=registry_with_versions,
    )  # fmt: skip
    require_effects(walk, tmp_path / "walk")


@pytest.fixture
def persona_pairs_file(tmp_path) -> Path:
    from train_helpers import keyword_pairs, write_jsonl

    return write_jsonl(tmp_path / "inputs" / "persona_pairs.jsonl", keyword_pairs(n_prompts=3))


def system_file(tmp_path: Path, system: str, episodes: Path) -> Path:
    """`episodes` as another system's: its label and a word of its own in every reply."""
    from mascot.episodes import load_episode_file

    path = tmp_path / "inputs" / f"{system}.jsonl"
    records = []
    for e in load_episode_file(episodes).episodes:
        e = e.model_copy(deep=True)
        e.metadata.system = system
        e.episode_id = e.episode_id.replace("mascot", system)
        for turn in e.turns:
            turn.response = f"{turn.response} ({system})"
        records.append(e)
    write_episodes(path, records)
    return path


# ---- the walk itself


@dataclass
class Toy:
    used: int = 1
    unused: int = 1
    output_dir: Path = Path("out")


def toy_run(s: Toy) -> None:
    s.output_dir.mkdir()
    (s.output_dir / "made.json").write_text(json.dumps({"used": s.used, "when": time.time()}), encoding="utf-8")


def test_the_walk_names_a_flag_that_changes_nothing_and_not_one_whose_effect_is_volatile(tmp_path, monkeypatch):
    import effect_walk

    monkeypatch.setattr(effect_walk, "cli_fields", lambda cls: dataclasses.fields(cls))
    assert Walk(Toy, toy_run, {}, values={"output_dir": Path("elsewhere")}).ignored(tmp_path) == [
        "unused"
    ]  # "when" differs in every run: left out of the comparison

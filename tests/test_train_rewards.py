"""The reward functions (TRL signature) and the Director's rollout rewards, without a policy model."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from mascot.llm.base import LLMError
from mascot.rosters import load_roster
from mascot.schema import Context, Directive, Turn
from mascot.testing.players import group_client
from mascot.testing.scripted import ScriptedClient
from mascot.train.config import DirectorGRPOSettings
from mascot.train.decision_points import DecisionPoint
from mascot.train.director_rollouts import director_rewards
from mascot.train.rewards import PersonaRewardModel, completion_text, conciseness_reward, diversity_score, format_reward
from mascot.train.trajectory_scores import Rollout, block_speakers


def as_message(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


@pytest.mark.parametrize(
    ("text", "reward"),
    [
        ("<think>They feel alone.</think> That sounds lonely.", 1.0),
        ("<think>\nplan\n</think>\n\nI hear you.", 1.0),
        ("That sounds lonely.", 0.0),  # no reasoning
        ("<think>They feel alone.</think>   ", 0.0),  # no reply
        ("<think></think> I hear you.", 0.0),  # empty reasoning
        ("<think>a</think> b <think>c</think> d", 0.0),  # a second reasoning block in the reply
        ("<think>never closed", 0.0),
    ],
)
def test_format_reward(text, reward):
    assert format_reward([text]) == [reward]
    assert format_reward([as_message(text)]) == [reward]  # conversational completions too


def test_conciseness_reward_penalises_words_beyond_the_budget_only():
    short = "<think>" + "long reasoning " * 100 + "</think> " + "word " * 10
    over = "word " * 15
    way_over = "word " * 100
    assert conciseness_reward([short, over, way_over], budget=10) == [0.0, -0.5, -1.0]


def test_diversity_score():
    assert diversity_score(["The Anchor", "The Beacon"]) == 1.0
    assert diversity_score(["The Anchor", "The Anchor"]) == -1.0
    assert diversity_score([]) == -1.0


def test_completion_text_reads_both_shapes():
    assert completion_text("hi") == "hi"
    assert completion_text([{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]) == "ab"


class RecordingScorer:
    def __init__(self) -> None:
        self.seen = []

    def score(self, conversations):
        self.seen.extend(conversations)
        return [float(len(c[-1]["content"])) for c in conversations]


def test_persona_reward_model_scores_prompt_plus_visible_reply():
    scorer = RecordingScorer()
    reward = PersonaRewardModel(scorer)
    prompt = [{"role": "user", "content": "I failed."}]
    scores = reward(prompts=[prompt], completions=[as_message("<think>be kind</think>I am here.")])
    assert scores == [len("I am here.")]
    assert scorer.seen[0] == prompt + [{"role": "assistant", "content": "I am here."}]


# --------------------------------------------------------------------------- Director rollouts


ROSTER = load_roster("emotional_support")
CONTEXT = Context(context_id="c1", dataset="EmpatheticDialogues", situation="I lost my job", emotion="sad")


def point(prefix_speakers=("The Anchor",)) -> DecisionPoint:
    prefix = [Turn(turn_idx=i, round_id=i, agent_name=name, response="...") for i, name in enumerate(prefix_speakers)]
    return DecisionPoint("c1:e0@r1", "c1:e0", CONTEXT, prefix, ROSTER, "emotional_support", len(prefix))


def test_block_speakers_include_the_speaker_before_the_decision():
    rollout = Rollout(
        point(("The Beacon", "The Anchor")), Directive(agent_name="The Anchor"), [Turn(turn_idx=2, round_id=2, agent_name="The Anchor", response="x")]
    )
    assert block_speakers(rollout) == ["The Anchor", "The Anchor"]
    assert diversity_score(block_speakers(rollout)) == -1.0


class FavourScorer:
    def score(self, rollouts):
        return [2.0 if r.directive.agent_name == "The Catalyst" else 0.0 for r in rollouts]


def run_rewards(rewards, completions, metrics=None, point_id="c1:e0@r1", step=0):
    """Every reward function on one batch as TRL calls them (awaited together on one loop, with
    the same arguments); each function's rewards by its name. `metrics` collects what they log."""
    log_metric = (lambda k, v: metrics.setdefault(k, []).append(v)) if metrics is not None else None
    kwargs = {
        "prompts": [[]] * len(completions),
        "completions": completions,
        "point_id": [point_id] * len(completions),
        "trainer_state": SimpleNamespace(global_step=step),
        "log_metric": log_metric,
    }

    async def together():
        return await asyncio.gather(*(fn(**kwargs) for fn in rewards.funcs))

    return {fn.__name__: values for fn, values in zip(rewards.funcs, asyncio.run(together()))}


def total(rewards, values: dict[str, list[float]]) -> list[float]:
    """The weighted sum TRL logs as `reward` (and sums before normalising with sum_then_normalize)."""
    return [sum(w * values[fn.__name__][i] for fn, w in zip(rewards.funcs, rewards.weights)) for i in range(len(next(iter(values.values()))))]


def test_director_rewards_roll_out_score_and_count_parse_failures():
    settings = DirectorGRPOSettings(
        data_path="x", directive_opening=False, suffix_rounds=2, user_response_probability=0.0, diversity_weight=0.5, parse_failure_reward=-3.0
    )
    clients = {role: group_client() for role in ("director", "speaker", "user")}
    rewards = director_rewards({"c1:e0@r1": point()}, clients, FavourScorer(), settings)
    assert [fn.__name__ for fn in rewards.funcs] == ["group_reward_model", "diversity"] and rewards.weights == [1.0, 0.5]
    completions = [
        as_message("<directive>\nagent: The Catalyst\naction: ask one question\ntone: direct\n</directive>"),
        as_message("agent: the anchor"),
        as_message("I think everyone should speak."),
    ]
    metrics: dict = {}
    values = run_rewards(rewards, completions, metrics)
    # no agent named: the parse-failure reward on each function
    assert values["group_reward_model"][2] == -3.0 and values["diversity"][2] == -3.0
    # Catalyst after the Anchor: the favoured speaker (2) and distinct personas (+1, weighted 0.5)
    assert (values["group_reward_model"][0], values["diversity"][0]) == (2.0, 1.0)
    assert total(rewards, values)[0] == pytest.approx(2.0 + 0.5)
    stats = rewards.rollouts.stats
    assert stats.parse_failures == 1 and stats.completions == 3
    assert metrics["director/parse_failure_rate"] == [pytest.approx(1 / 3)]  # logged once per batch, not per function
    assert metrics["director/group_reward"] == [pytest.approx(1.0)] and len(metrics["director/diversity"]) == 1
    # the rollout really continued the episode: the Speaker answered the given directive first
    speaker_calls = [c for c in clients["speaker"].calls if "ask one question" in c.messages[-1]["content"]]
    assert speaker_calls, "the sampled directive must reach the Speaker"


def test_both_director_rewards_share_one_rollout_per_completion():
    settings = DirectorGRPOSettings(
        data_path="x", directive_opening=False, suffix_rounds=1, user_response_probability=0.0, multi_objective_aggregation="normalize_then_sum"
    )
    clients = {role: group_client(latency_s=0.01) for role in ("director", "speaker", "user")}  # rollouts in flight while both wait
    rewards = director_rewards({"c1:e0@r1": point()}, clients, FavourScorer(), settings)
    assert len(rewards.funcs) == 2
    completions = [as_message("agent: The Catalyst"), as_message("agent: The Beacon"), as_message("no directive"), as_message("agent: The Anchor")]
    run_rewards(rewards, completions)
    assert len(clients["speaker"].calls) == 3  # one rolled-out round per parsed directive, not one per reward function
    # the same completions again (a later call of the same step) are rolled out afresh, once
    run_rewards(rewards, completions)
    assert len(clients["speaker"].calls) == 6 and rewards.rollouts.stats.completions == 8
    # called one after the other instead of together, the second function still reads the first's rollouts
    kwargs = {
        "prompts": [[]],
        "completions": [as_message("agent: The Beacon")],
        "point_id": ["c1:e0@r1"],
        "trainer_state": SimpleNamespace(global_step=1),
    }
    assert [asyncio.run(fn(**kwargs)) for fn in rewards.funcs] == [[0.0], [1.0]]
    assert len(clients["speaker"].calls) == 7


def test_a_zero_weight_drops_its_reward_function_and_two_zeros_are_refused():
    from mascot.train.runtime import TrainingSetupError

    clients = {role: group_client() for role in ("director", "speaker", "user")}
    only_diversity = director_rewards(
        {"c1:e0@r1": point()}, clients, FavourScorer(), DirectorGRPOSettings(data_path="x", directive_opening=False, group_reward_weight=0.0)
    )
    assert [fn.__name__ for fn in only_diversity.funcs] == ["diversity"] and only_diversity.weights == [0.5]
    no_model = director_rewards({"c1:e0@r1": point()}, clients, None, DirectorGRPOSettings(data_path="x", directive_opening=False))
    assert [fn.__name__ for fn in no_model.funcs] == ["diversity"]
    with pytest.raises(TrainingSetupError, match="--group-reward-weight and --diversity-weight are both 0"):
        director_rewards(
            {"c1:e0@r1": point()},
            clients,
            FavourScorer(),
            DirectorGRPOSettings(data_path="x", directive_opening=False, group_reward_weight=0.0, diversity_weight=0.0),
        )


def test_failed_rollout_does_not_move_the_advantage():
    settings = DirectorGRPOSettings(data_path="x", directive_opening=False, suffix_rounds=1, user_response_probability=0.0)

    def speaker(request):
        return LLMError("server down") if request.messages[0]["content"].startswith("You are The Beacon") else "fine"

    clients = {"director": group_client(), "speaker": ScriptedClient(fn=speaker), "user": group_client()}
    rewards = director_rewards({"c1:e0@r1": point()}, clients, FavourScorer(), settings)
    completions = [as_message("agent: The Catalyst"), as_message("agent: The Beacon"), as_message("agent: The Anchor")]
    values = run_rewards(rewards, completions)
    assert rewards.rollouts.stats.rollout_failures == 1
    # the failed Beacon rollout sits at its group's mean, on each function
    assert values["group_reward_model"] == [2.0, 1.0, 0.0] and values["diversity"] == [1.0, 0.0, -1.0]


def test_rollout_backends_come_from_the_registry_spread_over_endpoints_and_keep_the_speaker_apart(monkeypatch, tmp_path):
    from mascot.llm.metered import MeteredClient
    from mascot.train.director_grpo import build_rollout_backends, close_backends

    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-from-dotenv\n")  # rollouts read keys like every run
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    settings = DirectorGRPOSettings(
        data_path="x",
        rollout_server_url="http://a:1/v1?key=secret",
        rollout_endpoints="http://b:2/v1, http://c:3/v1",
        rollout_model="Qwen/Qwen3-8B",
        speaker_adapter="mascot-speaker",
        rollout_concurrency=5,
    )
    backends = build_rollout_backends(settings)
    clients = backends.clients
    assert all(isinstance(c, MeteredClient) for c in clients.values())  # usage counted per role
    assert clients["user"].inner is clients["director"].inner and clients["director"].model == "Qwen/Qwen3-8B"
    speaker = clients["speaker"].inner
    assert speaker.model == "mascot-speaker"  # the served LoRA alias of the trained Speaker
    assert [e.label for e in speaker.endpoints] == ["http://a:1/v1", "http://b:2/v1", "http://c:3/v1"]  # redacted
    # one load figure per server, shared by the Speaker's and the base model's clients
    assert [id(e) for e in speaker.endpoints] == [id(e) for e in clients["director"].inner.endpoints]
    assert speaker.max_in_flight == 5 and speaker._headers["Authorization"] == "Bearer sk-from-dotenv"
    close_backends(None, backends)


def test_rollouts_over_http_are_metered_traced_and_closed_on_the_trainers_loop(stub, tmp_path):
    import threading
    import types

    from mascot.testing.players import stub_responder
    from mascot.train.director_grpo import build_rollout_backends, close_backends

    server = stub(responder=stub_responder)
    settings = DirectorGRPOSettings(
        data_path="x",
        directive_opening=False,
        rollout_server_url=server.url,
        rollout_model="stub-model",
        suffix_rounds=1,
        user_response_probability=0.0,
        diversity_weight=1.0,
    )
    backends = build_rollout_backends(settings, tmp_path / "out" / "rollout_call_trace.jsonl")
    rewards = director_rewards({"c1:e0@r1": point()}, backends.clients, None, settings)
    assert [fn.__name__ for fn in rewards.funcs] == ["diversity"]  # no group reward model
    loop = asyncio.new_event_loop()  # like TRL, the reward function runs on a loop in its own thread
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        call = rewards.funcs[0](prompts=[[]], completions=[as_message("agent: The Catalyst")], point_id=["c1:e0@r1"])
        assert asyncio.run_coroutine_threadsafe(call, loop).result(60) == [1.0]
        close_backends(types.SimpleNamespace(async_loop=loop), backends)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
    assert server.stats.roles == ["speaker"] and backends.meter.by_role["speaker"].requests == 1
    trace = (tmp_path / "out" / "rollout_call_trace.jsonl").read_text().splitlines()
    assert len(trace) == 1 and '"role": "speaker"' in trace[0]
    assert backends.clients["speaker"].inner._session is None  # closed on the loop it was opened on


def test_every_rollout_failing_stops_training_with_a_clear_error():
    from mascot.train.director_rollouts import RolloutFailure

    settings = DirectorGRPOSettings(data_path="x", directive_opening=False, suffix_rounds=1, user_response_probability=0.0)
    down = ScriptedClient(fn=lambda request: LLMError("connection refused"))
    rewards = director_rewards({"c1:e0@r1": point()}, {"director": down, "speaker": down, "user": down}, FavourScorer(), settings)
    assert len(rewards.funcs) == 2
    with pytest.raises(RolloutFailure, match="every rollout of step 0 failed \\(2 of 2"):
        run_rewards(rewards, [as_message("agent: The Catalyst"), as_message("agent: The Beacon")], {})
    assert rewards.rollouts.stats.rollout_failures == 2  # counted once, whatever the number of functions


def test_rollout_model_defaults_to_the_policy_and_reward_models_to_their_trainer_layout(tmp_path, monkeypatch):
    from mascot.train import artefact
    from mascot.train.director_grpo import build_rollout_backends, resolve_group_reward_model_path
    from mascot.train.runtime import TrainingSetupError

    settings = DirectorGRPOSettings(data_path="x", directive_opening=False, model_name="Qwen/Qwen3-8B", rollout_server_url="http://a:1/v1")
    assert build_rollout_backends(settings)["speaker"].model == "Qwen/Qwen3-8B"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TrainingSetupError, match="group_reward_ESConv_Qwen3-0.6B.*mascot train group-reward-model"):
        resolve_group_reward_model_path(settings, "ESConv")
    folder = tmp_path / "outputs" / "reward_model" / "group_reward_ESConv_Qwen3-0.6B"
    folder.mkdir(parents=True)
    (folder / artefact.METADATA_FILE).write_text("{}")
    resolve_group_reward_model_path(settings, "ESConv")
    assert settings.group_reward_model_path == str(folder.relative_to(tmp_path))
    untouched = DirectorGRPOSettings(data_path="x", directive_opening=False, group_reward_weight=0.0)
    resolve_group_reward_model_path(untouched, "ESConv")
    assert untouched.group_reward_model_path is None


def test_format_reward_follows_the_thinking_setting():
    from mascot.dialogue.prompts import THINK_INSTRUCTION, with_think_instruction
    from mascot.train.config import SpeakerGRPOSettings
    from mascot.train.rewards import plain_format_reward
    from mascot.train.speaker_grpo import build_rewards

    assert plain_format_reward(["A plain reply.", "<think>x</think>reply", "  "]) == [1.0, 0.0, 0.0]
    on, _ = build_rewards(SpeakerGRPOSettings(data_path="x", reward_model_weight=0.0), None)
    off, _ = build_rewards(SpeakerGRPOSettings(data_path="x", reward_model_weight=0.0, thinking=False), None)
    assert format_reward in on and plain_format_reward in off and format_reward not in off
    prompt = [{"role": "system", "content": "You are The Anchor."}, {"role": "user", "content": "hi"}]
    thinking = with_think_instruction(prompt, True)
    assert thinking[0]["content"].endswith(THINK_INSTRUCTION) and with_think_instruction(thinking, True) == thinking
    assert with_think_instruction(thinking, False) == prompt

"""Stage 2 Director trainers: DPO over directive pairs, GRPO over prefix-suffix rollouts."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from train_helpers import (  # noqa: F401 - fixtures
    SamplingWatch,
    TrainerBuilt,
    capture_grpo_trainer,
    one_thread_per_module,
    sft_warm_start,
    single_thread,
    tiny_model,
    write_jsonl,
    write_run_config,
)

from mascot.dialogue.director import parse_directive
from mascot.dialogue.prompts import director_messages
from mascot.llm.base import ChatRequest
from mascot.rosters import load_roster
from mascot.schema import Context, Directive, Episode, EpisodeMetadata, PreferencePair, Turn
from mascot.testing.players import group_client
from mascot.train.artefact import read_metadata
from mascot.train.config import DirectorDPOSettings, DirectorGRPOSettings
from mascot.train.decision_points import sample_decision_points
from mascot.train.director_dpo import train_director_dpo
from mascot.train.director_grpo import NoDirectiveParsed, train_director_grpo

ROSTER = load_roster("emotional_support")
SITUATIONS = ["I lost my job", "my exam went badly", "I moved to a new city", "my friend ignores me", "I cannot sleep", "my team blames me"]


def context(i: int) -> Context:
    return Context(context_id=f"c{i}", dataset="EmpatheticDialogues", situation=f"{SITUATIONS[i % len(SITUATIONS)]} ({i})", emotion="sad")


def episode(i: int, speakers=("The Anchor", "The Beacon"), with_user: bool = True) -> Episode:
    turns, idx = [], 0
    for round_id, name in enumerate(speakers):
        turns.append(Turn(turn_idx=idx, round_id=round_id, agent_name=name, response=f"{name} says something.", directive=Directive(agent_name=name)))
        idx += 1
        if with_user:
            turns.append(Turn(turn_idx=idx, round_id=round_id, agent_name="user", response="Thanks.", turn_type="user"))
            idx += 1
    metadata = EpisodeMetadata(dataset="EmpatheticDialogues", roster="emotional_support")
    return Episode(episode_id=f"c{i}:e0", context_id=f"c{i}", context=context(i), turns=turns, metadata=metadata)


def directive(name: str) -> str:
    return f"agent: {name}"


def rate(texts: list[str], name: str) -> float:
    names = [parse_directive(t, ROSTER).directive for t in texts]
    return sum(1 for d in names if d and d.agent_name == name) / len(texts)


def sample(model: str, prompts, n: int) -> list[str]:
    from mascot.llm.local import LocalClient

    async def go():
        client = LocalClient(model, max_batch_size=n)  # a batch is one request's rows, whatever the machine's load: the same numbers every run
        try:
            requests = [ChatRequest(messages=p, temperature=1.0, max_tokens=12, n=n, seed=i) for i, p in enumerate(prompts)]
            return [t for r in await asyncio.gather(*(client.chat(q) for q in requests)) for t in r.texts]
        finally:
            await client.aclose()

    return asyncio.run(go())


# --------------------------------------------------------------------------- decision points


def test_decision_points_rebuild_prefixes_from_recorded_turns():
    episodes = [episode(i, speakers=("The Anchor", "The Beacon", "The Catalyst")) for i in range(3)]
    points, bare = sample_decision_points(episodes, per_episode=2, seed=7)
    assert bare == 0 and len(points) == 6
    for p in points:
        source = next(e for e in episodes if e.episode_id == p.episode_id)
        assert p.prefix == [t for t in source.turns if t.round_id < p.decision_round]
        assert p.context == source.context
        assert p.prompt() == director_messages(ROSTER, p.context, p.prefix)
    again, _ = sample_decision_points(episodes, per_episode=2, seed=7)
    assert [p.point_id for p in again] == [p.point_id for p in points]


def test_decision_points_rebuild_the_prompts_of_the_version_their_episode_was_made_with():
    made_with_v1 = episode(0)
    made_with_v1.metadata = made_with_v1.metadata.model_copy(update={"prompt_version": "v1"})
    unversioned = episode(1)
    points, _ = sample_decision_points([made_with_v1, unversioned], per_episode=1, seed=7)
    by_episode = {p.episode_id: p for p in points}
    first, second = by_episode[made_with_v1.episode_id], by_episode[unversioned.episode_id]
    assert first.prompt() == director_messages(ROSTER, first.context, first.prefix, "v1")
    assert first.prompt() != director_messages(ROSTER, first.context, first.prefix, "v2")
    assert second.prompt() == director_messages(ROSTER, second.context, second.prefix)  # no version recorded: the default


def test_branch_records_are_not_sampled_twice_and_bare_contexts_are_counted():
    spine = episode(0)
    spine.context = None
    branch = episode(0).model_copy(update={"episode_id": "c0:d1:k0"})
    branch.metadata = branch.metadata.model_copy(
        update={"branch": {"group_id": "c0:d1", "decision_round": 1, "candidate_idx": 0, "num_candidates": 2, "prefix_turns": 2}}
    )
    points, bare = sample_decision_points([spine, branch], per_episode=5, seed=0)
    assert {p.episode_id for p in points} == {"c0:e0"} and bare == 1
    assert points[0].context.context_id == "c0"


def test_balanced_decision_points_follow_each_last_speaker_equally_often_however_skewed_the_episodes():
    # Seven of eight episodes end their first round with The Beacon: unbalanced, the diversity term
    # would teach a Director only to avoid The Beacon.
    episodes = [episode(i, speakers=("The Beacon", "The Anchor")) for i in range(7)] + [episode(7, speakers=("The Catalyst", "The Anchor"))]
    plain, _ = sample_decision_points(episodes, per_episode=1, seed=3)
    points, _ = sample_decision_points(episodes, per_episode=1, seed=3, balance_last_speaker=True)
    assert len(points) == len(plain) == 8  # as many points as without balancing

    def last(p):
        return next((t.agent_name for t in reversed(p.prefix) if not t.is_user), None)

    assert [last(p) for p in points] == [None, "The Beacon", "The Catalyst", None, "The Beacon", "The Catalyst", None, "The Beacon"]  # in turn
    assert len({p.point_id for p in points}) == len(points)  # the one Catalyst prefix, reused, keeps distinct ids
    catalyst = [p for p in points if last(p) == "The Catalyst"]
    assert catalyst[0].prefix == catalyst[1].prefix and catalyst[1].point_id == catalyst[0].point_id + "#1"
    again, _ = sample_decision_points(episodes, per_episode=1, seed=3, balance_last_speaker=True)
    assert [p.point_id for p in again] == [p.point_id for p in points]
    assert sample_decision_points(episodes, per_episode=1, seed=3)[0] == plain  # off: the sampling of before


# --------------------------------------------------------------------------- DPO


def directive_pairs(n: int) -> list[PreferencePair]:
    return [
        PreferencePair(
            prompt=director_messages(ROSTER, context(i), []),
            chosen=[{"role": "assistant", "content": directive("The Catalyst")}],
            rejected=[{"role": "assistant", "content": directive("The Anchor")}],
            margin=1.0,
            kind="directive",
        )
        for i in range(n)
    ]


def test_director_dpo_widens_the_chosen_over_rejected_margin(tmp_path):
    run = tmp_path / "branching_ED_tiny"
    write_jsonl(run / "directive_pairs.jsonl", directive_pairs(30))
    write_run_config(run, dataset="EmpatheticDialogues")
    base = tiny_model(tmp_path / "base")
    settings = DirectorDPOSettings(
        data_path=str(run),
        model_name=str(base),
        output_dir=str(tmp_path / "dpo"),
        batch_size=8,
        learning_rate=5e-3,
        logging_steps=1,
        eval_fraction=0.2,
        eval_steps=1,
    )
    outcome = train_director_dpo(settings)
    ev = outcome.metadata.evaluation
    selection = outcome.metadata.train_metrics["selection"]  # every step measured on the held-out pairs, the best kept
    assert [s for s, _ in selection["measurements"]] == [1, 2, 3] and selection["figure"] == "held-out preference accuracy"
    assert selection["best_value"] == max(v for _, v in selection["measurements"]) == pytest.approx(ev["heldout_reward_accuracy"], abs=1e-4)
    assert ev["train_reward_margin"]["last"] > ev["train_reward_margin"]["first"]
    assert ev["heldout_reward_margin"] > 0.1 and ev["heldout_reward_accuracy"] >= 0.9
    meta = read_metadata(outcome.output_dir)
    assert (meta.role, meta.trainer, meta.num_eval_records) == ("director", "dpo", 6)
    assert len(sample(str(outcome.output_dir), [director_messages(ROSTER, context(0), [])], 2)) == 2  # serves locally
    # a pairs file is accepted directly as well
    direct = DirectorDPOSettings(
        data_path=str(run / "directive_pairs.jsonl"), model_name=str(base), output_dir=str(tmp_path / "dpo2"), batch_size=8, max_steps=1
    )
    assert train_director_dpo(direct).metadata.num_train_records == 27  # the default 10% of 30 held out


# --------------------------------------------------------------------------- GRPO


class Favour:
    """A synthetic group reward: 1 when the directive names the favoured persona."""

    def __init__(self, name: str) -> None:
        self.name = name

    def score(self, rollouts):
        return [1.0 if r.directive.agent_name == self.name else 0.0 for r in rollouts]


def scripted_clients():
    return {role: group_client() for role in ("director", "speaker", "user")}


def write_episode_run(folder, episodes):
    write_jsonl(folder / "episodes.jsonl", episodes)
    write_run_config(folder, dataset="EmpatheticDialogues")
    return folder


@pytest.fixture(scope="module")
def warm_director(tmp_path_factory) -> Path:
    """A tiny Director warmed up on the decision points of four recorded episodes (once per module:
    the warm-up is most of these tests' time). Trainers read it and write their LoRA elsewhere."""
    episodes = [episode(i) for i in range(4)]
    base = tiny_model(tmp_path_factory.mktemp("warm_director") / "base")
    points, _ = sample_decision_points(episodes, per_episode=2, seed=42)
    return sft_warm_start(base, [p.prompt() for p in points], [directive(ROSTER.names[i % 3]) for i in range(len(points))], steps=150)


def warmed_director(tmp_path, warm_director: Path, **extra) -> DirectorGRPOSettings:
    """Two-step GRPO settings over four recorded episodes, from the warmed-up tiny Director: most
    of its directives parse, some may not, and both are counted."""
    run = write_episode_run(tmp_path / "directed_ED_tiny", [episode(i) for i in range(4)])
    return DirectorGRPOSettings(
        data_path=str(run),
        model_name=str(warm_director),
        output_dir=str(tmp_path / "director"),
        batch_size=4,
        num_generations=2,
        max_steps=2,
        max_completion_length=8,
        logging_steps=1,
        directive_opening=False,
        **extra,
    )


def test_director_grpo_runs_rollouts_counts_failures_and_serves(tmp_path, warm_director):
    settings = warmed_director(tmp_path, warm_director, multi_objective_aggregation="normalize_then_sum")
    clients = scripted_clients()
    outcome = train_director_grpo(settings, rollout_clients=clients, trajectory_scorer=Favour("The Anchor"))
    ev = outcome.metadata.evaluation
    stats = outcome.extra["rollout_stats"]
    assert ev["num_completions"] == 8 == stats.completions
    assert ev["num_directive_parse_failures"] == stats.parse_failures < stats.completions
    speaker_calls = len(clients["speaker"].calls)
    # each parsed directive's rollout runs its --suffix-rounds once, though two reward functions (TRL awaits them together) score it
    assert speaker_calls == (stats.completions - stats.parse_failures) * settings.suffix_rounds
    assert set(ev["rewards"]) == {"group_reward_model", "diversity"}  # each function's own trend
    meta = read_metadata(outcome.output_dir)
    assert (meta.role, meta.trainer, meta.num_train_records) == ("director", "grpo", 8)  # 4 episodes x 2 decision points
    assert meta.hyperparameters["multi_objective_aggregation"] == "normalize_then_sum" and meta.train_metrics["train_loss"] is not None
    assert len(sample(str(outcome.output_dir), [director_messages(ROSTER, context(0), [])], 1)) == 1


def test_director_grpo_whose_directives_never_parse_fails_and_writes_no_artefact(tmp_path):
    run = write_episode_run(tmp_path / "directed_ED_tiny", [episode(i) for i in range(4)])
    base = tiny_model(tmp_path / "base")  # untrained and given two tokens: nothing it writes names a persona
    settings = DirectorGRPOSettings(
        data_path=str(run),
        model_name=str(base),
        output_dir=str(tmp_path / "director"),
        batch_size=4,
        num_generations=2,
        max_steps=4,
        max_completion_length=2,
        directive_opening=False,
    )
    clients = scripted_clients()
    with pytest.raises(NoDirectiveParsed, match="none of the 16 directives the Director wrote parsed.*the first was: "):
        train_director_grpo(settings, rollout_clients=clients, trajectory_scorer=Favour("The Anchor"))
    assert not clients["speaker"].calls  # nothing was rolled out
    assert not (tmp_path / "director" / "mascot_metadata.json").exists()
    assert not (tmp_path / "director" / "adapter_config.json").exists()


def test_director_grpo_raises_the_rate_of_the_favoured_persona(tmp_path):
    episodes = [episode(i, with_user=False) for i in range(12)]
    run = write_episode_run(tmp_path / "directed_ED_tiny", episodes)
    base = tiny_model(tmp_path / "base")
    points, _ = sample_decision_points(episodes, per_episode=2, seed=42)
    prompts = [p.prompt() for p in points]
    # a Director that answers in the directive format, naming each persona about equally often
    replies = [directive(ROSTER.names[(i + shift) % 3]) for shift in range(3) for i in range(len(prompts))]
    sft_warm_start(base, prompts * 3, replies, steps=150)
    before = rate(sample(str(base), prompts[:8], 8), "The Anchor")
    settings = DirectorGRPOSettings(
        data_path=str(run),
        model_name=str(base),
        output_dir=str(tmp_path / "director"),
        batch_size=16,
        num_generations=8,
        max_steps=30,
        learning_rate=5e-3,
        max_completion_length=12,
        beta=0.0,
        suffix_rounds=1,
        diversity_weight=0.0,
        logging_steps=5,
        gradient_checkpointing=False,  # a tiny model needs no memory saving; recomputing costs time
        # a 2-layer model averages attention over a long prompt: LoRA on the MLPs too lets it move
        lora_target_modules="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
        directive_opening=False,  # warmed up, sampled and measured on whole answers
    )
    outcome = train_director_grpo(settings, rollout_clients=scripted_clients(), trajectory_scorer=Favour("The Anchor"))
    after = rate(sample(str(outcome.output_dir), prompts[:8], 8), "The Anchor")
    assert after >= before + 0.15, (before, after)
    trend = outcome.metadata.evaluation["group_reward"]
    assert trend["last"] > trend["first"]


@pytest.mark.parametrize(
    ("aggregation", "weights", "names"),
    [
        ("normalize_then_sum", {}, ["group_reward_model", "diversity"]),
        ("sum_then_normalize", {"diversity_weight": 0.0}, ["group_reward_model"]),  # a weight of 0 drops its function
        ("sum_then_normalize", {"scale_rewards": "batch"}, ["group_reward_model", "diversity"]),
    ],
)
def test_the_aggregation_and_the_reward_weights_reach_grpo_config(monkeypatch, tmp_path, aggregation, weights, names):
    run = write_episode_run(tmp_path / "directed_ED_tiny", [episode(i) for i in range(2)])
    seen = capture_grpo_trainer(monkeypatch, "mascot.train.director_grpo")
    settings = DirectorGRPOSettings(
        data_path=str(run),
        model_name="tiny",
        output_dir=str(tmp_path / "director"),
        batch_size=4,
        num_generations=2,
        group_reward_weight=2.0,
        multi_objective_aggregation=aggregation,
        **weights,
    )
    with pytest.raises(TrainerBuilt):
        train_director_grpo(settings, rollout_clients=scripted_clients(), trajectory_scorer=Favour("The Anchor"))
    assert seen["args"].multi_objective_aggregation == aggregation
    assert seen["args"].scale_rewards == weights.get("scale_rewards", "group")
    assert [fn.__name__ for fn in seen["reward_funcs"]] == names
    assert seen["args"].reward_weights == [2.0, 0.5][: len(names)]


def test_the_directive_opening_is_written_into_the_prompt_and_read_back_with_the_answer(tmp_path):
    from train_helpers import tokenizer_dir
    from transformers import AutoTokenizer
    from trl.data_utils import is_conversational

    from mascot.dialogue.director import DIRECTIVE_OPENING
    from mascot.train.director_grpo import directive_prompt

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir()))
    episodes = [episode(i) for i in range(2)]
    points, _ = sample_decision_points(episodes, per_episode=1, seed=1)
    opened = directive_prompt(points[0], DirectorGRPOSettings(data_path="x", model_name="m"), tokenizer)
    # text, so that TRL tokenizes it as it is: the answer continues the opening inside the assistant
    # turn, as in episodes (a conversation would get a closed opening and a new assistant turn)
    assert not is_conversational({"prompt": opened})
    assert opened == tokenizer.apply_chat_template(points[0].prompt(), tokenize=False, add_generation_prompt=True) + DIRECTIVE_OPENING
    ids = tokenizer(text=opened)["input_ids"]  # what GRPOTrainer does with a text prompt
    assert tokenizer.decode(ids).endswith("<|im_start|>assistant\n" + DIRECTIVE_OPENING)
    unopened = DirectorGRPOSettings(data_path="x", model_name="m", directive_opening=False)
    assert directive_prompt(points[0], unopened, tokenizer) == points[0].prompt()
    from mascot.train.director_rollouts import directive_answer

    assert directive_answer(" The Beacon", True) == DIRECTIVE_OPENING + " The Beacon"
    assert directive_answer("<directive>\nagent: The Beacon", True) == "<directive>\nagent: The Beacon"  # wrote the block itself
    assert directive_answer(" The Beacon", False) == " The Beacon"
    # the completion continues the opening: parsed together, " The Beacon" names a roster member
    assert (
        parse_directive(DIRECTIVE_OPENING + " The Beacon\naction: ask how the week went\ntone: warm\n</directive>", ROSTER).directive.agent_name
        == "The Beacon"
    )


def test_rollouts_reply_as_long_and_as_sampled_as_the_settings_say():
    from mascot.train.director_rollouts import DirectorRollouts

    points, _ = sample_decision_points([episode(i, with_user=False) for i in range(2)], per_episode=1, seed=42)
    settings = DirectorGRPOSettings(
        data_path="unused",
        model_name="tiny",
        suffix_rounds=1,
        user_response_probability=1.0,
        directive_opening=False,
        rollout_max_tokens=24,
        rollout_user_max_tokens=12,
        rollout_temperature=0.3,
    )
    clients = scripted_clients()
    rollouts = DirectorRollouts({p.point_id: p for p in points}, clients, settings, consumers=1)
    batch = asyncio.run(rollouts.batch([[{"role": "assistant", "content": directive("The Anchor")}]], [points[0].point_id]))
    assert len(batch.rollouts) == 1 and not batch.failed
    # the rolled-out replies are as long and as sampled as the settings say, not the generation defaults
    asked = {(c.role, c.max_tokens, c.temperature) for role in ("speaker", "user") for c in clients[role].calls}
    assert asked == {("speaker", 24, 0.3), ("user", 12, 0.3)}


def test_rollouts_take_the_repetition_penalty_their_episodes_were_generated_with(tmp_path, monkeypatch):
    """What the trainer hands TRL, rolled out on scripted clients: the Speakers' requests carry the
    penalty recorded in the episodes' run_config.json, or --rollout-repetition-penalty when given."""
    run = tmp_path / "directed_ED_tiny"
    write_jsonl(run / "episodes.jsonl", [episode(i, with_user=False) for i in range(4)])
    write_run_config(run, dataset="EmpatheticDialogues", engine={"repetition_penalty": 1.2})

    def speaker_penalties(output: str, **flags) -> set[float]:
        seen = capture_grpo_trainer(monkeypatch, "mascot.train.director_grpo")
        settings = DirectorGRPOSettings(
            data_path=str(run),
            model_name="tiny",
            output_dir=str(tmp_path / output),
            batch_size=4,
            num_generations=2,
            suffix_rounds=1,
            user_response_probability=0.0,
            directive_opening=False,
            **flags,
        )
        clients = scripted_clients()
        with pytest.raises(TrainerBuilt):
            train_director_grpo(settings, rollout_clients=clients, trajectory_scorer=Favour("The Anchor"))
        rollouts = seen["reward_funcs"][0].rollouts
        point_id = next(iter(rollouts.points))
        asyncio.run(rollouts.batch([[{"role": "assistant", "content": directive("The Anchor")}]], [point_id]))
        return {c.repetition_penalty for c in clients["speaker"].calls}

    assert speaker_penalties("recorded") == {1.2}
    assert speaker_penalties("flag", rollout_repetition_penalty=1.05) == {1.05}


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ({"rollout_max_tokens": 0}, "--rollout-max-tokens must be at least 1"),
        ({"rollout_user_max_tokens": 0}, "--rollout-user-max-tokens must be at least 1"),
        ({"rollout_temperature": -0.5}, "--rollout-temperature must not be negative"),
        ({"rollout_repetition_penalty": 3.0}, "--rollout-repetition-penalty must be above 0 and at most 2"),
    ],
)
def test_rollout_settings_that_would_roll_out_nothing_are_one_line(tmp_path, flags, says):
    from mascot.errors import MascotError

    run = write_episode_run(tmp_path / "directed_ED_tiny", [episode(i) for i in range(4)])
    settings = DirectorGRPOSettings(
        data_path=str(run), model_name="tiny", output_dir=str(tmp_path / "director"), batch_size=4, num_generations=2, **flags
    )
    with pytest.raises(MascotError, match=says):
        train_director_grpo(settings, rollout_clients=scripted_clients(), trajectory_scorer=Favour("The Anchor"))
    assert not (tmp_path / "director").exists()


def test_rollouts_continue_each_episode_with_the_prompts_it_was_recorded_with():
    from mascot.dialogue.prompts import speaker_messages
    from mascot.train.director_rollouts import DirectorRollouts

    made_with_v1 = episode(0, with_user=False)
    made_with_v1.metadata = made_with_v1.metadata.model_copy(update={"prompt_version": "v1"})
    points, _ = sample_decision_points([made_with_v1, episode(1, with_user=False)], per_episode=1, seed=42)
    settings = DirectorGRPOSettings(data_path="unused", model_name="tiny", suffix_rounds=1, user_response_probability=0.0, directive_opening=False)
    anchor = ROSTER.persona("The Anchor")
    for point, version in zip(sorted(points, key=lambda p: p.episode_id), ("v1", "v2"), strict=True):
        clients = scripted_clients()
        rollouts = DirectorRollouts({point.point_id: point}, clients, settings, consumers=1)
        batch = asyncio.run(rollouts.batch([[{"role": "assistant", "content": directive("The Anchor")}]], [point.point_id]))
        assert len(batch.rollouts) == 1
        system = clients["speaker"].calls[0].messages[0]["content"]
        assert system == speaker_messages(anchor, ROSTER, point.context, point.prefix, version=version)[0]["content"]
        other = "v2" if version == "v1" else "v1"
        assert system != speaker_messages(anchor, ROSTER, point.context, point.prefix, version=other)[0]["content"]


def test_suffix_rounds_zero_rolls_each_decision_out_to_the_end_of_its_episode():
    from mascot.train.director_rollouts import DirectorRollouts

    three_rounds = [episode(i, speakers=("The Anchor", "The Beacon", "The Catalyst"), with_user=False) for i in range(2)]
    points, _ = sample_decision_points(three_rounds, per_episode=3, seed=1)
    settings = DirectorGRPOSettings(data_path="unused", model_name="tiny", suffix_rounds=0, user_response_probability=0.0, directive_opening=False)
    for point in points:
        clients = scripted_clients()
        batch = asyncio.run(
            DirectorRollouts({point.point_id: point}, clients, settings, consumers=1).batch(
                [[{"role": "assistant", "content": directive("The Anchor")}]], [point.point_id]
            )
        )
        (rollout,) = batch.rollouts[0]
        suffix = rollout.suffix
        assert [t.round_id for t in suffix] == list(range(point.decision_round, 3))  # a whole conversation, as the episodes were
        assert suffix[0].agent_name == "The Anchor"


def test_the_director_trainer_logs_each_companions_share_and_the_choice_entropy(tmp_path):
    from mascot.train.director_grpo import choices_moved
    from mascot.train.director_rollouts import choice_entropy, choice_shares

    assert choice_shares(["The Anchor", "The Anchor", "The Beacon", "The Anchor"], ROSTER.names) == {
        "The Anchor": 0.75,
        "The Catalyst": 0.0,
        "The Beacon": 0.25,
    }
    assert choice_entropy({"a": 1.0, "b": 0.0}) == 0.0 and abs(choice_entropy(dict.fromkeys("abc", 1 / 3)) - 1.585) < 1e-3
    moved = {"choice_shares": {"The Anchor": {"first": 0.3, "last": 0.9}, "The Beacon": {"first": 0.5, "last": 0.1}},
             "choice_entropy": {"first": 1.5, "last": 0.47}}  # fmt: skip
    assert choices_moved(moved) == "; The Anchor 30% -> 90% of the sampled directives, choice entropy 1.50 -> 0.47 bits"


def judge_file(tmp_path, favoured: str = "The Anchor"):
    """A plug-in judge whose collective score is 5 when the favoured companion speaks last, else 1."""
    path = tmp_path / "favour_judge.py"
    path.write_text(
        "calls = []\n\n"
        "def score(item):\n"
        "    calls.append(item.item_id)\n"
        "    companions = [s for s, _ in item.turns if s in {p.name for p in item.roster}]\n"
        f"    value = 5 if companions and companions[-1] == {favoured!r} else 1\n"
        "    return {key: value for key in item.keys}\n"
    )
    return f"python:{path}:score"


def test_the_director_can_be_rewarded_by_the_judge_itself_without_a_group_reward_model(tmp_path, warm_director):
    settings = warmed_director(tmp_path, warm_director, diversity_weight=0.0, suffix_rounds=1, reward_judge=judge_file(tmp_path))
    outcome = train_director_grpo(settings, rollout_clients=scripted_clients())
    ev = outcome.metadata.evaluation
    assert set(ev["rewards"]) == {"judge"} and ev["num_reward_judge_failures"] == 0
    assert (
        outcome.metadata.source_artefacts["reward_judge"] == settings.reward_judge and "group_reward_model" not in outcome.metadata.source_artefacts
    )
    assert set(ev["choice_shares"]) <= set(ROSTER.names) and "choice_entropy" in ev
    last = sum(trend["last"] for trend in ev["choice_shares"].values())
    assert abs(last - 1.0) < 1e-6  # the shares of one logged step add up


def test_a_rollout_the_judge_could_not_score_gets_its_groups_mean():
    from mascot.train.director_rollouts import RolloutBatch

    batch = RolloutBatch(point_id=["p", "p", "p", "q"], rollouts={0: None, 1: None, 2: None, 3: None}, failed=set())  # type: ignore[dict-item]
    assert batch.rewards({0: 4.0, 1: None, 2: 2.0, 3: 5.0}, parse_failure_reward=-1.0) == [4.0, 3.0, 2.0, 5.0]


def test_a_trees_records_give_each_shared_decision_point_once():
    """Nine conversations of a two-round tree share one opening and three first turns: four decision
    points, each once, however many records repeat it."""
    from mascot.dialogue.batch import run_all
    from mascot.dialogue.engine import EpisodeEngine
    from mascot.dialogue.settings import EngineSettings

    client = group_client()
    engine = EpisodeEngine(ROSTER, {"director": client, "speaker": client, "user": client}, EngineSettings(generation_mode="tree", num_turns=2))
    records = []
    asyncio.run(run_all(engine, [context(0)], write=records.append, skip=lambda key: False))
    points, _ = sample_decision_points(records, per_episode=2, seed=3)
    keys = [(p.decision_round, tuple(t.response for t in p.prefix)) for p in points]
    assert len(records) == 9 and len(keys) == len(set(keys)) == 4
    assert sorted(p.decision_round for p in points) == [0, 1, 1, 1]


def test_with_the_policy_as_rollout_director_the_later_rounds_are_the_trained_directors(tmp_path):
    """--rollout-director policy: after the sampled directive, each later round's directive comes
    from the Director being trained (in process, eval mode), never from the rollout backend's."""
    episodes = [episode(i, speakers=("The Anchor", "The Beacon", "The Catalyst"), with_user=False) for i in range(4)]
    run = write_episode_run(tmp_path / "directed_ED_tiny", episodes)
    base = tiny_model(tmp_path / "base")
    settings = DirectorGRPOSettings(
        data_path=str(run),
        model_name=str(base),
        output_dir=str(tmp_path / "director"),
        batch_size=4,
        num_generations=2,
        max_steps=1,
        max_completion_length=8,
        logging_steps=1,
        diversity_weight=1.0,
        suffix_rounds=0,
        rollout_director="policy",
        user_response_probability=0.0,
    )
    clients = scripted_clients()
    outcome = train_director_grpo(settings, rollout_clients=clients, trajectory_scorer=Favour("The Anchor"))
    assert not [c for c in clients["director"].calls]  # the backend's Director was never asked
    stats = outcome.extra["rollout_stats"]
    assert stats.completions == 4 and stats.rollout_failures == 0
    assert len(clients["speaker"].calls) > stats.completions  # rounds after the decision were played, their directives the policy's
    generation = outcome.metadata.train_metrics["generation"]
    assert generation["merged_calls"] > 1 and generation["unmerged_calls"] == 0  # the later rounds sampled merged too, as the directives were


def test_an_unknown_rollout_director_is_one_line(tmp_path):
    from mascot.errors import MascotError

    run = write_episode_run(tmp_path / "directed_ED_tiny", [episode(i) for i in range(4)])
    settings = DirectorGRPOSettings(
        data_path=str(run), model_name="tiny", output_dir=str(tmp_path / "director"), batch_size=4, num_generations=2, rollout_director="judge"
    )
    with pytest.raises(MascotError, match="--rollout-director must be base or policy"):
        train_director_grpo(settings, rollout_clients=scripted_clients(), trajectory_scorer=Favour("The Anchor"))


def tree_records(contexts: list[Context]) -> list[Episode]:
    from mascot.dialogue.batch import run_all
    from mascot.dialogue.engine import EpisodeEngine
    from mascot.dialogue.settings import EngineSettings

    client = group_client()
    engine = EpisodeEngine(ROSTER, {"director": client, "speaker": client, "user": client}, EngineSettings(generation_mode="tree", num_turns=2))
    records: list[Episode] = []
    asyncio.run(run_all(engine, contexts, write=records.append, skip=lambda key: False))
    return records


class NoRepeat:
    """1 when the conversation's last two companions differ, else 0."""

    def score(self, rollouts):
        names = [[t.agent_name for t in r.trajectory if not t.is_user] for r in rollouts]
        return [float(len(n) < 2 or n[-1] != n[-2]) for n in names]


def test_recorded_rollouts_reward_a_choice_with_the_conversations_that_went_on_from_it():
    """--rollouts recorded: a choice's reward is the mean score of the tree's conversations that
    went on with that companion (three after the first decision, one after the second); nothing
    is rolled out."""
    from mascot.train.decision_points import recorded_continuations
    from mascot.train.director_rollouts import DirectorRollouts, GroupRewardModelReward

    records = tree_records([context(0)])
    points, _ = sample_decision_points(records, per_episode=2, seed=3)
    recorded = recorded_continuations(records, points)
    settings = DirectorGRPOSettings(data_path="unused", model_name="tiny", rollouts="recorded", directive_opening=False)
    for point in points:
        assert sorted(recorded[point.point_id]) == sorted(ROSTER.names)
        assert {len(c) for c in recorded[point.point_id].values()} == ({3} if point.decision_round == 0 else {1})
        rollouts = DirectorRollouts({point.point_id: point}, {}, settings, consumers=1, recorded=recorded)
        reward = GroupRewardModelReward(rollouts, NoRepeat())
        values = asyncio.run(reward([None] * 3, [[{"role": "assistant", "content": directive(n)}] for n in ROSTER.names], [point.point_id] * 3))
        if point.decision_round == 0:
            assert values == pytest.approx([2 / 3] * 3)  # whoever opens, one of the three next companions repeats them
        else:
            before = [t.agent_name for t in point.prefix if not t.is_user][-1]
            assert values == [0.0 if n == before else 1.0 for n in ROSTER.names]


def test_director_grpo_on_recorded_rollouts_trains_without_a_rollout_backend(tmp_path):
    records = tree_records([context(i) for i in range(2)])
    run = write_episode_run(tmp_path / "tree_ED_tiny", records)
    base = tiny_model(tmp_path / "base")
    settings = DirectorGRPOSettings(
        data_path=str(run),
        model_name=str(base),
        output_dir=str(tmp_path / "director"),
        batch_size=4,
        num_generations=2,
        max_steps=1,
        max_completion_length=8,
        logging_steps=1,
        rollouts="recorded",
    )
    outcome = train_director_grpo(settings, trajectory_scorer=NoRepeat())  # no rollout clients: none is built
    stats = outcome.extra["rollout_stats"]
    assert stats.completions == 4 and stats.rollout_failures == 0 and not stats.engine_counters


def test_held_out_contexts_choose_the_directors_kept_step_and_stay_out_of_its_counters(tmp_path):
    """--eval-fraction holds whole contexts' decision points out of Director GRPO; they are sampled
    and rewarded every --eval-steps, the best step is kept, and the run's counters describe training alone."""
    records = tree_records([context(i) for i in range(4)])
    run = write_episode_run(tmp_path / "tree_ED_tiny", records)
    settings = DirectorGRPOSettings(
        data_path=str(run),
        model_name=str(tiny_model(tmp_path / "base")),
        output_dir=str(tmp_path / "director"),
        batch_size=4,
        num_generations=2,
        max_steps=2,
        max_completion_length=8,
        logging_steps=1,
        rollouts="recorded",
        eval_fraction=0.25,
        eval_steps=1,
    )
    outcome = train_director_grpo(settings, trajectory_scorer=NoRepeat())
    meta = outcome.metadata
    from mascot.train.decision_points import load_decision_inputs

    inputs = load_decision_inputs(settings)  # the split the run used: one of the 4 contexts, with all its points
    assert {p.context.context_id for p in inputs.held_out}.isdisjoint({p.context.context_id for p in inputs.points})
    assert len({p.context.context_id for p in inputs.held_out}) == 1
    assert (meta.num_train_records, meta.num_eval_records) == (len(inputs.points), len(inputs.held_out))
    limited = load_decision_inputs(dataclasses.replace(settings, limit=3))  # --limit caps the held-out points in proportion: 3 x 0.25 / 0.75
    assert (len(limited.points), len(limited.held_out)) == (3, 1)
    selection = meta.train_metrics["selection"]
    assert selection["figure"] == "held-out mean reward" and [s for s, _ in selection["measurements"]] == [1, 2]
    assert selection["best_value"] == max(v for _, v in selection["measurements"])
    assert meta.evaluation["heldout_reward"] is not None
    assert outcome.extra["rollout_stats"].completions == 2 * 4  # two steps of 4 completions; the held-out samples not counted


def test_the_director_samples_merged_in_eval_mode_with_a_cache_and_leaves_the_base_as_loaded(tmp_path, monkeypatch):
    """The real `train director-grpo` path: its sampling (under the roster-name slot) runs with the
    adapters folded, in eval mode, one token per pass after the prefill; the base weights come back
    bit for bit and the artefact records it."""
    records = tree_records([context(i) for i in range(2)])
    run = write_episode_run(tmp_path / "tree_ED_tiny", records)
    watch = SamplingWatch().install(monkeypatch, "mascot.train.director_grpo")
    import mascot.train.shared_prompt as shared_prompt

    shuffled = []
    monkeypatch.setattr(shared_prompt, "grouped_shuffle", lambda batch: shuffled.append(len(batch["prompt_ids"])) or batch)
    settings = DirectorGRPOSettings(
        data_path=str(run),
        model_name=str(tiny_model(tmp_path / "base")),
        output_dir=str(tmp_path / "director"),
        batch_size=4,
        num_generations=2,
        per_device_batch_size=2,
        max_steps=2,
        max_completion_length=6,
        logging_steps=1,
        rollouts="recorded",
        learning_rate=0.05,
    )
    outcome = train_director_grpo(settings, trajectory_scorer=NoRepeat())
    assert shuffled == [4, 4]  # each step's generation batch cut into micro-batches of whole groups
    sampling = watch.sampling_calls()
    assert sampling and not any(training for _, training, _ in sampling)
    assert len([w for _, _, w in sampling if w == 1]) >= len(sampling) - 2 * 2 * 2
    assert watch.base_weights_changed() == []
    generation = outcome.metadata.train_metrics["generation"]
    assert generation["merged_calls"] == 2 and generation["unmerged_calls"] == 0


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ({"rollouts": "recorded"}, "no recorded conversation for every companion .*--generation-mode tree"),
        ({"rollouts": "recorded", "rollout_director": "policy"}, "nothing to direct with --rollouts recorded"),
        ({"rollouts": "cached"}, "--rollouts must be live or recorded"),
    ],
)
def test_recorded_rollouts_need_a_tree_and_no_rollout_director(tmp_path, flags, says):
    from mascot.errors import MascotError

    run = write_episode_run(tmp_path / "directed_ED_tiny", [episode(i) for i in range(4)])
    settings = DirectorGRPOSettings(
        data_path=str(run), model_name="tiny", output_dir=str(tmp_path / "director"), batch_size=4, num_generations=2, **flags
    )
    with pytest.raises(MascotError, match=says):
        train_director_grpo(settings, trajectory_scorer=NoRepeat())
    assert not (tmp_path / "director").exists()


def test_a_reward_judge_that_never_answers_stops_the_run_in_one_line(tmp_path, warm_director):
    from mascot.train.trajectory_scores import SILENT_JUDGE_STEPS, RewardJudgeSilent

    path = tmp_path / "broken_judge.py"
    path.write_text("def score(item):\n    raise RuntimeError('judge unreachable')\n")
    settings = warmed_director(tmp_path, warm_director, diversity_weight=0.0, suffix_rounds=1, reward_judge=f"python:{path}:score")
    settings.max_steps = 6
    with pytest.raises(RewardJudgeSilent, match=rf"gave no usable judgment in \d+ tries over {SILENT_JUDGE_STEPS} steps") as info:
        train_director_grpo(settings, rollout_clients=scripted_clients())
    assert "\n" not in str(info.value)
    assert not list(Path(settings.output_dir).rglob("adapter_model.safetensors"))  # nothing saved as a trained Director


@pytest.mark.parametrize("accuracy, pairs, weak", [(0.578, 109, True), (0.802, 111, False), (None, 0, True)])
def test_a_group_reward_model_not_shown_above_chance_is_flagged_before_the_director_learns_its_noise(tmp_path, caplog, accuracy, pairs, weak):
    from mascot.train.artefact import TrainingMetadata, write_metadata
    from mascot.train.config import DirectorGRPOSettings
    from mascot.train.director_grpo import group_reward_model_check

    evaluation = {"heldout_pairwise_accuracy": accuracy, "heldout_pairs": pairs} if pairs else {}
    write_metadata(tmp_path, TrainingMetadata(role="group_reward_model", trainer="reward", base_model="tiny", evaluation=evaluation))
    settings = DirectorGRPOSettings(data_path="x", group_reward_model_path=str(tmp_path))
    with caplog.at_level("WARNING", logger="mascot.train.director_grpo"):
        check = group_reward_model_check(settings)
    assert check["weak"] is weak and check["heldout_pairs"] == pairs
    assert ("nothing shows it ranks conversations better than chance" in caplog.text) is weak
    if pairs:
        assert (check["p_above_chance"] < 0.05) is not weak  # 63 of 109: p = 0.06; 89 of 111: p < 1e-10
    assert group_reward_model_check(DirectorGRPOSettings(data_path="x", group_reward_model_path=str(tmp_path), group_reward_weight=0.0)) is None

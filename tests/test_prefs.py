"""Preference pairs: construction rules, Stage-1 runs (resume), Stage-2 group pairs, TRL format."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest
from judge_helpers import agent_turn, episode, numbered_speaker, sample_episode, scoring_judge, user_turn, write_episodes
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.files import StoreError, read_jsonl
from mascot.judge.panel import JudgePanel
from mascot.judge.rubric_judge import RubricJudge
from mascot.llm.base import LLMError
from mascot.prefs.group import episode_pairs, group_preferences, render_trajectory
from mascot.prefs.pairs import max_pairs, preference_index_pairs
from mascot.rosters import load_roster
from mascot.runs.store import RunStore
from mascot.schema import BranchInfo, Candidate, Context, DialogueLine, Directive, PreferencePair
from mascot.stage1.individual import OUTPUTS, run_individual
from mascot.stage1.settings import CandidateSettings
from mascot.testing.scripted import ScriptedClient

ROSTER = load_roster("emotional_support")


def score_of_reply(text: str) -> int:
    return int(text.split()[-1]) % 5 + 1


def contexts(n: int = 2) -> list[Context]:
    return [
        Context(
            context_id=f"esconv-test-{i}",
            dataset="ESConv",
            situation=f"Situation {i}: my deadlines keep moving.",
            emotion="anxiety",
            opening_turns=[DialogueLine(speaker="user", text=f"I cannot sleep ({i}).")],
        )
        for i in range(n)
    ]


# --------------------------------------------------------------------------- pair rules


@pytest.mark.parametrize("seed", range(25))
def test_pairs_respect_count_margin_and_order_for_random_scores(seed):
    rng = random.Random(seed)
    k = rng.randint(2, 10)
    scores = [
        rng.choice([None, *[1 + rng.randint(0, 16) / 4 for _ in range(5)]]) if rng.random() < 0.15 else 1 + rng.randint(0, 16) / 4 for _ in range(k)
    ]
    margin = rng.choice([0.0, 0.25, 0.5, 1.0, 2.0])
    pairs, counts = preference_index_pairs(scores, margin)
    assert len(pairs) <= max_pairs(k) == counts.candidate_pairs
    assert counts.kept + counts.dropped_by_margin + counts.dropped_ties + counts.dropped_unscored == max_pairs(k)
    assert len({frozenset((p.chosen, p.rejected)) for p in pairs}) == len(pairs)  # unordered pairs, once each
    for p in pairs:
        assert scores[p.chosen] > scores[p.rejected]
        assert p.margin == pytest.approx(scores[p.chosen] - scores[p.rejected]) and p.margin >= margin - 1e-9
    # every pair that clears the margin is kept
    gaps = [abs(scores[i] - scores[j]) for i in range(k) for j in range(i + 1, k) if None not in (scores[i], scores[j])]
    clear = sum(1 for gap in gaps if gap > 0 and gap >= margin - 1e-9)
    assert len(pairs) == clear


def test_margin_edge_ties_and_identical_texts():
    pairs, counts = preference_index_pairs([4.2, 3.7, 3.7], 0.5)  # 4.2 - 3.7 is 0.5000000000000004 or 0.49999...
    assert [(p.chosen, p.rejected) for p in pairs] == [(0, 1), (0, 2)] and counts.dropped_ties == 1
    pairs, counts = preference_index_pairs([5.0, 1.0], 0.5, texts=["same", " same "])
    assert pairs == [] and counts.dropped_identical == 1
    assert len(preference_index_pairs([1, 2, 3, 4, 5, 1.5, 2.5, 3.5], 0.0)[0]) == 28


# --------------------------------------------------------------------------- Stage 1


async def run_stage1(tmp_path, speaker, judge_client, *, ctxs=None, resume=False, overwrite=False, k=4, margin=0.5):
    store = RunStore(tmp_path / "run", outputs=OUTPUTS, resume=resume, overwrite=overwrite)
    with store:
        settings = CandidateSettings(num_candidates=k, score_margin=margin, personas=("The Anchor", "The Beacon"))
        stats = await run_individual(ctxs or contexts(), ROSTER, speaker, RubricJudge(judge_client), store, settings)
    return store, stats


async def test_stage1_writes_candidates_pairs_and_stats(tmp_path):
    speaker = numbered_speaker()
    store, stats = await run_stage1(tmp_path, speaker, scoring_judge(score_of_reply))
    assert len(speaker.calls) == 4 and all(c.n == 4 for c in speaker.calls)  # one request with n=K per query
    candidates = list(read_jsonl(store.path("candidates.jsonl"), Candidate))
    pairs = list(read_jsonl(store.path("pairs.jsonl"), PreferencePair))
    assert len(candidates) == 16 and all(c.overall == score_of_reply(c.response) for c in candidates)
    assert {c.persona for c in candidates} == {"The Anchor", "The Beacon"}
    for pair in pairs:
        assert pair.chosen_score - pair.rejected_score == pytest.approx(pair.margin) and pair.margin >= 0.5
        assert pair.prompt[0]["role"] == "system" and pair.persona in pair.prompt[0]["content"]
        assert pair.chosen[0]["role"] == "assistant" and pair.rejected[0]["role"] == "assistant"
        assert (pair.roster, pair.roster_version, pair.rubric_version) == ("emotional_support", "1.0", "paper_v2")  # the default rubric
    assert all(c.roster_version == "1.0" and c.prompt_version for c in candidates)
    report = json.loads(store.path("pairs_stats.json").read_text())
    assert report["num_pairs"] == len(pairs) and report["max_pairs_per_query"] == 6 and report["num_queries"] == 4
    assert report["num_pairs"] + report["num_dropped_by_margin"] + report["num_dropped_ties"] == 4 * 6
    assert sum(report["margin_distribution"]["histogram"].values()) == len(pairs)
    # TRL's conversational preference format, readable by datasets
    from datasets import load_dataset

    dataset = load_dataset("json", data_files=str(store.path("pairs.jsonl")), split="train")
    assert {"prompt", "chosen", "rejected", "margin"} <= set(dataset.column_names) and len(dataset) == len(pairs)


async def test_stage1_writes_each_querys_candidates_in_one_write(tmp_path, monkeypatch):
    """A kill lands between two writes, never inside one: a query's candidates survive together or
    not at all, so --resume asks again for all of them with the request's own n and seed (a kill
    between two candidate lines made it ask for the missing one alone, with another seed)."""
    import os

    from mascot import files

    writes = []
    real_write = os.write

    def counting_write(fd, data):
        path = os.readlink(f"/proc/self/fd/{fd}") if os.path.exists(f"/proc/self/fd/{fd}") else ""
        if path.endswith("candidates.jsonl"):
            writes.append(bytes(data).count(b"\n"))
        return real_write(fd, data)

    monkeypatch.setattr(files.os, "write", counting_write)
    store, _ = await run_stage1(tmp_path, numbered_speaker(), scoring_judge(score_of_reply), k=4)
    assert writes == [4, 4, 4, 4]  # 2 contexts x 2 personas, each query's 4 candidates in one write
    assert len(list(read_jsonl(store.path("candidates.jsonl"), Candidate))) == 16
    assert json.loads(store.path("run_summary.json").read_text())["num_records"] == 16


async def test_stage1_judge_failures_are_counted_and_kept_out_of_pairs(tmp_path):
    judge = scoring_judge(lambda text: 9 if text.endswith(" 2") else score_of_reply(text))  # candidate 2 never parses
    store, stats = await run_stage1(tmp_path, numbered_speaker(), judge, ctxs=contexts(1), k=3, margin=0.0)
    candidates = list(read_jsonl(store.path("candidates.jsonl"), Candidate))
    failed = [c for c in candidates if c.overall is None]
    assert len(failed) == 1 and "outside 1-5" in failed[0].judgment_error
    assert store.counters.num_annotation_failures == 1
    assert stats.counts.dropped_unscored == 2
    summary = json.loads(store.path("run_summary.json").read_text())
    assert summary["counters"]["num_annotation_failures"] == 1


async def test_stage1_resume_generates_only_what_is_missing(tmp_path):
    failing_once = {"n": 0}

    def flaky(request):
        failing_once["n"] += 1
        if "Situation 1" in request.messages[1]["content"] and request.messages[0]["content"].startswith("You are The Beacon"):
            return LLMError("server went away")
        return f"reply {failing_once['n']}"

    first = ScriptedClient(fn=flaky)
    store, _ = await run_stage1(tmp_path, first, scoring_judge(score_of_reply))
    assert store.counters.num_generation_failures == 1
    pairs_before = store.path("pairs.jsonl").read_text().splitlines()
    # a crash between a query's candidates and its pairs: drop the last query's pairs
    last_query = json.loads(pairs_before[-1])["pair_id"].rsplit("::", 1)[0]
    kept = [line for line in pairs_before if not json.loads(line)["pair_id"].startswith(last_query + "::")]
    store.path("pairs.jsonl").write_text("".join(line + "\n" for line in kept))

    with pytest.raises(StoreError, match="--resume"):
        await run_stage1(tmp_path, numbered_speaker(), scoring_judge(score_of_reply))

    second = numbered_speaker(prefix="again")
    judge = scoring_judge(score_of_reply)
    store, stats = await run_stage1(tmp_path, second, judge, resume=True)
    assert len(second.calls) == 1 and "Situation 1" in second.calls[0].messages[1]["content"]  # only the failed query
    assert len(judge.calls) == 4  # only its 4 candidates are judged
    pair_ids = [json.loads(line)["pair_id"] for line in store.path("pairs.jsonl").read_text().splitlines()]
    assert len(pair_ids) == len(set(pair_ids))  # nothing twice
    assert any(p.startswith(last_query + "::") for p in pair_ids)  # the lost pairs came back
    assert len(list(read_jsonl(store.path("candidates.jsonl"), Candidate))) == 16
    assert json.loads(store.path("pairs_stats.json").read_text())["num_queries"] == 4


# --------------------------------------------------------------------------- Stage 2


def independent_episodes() -> list:
    return [
        episode(
            f"ctx-1:e{i}",
            [agent_turn(0, 0, "The Anchor", f"quality {q}"), user_turn(1, 0, "ok"), agent_turn(2, 1, "The Beacon", f"more {q}")],
            episode_idx=i,
        )
        for i, q in enumerate([5, 1, 3])
    ]


def branch_episodes() -> list:
    prefix = [agent_turn(0, 0, "The Anchor", "I hear you."), user_turn(1, 0, "thanks")]
    out = []
    for k, (name, q) in enumerate([("The Catalyst", 5), ("The Beacon", 2), ("The Anchor", 2)]):
        output = f"<directive>\nagent: {name}\naction: act {k}\ntone: calm\n</directive>"
        turns = [*prefix, agent_turn(2, 1, name, f"quality {q}", action=f"act {k}", output=output), agent_turn(3, 2, "The Anchor", f"tail {q}")]
        branch = BranchInfo(group_id="ctx-1:d1", decision_round=1, candidate_idx=k, num_candidates=3, prefix_turns=2)
        out.append(episode(f"ctx-1:d1:k{k}", turns, branch=branch))
    return out


def quality_judge():
    return scoring_judge(lambda text: int(text.split("quality ")[1][0]) if "quality " in text else 3)


def test_episode_pairs_compare_trajectories_of_one_context():
    eps = independent_episodes()
    pairs, stats = episode_pairs(eps, {"ctx-1:e0": 5.0, "ctx-1:e1": 1.0, "ctx-1:e2": 3.0}, 1.5)
    assert [(p.chosen_score, p.rejected_score) for p in pairs] == [(5.0, 1.0), (5.0, 3.0), (3.0, 1.0)]
    assert all(p.kind == "episode" and p.trajectory_format == 2 for p in pairs)
    assert pairs[0].chosen[0]["content"] == render_trajectory(eps[0].turns, "emotional_support")
    assert "The Anchor: quality 5" in pairs[0].chosen[0]["content"]  # "respond" only echoes the prompt's example: not shown
    assert stats.pairs_per_query == {"ctx-1": 3}
    pairs, stats = episode_pairs(eps, {"ctx-1:e0": 5.0, "ctx-1:e1": 1.0, "ctx-1:e2": 3.0}, 2.5)
    assert len(pairs) == 1 and stats.counts.dropped_by_margin == 2


def test_a_trajectory_reads_as_the_judge_reads_it_and_format_1_shows_the_directives_but_not_copies_of_the_example():
    real = agent_turn(0, 0, "The Anchor", "That sounds hard.", action="name the fear about Monday")
    copied = agent_turn(1, 1, "The Beacon", "Try one step.", action="[EXAMPLE ONLY: one sentence naming what they just said and what to do about it]")
    text = render_trajectory([real, user_turn(2, 1, "ok"), copied], "emotional_support", 1)
    assert text.splitlines() == ["The Anchor [name the fear about Monday; warm]: That sounds hard.", "Person: ok", "The Beacon: Try one step."]
    text = render_trajectory([real, user_turn(2, 1, "ok"), copied], "emotional_support")
    assert text.splitlines() == ["The Anchor: That sounds hard.", "Person: ok", "The Beacon: Try one step."]


async def test_trajectory_pairs_judge_every_record_of_a_context_whole_and_say_what_the_sides_share():
    """A branching run's spine and branches and an independent episode of one context are all whole
    conversations of it: judged whole, every two far enough apart are a pair for the group reward
    model, kind branch where they share their opening turns, episode where they share none."""
    spine_turns = [agent_turn(0, 0, "The Anchor", "I hear you."), user_turn(1, 0, "thanks"), agent_turn(2, 1, "The Anchor", "quality 1")]
    spine = episode("ctx-1:spine", spine_turns)
    other = episode("ctx-1:e0", [agent_turn(0, 0, "The Beacon", "quality 4"), agent_turn(1, 1, "The Anchor", "quality 4")], episode_idx=0)
    judge = quality_judge()
    result = await group_preferences([spine, *branch_episodes(), other], JudgePanel([RubricJudge(judge)]), mode="trajectory", margin=0.5)
    judged = [c.messages[1]["content"] for c in judge.calls if "I hear you." in c.messages[1]["content"]]
    assert len(judged) == 4 and all("I hear you." in m.split("BEGIN CONVERSATION")[1] for m in judged)  # the shared turns judged as part of each
    assert {p.kind for p in result.pairs} == {"episode"}
    kinds = {(p.pair_id, p.pair_kind, p.shared_turns) for p in result.pairs}
    assert ("ctx-1:d1:k0>ctx-1:spine", "branch", 2) in kinds  # a branch against its spine: the prefix alike
    assert ("ctx-1:d1:k0>ctx-1:d1:k1", "branch", 2) in kinds
    assert any(kind == "episode" and shared == 0 for _, kind, shared in kinds)
    assert result.stats.pairs_per_query == {"ctx-1": len(result.pairs)}
    assert all(p.prompt == result.pairs[0].prompt for p in result.pairs)  # one context, one prompt


async def test_directive_pairs_share_the_prefix_and_compare_directives():
    judge = quality_judge()
    result = await group_preferences(branch_episodes(), JudgePanel([RubricJudge(judge)]), mode="auto", margin=0.5)
    # the judge saw each continuation, with the prefix as earlier conversation
    judged = [c.messages[1]["content"] for c in judge.calls]
    assert all("BEGIN EARLIER CONVERSATION" in m and "I hear you." in m.split("BEGIN CONVERSATION")[0] for m in judged)
    assert [p.kind for p in result.pairs] == ["directive", "directive"]
    for pair in result.pairs:
        assert pair.chosen[0]["content"].startswith("<directive>\nagent: The Catalyst")
        assert pair.prompt[0]["content"].startswith("You are the Director") and "I hear you." in pair.prompt[-1]["content"]
        assert pair.chosen_score == 5.0 and pair.rejected_score == 2.0
    assert result.stats.counts.dropped_ties == 1


def test_mascot_prefs_group_cli(tmp_path):
    from mascot.testing.players import stub_judge_responder
    from mascot.testing.stub_server import start_stub_server

    path = tmp_path / "group.jsonl"
    write_episodes(path, independent_episodes() + [sample_episode("ctx-2:e0", context_id="ctx-2")])
    with start_stub_server(latency_s=0.0, responder=stub_judge_responder) as server:
        result = CliRunner().invoke(
            app,
            [
                "prefs",
                "group",
                "--episodes",
                str(path),
                "--mode",
                "episode",
                "--score-margin",
                "0",
                "--judge-server-url",
                server.url,
                "--judge",
                "stub",
                "--no-cache",
            ],
        )
    assert result.exit_code == 0, result.output
    pairs = list(read_jsonl(tmp_path / "group_pairs.jsonl", PreferencePair))
    stats = json.loads((tmp_path / "group_pairs_stats.json").read_text())
    assert stats["mode"] == "episode" and stats["num_pairs"] == len(pairs) and stats["pairs_per_query"]["by_query"]["ctx-2"] == 0
    assert all(p.kind == "episode" and p.context_id == "ctx-1" for p in pairs)
    assert len((tmp_path / "group_pairs_judgments.jsonl").read_text().splitlines()) == 4


def test_prefs_group_with_no_pair_fails_naming_the_margin_that_works(tmp_path):
    """Scores that differ by less than the margin: no pair, a failed report, a non-zero exit and one
    line with the largest gap seen, the value --score-margin must not exceed."""
    from mascot.testing.players import stub_judge_responder
    from mascot.testing.stub_server import start_stub_server

    path = tmp_path / "group.jsonl"
    write_episodes(path, independent_episodes())
    with start_stub_server(latency_s=0.0, responder=stub_judge_responder) as server:
        result = CliRunner().invoke(
            app,
            [
                "prefs",
                "group",
                "--episodes",
                str(path),
                "--mode",
                "episode",
                "--score-margin",
                "4.5",
                "--judge-server-url",
                server.url,
                "--judge",
                "stub",
                "--no-cache",
            ],
        )
    stats = json.loads((tmp_path / "group_pairs_stats.json").read_text())
    assert result.exit_code != 0 and stats["status"] == "failed" and stats["num_pairs"] == 0
    gap = stats["largest_gap"]
    assert 0 < gap < 4.5 and f"rerun with --score-margin {gap:g} or lower" in str(result.exception), result.output


# --------------------------------------------------------------------------- end to end


def test_generate_individual_end_to_end_feeds_trl_reward_trainer(tmp_path, monkeypatch, embedded_model):
    """`mascot generate --mode individual` on the embedded local Speaker (the judge is the stub
    server: the 135M model cannot write rubric JSON), then one RewardTrainer step on the pairs."""
    from datasets import load_dataset
    from train_helpers import tiny_model
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from trl import RewardConfig, RewardTrainer

    from mascot.testing.players import stub_judge_responder
    from mascot.testing.stub_server import start_stub_server

    fixture = __import__("pathlib").Path(__file__).parent / "fixtures" / "esconv_sample.jsonl"
    monkeypatch.setenv("MASCOT_JUDGE_CACHE_DIR", str(tmp_path / "judge-cache"))
    with start_stub_server(latency_s=0.0, responder=stub_judge_responder) as server:
        result = CliRunner().invoke(
            app,
            [
                "generate",
                "--mode",
                "individual",
                "--dataset",
                "ESConv",
                "--data-file",
                str(fixture),
                "--limit",
                "1",
                "--model-name",
                str(embedded_model),
                "--num-candidates",
                "3",
                "--max-tokens",
                "24",
                "--score-margin",
                "0.2",
                "--temperature",
                "0.9",
                "--judge-server-url",
                server.url,
                "--judge-model",
                "stub-judge",
                "--output-dir",
                str(tmp_path),
            ],
        )
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "individual_ESConv_SmolLM2-135M-Instruct"
    candidates = list(read_jsonl(run_dir / "candidates.jsonl", Candidate))
    assert len(candidates) == 9 and {c.persona for c in candidates} == set(ROSTER.names)
    stats = json.loads((run_dir / "pairs_stats.json").read_text())
    assert stats["num_queries"] == 3 and stats["pairs_per_query"]["max"] <= 3
    pairs = load_dataset("json", data_files=str(run_dir / "pairs.jsonl"), split="train")
    assert len(pairs) == stats["num_pairs"] > 0

    model_dir = tiny_model(tmp_path / "tiny")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1)
    args = RewardConfig(
        output_dir=str(tmp_path / "rm"),
        max_steps=1,
        per_device_train_batch_size=2,
        use_cpu=True,
        bf16=False,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
    )
    trainer = RewardTrainer(model=model, args=args, train_dataset=pairs, processing_class=tokenizer)
    trainer.train()
    assert trainer.state.global_step == 1 and "loss" in trainer.state.log_history[0]


def test_directive_pairs_carry_the_director_prompt_of_the_version_their_episode_was_made_with(es_context, es_roster):
    from mascot.dialogue.prompts import director_messages
    from mascot.prefs.group import director_prompt
    from mascot.schema import Episode, EpisodeMetadata

    def made_with(version):
        meta = EpisodeMetadata(dataset="ESConv", roster=es_roster.name, prompt_version=version)
        return Episode(episode_id="e", context_id=es_context.context_id, context=es_context, turns=[], metadata=meta)

    assert director_prompt(made_with("v1"), [], None) == director_messages(es_roster, es_context, [], "v1")
    assert director_prompt(made_with("v1"), [], None) != director_prompt(made_with("v2"), [], None)
    assert director_prompt(made_with(None), [], None) == director_messages(es_roster, es_context, [])


def test_the_directors_scorer_writes_a_rollout_as_its_group_reward_model_was_trained(tmp_path):
    """A group reward model records its pairs' trajectory format; the Director's rollouts are
    rendered in it (format 1, with directives, for a model trained before the field)."""
    from mascot.train.trajectory_scores import GroupRewardModelScorer, Rollout

    class Recording:
        def __init__(self) -> None:
            self.seen: list = []

        def score(self, conversations):
            self.seen += conversations
            return [0.0] * len(conversations)

    point = SimpleNamespace(
        prefix=[agent_turn(0, 0, "The Anchor", "That sounds hard.", action="name the fear")], context=None, domain="emotional_support"
    )
    rollout = Rollout(point, Directive(agent_name="The Beacon"), [user_turn(1, 0, "ok")])  # type: ignore[arg-type]
    for trajectory_format, first_line in ((1, "The Anchor [name the fear; warm]: That sounds hard."), (2, "The Anchor: That sounds hard.")):
        model = Recording()
        GroupRewardModelScorer(model, trajectory_format).score([rollout])
        assert model.seen[0][-1]["content"].splitlines()[0] == first_line

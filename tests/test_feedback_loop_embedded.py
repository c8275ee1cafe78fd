"""The loop from people's ratings to a served companion on the embedded model (SmolLM2-135M):
scripted people rate the companions' replies in the web app with a known preference (a reply that
speaks from the companion's own side, starting with "I", is helpful); `mascot prefs feedback`
builds pairs; a reward model trained on them from the embedded model ranks the replies of
conversations it never saw by that preference; a Speaker trained against it with GRPO compares
better than the current (untrained) one with the same preference as the judge, is promoted on that
evidence, and is loaded by a following server. Opt-in: `make test-slow` (about 12 minutes on 2
cores). tests/test_feedback_loop.py runs the same loop on tiny models.
"""

from __future__ import annotations

import random

import pytest
from test_feedback_loop import converse as converse_and_rate

from mascot.commands.prefs import PrefsFeedbackSettings, run_prefs_feedback
from mascot.files import read_jsonl
from mascot.schema import PreferencePair
from mascot.testing.scripted import ScriptedClient

pytestmark = pytest.mark.slow

FIRST_PERSON = [
    "I hear how heavy this is for you right now.",
    "I am glad you told me about this tonight.",
    "I would feel the same in your place, honestly.",
    "I can stay with you while you sort through it.",
    "I think you handled a hard day better than you know.",
]
OTHER = [
    "That sounds really heavy for you right now.",
    "It makes sense that this keeps you awake.",
    "Maybe writing it down could help a little tonight.",
    "Everyone struggles with days like this one sometimes.",
    "What would a good friend tell you about it?",
]


def speaks_for_itself(text: str) -> bool:
    """The known preference: the reply starts with "I" (I, I'm, I'd...)."""
    words = text.strip().strip('"').split()
    return bool(words) and (words[0] == "I" or words[0].startswith("I'"))


def scripted_speaker(seed: int) -> ScriptedClient:
    rng = random.Random(seed)
    return ScriptedClient(fn=lambda request: rng.choice(FIRST_PERSON if rng.random() < 0.5 else OTHER))


def converse(session_dir, *, seed: int, sessions: int) -> int:
    """Scripted people talk and rate every reply by the known preference; returns the ratings given."""
    return converse_and_rate(session_dir, seed=seed, sessions=sessions, consent=True, speaker=scripted_speaker, helpful=speaks_for_itself)


JUDGE = '''
def speaks_for_itself(item):
    """The people's preference as a judge: a companion's reply that starts with "I" is helpful."""
    if item.scope != "agent":
        return {key: 3.0 for key in item.keys}
    words = (item.response or "").strip().strip('"').split()
    good = bool(words) and (words[0] == "I" or words[0].startswith("I'"))
    return {key: 5.0 if good else 1.0 for key in item.keys}


speaks_for_itself.version = "1"
'''

RM = dict(score_layers=12, score_window=40, eval_steps=0, batch_size=8, learning_rate=3e-4, lora_r=16, lora_alpha=32, max_length=128,
          lora_target_modules="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", gradient_checkpointing=False)  # fmt: skip
SPEAKER = dict(batch_size=8, num_generations=4, max_completion_length=16, temperature=0.9, thinking=False, lora_r=8, lora_alpha=16, beta=0.0,
               gradient_checkpointing=False, reward_max_length=128, format_weight=0.0, conciseness_weight=0.0, logging_steps=1)  # fmt: skip


def test_the_loop_on_the_embedded_model(tmp_path, embedded_model):
    from mascot.adapter_registry import Registry
    from mascot.adapters.compare import CompareRequest, compare_versions
    from mascot.adapters.follow import Follower
    from mascot.adapters.promotion import promote
    from mascot.stats import binomial_p
    from mascot.testing.players import stub_responder
    from mascot.testing.stub_server import start_stub_server
    from mascot.train.config import RewardModelSettings, SpeakerGRPOSettings
    from mascot.train.reward_model import train_reward_model
    from mascot.train.scoring import RewardModelScorer, score_pair_sides
    from mascot.train.speaker_grpo import train_speaker

    registry = Registry.open()
    (tmp_path / "judge.py").write_text(JUDGE)
    converse(tmp_path / "chat", seed=1, sessions=6)
    run_prefs_feedback(PrefsFeedbackSettings(session_dir=tmp_path / "chat", output_dir=tmp_path / "pairs"))
    pairs = list(read_jsonl(tmp_path / "pairs" / "pairs.jsonl", PreferencePair))
    assert len(pairs) >= 40 and all(speaks_for_itself(p.chosen[0]["content"]) and not speaks_for_itself(p.rejected[0]["content"]) for p in pairs)

    model = str(embedded_model)
    rm = train_reward_model(RewardModelSettings(data_path=str(tmp_path / "pairs"), model_name=model, dataset="ESConv", output_dir=str(tmp_path / "rm"),
                                                max_steps=24, eval_fraction=0.2, **RM))  # fmt: skip
    converse(tmp_path / "unseen", seed=3, sessions=3)
    run_prefs_feedback(PrefsFeedbackSettings(session_dir=tmp_path / "unseen", output_dir=tmp_path / "unseen_pairs", max_pairs_per_reply=1))
    unseen = list(read_jsonl(tmp_path / "unseen_pairs" / "pairs.jsonl", PreferencePair))
    chosen, rejected = score_pair_sides(RewardModelScorer.from_path(str(rm.output_dir), max_length=128), unseen)
    right = sum(c > r for c, r in zip(chosen, rejected))
    print(f"reward model on unseen conversations: {right}/{len(unseen)}")
    assert binomial_p(right, len(unseen), alternative="greater") < 0.01, (right, len(unseen))
    promote(registry, rm.metadata.registered_as)

    common = dict(data_path=str(tmp_path / "pairs"), model_name=model, dataset="ESConv", reward_model_path="current", **SPEAKER)
    current = train_speaker(SpeakerGRPOSettings(**common, output_dir=str(tmp_path / "speaker_v1"), max_steps=1, learning_rate=1e-9))
    promote(registry, current.metadata.registered_as)
    new = train_speaker(SpeakerGRPOSettings(**common, output_dir=str(tmp_path / "speaker_v2"), max_steps=32, learning_rate=3e-3))
    comparison = compare_versions(registry, new.metadata.registered_as, "current", CompareRequest(
        data_file="shipped:learn", split="test", limit=24, judge_model=f"python:{tmp_path / 'judge.py'}:speaks_for_itself",
        episodes_settings={"num_turns": 2, "max_tokens": 16, "director_max_tokens": 40, "user_max_tokens": 16}, output_dir=tmp_path / "compare"))  # fmt: skip
    print(f"compare: {comparison}")
    assert comparison.verdict == "better", comparison
    assert promote(registry, new.metadata.registered_as).current == new.metadata.registered_as
    with start_stub_server(
        latency_s=0.001, responder=stub_responder, served_models=[model], lora_modules={current.metadata.registered_as: current.output_dir}
    ) as server:
        lines = Follower(registry, server.url, model, served={current.metadata.registered_as: str(current.output_dir)}).poll()
    assert lines == [f"loaded {new.metadata.registered_as}, the current Speaker, without a restart (served as {new.metadata.registered_as})"]

"""A sampling setting of the Speakers reaches the Speaker on every path that runs one: group
episodes, Stage-1 candidates, a chat, the Director trainer's rollouts (under their `rollout_`
names: they sample as the episodes they continue did) and `mascot eval`'s cells. Each path builds
its Speaker with `Speaker.for_settings` from the settings it derives; this walks every sampling
field, so a setting added to `SamplingSettings` and forgotten by one path fails here."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from mascot.dialogue.agents import Speaker
from mascot.dialogue.settings import SamplingSettings
from mascot.dialogue.tally import Tally
from mascot.rosters import load_roster
from mascot.testing.scripted import ScriptedClient

FIXTURES = Path(__file__).parent / "fixtures"
ROSTER = load_roster("emotional_support")
# A valid value other than every path's default, per sampling field.
CHANGED = {"temperature": 0.31, "max_tokens": 77, "repetition_penalty": 1.17, "seed": 1234}


def speaker_of(settings) -> Speaker:
    return Speaker.for_settings(ScriptedClient(fn=lambda request: "ok"), ROSTER, Tally(), settings, think=False)


def episodes(name, value):
    from mascot.dialogue.run_settings import GroupEpisodeSettings

    return GroupEpisodeSettings(**{name: value})


def stage_1(name, value):
    from mascot.stage1.settings import CandidateSettings

    return CandidateSettings(**{name: value})


def chat(name, value):
    from mascot.dialogue.chat import engine_settings
    from mascot.dialogue.chat_settings import ChatSettings

    return engine_settings(ChatSettings(**{name: value}), "session")


def rollouts(name, value):
    from mascot.train.config import DirectorGRPOSettings
    from mascot.train.director_rollouts import rollout_engine_settings

    declared = {f.name for f in fields(DirectorGRPOSettings)}
    flag = f"rollout_{name}" if f"rollout_{name}" in declared else name
    return rollout_engine_settings(DirectorGRPOSettings(data_path="episodes.jsonl", **{flag: value}))


def evaluation(name, value):
    from mascot.eval.plan import Cell, generate_settings
    from mascot.eval.settings import EvalSettings
    from mascot.eval.systems import Catalogue

    catalogue = Catalogue()
    s = EvalSettings(systems="zero-shot", data_file=str(FIXTURES / "esconv_sample.jsonl"), dataset="ESConv", model_name="m", **{name: value})
    return generate_settings(Cell("test", "zero-shot", catalogue.get("zero-shot"), Path("cell")), s, catalogue, "ESConv")


PATHS = {"episodes": episodes, "stage 1": stage_1, "chat": chat, "rollouts": rollouts, "eval": evaluation}


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("name", [f.name for f in fields(SamplingSettings)])
def test_a_sampling_setting_reaches_the_speaker_on_every_path(path, name):
    assert name in CHANGED, f"give {name} a changed value in CHANGED"
    settings = PATHS[path](name, CHANGED[name])
    assert getattr(settings, name) == CHANGED[name], f"{path} does not pass --{name.replace('_', '-')} on"
    if name != "seed":  # the seed seeds each turn's request, not the Speaker
        assert getattr(speaker_of(settings), name) == CHANGED[name]


def test_eval_takes_several_servers_per_endpoint_as_every_command_does():
    from mascot.eval.plan import Cell, generate_settings, judge_settings
    from mascot.eval.settings import EvalSettings
    from mascot.eval.systems import Catalogue

    urls = ["http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1"]
    catalogue = Catalogue()
    s = EvalSettings(systems="zero-shot", dataset="ESConv", model_name="m", vllm_server_url=urls, judge_server_url=urls, judges=["j"])
    cell = Cell("test", "zero-shot", catalogue.get("zero-shot"), Path("cell"))
    assert generate_settings(cell, s, catalogue, "ESConv").vllm_server_url == urls
    assert judge_settings(Path("cell/run/episodes.jsonl"), cell, s, "ESConv").judge_server_url == urls

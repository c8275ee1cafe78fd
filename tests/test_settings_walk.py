"""Every setting of `mascot generate` reaches what it names: changed to a valid non-default value,
each CLI field changes the resolved configuration the run records (run_config.json's settings
and roles, the run folder, the episode ids' tag), or is listed below with the reason it does not.
A setting accepted and ignored fails here.

Stage 1 is also checked by its effects, on scripted clients: the concurrency its queries run at,
the rubric version its records carry, the scoring mode its judge uses.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import MISSING
from pathlib import Path
from types import SimpleNamespace

import pytest
from judge_helpers import judged_block, numbered_speaker, scoring_judge
from rich.console import Console

from mascot.commands.generate import GROUP_ONLY, STAGE_1_ONLY, GenerateSettings, ignored_by_mode
from mascot.files import read_jsonl
from mascot.schema import Candidate
from mascot.settings import cli_fields, settings_from

ESCONV = Path(__file__).parent / "fixtures" / "esconv_sample.jsonl"
BASE = {"dataset": "ESConv", "data_file": ESCONV, "output_dir": Path("runs")}

# Valid non-default values where "default + 1" or "not default" does not make one.
VALUES = {
    "dataset": "ED", "data_file": Path("other/test.jsonl"), "split": "valid", "extra_body": '{"top_k": 20}',
    "generation_mode": "independent", "branch_proposals": "roster", "turn_policy": "round-robin", "prompt_family": "zero-shot", "safety": "on",
    "safety_locale": "en-GB", "user_big_five_profile": "High Openness", "user_profile_set": "mbti", "user_profile": "Low Openness", "system": "baseline", "rubric_version": "paper_v1",
    "judge_scoring": "json", "cache_dir": Path("cache"), "output_dir": Path("elsewhere"), "roster": "meetings",
    "mode": "individual", "user_response_probability": 0.9, "temperature": 0.2, "prompt_version": "v1", "safety_model_scope": "all",
    # an in-process role's adapter must be a folder holding one
    "director_adapter": str(ESCONV.parent / "lora_adapter"), "speaker_adapter": str(ESCONV.parent / "lora_adapter"),
}  # fmt: skip
# Settings that act only together with another (refused alone): changed alongside it and compared
# with a run given that other setting alone.
COMPANIONS = {"safety_model": {"safety_server_url": ["http://127.0.0.1:9/v1"]}}

# Settings that shape neither what is generated nor what is recorded, by design.
PRESENTATION_ONLY = {
    "resume": "continues a run folder; --resume refuses other settings instead of recording new ones",
    "overwrite": "deletes a run folder's outputs before it starts; what the run is stays the same",
}
# Settings of the other mode (a group run never judges, Stage 1 has no Director, user or turns):
# each run says, in one warning, which of them it was given and does not read.
NOT_IN_GROUP = {name: "Stage 1 only: a group run does not judge" for name in STAGE_1_ONLY}
NOT_IN_INDIVIDUAL = {name: "group mode only: Stage 1 asks the Speaker alone, for one reply per candidate" for name in GROUP_ONLY}


def changed_value(f):
    """A valid value for field `f` other than its default."""
    name, default = f.name, (f.default if f.default is not MISSING else f.default_factory())  # type: ignore[misc]
    if name in VALUES:
        return VALUES[name]
    if isinstance(default, bool):  # before the names: share_model is a switch, not a model id
        return not default
    if name.endswith("_thinking"):
        return "on"
    if name.endswith("_extra_body"):
        return '{"k": 1}'
    if name.endswith("_server_url"):
        return ["http://127.0.0.1:9/v1"]
    if name.endswith(("_model", "_adapter")) or name == "model_name":
        return f"some/{name}"
    if isinstance(default, (int, float)):
        return default + 1
    if default is None and "int" in str(f.type):
        return 7
    raise AssertionError(f"no changed value for {name}: add one to VALUES")


def resolved_group(s: GenerateSettings) -> str:
    """What a group run records: run_config.json's settings and roles, its folder, its tag."""
    from mascot.dialogue.run import roles_needed, run_dir_for, run_settings, run_tag
    from mascot.llm.routing import resolve_roles
    from mascot.rosters import load_roster, roster_for_dataset

    roster = load_roster(s.roster) if s.roster else roster_for_dataset(s.dataset)
    roles = {role: ep.describe() for role, ep in resolve_roles(s, roles_needed(s)).items()}
    return json.dumps([run_settings(s, roster, 1), roles, str(run_dir_for(s)), run_tag(s, roster)], sort_keys=True, default=str)


def resolved_individual(s: GenerateSettings) -> str:
    """What a Stage-1 run records: run_config.json's settings and roles, its folder."""
    from mascot.llm.routing import resolve_roles
    from mascot.prefs.generate import _run_settings, individual_run_dir
    from mascot.rosters import load_roster, roster_for_dataset

    roster = load_roster(s.roster) if s.roster else roster_for_dataset(s.dataset)
    roles = resolve_roles(s, ("speaker", "judge"))
    cache = None if s.no_cache else SimpleNamespace(path=Path(s.cache_dir or "default-cache"))  # the path only, nothing opened
    settings = _run_settings(s, roles, roster.ident, 1, cache)
    described = {role: ep.describe() for role, ep in roles.items()}
    return json.dumps([settings, described, str(individual_run_dir(s))], sort_keys=True, default=str)


@pytest.mark.parametrize(("mode", "resolve", "exempt"), [("group", resolved_group, NOT_IN_GROUP), ("individual", resolved_individual, NOT_IN_INDIVIDUAL)])
def test_every_generate_setting_changes_the_recorded_configuration(mode, resolve, exempt):
    base = {**BASE, "mode": mode}
    reference = resolve(settings_from(GenerateSettings, base, "walk"))
    ignored = []
    for f in cli_fields(GenerateSettings):
        if f.name in PRESENTATION_ONLY or f.name in exempt or f.name == "mode":
            continue
        companion = COMPANIONS.get(f.name, {})
        before = resolve(settings_from(GenerateSettings, {**base, **companion}, "walk")) if companion else reference
        changed = settings_from(GenerateSettings, {**base, **companion, f.name: changed_value(f)}, f"walk {f.name}")
        if resolve(changed) == before:
            ignored.append(f.name)
    assert ignored == [], f"accepted and ignored by generate --mode {mode}: {', '.join(ignored)}"


def test_the_exemption_lists_name_real_settings():
    names = {f.name for f in cli_fields(GenerateSettings)}
    assert set(PRESENTATION_ONLY) | set(NOT_IN_GROUP) | set(NOT_IN_INDIVIDUAL) <= names


# --------------------------------------------------------------------------- Stage 1, by its effects


class CountingSpeaker:
    """A scripted Speaker that notes how many of its requests were in flight at once."""

    def __init__(self) -> None:
        self.inner = numbered_speaker(latency_s=0.02)
        self.model, self.backend = "scripted", "scripted"
        self.in_flight = self.most_in_flight = 0

    async def chat(self, request):
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            return await self.inner.chat(request)
        finally:
            self.in_flight -= 1

    def __getattr__(self, name):
        return getattr(self.inner, name)


def run_stage1(tmp_path: Path, **flags):
    """`mascot generate --mode individual` (its settings, as the command line makes them) on
    scripted clients; returns the Speaker and the candidates written."""
    from mascot.prefs.generate import generate_individual

    values = {**BASE, "mode": "individual", "num_candidates": 2, "limit": 2, "output_dir": tmp_path, "no_cache": True, **flags}
    s = settings_from(GenerateSettings, values, "stage 1")
    speaker = CountingSpeaker()
    def score(text: str) -> int:
        return int(text.split()[-1]) % 5 + 1

    def distribution(request, choices):  # the logprob judge's answer: all mass on the same score
        return {choices[score(judged_block(request.messages, "REPLY")) - 1]: 1.0}

    judge = scoring_judge(score, distributions=distribution)
    run_dir = asyncio.run(generate_individual(s, clients={"speaker": speaker, "judge": judge}, console=Console(quiet=True)))
    return speaker, list(read_jsonl(run_dir / "candidates.jsonl", Candidate))


def test_max_concurrent_episodes_sets_stage1_concurrency(tmp_path):
    one, _ = run_stage1(tmp_path / "one", max_concurrent_episodes=1)
    many, _ = run_stage1(tmp_path / "many", max_concurrent_episodes=8)
    assert one.most_in_flight == 1 and many.most_in_flight > 1


def test_rubric_version_reaches_stage1_records(tmp_path):
    _, v1 = run_stage1(tmp_path / "v1", rubric_version="paper_v1")
    _, default = run_stage1(tmp_path / "default")
    assert {c.rubric_version for c in v1} == {"paper_v1"} and {c.rubric_version for c in default} == {"paper_v2"}


def test_judge_scoring_reaches_the_stage1_judge(tmp_path):
    _, by_json = run_stage1(tmp_path / "json", judge_scoring="json")
    _, by_logprobs = run_stage1(tmp_path / "logprobs", judge_scoring="logprobs")
    assert all(isinstance(v, int) for c in by_json for v in (c.scores or {}).values())  # JSON verdicts
    assert all(isinstance(v, float) for c in by_logprobs for v in (c.scores or {}).values())  # expected scores
    assert by_json and by_logprobs


def test_repetition_penalty_reaches_the_stage1_speaker_requests(tmp_path):
    penalised, _ = run_stage1(tmp_path / "penalised", repetition_penalty=1.3)
    plain, _ = run_stage1(tmp_path / "plain")
    assert penalised.calls and {c.repetition_penalty for c in penalised.calls} == {1.3}
    assert {c.repetition_penalty for c in plain.calls} == {1.0}


def test_a_setting_the_mode_does_not_read_is_named_in_one_warning():
    group = settings_from(GenerateSettings, {**BASE, "score_margin": 0.9, "judge_scoring": "json"}, "test")
    assert sorted(ignored_by_mode(group)) == ["--judge-scoring", "--score-margin"]
    stage_1 = settings_from(GenerateSettings, {**BASE, "mode": "individual", "num_turns": 9}, "test")
    assert ignored_by_mode(stage_1) == ["--num-turns"]
    assert ignored_by_mode(settings_from(GenerateSettings, BASE, "test")) == []


# ---- every command: each setting is read by the code that runs it

SRC = Path(__file__).resolve().parent.parent / "src" / "mascot"
CHECKS = ("__post_init__",)  # validation reads a setting without using it


def reads_outside_checks() -> set[str]:
    """Every attribute name read, and every string constant (getattr, as_dict keys), anywhere in
    the library except inside the settings' own checks (`__post_init__`, `check_*`)."""
    import ast

    names: set[str] = set()
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and (f.name in CHECKS or f.name.startswith("check_")) for n in ast.walk(f)}
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value)
            elif isinstance(node, ast.keyword) and node.arg:
                names.add(node.arg)
    return names


def test_every_commands_settings_are_read_by_what_runs_it():
    from mascot import vocab
    from mascot.commands import COMMANDS

    # The `--<role>-*` flags are read once, by their fold into the role mapping (checked below).
    role_flags = {f"{role}_{kind}" for role in vocab.ROLES for kind in ("model", "adapter", "server_url", "extra_body", "thinking")}
    read = reads_outside_checks() | role_flags
    unread = sorted({f"mascot {entry.name}: {f.name}" for entry in COMMANDS for f in cli_fields(entry.settings_class()) if f.name not in read})
    assert not unread, "settings accepted and never read: " + "; ".join(unread)


def test_every_role_flag_reaches_the_role_mapping():
    from mascot.commands import COMMANDS
    from mascot.settings_groups import role_mapping

    given = {"model": "m-x", "adapter": "a-x", "server_url": ["http://127.0.0.1:9/v1"], "extra_body": '{"top_k": 3}', "thinking": "on"}
    expected = {"model": "m-x", "adapter": "a-x", "server_url": ["http://127.0.0.1:9/v1"], "extra_body": {"top_k": 3}, "thinking": True}
    for entry in COMMANDS:
        cls = entry.settings_class()
        names = {f.name for f in cli_fields(cls)}
        for role in ("director", "speaker", "user", "judge"):
            for kind, value in given.items():
                if f"{role}_{kind}" not in names:
                    continue
                probe = SimpleNamespace(**{f"{role}_{kind}": value})
                got = getattr(role_mapping(probe)[role], kind)
                assert got == expected[kind] or (kind == "extra_body" and expected[kind].items() <= got.items()), (entry.name, role, kind)

"""Every setting of `mascot generate`, in both modes, reaches what it names: changed to a valid
non-default value, each flag of the mode's settings class changes the resolved configuration the
run records (run_config.json's settings and roles, the run folder, the episode ids' tag). There
is no list of exceptions: a mode's flags are exactly the settings its run reads.

Stage 1 is also checked by its effects, on scripted clients: the concurrency its queries run at,
the rubric version its records carry, the scoring mode its judge uses.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import effect_walk
import pytest
from judge_helpers import judged_block, numbered_speaker, scoring_judge
from rich.console import Console

from mascot.dialogue.run_settings import GroupEpisodeSettings
from mascot.files import read_jsonl
from mascot.schema import Candidate
from mascot.settings import cli_fields, settings_from
from mascot.stage1.settings import CandidateSettings

ESCONV = Path(__file__).parent / "fixtures" / "esconv_sample.jsonl"
BASE = {"dataset": "ESConv", "data_file": ESCONV, "output_dir": Path("runs")}

# Valid non-default values where "default + 1" or "not default" does not make one.
VALUES = {
    "dataset": "ED", "data_file": Path("other/test.jsonl"), "split": "valid", "extra_body": '{"top_k": 20}',
    "generation_mode": "independent", "branch_proposals": "roster", "turn_policy": "round-robin", "prompt_family": "zero-shot", "safety": "on",
    "safety_locale": "en-GB", "user_big_five_profile": "High Openness", "user_profile_set": "mbti", "user_profile": "Low Openness", "system": "baseline", "rubric_version": "paper_v1",
    "judge_scoring": "json", "cache_dir": Path("cache"), "output_dir": Path("elsewhere"), "roster": "meetings",
    "user_response_probability": 0.9, "temperature": 0.2, "prompt_version": "v1", "safety_model_scope": "all",
    # an in-process role's adapter must be a folder holding one
    "director_adapter": str(ESCONV.parent / "lora_adapter"), "speaker_adapter": str(ESCONV.parent / "lora_adapter"),
}  # fmt: skip
# Settings that act only together with another (refused alone): changed alongside it and compared
# with a run given that other setting alone.
COMPANIONS = {"safety_model": {"safety_server_url": ["http://127.0.0.1:9/v1"]}}


def changed_value(f):
    """A valid value for field `f` other than its default."""
    return effect_walk.changed_value(f, VALUES)


def resolved_group(s: GroupEpisodeSettings) -> str:
    """What a group run records: run_config.json's settings and roles, its folder, its tag."""
    from mascot.dialogue.run import roles_needed, run_dir_for, run_settings, run_tag
    from mascot.llm.routing import resolve_roles
    from mascot.rosters import load_roster, roster_for_dataset

    roster = load_roster(s.roster) if s.roster else roster_for_dataset(s.dataset)
    endpoints = resolve_roles(s, roles_needed(s))
    roles = {role: ep.describe() for role, ep in endpoints.items()}
    return json.dumps([run_settings(s, roster, 1, endpoints), roles, str(run_dir_for(s)), run_tag(s, roster)], sort_keys=True, default=str)


def resolved_individual(s: CandidateSettings) -> str:
    """What a Stage-1 run records: run_config.json's settings and roles, its folder."""
    from mascot.llm.routing import resolve_roles
    from mascot.rosters import load_roster, roster_for_dataset
    from mascot.stage1.run import individual_run_dir, run_settings

    roster = load_roster(s.roster) if s.roster else roster_for_dataset(s.dataset)
    roles = resolve_roles(s, ("speaker", "judge"))
    cache = None if s.no_cache else SimpleNamespace(path=Path(s.cache_dir or "default-cache"))  # the path only, nothing opened
    settings = run_settings(s, roles, roster.ident, 1, cache)
    described = {role: ep.describe() for role, ep in roles.items()}
    return json.dumps([settings, described, str(individual_run_dir(s))], sort_keys=True, default=str)


@pytest.mark.parametrize(("settings_class", "resolve"), [(GroupEpisodeSettings, resolved_group), (CandidateSettings, resolved_individual)])
def test_every_generate_setting_changes_the_recorded_configuration(settings_class, resolve):
    reference = resolve(settings_from(settings_class, BASE, "walk"))
    ignored = []
    for f in cli_fields(settings_class):
        companion = COMPANIONS.get(f.name, {})
        before = resolve(settings_from(settings_class, {**BASE, **companion}, "walk")) if companion else reference
        changed = settings_from(settings_class, {**BASE, **companion, f.name: changed_value(f)}, f"walk {f.name}")
        if resolve(changed) == before:
            ignored.append(f.name)
    assert ignored == [], f"accepted and ignored by {settings_class.__name__}: {', '.join(ignored)}"


def test_a_flag_of_the_other_mode_is_not_a_flag_of_this_one():
    from typer.testing import CliRunner

    from mascot.cli.app import app

    stage_1 = CliRunner().invoke(app, ["generate", "--mode", "individual", "--num-turns", "3", "--dry-run"])
    assert stage_1.exit_code == 2 and "No such option: --num-turns" in stage_1.output
    group = CliRunner().invoke(app, ["generate", "--score-margin", "0.9", "--dry-run"])
    assert group.exit_code == 2 and "No such option: --score-margin" in group.output
    unknown = CliRunner().invoke(app, ["generate", "--mode", "solo"])
    assert unknown.exit_code != 0 and "unknown --mode 'solo': choose group or individual" in str(unknown.exception or unknown.output)


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
    from mascot.stage1.run import generate_individual

    values = {**BASE, "num_candidates": 2, "limit": 2, "output_dir": tmp_path, "no_cache": True, **flags}
    s = settings_from(CandidateSettings, values, "stage 1")
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
        skipped = {
            id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and (f.name in CHECKS or f.name.startswith("check_")) for n in ast.walk(f)
        }
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


def test_a_config_file_s_mode_picks_the_settings_class(tmp_path):
    from mascot.cli.lazy import chosen_mode
    from mascot.commands import modes

    config = tmp_path / "stage1.yaml"
    config.write_text("mode: individual\nnum_candidates: 4\n")
    assert chosen_mode(modes("generate"), ["--config", str(config)]).settings_class() is CandidateSettings
    assert chosen_mode(modes("generate"), [f"--config={config}", "--mode", "group"]).settings_class() is GroupEpisodeSettings  # the flag wins
    assert chosen_mode(modes("generate"), []).settings_class() is GroupEpisodeSettings

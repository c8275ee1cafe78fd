"""Every command is generated from a settings dataclass: each accepts --config FILE (flags win),
each settings class checks itself once, and the shared groups reach the library unchanged."""

import json
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.dialogue.run_settings import GroupEpisodeSettings
from mascot.dialogue.settings import EngineSettings
from mascot.errors import MascotError
from mascot.settings import cli_fields
from mascot.stage1.settings import CandidateSettings

FIXTURES = Path(__file__).parent / "fixtures"
ESCONV = FIXTURES / "esconv_sample.jsonl"


def leaf_commands(group=None, path=()):
    group = group or get_command(app)
    for name in group.list_commands(None):
        command = group.get_command(None, name)
        if hasattr(command, "list_commands"):
            yield from leaf_commands(command, (*path, name))
        else:
            yield (*path, name), command


def test_every_command_accepts_a_config_file():
    missing = [" ".join(path) for path, command in leaf_commands() if "config" not in {p.name for p in command.params}]
    # `mascot chat` still declares its options by hand
    assert missing in ([], ["chat"]), missing


def test_every_setting_of_the_shared_groups_has_help():
    from mascot.adapters.serve_command import ServeSettings
    from mascot.commands.judge import JudgeSettings
    from mascot.commands.metrics import MetricsCommandSettings
    from mascot.commands.prefs import PrefsGroupSettings

    for cls in (GroupEpisodeSettings, JudgeSettings, PrefsGroupSettings, MetricsCommandSettings, ServeSettings):
        assert all(f.metadata.get("help") for f in cli_fields(cls)), cls.__name__


def dry_run(*args):
    result = CliRunner().invoke(app, [*args, "--dry-run"])
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.stdout[: result.stdout.rindex("}") + 1])


def test_generate_reads_a_config_file_and_flags_win(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "generate.yaml"
    config.write_text(f"dataset: ED\ndata-file: {FIXTURES / 'ed_sample.csv'}\nnum_turns: 3\nturn-policy: round-robin\nseed: 5\n")
    out = dry_run("generate", "--config", str(config), "--seed", "9")
    assert out["resolved"]["dataset"] == "EmpatheticDialogues"
    assert out["settings"]["num_turns"] == 3 and out["settings"]["turn_policy"] == "round-robin" and out["settings"]["seed"] == 9
    assert out["resolved"]["run_dir"].startswith("data/rl/directed_EmpatheticDialogues_SmolLM2-135M-Instruct_round-robin")


def test_judge_and_prefs_read_a_config_file(tmp_path, monkeypatch):
    from test_docs_commands import fixture_episodes, write_jsonl

    monkeypatch.chdir(tmp_path)
    episodes = tmp_path / "episodes.jsonl"
    write_jsonl(episodes, fixture_episodes("ESConv", branching=False))
    (tmp_path / "judge.yaml").write_text(f"input-file: {episodes}\nscope: agent\nlimit: 1\n")
    assert dry_run("judge", "--config", "judge.yaml")["settings"] == {"scope": "agent", "limit": 1, "output_dir": None}
    (tmp_path / "prefs.yaml").write_text(f"input-file: {episodes}\nmode: episode\nscore_margin: 1.5\n")
    assert dry_run("prefs", "group", "--config", "prefs.yaml")["settings"]["score_margin"] == 1.5


def test_an_unknown_config_key_is_one_clear_error(tmp_path):
    (tmp_path / "bad.yaml").write_text("num_turn: 3\n")
    result = CliRunner().invoke(app, ["generate", "--config", str(tmp_path / "bad.yaml"), "--dry-run"])
    assert result.exit_code != 0 and "unknown settings num_turn" in str(result.exception)


@pytest.mark.parametrize(
    "values, message",
    [
        ({"turn_policy": "loudest"}, "--turn-policy"),
        ({"generation_mode": "sideways"}, "--generation-mode"),
        ({"user_response_probability": 1.5}, "--user-response-probability"),
        ({"num_turns": 0}, "--num-turns"),
        ({"mode": "solo"}, "--mode"),
        ({"transcript_window": 0}, "--transcript-window"),
        ({"speaker_extra_body": "[1]"}, "--speaker-extra-body"),
        ({"director_thinking": "maybe"}, "--director-thinking"),
        ({"resume": True, "overwrite": True}, "--resume or --overwrite"),
    ],
)
def test_generate_settings_check_themselves(values, message):
    with pytest.raises(MascotError, match=message):
        GroupEpisodeSettings(**values)


def test_stage_1_settings_check_their_own_values():
    with pytest.raises(MascotError, match="--num-candidates must be at least 2"):
        CandidateSettings(num_candidates=1)
    with pytest.raises(MascotError, match="--score-margin must not be negative"):
        CandidateSettings(score_margin=-1)


def test_the_engine_settings_check_themselves_wherever_they_are_built():
    with pytest.raises(MascotError, match="--turn-policy"):
        EngineSettings(turn_policy="loudest")
    assert EngineSettings(user_big_five_profile="High Openness").enable_big_five


def test_the_engine_record_carries_every_engine_flag_and_each_role_s_thinking():
    from mascot.dialogue.run import engine_record

    s = GroupEpisodeSettings(num_turns=3, temperature=0.3, speaker_thinking="on", director_thinking="off", user_big_five_profile="High Openness")
    record = engine_record(s)
    assert record["num_turns"] == 3 and record["director_temperature"] == 0.3 and record["enable_big_five"]
    assert record["speaker_think"] is True and record["director_thinking"] is False
    assert s.roles["speaker"].thinking is True and s.roles["director"].thinking is False and s.roles["user"].thinking is None


def test_the_stage1_run_folder_follows_the_speaker_model():
    from mascot.stage1.run import individual_run_dir

    s = CandidateSettings(num_candidates=3, score_margin=0.2, judge_max_tokens=64, speaker_model="m", output_dir=Path("o"))
    assert individual_run_dir(s) == Path("o/individual_ESConv_m")


def _option_fields(classes):
    """(class, field) of every option (a flag: help text, not a positional argument) each class itself annotates."""
    import dataclasses

    for cls in dict.fromkeys(c for c in classes if dataclasses.is_dataclass(c)):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for name in cls.__dict__.get("__annotations__", {}):
            f = fields.get(name)
            if f is not None and "help" in f.metadata and not f.metadata.get("argument"):
                yield cls, f


def _every_settings_class():
    from mascot.commands import COMMANDS

    return [c for entry in COMMANDS for c in entry.settings_class().__mro__]


def test_every_flag_has_one_declaration():
    """A flag name has one declaration (type of value, spellings, checks, help) across every
    command; a command that takes it composes the group that declares it, or (`default_for`) gives
    it its own default and says what it reads there."""
    declared: dict[str, list[str]] = {}
    borrowed = []
    for cls, f in _option_fields(_every_settings_class()):
        owner = f.metadata.get("declared_by")
        if owner is None:
            declared.setdefault(f.name, []).append(f"{cls.__module__}.{cls.__qualname__}")
        else:
            borrowed.append((f"{cls.__module__}.{cls.__qualname__}", f.name, owner))
    assert {name: owners for name, owners in declared.items() if len(owners) > 1} == {}
    assert borrowed and all(owner in declared.get(name, []) for _, name, owner in borrowed), [
        b for b in borrowed if b[2] not in declared.get(b[1], [])
    ]


@pytest.mark.parametrize("words, mode", [(("generate",), "group"), (("generate",), "individual"), (("chat",), None), (("web",), None)])
def test_a_run_s_settings_take_each_flag_from_one_declaration(words, mode):
    """Groups composed by inheritance must not collide: each flag of the run's class is declared by one class of its MRO."""
    from mascot.commands import command

    cls = command(*words, mode=mode).settings_class()
    owners: dict[str, list[str]] = {}
    for owner, f in _option_fields(cls.__mro__):
        owners.setdefault(f.name, []).append(owner.__name__)
    assert {name: found for name, found in owners.items() if len(found) > 1} == {}
    assert GroupEpisodeSettings().num_episodes == EngineSettings().num_episodes == 2  # one default


def test_deprecated_spellings_still_work():
    """The reference's names are kept as extra spellings of the same settings."""
    s = GroupEpisodeSettings()
    names = {flag for f in cli_fields(type(s)) for flag in f.metadata.get("flags", ())}
    assert {"--model", "--directive-model", "--agent-model", "--token-budget"} <= names
    result = CliRunner().invoke(app, ["generate", "--dataset", "ESConv", "--data-file", str(ESCONV), "--agent-model", "./none", "--dry-run"])
    assert result.exit_code != 0 and "speaker model folder ./none" in str(result.exception)


def test_a_command_body_gets_validated_settings(monkeypatch):
    seen = []
    import mascot.dialogue.run as run

    monkeypatch.setattr(run, "run_group_generation", lambda cfg, command: seen.append(cfg))
    result = CliRunner().invoke(app, ["generate", "--dataset", "ESConv", "--num-turns", "2", "--temperature", "0.2"])
    assert result.exit_code == 0, result.output
    assert seen[0].num_turns == 2 and seen[0].temperature == 0.2  # the settings object itself reaches the run
    refused = CliRunner().invoke(app, ["generate", "--num-turns", "0"])
    assert refused.exit_code != 0 and "--num-turns" in str(refused.exception) and len(seen) == 1


def test_no_library_function_takes_settings_untyped():
    """A function that reads settings names their class (or the group it reads), never `Any`:
    what a setting reaches can then be followed from its declaration."""
    import ast

    src = Path(__file__).resolve().parent.parent / "src" / "mascot"
    untyped = []
    for path in src.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for arg in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
                    if arg.arg in ("s", "settings") or arg.arg.endswith("_settings"):
                        shown = ast.unparse(arg.annotation) if arg.annotation else None
                        if shown in (None, "Any", "object", "typing.Any"):
                            untyped.append(f"{path.relative_to(src)}:{node.lineno} {node.name}({arg.arg}: {shown})")
    assert untyped == []


def test_a_config_file_that_is_not_yaml_is_one_line(tmp_path):
    from mascot.settings import read_config_file

    bad = tmp_path / "bad.yaml"
    bad.write_text("mode: [oops\n")
    with pytest.raises(MascotError) as failed:
        read_config_file(bad)
    assert "\n" not in str(failed.value) and "not valid YAML (line 2, column 1)" in str(failed.value)

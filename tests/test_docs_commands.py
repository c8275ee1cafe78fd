"""Every `mascot ...` command in README.md and docs/*.md code blocks runs with `--dry-run`.

The commands are read from whatever the documents say now. Inputs they name are made in a scratch
folder from tiny fixtures (pairs, episodes, artefact folders, dataset files), so each command's
flags, data and defaults are checked by the real dry run. No network: model ids resolve through a
stand-in hub that knows every well-formed id, and endpoints answer /models with an empty list.
Commands that cannot take --dry-run (`mascot --help`, `mascot chat`, `mascot demo`, `mascot data`,
launcher-wrapped `-m mascot ...` lines) have each flag they use checked against their --help.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mascot.cli.app import app

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
NO_DRY_RUN = ("chat", "demo", "data", "adapters", "--help", "--version")
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)


def documented_commands() -> list[tuple[str, str]]:
    """(document, command line) for every command in a fenced code block, continuations joined."""
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if not doc.exists():
            continue
        for block in _FENCE.findall(doc.read_text(encoding="utf-8")):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = line.strip().removeprefix("$ ")
                if line.startswith("mascot ") or " -m mascot " in line:
                    found.append((doc.name, line))
    return found


def words(line: str) -> list[str]:
    """The command's words after `mascot`: comments dropped, `...` elisions dropped, optional
    `[--flag]` brackets opened."""
    tokens = shlex.split(line, comments=True)
    start = max(i for i, t in enumerate(tokens) if t == "mascot") + 1
    kept = []
    for token in tokens[start:]:
        if token == "...":
            continue
        kept.append(token[1:-1] if token.startswith("[") and token.endswith("]") else token)
    return kept


# --------------------------------------------------------------------------- fixtures


def dataset_in(name: str) -> str:
    lowered = name.lower()
    if "qmsum" in lowered:
        return "QMSum"
    if "empathetic" in lowered or "_ed_" in lowered or lowered.startswith("ed"):
        return "EmpatheticDialogues"
    return "ESConv"


def write_jsonl(path: Path, records) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(r.to_json() + "\n" for r in records), encoding="utf-8")


def write_run_config(folder: Path, dataset: str) -> None:
    config = {"run_id": folder.name, "command": "fixture", "output_file": "x", "settings": {"dataset": dataset}}
    (folder / "run_config.json").write_text(json.dumps(config), encoding="utf-8")


def fixture_contexts(dataset: str):
    from mascot.data.loaders import load_contexts

    source = {"QMSum": "qmsum_sample.jsonl", "ESConv": "esconv_sample.jsonl", "EmpatheticDialogues": "ed_sample.csv"}[dataset]
    return list(load_contexts(dataset, split="test", data_file=FIXTURES / source, limit=2))


def fixture_episodes(dataset: str, branching: bool):
    from mascot.dialogue.engine import EpisodeEngine
    from mascot.dialogue.settings import EngineSettings
    from mascot.rosters import roster_for_dataset
    from mascot.testing.players import group_client

    client = group_client()
    settings = EngineSettings(num_turns=2, num_candidates=2, generation_mode="branching" if branching else "independent")
    engine = EpisodeEngine(roster_for_dataset(dataset), {"director": client, "speaker": client, "user": client}, settings, dataset=dataset)

    async def collect():
        return [e for c in fixture_contexts(dataset) async for e in engine.run_context(c, lambda key: False)]

    return asyncio.run(collect())


def fixture_pairs(kind: str):
    from mascot.schema import PreferencePair

    def prompt(i: int) -> list[dict]:  # two distinct prompts: one default GRPO step (16 completions, 8 per prompt) needs 2
        return [{"role": "system", "content": "You are The Anchor."}, {"role": "user", "content": f"I cannot sleep ({i % 2})."}]

    return [
        PreferencePair(
            prompt=prompt(i),
            chosen=[{"role": "assistant", "content": f"good {i}"}],
            rejected=[{"role": "assistant", "content": f"bad {i}"}],
            margin=1.0,
            persona="The Anchor",
            kind=kind,
        )
        for i in range(4)
    ]


def fixture_candidates():
    from mascot.schema import Candidate

    prompt = [{"role": "system", "content": "You are The Anchor."}, {"role": "user", "content": "I cannot sleep."}]
    return [
        Candidate(
            candidate_id=f"c{i}", context_id="ctx-1", persona="The Anchor", prompt=prompt, response=f"reply {i}", candidate_idx=i, overall=float(i)
        )
        for i in range(2)
    ]


def artefact(folder: Path, role: str, base: str, adapter: bool = True) -> None:
    from mascot.train.artefact import METADATA_FILE, TrainingMetadata

    folder.mkdir(parents=True, exist_ok=True)
    task = "causal_lm" if role in ("speaker", "director") else "sequence_classification"
    meta = TrainingMetadata(role=role, trainer="grpo", base_model=base, task=task)
    (folder / METADATA_FILE).write_text(meta.model_dump_json(exclude_none=True), encoding="utf-8")
    if adapter:
        (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base, "r": 16}), encoding="utf-8")
        (folder / "adapter_model.safetensors").write_bytes(b"")  # dry runs check that the weights are there


def materialise(option: str, value: str, workdir: Path) -> str:
    """Makes the input a documented command names (a placeholder such as `.../x` gets a real path)."""
    path = Path(value.replace("...", "elided", 1)) if value.startswith("...") else Path(value)
    target = path if path.is_absolute() else workdir / path
    if target.exists() or option in ("--output-dir", "--output-file", "--output", "--cache-dir", "--log-file", "--served-adapters"):
        return str(path)
    dataset = dataset_in(str(path))
    if option == "--data-file":
        source = {"QMSum": "qmsum_sample.jsonl", "ESConv": "esconv_sample.jsonl", "EmpatheticDialogues": "ed_sample.csv"}[dataset]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIXTURES / source, target)
    elif option in ("--data-path", "--episode-dataset-path"):
        branching = option == "--episode-dataset-path" or "branching" in path.name
        write_jsonl(target / "episodes.jsonl", fixture_episodes(dataset, branching))
        write_jsonl(target / "pairs.jsonl", fixture_pairs("persona"))
        write_jsonl(target / "group_pairs.jsonl", fixture_pairs("episode"))
        write_jsonl(target / "directive_pairs.jsonl", fixture_pairs("directive"))
        write_jsonl(target / "candidates.jsonl", fixture_candidates())
        write_run_config(target, dataset)
    elif option in ("--input-file", "--episodes", "--a", "--b"):
        episodes = fixture_episodes(dataset, "branching" in str(path))
        for episode in episodes if option == "--b" else []:  # a study compares two different systems
            episode.metadata.system = "baseline"
        write_jsonl(target, episodes)
    elif option in ("--reward-model-path", "--group-reward-model-path"):
        artefact(target, "group_reward_model" if "group" in option else "persona_reward_model", "Qwen/Qwen3-0.6B")
    elif option == "--adapter" and "=" in value:  # `mascot eval --adapter NAME=PATH`
        artefact(workdir / value.split("=", 1)[1], "speaker", "Qwen/Qwen3-8B")
    elif option == "--adapter":
        artefact(target, "speaker", "Qwen/Qwen3-8B")
    elif option in ("--speaker-adapter", "--director-adapter") and ("/" in value or value.startswith(".")):
        artefact(target, option[2:].split("-")[0], "Qwen/Qwen3-8B")
    return str(path)


PATH_OPTIONS = (
    "--data-file",
    "--data-path",
    "--episode-dataset-path",
    "--input-file",
    "--episodes",
    "--reward-model-path",
    "--group-reward-model-path",
    "--adapter",
    "--speaker-adapter",
    "--director-adapter",
    "--a",
    "--b",
)


DEFAULT_INPUTS = {  # a trainer whose documented command relies on the default path of another's output
    ("train", "speaker"): ("--reward-model-path", "outputs/reward_model/Individual_{dataset}_Qwen3-0.6B"),
    ("train", "director-grpo"): ("--group-reward-model-path", "outputs/reward_model/group_reward_{dataset}_Qwen3-0.6B"),
}


def judge_file_on_study(option: str, path: Path, study: Path) -> None:
    """A judge's file (or run / compare folder) on the study's episodes: collective judgments, or
    one head-to-head verdict per pair."""
    from mascot.schema import Judgment
    from mascot.study.db import meta, opened

    if path.exists():
        return
    with opened(study) as conn:
        pairs = meta(conn)["episode_ids"].values()
    target = path if path.suffix == ".jsonl" else path / ("judgments_episodes.jsonl" if option == "--judgments" else "verdicts.jsonl")
    target.parent.mkdir(parents=True, exist_ok=True)
    if option == "--judgments":
        rows = [
            Judgment(item_id=f"{p[side]}#collective", judge_model="judge", rubric_version="v1", scope="collective", overall=3.0).to_json()
            for p in pairs
            for side in ("a", "b")
        ]
    else:
        rows = [
            json.dumps({"judge": "judge", "order": ["A", "B"], "episodes": {"A": p["a"], "B": p["b"]}, "winners": {"overall": "A"}, "failed": False})
            for p in pairs
        ]
    target.write_text("".join(row + "\n" for row in rows), encoding="utf-8")


def prepare(argv: list[str], workdir: Path) -> list[str]:
    out = list(argv)
    if out[:1] == ["serve"]:  # positional artefact folders
        for token in out[1:]:
            if token.startswith("-"):
                break
            if not (workdir / token).exists():
                artefact(workdir / token, "director" if "director" in token.lower() else "speaker", "Qwen/Qwen3-8B")
    if out[:2] == ["eval", "compare"]:  # positional episode files of the compared systems
        for token in out[2:]:
            if token.startswith("-"):
                break
            materialise("--input-file", token, workdir)
    for i, token in enumerate(out[:-1]):
        if token in PATH_OPTIONS:
            out[i + 1] = materialise(token, out[i + 1], workdir)
    study_file = out[2] if out[:2] == ["study", "results"] and len(out) > 2 else None
    if out[0] == "web" and "--study" in out:
        study_file = out[out.index("--study") + 1]
    if study_file and not (workdir / study_file).exists():  # a study file to read or serve
        from mascot.study.create import create_study
        from mascot.study.samples import write_sample_systems

        create_study(*write_sample_systems(workdir / "study_inputs"), workdir / study_file, raters=2)
    for i, token in enumerate(out[:-1]):
        if study_file and out[:2] == ["study", "results"] and token in ("--judgments", "--verdicts"):
            judge_file_on_study(token, workdir / out[i + 1], workdir / study_file)
    if out[:2] == ["prefs", "feedback"] and "--session-dir" in out:  # the web app's session folder, empty
        (workdir / out[out.index("--session-dir") + 1]).mkdir(parents=True, exist_ok=True)
    default = DEFAULT_INPUTS.get(tuple(out[:2]))
    if default and default[0] not in out:
        from mascot.data.registry import canonical_dataset_name

        dataset = canonical_dataset_name(out[out.index("--dataset") + 1]) if "--dataset" in out else "ESConv"
        materialise(default[0], default[1].format(dataset=dataset), workdir)
    return out


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A scratch project folder, and no network."""
    import mascot.commands.dryrun as dryrun
    import mascot.llm.served as serve

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("mascot.hub.hub_online", lambda: True)  # a stand-in hub that knows every id
    monkeypatch.setattr(dryrun, "_check_on_hub", lambda model, label: "hub")
    monkeypatch.setattr(serve, "list_served_models", lambda url, **kw: [])  # endpoints answer, list nothing
    import mascot.adapters.serve_command as serve_cmd

    monkeypatch.setattr(serve_cmd, "check_python_module", lambda python, module: None)  # vLLM lives elsewhere
    return work


COMMANDS = documented_commands()


def test_the_documents_hold_commands():
    assert len(COMMANDS) >= 10, COMMANDS


@pytest.mark.parametrize("doc, line", COMMANDS, ids=[f"{d}:{i}" for i, (d, _) in enumerate(COMMANDS)])
def test_documented_command_passes_its_dry_run(doc, line, workdir):
    argv = words(line)
    runner = CliRunner()
    if " -m mascot " in line or not argv or argv[0] in NO_DRY_RUN:
        check_flags_exist(runner, argv, doc, line)
        return
    argv = prepare(argv, workdir)
    result = runner.invoke(app, [*argv, "--dry-run"])
    detail = f"{doc}: `{line}` failed its dry run:\n{result.output}\n{result.exception!r}"
    assert result.exit_code == 0, detail
    assert '"dry_run"' in result.output or (argv[0] == "pipeline" and "No problems found" in result.output), detail  # the pipeline's is a table


def check_flags_exist(runner: CliRunner, argv: list[str], doc: str, line: str) -> None:
    """Commands without a dry run: the subcommand exists and knows every flag the line uses."""
    import typer.main

    command = typer.main.get_command(app)
    for word in [t for t in argv[:2] if not t.startswith("-")]:
        assert hasattr(command, "list_commands") and word in command.list_commands(None), f"{doc}: `{line}`: no subcommand {word!r}"
        command = command.get_command(None, word)
    known = {opt for param in command.params for opt in [*param.opts, *param.secondary_opts]} | {"--help"}
    for flag in (t.split("=")[0] for t in argv if t.startswith("--")):
        assert flag in known, f"{doc}: `{line}` uses {flag}, which `mascot {command.name}` does not take"

"""The adapter registry: trainers register what they write, versions are listed and compared on
the same held-out data, promoted only on evidence, rolled back, and resolved by runs pointed at
"current" (which record the version they used)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from train_helpers import base, keyword_pairs, one_thread_per_module, write_jsonl  # noqa: F401 - fixtures
from typer.testing import CliRunner

from mascot.adapter_registry import Registry, RegistryError, resolve_adapter
from mascot.adapters import compare as compare_module
from mascot.adapters.compare import CompareRequest, compare_versions
from mascot.adapters.promotion import promote, rollback
from mascot.cli.app import app
from mascot.testing.players import stub_responder
from mascot.testing.stub_server import start_stub_server
from mascot.train.artefact import TrainingMetadata, read_metadata, write_metadata
from mascot.train.registration import register

ESCONV_SAMPLE = Path(__file__).parent / "fixtures" / "esconv_sample.jsonl"


def artefact(folder: Path, role: str = "speaker", weights: bytes = b"w1", **evaluation) -> Path:
    """A trained-artefact folder as a trainer leaves it (metadata, adapter config, weights)."""
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "stub-model"}))
    (folder / "adapter_model.safetensors").write_bytes(weights)
    meta = TrainingMetadata(role=role, trainer="grpo", base_model="stub-model", dataset="ESConv", evaluation=evaluation,
                            train_metrics={"global_steps": 8}, hyperparameters={"output_dir": str(folder)})  # fmt: skip
    write_metadata(folder, meta)
    return folder


@pytest.fixture
def registry() -> Registry:
    return Registry.open()  # the test's own (conftest points $MASCOT_REGISTRY at it)


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


def said(result) -> str:
    """What a command told the user: its output, or the one-line error `mascot` prints."""
    return result.output + (str(result.exception) if result.exception else "")


def two_speakers(tmp_path: Path, registry: Registry) -> tuple[str, str]:
    first, _ = register(registry, artefact(tmp_path / "speaker_a", weights=b"a"))
    second, _ = register(registry, artefact(tmp_path / "speaker_b", weights=b"b"))
    return first.id, second.id


def fake_scores(monkeypatch, by_version: dict[str, list[float]]) -> None:
    """Each version's per-episode scores, as if its episodes had been generated and judged."""

    def scores(version, request, folder, data_file):
        return {f"ctx-{i}#e0": s for i, s in enumerate(by_version[version.id])}

    monkeypatch.setattr(compare_module, "policy_scores", scores)
    monkeypatch.setattr("mascot.pipeline.steps.pipeline_data_file", lambda *a: None)


def test_versions_are_numbered_per_role_and_the_same_weights_are_not_registered_twice(tmp_path, registry):
    speaker, new = register(registry, artefact(tmp_path / "s1", weights=b"a"))
    again, new_again = register(registry, tmp_path / "s1")
    director, _ = register(registry, artefact(tmp_path / "d1", role="director", weights=b"d"))
    speaker_2, _ = register(registry, artefact(tmp_path / "s2", weights=b"b", heldout_reward=0.7))
    assert (speaker.id, new, again.id, new_again, director.id, speaker_2.id) == ("speaker-v1", True, "speaker-v1", False, "director-v1", "speaker-v2")
    assert speaker_2.heldout == {"heldout_reward": 0.7} and speaker_2.steps == 8 and speaker_2.base_model == "stub-model"

    listed = cli("adapters", "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert [(v["id"], v["current"]) for v in json.loads(listed.output)] == [("director-v1", False), ("speaker-v1", False), ("speaker-v2", False)]
    table = cli("adapters", "list", "--role", "speaker")
    assert "speaker-v2" in table.output and "director-v1" not in table.output


def test_a_folder_without_metadata_is_one_line_and_a_torn_log_line_is_skipped(tmp_path, registry):
    (tmp_path / "empty").mkdir()
    result = cli("adapters", "register", str(tmp_path / "empty"))
    assert result.exit_code != 0 and "holds no trained artefact (no mascot_metadata.json)" in said(result)
    register(registry, artefact(tmp_path / "s1"))
    with open(registry.log_path, "ab") as fh:
        fh.write(b'{"event": "registered", "vers')  # a writer killed mid-line
    second, _ = register(registry, artefact(tmp_path / "s2", weights=b"other"))
    state = registry.state()
    assert second.id == "speaker-v2" and set(state.versions) == {"speaker-v1", "speaker-v2"} and state.unreadable_lines == 1


def test_promote_needs_a_comparison_with_current_and_refuses_a_worse_version(tmp_path, registry, monkeypatch):
    first, second = two_speakers(tmp_path, registry)
    assert promote(registry, first).current == first  # the first current needs no comparison
    with pytest.raises(RegistryError, match=f"{second} has not been compared with the current {first}"):
        promote(registry, second)

    fake_scores(monkeypatch, {first: [4.0, 4.5, 3.5, 4.0, 4.2, 3.9], second: [3.0, 3.5, 2.5, 3.2, 3.0, 2.8]})
    comparison = compare_versions(registry, second, "current", CompareRequest(output_dir=tmp_path / "cmp"))
    assert (comparison.verdict, comparison.n, comparison.difference) == ("worse", 6, pytest.approx(-1.0167, abs=1e-3))
    assert comparison.p_worse < 0.05 < comparison.p_better
    assert json.loads((tmp_path / "cmp" / "comparison.json").read_text())["verdict"] == "worse"
    refused = cli("adapters", "promote", second)
    assert refused.exit_code != 0 and "compares worse than the current one is not promoted" in said(refused)
    assert registry.state().current["speaker"] == first

    forced = cli("adapters", "promote", second, "--force")
    assert forced.exit_code == 0, forced.output
    event = registry.state().events[-1]
    assert (event.event, event.current, event.previous, event.forced) == ("promoted", second, first, True)


def test_a_better_version_is_promoted_and_rollback_restores_the_previous_current(tmp_path, registry, monkeypatch):
    first, second = two_speakers(tmp_path, registry)
    promote(registry, first)
    fake_scores(monkeypatch, {first: [3.0, 3.1, 2.9, 3.0, 3.2, 2.8], second: [4.0, 4.2, 3.8, 4.1, 4.0, 3.9]})
    result = cli("adapters", "compare", second, "--limit", "6")
    assert result.exit_code == 0, result.output
    assert f"{second} against {first}" in result.output and "better" in result.output
    promoted = cli("adapters", "promote", second)
    assert promoted.exit_code == 0 and f"{second} is now the current speaker (was {first})" in promoted.output
    assert registry.state().current["speaker"] == second

    # The comparison counts in either direction: read from the first version's side it is worse.
    with pytest.raises(RegistryError, match="compares worse than the current one"):
        promote(registry, first)
    back = cli("adapters", "rollback", "speaker")
    assert back.exit_code == 0 and f"{first} is the current speaker again (rolled back from {second})" in back.output
    assert registry.state().current["speaker"] == first
    with pytest.raises(RegistryError, match=f"no previous Speaker to roll back to: {first} is the only Speaker ever promoted"):
        rollback(registry, "speaker")


def test_a_version_whose_folder_changed_is_neither_promoted_nor_used(tmp_path, registry):
    version, _ = register(registry, artefact(tmp_path / "s1"))
    promote(registry, version.id)
    assert resolve_adapter("current", "speaker") == (str((tmp_path / "s1").resolve()), "speaker-v1")
    (tmp_path / "s1" / "adapter_model.safetensors").write_bytes(b"retrained in place")
    with pytest.raises(RegistryError, match="speaker-v1: the weights in .* changed after it was registered"):
        resolve_adapter("current", "speaker")
    with pytest.raises(RegistryError, match="no current Director"):
        resolve_adapter("current", "director")
    with pytest.raises(RegistryError, match="no version 'speaker-v7'"):
        resolve_adapter("v7", "speaker")
    assert resolve_adapter(str(tmp_path / "s1"), "speaker") == (str(tmp_path / "s1"), None)  # a folder is a folder


def test_a_run_pointed_at_current_uses_that_version_and_records_it(tmp_path, registry):
    folder = artefact(tmp_path / "director_a", role="director")
    version, _ = register(registry, folder)
    promote(registry, version.id)
    contexts = tmp_path / "esconv.jsonl"
    contexts.write_text(ESCONV_SAMPLE.read_text().splitlines()[0] + "\n")
    asked = []

    def responder(messages, request):
        asked.append((request["role"], request["model"]))
        return stub_responder(messages, request)

    lora = {"mascot-director": str(folder.resolve())}
    with start_stub_server(latency_s=0.001, responder=responder, served_models=["stub-model"], lora_modules=lora) as server:
        result = cli(
            "generate",
            "--mode",
            "group",
            "--dataset",
            "ESConv",
            "--data-file",
            str(contexts),
            "--model-name",
            "stub-model",
            "--output-dir",
            str(tmp_path / "out"),
            "--num-turns",
            "1",
            "--vllm-server-url",
            server.url,
            "--director-adapter",
            "current",
        )
    assert result.exit_code == 0, result.output
    assert {model for role, model in asked if role == "director"} == {"mascot-director"}
    (run_dir,) = (tmp_path / "out").iterdir()
    config = json.loads((run_dir / "run_config.json").read_text())
    assert config["settings"]["resolved"]["adapter_versions"] == {"director": "director-v1"}
    assert config["roles"]["director"]["adapter"] == str(folder.resolve())


def test_trainers_register_their_artefact_and_reward_models_compare_on_held_out_pairs(base, tmp_path, registry):
    from mascot.train.config import RewardModelSettings
    from mascot.train.reward_model import train_reward_model

    run = tmp_path / "individual_ED_tiny"
    write_jsonl(run / "pairs.jsonl", keyword_pairs(n_prompts=32, per_prompt=2))
    (run / "run_config.json").write_text(json.dumps({"settings": {"dataset": "EmpatheticDialogues", "rubric_version": "paper_v1"}}))
    common = dict(data_path=str(run), model_name=str(base), batch_size=4, eval_fraction=0.25, logging_steps=1, head_init="random", eval_steps=0)
    barely = train_reward_model(RewardModelSettings(**common, output_dir=str(tmp_path / "rm_a"), learning_rate=1e-6, max_steps=1))
    learnt = train_reward_model(RewardModelSettings(**common, output_dir=str(tmp_path / "rm_b"), learning_rate=3e-3, max_steps=24))
    assert (barely.metadata.registered_as, learnt.metadata.registered_as) == ("persona_reward_model-v1", "persona_reward_model-v2")
    assert read_metadata(learnt.output_dir).registered_as == "persona_reward_model-v2"  # the artefact knows its version
    version = registry.state().versions["persona_reward_model-v2"]
    assert version.heldout["heldout_pairwise_accuracy"] == learnt.metadata.evaluation["heldout_pairwise_accuracy"]

    held_out = write_jsonl(tmp_path / "held_out" / "pairs.jsonl", keyword_pairs(n_prompts=24, per_prompt=2, seed=99))
    promote(registry, "persona_reward_model-v1")
    missing = cli("adapters", "compare", "persona_reward_model-v2")
    assert missing.exit_code != 0 and "needs --pairs FILE" in said(missing)
    comparison = compare_versions(registry, "persona_reward_model-v2", "current", CompareRequest(pairs=held_out))
    assert comparison.n == 48 and comparison.verdict == "better", comparison
    assert comparison.candidate_mean > 0.9 and comparison.candidate_mean - comparison.reference_mean == pytest.approx(comparison.difference, abs=1e-3)
    assert promote(registry, "persona_reward_model-v2").current == "persona_reward_model-v2"


def test_registration_can_be_turned_off_and_a_failing_registry_never_costs_the_artefact(tmp_path, monkeypatch, caplog):
    from mascot.train.registration import register_trained

    folder = artefact(tmp_path / "s1")
    monkeypatch.setenv("MASCOT_REGISTRY", "off")
    assert register_trained(folder) is None
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("MASCOT_REGISTRY", str(blocked))
    assert register_trained(folder) is None
    assert "was not registered" in caplog.text and "mascot adapters register" in caplog.text
    assert (folder / "adapter_model.safetensors").read_bytes() == b"w1"


def test_serve_takes_a_version_and_serves_it_under_its_id(tmp_path, registry):
    from mascot.adapters.serve import adapter_from_artefact

    folder = artefact(tmp_path / "speaker_a")
    (folder / "adapter_config.json").write_text(json.dumps({"r": 8, "base_model_name_or_path": "stub-model"}))
    version, _ = register(registry, folder)
    served, base_model = adapter_from_artefact(version.id)
    assert (served.alias, served.path, base_model) == ("speaker-v1", str(folder.resolve()), "stub-model")
    assert adapter_from_artefact(version.id, "mine")[0].alias == "mine"


def test_trainer_flags_take_versions_and_the_artefact_records_which(tmp_path, registry):
    from mascot.train.config import DirectorGRPOSettings, SpeakerGRPOSettings

    speaker, _ = register(registry, artefact(tmp_path / "speaker_a"))
    group_rm, _ = register(registry, artefact(tmp_path / "grm", role="group_reward_model", weights=b"g"))
    persona_rm, _ = register(registry, artefact(tmp_path / "prm", role="persona_reward_model", weights=b"p"))
    promote(registry, speaker.id)
    director = DirectorGRPOSettings(data_path="episodes", speaker_adapter="current", group_reward_model_path="group_reward_model-v1")
    assert (director.speaker_adapter, director.group_reward_model_path) == (speaker.folder, group_rm.folder)
    assert director.registry_versions == {"speaker_adapter": "speaker-v1", "group_reward_model_path": "group_reward_model-v1"}
    served = DirectorGRPOSettings(data_path="episodes", speaker_adapter="speaker-v1", rollout_server_url="http://127.0.0.1:1/v1")
    assert served.speaker_adapter == "speaker-v1"  # with a rollout server it is the name that server serves it under
    assert SpeakerGRPOSettings(data_path="pairs", reward_model_path="v1").reward_model_path == persona_rm.folder
    with pytest.raises(RegistryError, match="is a Speaker, not a group reward model"):
        DirectorGRPOSettings(data_path="episodes", group_reward_model_path="speaker-v1")


def test_eval_systems_take_a_version_through_their_adapter_names(tmp_path, registry):
    from mascot.eval.plan import registry_reference
    from mascot.eval.systems import Catalogue

    catalogue = Catalogue(adapters={"director_grpo": "current"})  # as `--adapter director_grpo=current` makes it
    with pytest.raises(RegistryError, match="no current Director"):
        registry_reference(catalogue, "director_grpo", "director")
    version, _ = register(registry, artefact(tmp_path / "director_a", role="director"))
    promote(registry, version.id)
    assert registry_reference(catalogue, "director_grpo", "director") == "current"  # the run resolves and records it
    assert registry_reference(catalogue, "speaker_grpo", "speaker") is None  # the shipped folder template


def test_compare_dry_run_shows_the_runs_it_would_make_and_writes_nothing(tmp_path, registry):
    first, second = two_speakers(tmp_path, registry)
    result = cli("adapters", "compare", second, first, "--limit", "3", "--dry-run")
    assert result.exit_code == 0, said(result)
    plan = json.loads(result.output[: result.output.rindex("}") + 1])["resolved"]
    assert plan["role"] == "speaker" and plan["candidate"].startswith(f"{second} (")
    assert [line.split("--system ")[1].split()[0] for line in plan["episodes"]] == [first, second]
    assert all("--limit 3" in line and "--speaker-adapter" in line for line in plan["episodes"])
    assert not (registry.folder / "comparisons").exists()
    rm_a, _ = register(registry, artefact(tmp_path / "rm_a", role="persona_reward_model", weights=b"x"))
    rm_b, _ = register(registry, artefact(tmp_path / "rm_b", role="persona_reward_model", weights=b"y"))
    held_out = write_jsonl(tmp_path / "held_out.jsonl", keyword_pairs(n_prompts=3, per_prompt=2))
    counted = cli("adapters", "compare", rm_b.id, rm_a.id, "--pairs", str(held_out), "--dry-run")
    assert counted.exit_code == 0 and '"pairs": 6' in counted.output, said(counted)


def test_a_comparison_whose_paired_differences_are_all_the_same_is_told_without_an_interval():
    from mascot.adapter_registry import Comparison
    from mascot.adapters.promotion import describe_comparison

    same = Comparison(candidate="speaker-v2", reference="speaker-v1", figure="Speaker score", verdict="untestable", n=4,
                      candidate_mean=3.2, reference_mean=3.2, difference=0.0)  # fmt: skip
    assert describe_comparison(same) == (
        "speaker-v2 against speaker-v1: 3.200 vs 3.200 Speaker score (difference +0.000, no interval: "
        "every one of the 4 paired differences is the same): untestable"
    )

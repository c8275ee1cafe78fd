"""run_config.json records the run's settings object whole (`mascot.runs.record`), and one reader
maps the records older runs wrote (format 1, kept in tests/fixtures/format1 as mascot wrote them for
the golden runs) onto it: such a folder compares equal with the same settings today, resumes with
its own episode ids, and refuses a changed setting by the setting's name."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from cli_helpers import run_mascot

from mascot.errors import MascotError
from mascot.files import read_jsonl
from mascot.runs.record import FORMAT, read_settings, settings_record, settings_view
from mascot.runs.store import flatten_settings, settings_differences
from mascot.schema import Episode
from mascot.testing.stub_server import start_stub_server

HERE = Path(__file__).resolve().parent
FORMAT_1 = HERE / "fixtures" / "format1"
_SPEC = importlib.util.spec_from_file_location("golden_regenerate", HERE / "golden" / "regenerate.py")
golden = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(golden)


def recorded(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))["settings"]


@pytest.mark.parametrize("case", ["directed", "branching", "individual"])
def test_a_format_1_record_reads_as_the_same_settings_today(case):
    old, new = recorded(FORMAT_1 / f"{case}.run_config.json"), recorded(HERE / "golden" / case / "run_config.json")
    assert "format" not in old and new["format"] == FORMAT
    compared = set(flatten_settings(read_settings(old))) & set(flatten_settings(read_settings(new)))
    assert len(compared) >= 30  # the mapping lines the settings up: most of them are compared
    assert settings_differences(read_settings(old), read_settings(new)) == []
    for name in ("dataset", "seed", "max_tokens", "transcript_window", "repetition_penalty", "prompt_version"):
        assert settings_view(old)[name] == settings_view(new)[name], name
    assert settings_view(old)["roster"] == settings_view(new)["roster"] == "emotional_support@1.0"


def test_every_field_of_the_settings_is_recorded_under_its_own_name():
    from mascot.dialogue.run_settings import GroupEpisodeSettings
    from mascot.settings import as_dict

    s = GroupEpisodeSettings(num_turns=4, vllm_server_url=["http://127.0.0.1:9/v1"])
    record = settings_record(s, roster="emotional_support@1.0")
    expected = {k for k in as_dict(s) if not k.endswith("server_url")}
    assert expected <= set(record) and record["num_turns"] == 4 and "vllm_server_url" not in record
    assert record["settings_class"] == "mascot.dialogue.run_settings.GroupEpisodeSettings"
    assert settings_view(record)["roster"] == "emotional_support@1.0"  # the resolved roster over the flag


def test_a_run_folder_written_in_format_1_resumes_and_refuses_a_changed_setting(tmp_path):
    folder, responder, extra = golden.CASES["directed"]
    out = tmp_path / "out"
    with start_stub_server(port=0, latency_s=0.0, responder=golden._responder(responder), vllm_limits=True) as server:
        args = [*golden.COMMON, *[a.format(url=server.url) for a in extra], "--output-dir", str(out)]
        run_mascot(args)
        run = out / folder
        ids = [e.episode_id for e in read_jsonl(run / "episodes.jsonl", Episode)]
        old = (FORMAT_1 / "directed.run_config.json").read_text().replace("<tmp>", str(tmp_path)).replace("<repo>", str(HERE.parent))
        config = json.loads((run / "run_config.json").read_text())
        config["settings"] = json.loads(old)["settings"]  # the folder as an older mascot left it
        (run / "run_config.json").write_text(json.dumps(config))
        lines = (run / "episodes.jsonl").read_text().splitlines(keepends=True)
        (run / "episodes.jsonl").write_text(lines[0])  # one episode left to write again
        with pytest.raises(MascotError, match=r"num_turns: saved 3, now 2"):
            run_mascot([*args, "--num-turns", "2", "--resume"])
        run_mascot([*args, "--resume"])
    assert [e.episode_id for e in read_jsonl(run / "episodes.jsonl", Episode)] == ids
    assert recorded(run / "run_config.json")["format"] == FORMAT  # written in today's form once resumed


def test_a_settings_format_this_mascot_does_not_know_is_one_line():
    from mascot.files import StoreError

    with pytest.raises(StoreError, match=r"^run_config.json: settings format 7 is not one this mascot reads \(1 or 2\)"):
        read_settings({"format": 7, "num_turns": 3})

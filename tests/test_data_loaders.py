"""Dataset loaders on small fixtures in the real formats, plus an opt-in check on the real copies."""

from __future__ import annotations

import json
import shutil
import sys
import types
from pathlib import Path

import pytest

from mascot.data.empathetic import decode_text
from mascot.data.loaders import iter_contexts, load_contexts, split_name
from mascot.data.qmsum import detokenize, window_of
from mascot.data.registry import DatasetError
from mascot.data.sources import estimate_tokens
from mascot.schema import Context

FIXTURES = Path(__file__).parent / "fixtures"
REAL_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def _error(dataset: str, name: str, **kwargs) -> str:
    with pytest.raises(DatasetError) as info:
        load_contexts(dataset, data_file=FIXTURES / name, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


# --------------------------------------------------------------------------- ESConv


def test_esconv_contexts_from_jsonl_without_trailing_newline():
    assert not (FIXTURES / "esconv_sample.jsonl").read_bytes().endswith(b"\n")
    contexts = load_contexts("ESConv", data_file=FIXTURES / "esconv_sample.jsonl")
    assert [c.context_id for c in contexts] == ["esconv-test-1", "esconv-test-2", "esconv-test-3"]
    first, second, third = contexts
    assert first.dataset == "ESConv" and first.split == "test"
    assert first.emotion == "anxiety" and first.problem_type == "job crisis"
    assert first.situation.startswith("My team lead")
    assert first.conv_id == first.context_id
    # the supporter's greeting before the seeker's first turn is kept; later turns are not
    assert [(t.speaker, t.text) for t in first.opening_turns] == [
        ("supporter", "Hi there, how are you feeling today?"),
        ("user", "Not great, work has been overwhelming."),
    ]
    assert [t.speaker for t in second.opening_turns] == ["user"]
    assert [t.speaker for t in third.opening_turns] == ["supporter", "supporter", "user"]
    assert '"Biscuit"' in third.situation


def test_esconv_survey_keys_may_be_missing():
    contexts = load_contexts("esconv", data_file=FIXTURES / "esconv_sample.jsonl")
    assert [c.initial_emotion_intensity for c in contexts] == [4, 3, None]


def test_esconv_split_names_the_ids():
    contexts = load_contexts("esconv", split="validation", data_file=FIXTURES / "esconv_sample.jsonl")
    assert contexts[0].context_id == "esconv-valid-1" and contexts[0].split == "valid"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("esconv_bad_json.jsonl", "esconv_bad_json.jsonl:2: not valid JSON"),
        ("esconv_missing_field.jsonl", "esconv_missing_field.jsonl:2: field 'situation' must be a string (missing)"),
        ("esconv_no_seeker.jsonl", "esconv_no_seeker.jsonl:1: dialog has no seeker"),
        ("empty.jsonl", "no ESConv contexts"),
    ],
)
def test_esconv_malformed_files_name_file_and_line(name, expected):
    assert expected in _error("ESConv", name)


# --------------------------------------------------------------------------- Empathetic Dialogues


def test_ed_groups_rows_into_conversations():
    contexts = load_contexts("ed", split="valid", data_file=FIXTURES / "ed_sample.csv")
    assert [c.context_id for c in contexts] == ["hit:10_conv:20", "hit:11_conv:22", "hit:12_conv:24"]
    assert all(c.conv_id == c.context_id and c.dataset == "EmpatheticDialogues" for c in contexts)
    proud, furious, guilty = contexts
    assert proud.emotion == "proud"
    assert proud.situation == "I finally got the keys to my first apartment, after two years of saving."
    assert [(t.speaker, t.text) for t in proud.opening_turns] == [("user", "Guess what, I just signed the lease on my own place!")]
    # rows out of order: the opening is utterance 1, with its quoted comma and quotes intact
    assert furious.opening_turns[0].text == 'A tree came down on my car, and "of course" the neighbour says it\'s not his problem.'
    assert guilty.emotion == "guilty" and len(guilty.opening_turns) == 1


def test_ed_comma_decoding():
    assert decode_text("Today_comma_as i left") == "Today, as i left"
    assert decode_text("Yeah_comma_ fine") == "Yeah, fine"
    assert decode_text("1_comma_000 dollars") == "1,000 dollars"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ed_bad_columns.csv", "ed_bad_columns.csv:1: expected the columns conv_id,utterance_idx"),
        ("ed_bad_row.csv", "ed_bad_row.csv:4: expected 8 columns, found 9"),
        ("ed_bad_index.csv", "ed_bad_index.csv:3: utterance_idx must be an integer"),
    ],
)
def test_ed_malformed_files_name_file_and_line(name, expected):
    assert expected in _error("EmpatheticDialogues", name)


def test_ed_line_numbers_count_quoted_newlines(tmp_path):
    lines = (FIXTURES / "ed_sample.csv").read_text().splitlines(keepends=True)
    broken = tmp_path / "broken.csv"
    # header + 3 rows + a quoted utterance spanning lines 5-6 + one row: the broken record is on line 8
    assert len(lines) == 8
    broken.write_text("".join(lines[:7]) + "hit:12_conv:24,1,guilty\n")
    with pytest.raises(DatasetError, match=r"broken.csv:8: expected 8 columns, found 3"):
        load_contexts("ed", data_file=broken)


def test_ed_empty_csv(tmp_path):
    empty = tmp_path / "valid.csv"
    empty.write_text("")
    with pytest.raises(DatasetError, match="empty file"):
        load_contexts("ed", split="valid", data_file=empty)
    empty.write_text("conv_id,utterance_idx,context,prompt,speaker_idx,utterance,selfeval,tags\n")
    with pytest.raises(DatasetError, match="no EmpatheticDialogues contexts"):
        load_contexts("ed", split="valid", data_file=empty)


# --------------------------------------------------------------------------- QMSum


def test_qmsum_one_context_per_specific_query():
    contexts = load_contexts("QMSum", data_file=FIXTURES / "qmsum_sample.jsonl")
    assert [c.context_id for c in contexts] == ["qmsum-test-1-0", "qmsum-test-1-1", "qmsum-test-2-g0"]
    decision, next_meeting, general = contexts
    assert decision.is_meeting and decision.meeting == "qmsum-test-1"
    assert decision.query == "What did the group decide about the case?"
    assert decision.answer == "Plastic case, rubber buttons."
    # spans are strings; the window starts at the query's first relevant turn
    assert decision.start_idx == 2
    assert decision.transcript[0].speaker == "Industrial Designer"
    assert decision.transcript[0].text == "I think we shouldn't use the the the rubber case, it's too expensive."
    assert next_meeting.start_idx == 0  # the earliest of its two spans
    # the marker-only turn is skipped
    assert [t.text for t in next_meeting.transcript[:2]] == ["Okay, let's get started.", decision.transcript[0].text]
    # a meeting without specific queries falls back to its general query, from the first turn
    assert general.meeting == "qmsum-test-2" and general.start_idx == 0
    assert general.query == "What was the committee about?"


def test_qmsum_window_fits_token_budget():
    full = load_contexts("qmsum", data_file=FIXTURES / "qmsum_sample.jsonl", limit=1)[0]
    small = load_contexts("qmsum", data_file=FIXTURES / "qmsum_sample.jsonl", limit=1, transcript_window=40)[0]
    assert len(full.transcript) == 5  # everything from turn 2 to the end
    assert 0 < len(small.transcript) < len(full.transcript)
    assert sum(estimate_tokens(t.text) for t in small.transcript) <= 40
    # the next turn would not have fitted
    assert sum(estimate_tokens(t.text) for t in full.transcript[: len(small.transcript) + 1]) > 40


def test_qmsum_first_turn_longer_than_budget_is_cut():
    window = window_of([("Chair", " ".join(["word"] * 100))], 0, 13)
    assert len(window) == 1 and window[0].text == " ".join(["word"] * 10) + " ..."


def test_qmsum_detokenize():
    assert detokenize("That 's great . Doesn't it ?") == "That's great. Doesn't it?"
    assert detokenize("we do n't know ( maybe ) {disfmarker} yes , 50 % .") == "we don't know (maybe) yes, 50%."
    assert detokenize("{vocalsound} {pause}") == ""


def test_qmsum_val_split_name():
    assert split_name("QMSum", "validation") == "val"
    contexts = load_contexts("qmsum", split="valid", data_file=FIXTURES / "qmsum_sample.jsonl")
    assert contexts[0].context_id == "qmsum-val-1-0" and contexts[0].split == "val"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("qmsum_bad_span.jsonl", "qmsum_bad_span.jsonl:2: specific_query_list[1]: span start 99 is outside"),
        ("qmsum_missing_transcript.jsonl", "qmsum_missing_transcript.jsonl:1: field 'meeting_transcripts' must be a list"),
    ],
)
def test_qmsum_malformed_files_name_file_and_line(name, expected):
    assert expected in _error("QMSum", name)


def test_qmsum_reads_only_the_meetings_it_needs():
    # line 2 is malformed, but a limit met by line 1 never reads it
    contexts = load_contexts("qmsum", data_file=FIXTURES / "qmsum_bad_span.jsonl", limit=1)
    assert [c.context_id for c in contexts] == ["qmsum-test-1-g0"]
    stream = iter_contexts("qmsum", data_file=FIXTURES / "qmsum_bad_span.jsonl")
    assert next(stream).context_id == "qmsum-test-1-g0"


# --------------------------------------------------------------------------- selection and paths


def test_limit_keeps_file_order_and_shuffle_is_seeded():
    path = FIXTURES / "ed_sample.csv"
    everything = [c.context_id for c in load_contexts("ed", data_file=path)]
    assert [c.context_id for c in load_contexts("ed", data_file=path, limit=2)] == everything[:2]
    orders = {seed: [c.context_id for c in load_contexts("ed", data_file=path, shuffle=True, seed=seed)] for seed in range(8)}
    assert all(sorted(order) == sorted(everything) for order in orders.values())
    assert len({tuple(order) for order in orders.values()}) > 1  # seeds differ
    again = [c.context_id for c in load_contexts("ed", data_file=path, shuffle=True, seed=3)]
    assert again == orders[3]
    picked = [c.context_id for c in load_contexts("ed", data_file=path, shuffle=True, seed=3, limit=2)]
    assert picked == orders[3][:2]


def test_data_file_may_be_a_folder_of_splits(tmp_path):
    shutil.copy(FIXTURES / "ed_sample.csv", tmp_path / "valid.csv")
    contexts = load_contexts("ed", split="validation", data_file=tmp_path)
    assert len(contexts) == 3 and contexts[0].split == "valid"
    with pytest.raises(DatasetError, match=r"no test\.csv in this folder \(found: valid\.csv\)"):
        load_contexts("ed", split="test", data_file=tmp_path)


def test_bad_arguments_are_one_line_errors(tmp_path):
    with pytest.raises(DatasetError, match="no such file"):
        load_contexts("esconv", data_file=tmp_path / "missing.jsonl")
    with pytest.raises(DatasetError, match="unknown split 'dev2'"):
        load_contexts("esconv", split="dev2", data_file=FIXTURES / "esconv_sample.jsonl")
    with pytest.raises(DatasetError, match="unknown dataset"):
        load_contexts("dailydialog", data_file=FIXTURES / "esconv_sample.jsonl")
    with pytest.raises(DatasetError, match="--limit must be at least 1"):
        load_contexts("esconv", data_file=FIXTURES / "esconv_sample.jsonl", limit=0)


# --------------------------------------------------------------------------- the hub path


@pytest.fixture
def fake_datasets(monkeypatch):
    """A stand-in for the `datasets` package: records calls, returns scripted rows or raises."""
    module = types.ModuleType("datasets")
    module.calls = []
    module.rows = []
    module.error = None

    def load_dataset(path, split=None, **kwargs):
        module.calls.append((path, split, kwargs))
        if module.error:
            raise module.error
        return list(module.rows)

    module.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", module)
    monkeypatch.setattr("mascot.hub.hub_online", lambda: True)  # the stand-in is the hub, and it answers
    return module


def test_hub_unreachable_suggests_data_file(fake_datasets):
    fake_datasets.error = ConnectionError("Couldn't reach 'thu-coai/esconv' on the Hub\n(offline mode is enabled)")
    with pytest.raises(DatasetError) as info:
        load_contexts("esconv", split="valid")
    message = str(info.value)
    assert "\n" not in message and "--data-file" in message and "thu-coai/esconv" in message
    assert fake_datasets.calls == [("thu-coai/esconv", "validation", {})]


def test_offline_and_not_cached_is_one_line_before_any_hub_request(fake_datasets, monkeypatch, tmp_path):
    monkeypatch.setattr("mascot.hub.hub_online", lambda: False)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(DatasetError) as info:
        load_contexts("esconv", split="test")
    assert str(info.value) == (
        "ESConv split 'test' is read from the Hugging Face hub (thu-coai/esconv), which is unreachable offline, "
        "and is not in the datasets cache: pass --data-file with a local copy"
    )
    assert fake_datasets.calls == []  # no retries against an unreachable hub
    (tmp_path / "empty-cache" / "thu-coai___esconv" / "default" / "0.0.0" / "abc").mkdir(parents=True)
    fake_datasets.rows = [{"text": line} for line in (FIXTURES / "esconv_sample.jsonl").read_text().splitlines()]
    assert load_contexts("esconv", split="test")  # a prepared copy in the cache: loaded offline
    assert fake_datasets.calls == [("thu-coai/esconv", "test", {})]


def test_hub_rows_become_contexts(fake_datasets):
    # ESConv's hub export holds each dialogue as a JSON string in a `text` column
    lines = (FIXTURES / "esconv_sample.jsonl").read_text().splitlines()
    fake_datasets.rows = [{"text": line} for line in lines]
    contexts = load_contexts("esconv", split="test", limit=2)
    assert [c.context_id for c in contexts] == ["esconv-test-1", "esconv-test-2"]
    assert contexts[0].opening_turns[-1].speaker == "user"

    fake_datasets.rows = [
        {
            "conv_id": "hit:1_conv:2",
            "utterance_idx": 1,
            "context": "joyful",
            "prompt": "I won_comma_ finally",
            "speaker_idx": 1,
            "utterance": "I won the raffle_comma_ can you believe it?",
            "selfeval": "",
            "tags": "",
        },
        {
            "conv_id": "hit:1_conv:2",
            "utterance_idx": 2,
            "context": "joyful",
            "prompt": "I won_comma_ finally",
            "speaker_idx": 2,
            "utterance": "No way!",
            "selfeval": "",
            "tags": "",
        },
    ]
    (ed,) = load_contexts("ed", split="valid")
    assert ed.context_id == "hit:1_conv:2" and ed.opening_turns[0].text == "I won the raffle, can you believe it?"
    assert fake_datasets.calls[-1] == ("facebook/empathetic_dialogues", "validation", {"revision": "refs/convert/parquet"})

    fake_datasets.rows = [json.loads(line) for line in (FIXTURES / "qmsum_sample.jsonl").read_text().splitlines()]
    contexts = load_contexts("qmsum", split="validation")
    assert [c.context_id for c in contexts] == ["qmsum-val-1-0", "qmsum-val-1-1", "qmsum-val-2-g0"]
    path, split, kwargs = fake_datasets.calls[-1]
    assert path == "json" and kwargs["data_files"].endswith("/data/ALL/jsonl/val.jsonl")


def test_hub_without_datasets_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(DatasetError, match=r"needs the 'datasets' package .*--data-file"):
        load_contexts("qmsum")


# --------------------------------------------------------------------------- CLI


def test_cli_preview_jsonl_and_rich():
    from typer.testing import CliRunner

    from mascot.cli.app import app

    runner = CliRunner()
    result = runner.invoke(app, ["data", "preview", "--dataset", "ed", "--data-file", str(FIXTURES / "ed_sample.csv"), "--limit", "2", "--jsonl"])
    assert result.exit_code == 0, result.output
    records = [Context.model_validate_json(line) for line in result.output.splitlines()]
    assert [r.context_id for r in records] == ["hit:10_conv:20", "hit:11_conv:22"]

    result = runner.invoke(app, ["data", "preview", "--dataset", "qmsum", "--data-file", str(FIXTURES / "qmsum_sample.jsonl")])
    assert result.exit_code == 0, result.output
    assert "qmsum-test-1-0" in result.output and "What did the group decide" in result.output

    result = runner.invoke(app, ["data", "preview", "--dataset", "esconv", "--data-file", str(FIXTURES / "esconv_bad_json.jsonl")])
    assert isinstance(result.exception, DatasetError)


# --------------------------------------------------------------------------- real data (opt-in)


@pytest.mark.realdata
@pytest.mark.parametrize(
    ("dataset", "folder", "split", "expected"),
    [
        ("ESConv", "esconv", "train", 910),
        ("ESConv", "esconv", "valid", 195),
        ("ESConv", "esconv", "test", 195),
        ("EmpatheticDialogues", "ed", "valid", 2770),
        ("EmpatheticDialogues", "ed", "test", 2547),
        ("QMSum", "qmsum", "val", 35),
        ("QMSum", "qmsum", "test", 35),
    ],
)
def test_real_data_splits(dataset, folder, split, expected):
    if not (REAL_DATA / folder).is_dir():
        pytest.skip(f"{REAL_DATA / folder} is absent")
    contexts = load_contexts(dataset, split=split, data_file=REAL_DATA / folder)
    assert len({c.context_id for c in contexts}) == len(contexts)
    if dataset == "QMSum":
        assert len({c.meeting for c in contexts}) == expected
        for c in contexts:
            assert c.query and c.transcript and c.start_idx is not None
            assert sum(estimate_tokens(t.text) for t in c.transcript) <= 1500 or len(c.transcript) == 1
            assert not any("{disfmarker}" in t.text or " ." in t.text for t in c.transcript)
        return
    assert len(contexts) == expected
    for c in contexts:
        assert c.situation and c.emotion and c.opening_turns
        assert c.opening_turns[-1].speaker == "user" and c.opening_turns[-1].text
        assert "_comma_" not in c.situation + c.opening_turns[-1].text
        if dataset == "ESConv":
            assert c.problem_type

import json

import pytest

from mascot.files import RecordFormatError, StoreError, read_jsonl, redact, repair_torn_tail
from mascot.runs.store import RunStore
from mascot.schema import Context, RunConfig


def ctx(i: int) -> Context:
    return Context(context_id=f"c{i}", dataset="ESConv")


def store_for(path, **kw):
    return RunStore(path, outputs=("out.jsonl",), key_of=lambda d: d["context_id"], **kw)


def test_existing_output_is_an_error_without_resume_or_overwrite(tmp_path):
    with store_for(tmp_path / "run") as store:
        store.append(ctx(0))
    with pytest.raises(StoreError, match="--resume .* --overwrite"):
        store_for(tmp_path / "run").open()
    assert len(list(read_jsonl(tmp_path / "run" / "out.jsonl", Context))) == 1


def test_resume_skips_written_records_and_overwrite_starts_over(tmp_path):
    with store_for(tmp_path / "run") as store:
        for i in range(3):
            store.append(ctx(i))
    with store_for(tmp_path / "run", resume=True) as store:
        assert store.done_keys == {"c0", "c1", "c2"} and store.summary.num_resumed_records == 3
        store.append(ctx(3))
    assert [c.context_id for c in read_jsonl(tmp_path / "run" / "out.jsonl", Context)] == ["c0", "c1", "c2", "c3"]
    with store_for(tmp_path / "run", overwrite=True) as store:
        assert not store.done_keys
        store.append(ctx(9))
    assert [c.context_id for c in read_jsonl(tmp_path / "run" / "out.jsonl", Context)] == ["c9"]


def test_torn_last_line_is_dropped_on_resume(tmp_path):
    with store_for(tmp_path / "run") as store:
        store.append(ctx(0))
        store.append(ctx(1))
    path = tmp_path / "run" / "out.jsonl"
    with open(path, "a") as fh:
        fh.write('{"context_id": "c2", "data')
    with store_for(tmp_path / "run", resume=True) as store:
        assert store.done_keys == {"c0", "c1"} and store.summary.num_torn_lines_dropped == 1
        store.append(ctx(2))
    assert [c.context_id for c in read_jsonl(path, Context)] == ["c0", "c1", "c2"]


def test_a_broken_line_inside_the_file_stops_resume_naming_where(tmp_path):
    with store_for(tmp_path / "run") as store:
        store.append(ctx(0))
        store.append(ctx(1))
    path = tmp_path / "run" / "out.jsonl"
    first, second = path.read_text().splitlines()
    path.write_text(f"{first}\n{second[:-1]},,}}\n{first}\n")  # a mangled middle line: not a torn tail
    with pytest.raises(StoreError) as info:
        store_for(tmp_path / "run", resume=True).open()
    assert str(info.value).startswith(f"{path}:2: unreadable line (") and "at column " in str(info.value)
    assert "\n" not in str(info.value) and path.read_text().count("\n") == 3  # nothing rewritten


def test_repair_leaves_complete_files_alone(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n')
    assert repair_torn_tail(path) == 0 and path.read_text() == '{"a": 1}\n'


def test_a_second_run_on_the_same_directory_is_refused(tmp_path):
    with store_for(tmp_path / "run"):
        with pytest.raises(StoreError, match="in use"):
            store_for(tmp_path / "run", resume=True).open()


def test_summary_records_status_and_counters(tmp_path):
    with pytest.raises(RuntimeError):
        with store_for(tmp_path / "run") as store:
            store.counters.num_empty_responses += 2
            raise RuntimeError("boom")
    summary = json.loads((tmp_path / "run" / "run_summary.json").read_text())
    assert summary["status"] == "failed" and "boom" in summary["error"]
    assert summary["counters"]["num_empty_responses"] == 2
    with store_for(tmp_path / "run", resume=True) as store:
        assert store.counters.num_empty_responses == 2  # counters carry over a resume


def test_secrets_are_redacted_from_run_config(tmp_path, monkeypatch):
    with store_for(tmp_path / "run") as store:
        store.write_config(
            RunConfig(
                run_id="r", command="c", output_file="o", settings={"api_key": "sk-secret", "api_key_env": "OPENAI_API_KEY", "nested": {"token": "t"}}
            )
        )
    text = (tmp_path / "run" / "run_config.json").read_text()
    assert "sk-secret" not in text and '"t"' not in text and "OPENAI_API_KEY" in text
    assert redact({"authorization": "Bearer x"}) == {"authorization": "***"}


def test_malformed_jsonl_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"context_id": "a", "dataset": "ED"}\n{"dataset": "ED"}\n')
    with pytest.raises(RecordFormatError, match=r"bad.jsonl:2: not a valid Context"):
        list(read_jsonl(path, Context))

"""The one episode reader (`mascot.episodes`) that judging, metrics, pairing, training, the study and
comparison share: a malformed line is skipped, counted and logged once with its line number; a
file without a valid episode is one line; the cut-short last line of a stopped run is tolerated."""

import logging

import pytest
from judge_helpers import sample_episode

from mascot.episodes import episode_file_path, load_episode_file
from mascot.errors import MascotError
from mascot.train.data import load_episodes


def line(episode_id: str) -> str:
    return sample_episode(episode_id).model_dump_json(exclude_none=True) + "\n"


def test_malformed_lines_are_skipped_counted_and_logged_once(tmp_path, caplog):
    path = tmp_path / "episodes.jsonl"
    path.write_text(
        line("a") + "{not json\n" + line("b") + '["a list"]\n' + '{"episode_id": "c", "metadata": {"dataset": "ESConv"}, "turns": 3}\n' + line("d")
    )
    with caplog.at_level(logging.WARNING, logger="mascot.episodes"):
        loaded = load_episode_file(path)
    assert [e.episode_id for e in loaded.episodes] == ["a", "b", "d"]
    assert loaded.skipped_lines == [2, 4, 5] and not loaded.torn_tail
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "skipped 3 malformed lines (lines 2, 4, 5; the first: episodes.jsonl:2: not valid JSON" in warnings[0]
    assert loaded.warnings == warnings  # reports carry the same line


def test_a_file_without_a_valid_episode_is_one_line(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(MascotError, match=r"empty.jsonl: no episodes in the file \(it is empty\)$"):
        load_episode_file(empty)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops\n[1]\n")
    with pytest.raises(MascotError, match=r"no episodes in the file \(2 malformed lines, the first: bad.jsonl:1: not valid JSON") as caught:
        load_episode_file(bad)
    assert "\n" not in str(caught.value)


def test_a_cut_short_last_line_is_tolerated_not_counted(tmp_path, caplog):
    path = tmp_path / "episodes.jsonl"
    path.write_text(line("a") + line("b") + line("c")[:40])  # a killed run's half-written record
    with caplog.at_level(logging.WARNING, logger="mascot.episodes"):
        loaded = load_episode_file(path)
    assert [e.episode_id for e in loaded.episodes] == ["a", "b"]
    assert loaded.torn_tail and loaded.skipped_lines == []
    assert "cut short" in caplog.records[0].getMessage()
    only_torn = tmp_path / "only.jsonl"
    only_torn.write_text(line("a")[:30])
    with pytest.raises(MascotError, match="only a cut-short last line"):
        load_episode_file(only_torn)


def test_training_reads_episodes_by_the_same_rule(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "episodes.jsonl").write_text(line("a") + "{bad\n" + line("b")[:25])
    file, episodes = load_episodes(run)
    assert file == run / "episodes.jsonl" and [e.episode_id for e in episodes] == ["a"]
    assert episode_file_path(run) == file


def test_duplicate_ids_and_missing_files_are_refused(tmp_path):
    path = tmp_path / "dup.jsonl"
    path.write_text(line("a") + line("a"))
    with pytest.raises(MascotError, match="occur more than once"):
        load_episode_file(path)
    with pytest.raises(MascotError, match="input file not found"):
        load_episode_file(tmp_path / "missing.jsonl")
    with pytest.raises(MascotError, match="is a folder"):
        load_episode_file(tmp_path)

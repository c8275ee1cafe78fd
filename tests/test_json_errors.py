"""A malformed JSON line or flag is placed where the mistake is: the line, and the column as the
text shown reads (characters, not bytes; the one line an error message shows)."""

import pytest

from mascot.episodes import load_episode_file
from mascot.errors import MascotError
from mascot.files import RecordFormatError, iter_json_objects, read_jsonl
from mascot.pipeline.settings import parse_step_flags
from mascot.schema import Episode
from mascot.settings_groups import parse_extra_body

# The stray `x` is the 54th character of the second line (after a name with accents: 4 bytes more).
GOOD = '{"episode_id": "ctx-1:e0", "context_id": "ctx-1", "turns": [], "metadata": {"dataset": "ESConv"}}'
BAD = '{"episode_id": "café-été-1:e0", "context_id": "c12", x "turns": []}'


@pytest.fixture
def bad_file(tmp_path):
    assert BAD.index("x ") + 1 == 54
    path = tmp_path / "episodes.jsonl"
    path.write_text(GOOD + "\n" + BAD + "\n", encoding="utf-8")
    return path


def test_every_jsonl_reader_names_line_2_column_54(bad_file):
    with pytest.raises(
        RecordFormatError, match=r"episodes.jsonl:2: not valid JSON \(Expecting property name enclosed in double quotes at column 54\)$"
    ):
        list(iter_json_objects(bad_file))
    with pytest.raises(
        RecordFormatError, match=r"episodes.jsonl:2: not valid JSON \(Expecting property name enclosed in double quotes at column 54\)$"
    ):
        list(read_jsonl(bad_file, Episode))
    loaded = load_episode_file(bad_file, fallback_dataset="ESConv")
    assert len(loaded.episodes) == 1 and loaded.skipped_lines == [2]
    assert "episodes.jsonl:2: not valid JSON (Expecting property name enclosed in double quotes at column 54)" in loaded.warnings[0]


def test_a_message_ending_in_at_reads_once(tmp_path):
    path = tmp_path / "cut.jsonl"
    path.write_text('{"a": "line\tbreak"}\n', encoding="utf-8")
    with pytest.raises(RecordFormatError, match=r"cut.jsonl:1: not valid JSON \(Invalid control character at column 12\)$"):
        list(iter_json_objects(path))


def test_a_flag_of_several_lines_is_placed_in_the_one_line_shown():
    text = '{"chat_template_kwargs": {"enable_thinking": false},\n  "top_k": 20,\n  x "min_p": 0}'
    shown = '{"chat_template_kwargs": {"enable_thinking": false}, "top_k": 20, x "min_p": 0}'
    column = shown.index(" x ") + 2
    with pytest.raises(
        MascotError, match=rf"^--extra-body is not valid JSON \(Expecting property name enclosed in double quotes at column {column}\): "
    ) as caught:
        parse_extra_body(text)
    assert str(caught.value).endswith(shown)
    with pytest.raises(MascotError, match=r"^--steps is not valid JSON \(Expecting ':' delimiter at column 19\): "):
        parse_step_flags('{"sft":\n   {"epochs" 2}}')

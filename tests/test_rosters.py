import pytest

from mascot.rosters import RosterError, big_five_profile, load_big_five, load_roster, roster_for_dataset


def test_builtin_rosters_have_the_known_personas():
    assert load_roster("emotional_support").names == ["The Anchor", "The Catalyst", "The Beacon"]
    assert load_roster("meetings").names == ["Minutes Scribe", "Decision Logger", "Action Item Captain", "Critic"]
    for persona in load_roster("meetings").personas:
        assert persona.traits and persona.linguistic_style and persona.expertise and persona.disposition


def test_roster_for_dataset():
    assert roster_for_dataset("qmsum").name == "meetings"
    assert roster_for_dataset("ED").name == "emotional_support"
    assert roster_for_dataset("ESConv").version == "1.0"


def test_ten_big_five_profiles():
    profiles = load_big_five()
    assert len(profiles) == 10
    assert big_five_profile("high openness").trait == "Openness"
    with pytest.raises(RosterError):
        big_five_profile("Very Open")


def test_custom_roster_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: duo\nversion: '2'\npersonas:\n  - {name: Sage, role: listener}\n  - {name: Spark, role: motivator}\n")
    roster = load_roster(str(path))
    assert roster.ident == "duo@2" and roster.names == ["Sage", "Spark"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: x\nversion: '1'\npersonas: []\n", "at least one persona"),
        ("name: x\nversion: '1'\npersonas:\n  - {name: A, role: r}\n  - {name: A, role: r}\n", "unique"),
        ("name: x\npersonas: [\n", "not valid YAML"),
        ("name: x\nversion: '1'\npersonas:\n  - {role: r}\n", "invalid roster"),
    ],
)
def test_bad_roster_files_give_one_line_errors(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(RosterError, match=message) as info:
        load_roster(str(path))
    assert "\n" not in str(info.value)


def test_unknown_roster_name():
    with pytest.raises(RosterError, match="unknown roster"):
        load_roster("nope")

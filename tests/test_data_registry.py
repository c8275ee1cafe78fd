"""The dataset registry: a dataset registered once is found by its name and aliases and drives the
loader, the split naming, the evaluation splits, the roster, the domain and the file-name guess."""

import sys
import types

import pytest

from mascot.data import registry
from mascot.data.loaders import load_contexts, split_name
from mascot.data.registry import Dataset, DatasetError, canonical_dataset_name, dataset, dataset_domain, guess_dataset
from mascot.rosters import roster_for_dataset
from mascot.rubrics import domain_of
from mascot.schema import Context


@pytest.fixture
def toy(monkeypatch, tmp_path):
    """A meetings dataset named ToyMeet (alias tm) whose reader writes one context per line of a
    text file, the split name in each id; lines starting with `#` are its `chatter` subset."""
    reader = types.ModuleType("toy_reader")
    reader.file_candidates = lambda split: [f"{split}.txt"]

    def iter_file(path, split, **_):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            yield Context(context_id=f"toy-{split}-{number}", dataset="ToyMeet", split=split, meeting="m", query=line)

    reader.iter_file = iter_file
    reader.iter_hub = lambda split, **_: iter(())
    reader.chatter = lambda context: "chatter" if context.query.startswith("#") else "work"
    monkeypatch.setitem(sys.modules, "toy_reader", reader)
    monkeypatch.setattr(registry, "DATASETS", registry.DATASETS)
    monkeypatch.setattr(registry, "_BY_KEY", dict(registry._BY_KEY))
    registry.register(
        Dataset(
            "ToyMeet",
            "meetings",
            "toy_reader",
            aliases=("tm",),
            split_names={"train": "tr", "valid": "dv", "test": "te"},
            subsets=("chatter",),
            context_subset="toy_reader:chatter",
            roster="meetings",
            file_hints=("toymeet",),
        )
    )
    (tmp_path / "te.txt").write_text("# hello\nthe budget\n# bye\n")
    return tmp_path


def test_a_registered_dataset_is_found_by_name_and_alias(toy):
    assert canonical_dataset_name("toymeet") == canonical_dataset_name(" TM ") == "ToyMeet"
    assert dataset("tm").domain == dataset_domain("ToyMeet") == domain_of("ToyMeet") == "meetings"
    assert "ToyMeet" in registry.dataset_names()
    assert guess_dataset("group_toymeet_model.jsonl") == "ToyMeet"


def test_a_registered_dataset_drives_loader_splits_and_roster(toy):
    contexts = load_contexts("tm", split="test", data_file=toy)
    assert [c.context_id for c in contexts] == ["toy-te-1", "toy-te-2", "toy-te-3"]
    assert split_name("ToyMeet", "validation") == "dv"
    assert [c.query for c in load_contexts("tm", split="chatter", data_file=toy)] == ["# hello", "# bye"]
    assert roster_for_dataset("tm").name == roster_for_dataset("QMSum").name


def test_unknown_names_and_taken_names_are_one_line_errors(toy):
    with pytest.raises(DatasetError, match="unknown dataset 'nope': choose one of ESConv, EmpatheticDialogues, QMSum, ToyMeet"):
        dataset("nope")
    with pytest.raises(DatasetError, match="already registered"):
        registry.register(Dataset("Other", "meetings", "toy_reader", aliases=("ed",)))
    with pytest.raises(DatasetError, match="unknown split 'positive' for ToyMeet"):
        load_contexts("ToyMeet", split="positive", data_file=toy)


def test_built_in_entries():
    assert split_name("QMSum", "valid") == "val" and split_name("ESConv", "val") == "valid"
    assert canonical_dataset_name("ED") == canonical_dataset_name("empathetic-dialogues") == "EmpatheticDialogues"
    assert [d.name for d in registry.DATASETS if d.out_of_domain] == ["ESConv"]
    assert registry.DATASET_CHOICES == "ESConv, EmpatheticDialogues (ED) or QMSum"
    with pytest.raises(DatasetError, match="reads ESConv or EmpatheticDialogues files"):
        dataset("QMSum").sft_dialogues("x.jsonl")

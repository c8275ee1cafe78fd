"""Evaluation splits: ED by valence, QMSum by domain, ESConv as out-of-domain (fixtures here; the
real files under ../shared/data behind the realdata marker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mascot.data.loaders import load_contexts
from mascot.data.registry import DatasetError
from mascot.data.subsets import ed_valence, meeting_domain, parse_split

FIXTURES = Path(__file__).parent / "fixtures"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SHARED = SHARED if SHARED.is_dir() else Path("/work/shared/data")


def test_the_valence_mapping_covers_the_32_labels_once():
    mapping = ed_valence()
    assert len(mapping) == 32 and set(mapping.values()) == {"positive", "neutral", "negative"}
    assert mapping["proud"] == "positive" and mapping["surprised"] == "neutral" and mapping["furious"] == "negative"


def test_ed_valence_splits_filter_the_test_split():
    positive = load_contexts("ED", split="positive", data_file=FIXTURES / "ed_sample.csv")
    negative = load_contexts("ED", split="negative", data_file=FIXTURES / "ed_sample.csv")
    assert [c.emotion for c in positive] == ["proud"] and sorted(c.emotion for c in negative) == ["furious", "guilty"]
    assert all(c.split == "test" for c in positive + negative)  # ids as in the test split


def test_an_empty_subset_and_a_foreign_subset_are_one_line_each():
    with pytest.raises(DatasetError, match="no EmpatheticDialogues contexts in split 'neutral'"):
        load_contexts("ED", split="neutral", data_file=FIXTURES / "ed_sample.csv")
    with pytest.raises(
        DatasetError, match=r"unknown split 'negative' for QMSum: choose one of train, valid \(validation, val\), test, product, academic, committee"
    ):
        parse_split("QMSum", "negative")
    assert parse_split("EmpatheticDialogues", "valid:negative") == ("valid", "negative")
    assert parse_split("ESConv", "ood") == ("test", "ood")


@pytest.mark.parametrize(
    "speakers, domain",
    [
        (["Project Manager", "Marketing", "Industrial Designer", "User Interface"], "product"),
        (["Grad A", "PhD C", "Professor E", "Postdoc B"], "academic"),
        (["Lynne Neagle AM", "Kirsty Williams AM", "Huw Morris"], "committee"),
        (["Hon. Bill Blair", "The Chair"], "committee"),
    ],
)
def test_meeting_domain_from_speakers(speakers, domain):
    assert meeting_domain(speakers) == domain


def test_qmsum_domain_splits_keep_whole_meetings():
    product = load_contexts("QMSum", split="product", data_file=FIXTURES / "qmsum_sample.jsonl")
    committee = load_contexts("QMSum", split="committee", data_file=FIXTURES / "qmsum_sample.jsonl")
    assert {c.meeting for c in product} == {"qmsum-test-1"} and {c.meeting for c in committee} == {"qmsum-test-2"}


@pytest.mark.realdata
def test_real_ed_valence_splits_partition_the_test_split():
    if not (SHARED / "ed").is_dir():
        pytest.skip("no ../shared/data/ed")
    every = load_contexts("ED", split="test", data_file=SHARED / "ed")
    parts = {s: load_contexts("ED", split=s, data_file=SHARED / "ed") for s in ("positive", "neutral", "negative")}
    assert sum(len(p) for p in parts.values()) == len(every)
    assert {c.emotion for c in parts["neutral"]} == {"surprised", "sentimental", "nostalgic", "prepared", "anticipating"}


@pytest.mark.realdata
def test_real_qmsum_domains_follow_the_corpora():
    if not (SHARED / "qmsum").is_dir():
        pytest.skip("no ../shared/data/qmsum")
    meetings = {s: {c.meeting for c in load_contexts("QMSum", split=s, data_file=SHARED / "qmsum")} for s in ("product", "academic", "committee")}
    # QMSum's test split: 20 AMI product meetings, 9 ICSI academic meetings, 6 committee meetings
    assert {s: len(m) for s, m in meetings.items()} == {"product": 20, "academic": 9, "committee": 6}
    every = {c.meeting for c in load_contexts("QMSum", split="test", data_file=SHARED / "qmsum")}
    assert meetings["product"] | meetings["academic"] | meetings["committee"] == every


@pytest.mark.realdata
def test_real_esconv_is_the_out_of_domain_set():
    if not (SHARED / "esconv").is_dir():
        pytest.skip("no ../shared/data/esconv")
    assert len(load_contexts("ESConv", split="ood", data_file=SHARED / "esconv")) == 195


def test_paper_v2_names_the_meetings_columns_as_the_paper_and_keeps_paper_v1():
    from mascot.rubrics import load_rubric_set

    v1, v2 = load_rubric_set("paper_v1"), load_rubric_set("paper_v2")
    meetings_v2 = v2.rubric("meetings", "agent").names
    assert meetings_v2["role_consistency"] == "Consistency" and meetings_v2["contribution"] == "Social Contribution"
    assert v1.rubric("meetings", "agent").names["role_consistency"] == "Role Consistency"
    for domain in ("emotional_support", "meetings"):
        for scope in ("agent", "collective"):
            assert v1.rubric(domain, scope).keys == v2.rubric(domain, scope).keys  # the judge answers with the same keys

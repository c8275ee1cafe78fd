"""The static redundancy embedding: distillation from a tiny random BERT built here, the weighted
mean at inference, the cache (reused, rebuilt when stale) and the `--embedding` option."""

from __future__ import annotations

import json

import pytest
from judge_helpers import agent_turn, episode, user_turn, write_episodes
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.errors import MascotError
from mascot.metrics import static_embedding
from mascot.metrics.settings import MetricsSettings
from mascot.metrics.static_embedding import StaticEmbedder, pca_reduce, rank_weights, static_cache_dir, token_vectors

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")

WORDS = "i you feel tired today sad work sleep the a is it hard help".split()


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A saved random BERT (hidden 32, one layer) with a WordPiece vocabulary of 26 tokens."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-bert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", *WORDS, "##s", "##ed", "##ing", "##ly", "##y"]
    tokenizer = BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)})
    assert len(tokenizer) == len(vocab)
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_each_row_is_the_models_output_for_that_token_alone(tiny_bert):
    from transformers import AutoTokenizer, BertModel

    model, tokenizer = BertModel.from_pretrained(tiny_bert), AutoTokenizer.from_pretrained(tiny_bert)
    table = token_vectors(model, tokenizer, batch_size=5)  # batches that do not divide the vocabulary
    assert table.shape == (len(tokenizer), 32)
    token = tokenizer.convert_tokens_to_ids("tired")
    with torch.inference_mode():
        alone = model(input_ids=torch.tensor([[tokenizer.cls_token_id, token, tokenizer.sep_token_id]])).last_hidden_state[0, 1]
    assert np.allclose(table[token], alone.numpy(), atol=1e-5)
    assert not np.allclose(table[token], table[token + 1])


def test_pca_keeps_distances_at_full_rank_and_reduces_to_the_main_axes():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(50, 6)) @ np.diag([5, 4, 3, 0.01, 0.01, 0.01])
    reduced = pca_reduce(vectors, 3)
    assert reduced.shape == (50, 3)
    distance = lambda x: np.linalg.norm(x[:, None] - x[None], axis=-1)  # noqa: E731
    assert np.abs(distance(reduced) - distance(vectors)).max() < 0.1  # the dropped axes held almost nothing
    assert pca_reduce(vectors, 6).shape == (50, 6) and pca_reduce(vectors, 8) is not vectors


def test_rank_weights_fall_with_the_token_rank():
    weights = rank_weights(1000, coefficient=1e-3)
    assert weights.shape == (1000,) and np.all(np.diff(weights) > 0)  # id 0 the most frequent: the smallest weight
    assert 0 < weights[0] < 0.1 and 0.5 < weights[-1] <= 1.0


def test_sentence_vectors_are_the_normalised_weighted_mean_of_token_vectors(tiny_bert, tmp_path, monkeypatch):
    monkeypatch.setattr(static_embedding, "PCA_DIMS", 8)
    embedder = StaticEmbedder(str(tiny_bert), cache_dir=tmp_path)
    assert embedder.built and embedder.vectors.shape == (26, 8) and embedder.meta["dims"] == 8
    out = embedder.encode(["I feel tired.", "", "sleeping helps", "I feel tired."])
    assert out.shape == (4, 8) and out.dtype == np.float32
    ids = embedder.tokenizer.encode("sleeping helps", add_special_tokens=False).ids
    assert len(ids) == 4  # sleep ##ing help ##s
    expected = (embedder.vectors[ids] * embedder.weights[ids, None]).sum(axis=0)
    assert np.allclose(out[2], expected / np.linalg.norm(expected), atol=1e-5)
    assert np.allclose(out[0], out[3]) and np.allclose(np.linalg.norm(out[[0, 2]], axis=1), 1.0, atol=1e-5)
    assert not out[1].any()  # no token: the zero vector
    assert embedder.encode([]).shape == (0, 8)


def test_the_cache_is_reused_and_rebuilt_when_its_version_or_source_differs(tiny_bert, tmp_path, monkeypatch):
    built = []
    distil = static_embedding.distil
    monkeypatch.setattr(static_embedding, "distil", lambda source, folder: (built.append(source), distil(source, folder)))
    first = StaticEmbedder(str(tiny_bert), cache_dir=tmp_path)
    again = StaticEmbedder(str(tiny_bert), cache_dir=tmp_path)
    assert first.built and not again.built and len(built) == 1
    assert np.array_equal(first.vectors, again.vectors)
    meta = json.loads((static_cache_dir(str(tiny_bert), tmp_path) / "meta.json").read_text())
    assert meta["source_model"] == str(tiny_bert) and meta["version"] == static_embedding.STATIC_VERSION

    monkeypatch.setattr(static_embedding, "STATIC_VERSION", static_embedding.STATIC_VERSION + 1)
    rebuilt = StaticEmbedder(str(tiny_bert), cache_dir=tmp_path)
    assert rebuilt.built and len(built) == 2 and rebuilt.meta["version"] == static_embedding.STATIC_VERSION
    assert not StaticEmbedder(str(tiny_bert), cache_dir=tmp_path).built
    # a table whose meta names another source is not taken for this one
    folder = static_cache_dir(str(tiny_bert), tmp_path)
    (folder / "meta.json").write_text(json.dumps({**rebuilt.meta, "source_model": "another-model"}))
    assert StaticEmbedder(str(tiny_bert), cache_dir=tmp_path).built and len(built) == 3
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]  # no scratch folder left behind


def three_agent_episode():
    return episode(
        "three",
        [
            agent_turn(0, 0, "The Anchor", "I hear you, that sounds hard."),
            agent_turn(1, 0, "The Catalyst", "Maybe sleep helps."),
            user_turn(2, 0, "Thanks."),
            agent_turn(3, 1, "The Beacon", "You feel tired today."),
        ],
    )


def test_mascot_metrics_embedding_static_uses_the_cached_table(tiny_bert, tmp_path, monkeypatch):
    monkeypatch.setenv("MASCOT_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "episodes.jsonl"
    write_episodes(path, [three_agent_episode()])
    args = ["metrics", "--input-file", str(path), "--skip-nli", "--embedding", "static", "--embedding-model", str(tiny_bert)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "metrics_auto.json").read_text())
    block = report["settings"]["redundancy"]
    assert block["embedding"] == "static" and block["precision"] == "static" and block["static_version"] == static_embedding.STATIC_VERSION
    assert block["static_table"].startswith(str(tmp_path / "cache" / "embeddings" / "static"))
    redundancy = report["per_episode"][0]["redundancy"]
    table = StaticEmbedder(str(tiny_bert))  # the table the command built, from the same cache
    assert not table.built
    vectors = table.encode([t.response for t in three_agent_episode().agent_turns])
    assert redundancy == pytest.approx((float(vectors[0] @ vectors[1]) + float(vectors[1] @ vectors[2])) / 2, abs=1e-6)


def test_a_bad_embedding_value_is_a_one_line_error(tmp_path):
    with pytest.raises(MascotError, match=r"unknown --embedding 'glove': use one of minilm, static"):
        MetricsSettings(embedding="glove")
    path = tmp_path / "episodes.jsonl"
    write_episodes(path, [three_agent_episode()])
    result = CliRunner().invoke(app, ["metrics", "--input-file", str(path), "--skip-nli", "--embedding", "glove"])
    assert isinstance(result.exception, MascotError) and "\n" not in str(result.exception) and "--embedding" in str(result.exception)
    assert not (tmp_path / "metrics_auto.json").exists()


def test_the_pipeline_metrics_step_takes_the_embedding_option():
    from mascot.pipeline.settings import PipelineSettings
    from mascot.pipeline.steps import Plan

    plan = Plan(PipelineSettings(steps={"metrics": {"embedding": "static"}}), None)
    assert "--embedding static" in plan.step("metrics_base").command_line() and "--embedding static" in plan.step("metrics_trained").command_line()
    assert "--embedding " not in Plan(PipelineSettings(), None).step("metrics_base").command_line()  # the default, minilm
    with pytest.raises(MascotError, match="--embedding"):
        Plan(PipelineSettings(steps={"metrics": {"embedding": "glove"}}), None)

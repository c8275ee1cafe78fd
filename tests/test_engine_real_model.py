"""A short directed episode end to end on the real embedded model (SmolLM2-135M-Instruct), no server."""

import asyncio
import json

from rich.console import Console

from mascot.dialogue.run import generate_group
from mascot.dialogue.run_settings import GroupEpisodeSettings
from mascot.files import read_jsonl
from mascot.schema import Episode


def test_directed_episode_on_the_embedded_model(tmp_path, es_context, es_roster, embedded_model):
    cfg = GroupEpisodeSettings(
        dataset="ESConv", num_turns=2, user_response_probability=1.0, max_tokens=40, seed=1, output_dir=tmp_path, model_name=str(embedded_model)
    )
    run_dir, store = asyncio.run(generate_group(cfg, contexts=[es_context], console=Console(quiet=True)))
    (episode,) = list(read_jsonl(run_dir / "episodes.jsonl", Episode))
    agent_turns = episode.agent_turns
    assert [t.round_id for t in agent_turns] == [0, 1]
    assert all(t.agent_name in es_roster.names for t in agent_turns)
    # the Director's answer is kept: as the directive's text, or apart when it could not be used
    # (the tiny model often copies the prompt's example: a marked, counted fallback)
    assert all(t.directive_output or (t.director_fallback and t.director_raw_output) for t in agent_turns)
    copies = sum(bool(t.director_copied_example) for t in agent_turns)
    assert (copies > 0) == (store.summary.counters.num_directive_example_copies > 0)
    assert any(t.response for t in episode.turns)
    assert sum(1 for t in episode.turns if t.is_user) == 2
    config = json.loads((run_dir / "run_config.json").read_text())
    assert config["settings"]["resolved"]["local_backend_roles"] == ["director", "speaker", "user"]
    assert config["roles"]["speaker"]["backend"] == "local"
    assert episode.metadata.speaker_model == str(embedded_model)
    usage = store.summary.usage
    assert usage["speaker"].completion_tokens > 0 and usage["director"].requests >= 2

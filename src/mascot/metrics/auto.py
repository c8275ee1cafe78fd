"""`mascot metrics`: automatic, model-free-of-LLM metrics over an episode file.

Per episode (agent turns only): NLI contradiction / entailment / neutral rates over the response
pairs the pairing mode selects (see `pairing`), Self-BLEU and distinct-1/2 (see `lexical`), and
semantic redundancy: the mean cosine similarity between the embeddings of the same response pairs
(adjacent-agent by default: consecutive responses by two different agents). The report gives every metric's mean and
population standard deviation over episodes (episodes where a metric is undefined, e.g. no pairs,
are left out and counted), NLI rates pooled over all pairs, and the settings used. The
conversation checks (copied directives, speaker balance, restated instructions, loops... see
`conversation`) run on every episode too, under the report's `conversation`.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from mascot.episodes import load_episode_file
from mascot.errors import MascotError
from mascot.files import write_json_atomic
from mascot.metrics.conversation import conversation_report
from mascot.metrics.lexical import DISTINCT_SETTINGS, SELF_BLEU_SCALE, SELF_BLEU_SETTINGS, distinct_n, self_bleu
from mascot.metrics.nli import NLI_LABELS
from mascot.metrics.pairing import response_pairs, unordered_pairs
from mascot.metrics.settings import PAIRING_MODES, MetricsSettings
from mascot.schema import Episode

log = logging.getLogger(__name__)

METRIC_ORDER = ("nli_contradiction", "nli_entailment", "nli_neutral", "self_bleu", "distinct_1", "distinct_2", "redundancy")


@dataclass
class EpisodeMetrics:
    episode_id: str
    system: str | None
    num_agent_turns: int
    num_pairs: int
    values: dict[str, float | None] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "episode_id": self.episode_id,
            "system": self.system,
            "num_agent_turns": self.num_agent_turns,
            "num_pairs": self.num_pairs,
            **self.values,
        }


def on_current_scale(report: dict) -> dict:
    """`report` (a `mascot metrics` report as read from disk) with Self-BLEU on 0-1. A report whose
    settings do not record the Self-BLEU scale was written on sacrebleu's 0-100 (every report before
    the scale was recorded): its per-episode values and summaries are divided by 100 here, in a copy;
    the file stays as it was written."""
    bleu_settings = (report.get("settings") or {}).get("self_bleu") or {}
    if bleu_settings.get("scale") == SELF_BLEU_SCALE:
        return report
    converted = {
        **report,
        "settings": {**(report.get("settings") or {}), "self_bleu": {**bleu_settings, "scale": SELF_BLEU_SCALE, "read_from_scale": "0-100"}},
    }
    converted["per_episode"] = [_hundredth(row, ("self_bleu",)) for row in report.get("per_episode") or []]
    if isinstance(report.get("overall"), dict):
        converted["overall"] = _summary_hundredth(report["overall"])
    if isinstance(report.get("per_system"), dict):
        converted["per_system"] = {system: _summary_hundredth(summary) for system, summary in report["per_system"].items()}
    return converted


def _hundredth(row: dict, keys: tuple[str, ...]) -> dict:
    return {**row, **{k: round(row[k] / 100, 6) for k in keys if isinstance(row.get(k), (int, float))}}


def _summary_hundredth(summary: dict | None) -> dict | None:
    if not isinstance(summary, dict) or not isinstance(summary.get("self_bleu"), dict):
        return summary
    return {**summary, "self_bleu": _hundredth(summary["self_bleu"], ("mean", "std"))}


def describe(values: list[float]) -> dict:
    if not values:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": round(statistics.fmean(values), 4), "std": round(statistics.pstdev(values), 4), "n": len(values)}


def check_rounds(path: Path, missing: set[str], settings: MetricsSettings) -> bool:
    """Whether rounds must be inferred; a one-line error when they cannot be."""
    if not missing or settings.pairing_mode != "same-round":
        return False
    if not settings.allow_round_inference:
        raise MascotError(
            f"{path}: {len(missing)} episode(s) have turns without round_id: pass --allow-round-inference "
            "(rounds from turn order) or --pairing-mode all-pairs / adjacent-agent"
        )
    return True


def lexical_metrics(responses: list[str]) -> dict[str, float | None]:
    return {"self_bleu": self_bleu(responses), "distinct_1": distinct_n(responses, 1), "distinct_2": distinct_n(responses, 2)}


def nli_rates(labels: list[str]) -> dict[str, float | None]:
    if not labels:
        return {f"nli_{label}": None for label in NLI_LABELS}
    return {f"nli_{label}": labels.count(label) / len(labels) for label in NLI_LABELS}


def redundancy_values(episodes: list[Episode], settings: MetricsSettings, infer: set[str], embedder) -> list[float | None]:
    """Mean cosine similarity of each episode's response pairs (all texts encoded in one batch run)."""
    import numpy as np

    texts = [t.response for e in episodes for t in e.agent_turns]
    vectors = embedder.encode(texts)
    out: list[float | None] = []
    offset = 0
    for episode in episodes:
        agents = episode.agent_turns
        row = {id(t): offset + i for i, t in enumerate(agents)}
        offset += len(agents)
        pairs = unordered_pairs(episode, settings.pairing_mode, infer_rounds=episode.episode_id in infer)
        sims = [float(np.dot(vectors[row[id(a)]], vectors[row[id(b)]])) for a, b in pairs]
        out.append(sum(sims) / len(sims) if sims else None)
    return out


def compute_metrics(episodes: list[Episode], settings: MetricsSettings, *, infer: set[str] | None = None, nli=None, embedder=None) -> dict:
    """The report for `episodes`. `nli` (an NLIScorer) and `embedder` are needed unless skipped."""
    infer = infer or set()
    per_episode: list[EpisodeMetrics] = []
    all_pairs: list[tuple[int, tuple[str, str]]] = []
    for idx, episode in enumerate(episodes):
        pairs = response_pairs(episode, settings.pairing_mode, settings.nli_direction, infer_rounds=episode.episode_id in infer)
        responses = [t.response for t in episode.agent_turns]
        metrics = EpisodeMetrics(episode.episode_id, episode.metadata.system, len(responses), len(pairs), lexical_metrics(responses))
        per_episode.append(metrics)
        all_pairs.extend((idx, (p.premise, p.hypothesis)) for p in pairs)
    pooled: dict[str, float | None] = {}
    if not settings.skip_nli:
        labels = nli.predict([p for _, p in all_pairs]) if all_pairs else []
        by_episode: dict[int, list[str]] = {}
        for (idx, _), label in zip(all_pairs, labels):
            by_episode.setdefault(idx, []).append(label)
        for idx, metrics in enumerate(per_episode):
            metrics.values.update(nli_rates(by_episode.get(idx, [])))
        pooled = nli_rates(labels)
    if not settings.skip_embeddings:
        for metrics, value in zip(per_episode, redundancy_values(episodes, settings, infer, embedder)):
            metrics.values["redundancy"] = value
    report = summarize(per_episode, pooled, len(all_pairs))
    report["conversation"], checked = conversation_report(episodes)
    for row, counts in zip(report["per_episode"], checked):
        row["conversation"] = counts
    return report


def summarize(per_episode: list[EpisodeMetrics], pooled: dict, num_pairs: int) -> dict:
    names = [m for m in METRIC_ORDER if any(m in e.values for e in per_episode)]
    overall = {name: describe([e.values[name] for e in per_episode if e.values.get(name) is not None]) for name in names}
    systems = sorted({e.system or "unknown" for e in per_episode})
    per_system = {
        s: {
            name: describe([e.values[name] for e in per_episode if (e.system or "unknown") == s and e.values.get(name) is not None]) for name in names
        }
        for s in systems
    }
    report = {
        "num_episodes": len(per_episode),
        "num_response_pairs": num_pairs,
        "num_episodes_without_pairs": sum(1 for e in per_episode if e.num_pairs == 0),
        "overall": overall,
        "per_system": per_system,
        "per_episode": [e.to_dict() for e in per_episode],
    }
    if pooled:
        report["nli_pooled_over_pairs"] = pooled
    return report


def settings_block(settings: MetricsSettings, nli=None, embedder=None) -> dict:
    block = {
        "pairing_mode": settings.pairing_mode,
        "pairing_modes": list(PAIRING_MODES),
        "nli_direction": settings.nli_direction,
        "allow_round_inference": settings.allow_round_inference,
        "round_inference_rule": "a new round starts after every user turn",
        "self_bleu": SELF_BLEU_SETTINGS,
        "distinct": DISTINCT_SETTINGS,
        "statistics": "mean and population std (ddof=0) over episodes where the metric is defined",
    }
    if not settings.skip_nli:
        block["nli"] = {
            "model": settings.nli_model,
            "label_indices": nli.labels if nli else None,
            "batch_size": settings.batch_size,
            "prediction": "argmax label per pair; rates = share of the episode's pairs",
        }
    if not settings.skip_embeddings:
        block["redundancy"] = {
            "model": settings.embedding_model,
            "embedding": settings.embedding,
            **(embedder.report_fields() if hasattr(embedder, "report_fields") else {}),
            "precision": getattr(embedder, "precision", settings.embedding_precision),
            "max_seq_length": settings.embedding_max_seq_length,
            "definition": "mean cosine similarity of the response pairs selected by the pairing mode (same-round: responses within one round)",
        }
    return block


def load_embedder(settings: MetricsSettings):
    """The redundancy embedder the settings choose: the sentence-transformers model itself, or the
    static table distilled from it (built into the cache on first use)."""
    if settings.embedding == "static":
        from mascot.metrics.static_embedding import StaticEmbedder

        return StaticEmbedder(settings.embedding_model)
    from mascot.llm.embeddings import Embedder

    return Embedder(
        settings.embedding_model,
        batch_size=max(settings.batch_size, 64),
        precision=settings.embedding_precision,
        max_seq_length=settings.embedding_max_seq_length,
    )


def run_metrics_file(input_file: Path, settings: MetricsSettings, *, output_file: Path, dataset: str | None = None, nli=None, embedder=None) -> dict:
    loaded = load_episode_file(input_file, dataset=dataset, fallback_dataset="unknown")
    infer = loaded.missing_round_ids if check_rounds(input_file, loaded.missing_round_ids, settings) else set()
    if not settings.skip_nli and nli is None:
        from mascot.metrics.nli import NLIScorer

        nli = NLIScorer.load(settings.nli_model, batch_size=settings.batch_size)
    if not settings.skip_embeddings and embedder is None:
        embedder = load_embedder(settings)
    report = compute_metrics(loaded.episodes, settings, infer=infer, nli=nli, embedder=embedder)
    warnings = list(loaded.warnings)
    if settings.pairing_mode == "same-round" and report["num_episodes_without_pairs"]:
        warnings.append(
            f"{report['num_episodes_without_pairs']} episode(s) have no round with two agent turns, so same-round pairing gives them no "
            "NLI or redundancy pairs (MASCOT rounds hold one agent turn); --pairing-mode adjacent-agent compares consecutive agents"
        )
    result = {
        "input_file": str(input_file),
        "settings": settings_block(settings, nli, embedder),
        "num_rounds_inferred_episodes": len(infer),
        "warnings": warnings,
        **report,
    }
    if loaded.skipped_lines:  # malformed lines, named in `warnings`; the closing line counts them
        result["num_skipped_lines"] = len(loaded.skipped_lines)

    Path(output_file).parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(Path(output_file), result)
    for warning in warnings:
        log.warning(warning)
    return result

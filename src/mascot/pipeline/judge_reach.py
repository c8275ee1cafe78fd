"""How far the Director's choice of companions moves the group judge, read off the Stage-2 episodes.

A Director trained on a group judge's preferences gains only what that judge's score varies with
what the Director decides. In the learning preset it decides who speaks (its directive's words do
not steer a small Speaker), and the Stage-2 episodes hold every sequence of companions for every
training context (`--generation-mode tree`) with the group judge's score of each. So, before any
Director trains:

- the F test of the companion sequence in a linear model of the score with each context's own level
  taken out (`mascot.stats.factor_effect`), and the share of the within-context variation it explains;
- each sequence's mean score relative to its context's mean;
- the most a Director could gain over the base Director by always taking the best sequence: the best
  sequence's mean against the mean under the base Director's sequences on the held-out contexts.

A judge that does not respond to the sequence (p >= 0.05) rewards what the Speaker happens to say,
not whom the Director picks: a Director that learns by choosing cannot be shown to gain under it,
and its group reward model learns the Speaker's words. The report says so beside the comparisons.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from mascot.errors import MascotError
from mascot.pipeline import figures as fig

log = logging.getLogger(__name__)

ALPHA = 0.05
JUDGMENTS_FILE = "group_pairs_judgments.jsonl"
SHOWN_SEQUENCES = 12  # more than this: the best and the worst halves of it


def companion_sequence(episode) -> str:
    """The companions of an episode in the order they spoke, as `A > B`."""
    return " > ".join(t.agent_name for t in episode.agent_turns)


def episode_collective_scores(judgments_file: Path) -> dict[str, float]:
    """Episode id -> its collective `overall`, the mean where several judges scored it (failed
    judgments left out)."""
    from mascot.files import read_jsonl
    from mascot.schema import Judgment

    collected: dict[str, list[float]] = defaultdict(list)
    for judgment in read_jsonl(Path(judgments_file), Judgment, drop_torn_tail=True):
        if judgment.scope == "collective" and not judgment.failed and judgment.overall is not None:
            episode_id = str((judgment.model_extra or {}).get("episode_id") or judgment.item_id.split("#", 1)[0])
            collected[episode_id].append(float(judgment.overall))
    return {e: sum(v) / len(v) for e, v in collected.items()}


def sequence_effects(rows: list[tuple[str, str, float]]) -> list[dict[str, Any]]:
    """Per sequence, best first: the mean of its scores minus their context's mean, and how many."""
    by_context: dict[str, list[float]] = defaultdict(list)
    for context, _, score in rows:
        by_context[context].append(score)
    context_mean = {c: sum(v) / len(v) for c, v in by_context.items()}
    relative: dict[str, list[float]] = defaultdict(list)
    for context, sequence, score in rows:
        relative[sequence].append(score - context_mean[context])
    effects = [{"sequence": s, "mean": sum(v) / len(v), "n": len(v)} for s, v in relative.items()]
    return sorted(effects, key=lambda e: (-e["mean"], e["sequence"]))


def base_expectation(effects: list[dict[str, Any]], base_episodes: Path | None) -> dict[str, Any]:
    """The mean effect under the base Director's sequences on the held-out contexts, the share of
    its episodes whose sequence has an estimate, and the best sequence's gain over it."""
    if base_episodes is None or not effects:
        return {}
    from mascot.episodes import load_episode_file

    counts = Counter(companion_sequence(e) for e in load_episode_file(base_episodes, fallback_dataset="unknown").episodes)
    known = {e["sequence"]: e["mean"] for e in effects}
    covered = sum(n for s, n in counts.items() if s in known)
    if not covered:
        return {"base_coverage": 0.0}
    expected = sum(known[s] * n for s, n in counts.items() if s in known) / covered
    return {"base_expected": expected, "base_coverage": covered / sum(counts.values()), "best_gain_over_base": effects[0]["mean"] - expected}


def judge_reach(root: Path) -> dict[str, Any] | None:
    """The figures above for a pipeline folder, or None before its Stage-2 episodes are judged.
    Episodes without a usable judgment are counted and left out."""
    from mascot.episodes import load_episode_file
    from mascot.stats import factor_effect

    run = fig.find_run_dir(root / "episodes")
    judgments = root / "group_pairs" / JUDGMENTS_FILE
    if run is None or not (run / "episodes.jsonl").is_file() or not judgments.is_file():
        return None
    scores = episode_collective_scores(judgments)
    episodes = load_episode_file(run / "episodes.jsonl", fallback_dataset="unknown").episodes
    rows = [(e.context_id, companion_sequence(e), scores[e.episode_id]) for e in episodes if e.episode_id in scores and e.agent_turns]
    effects = sequence_effects(rows)
    test = factor_effect([r[2] for r in rows], [r[0] for r in rows], [r[1] for r in rows])
    out = {"conversations": len(rows), "unscored": len(episodes) - len(rows), "contexts": len({r[0] for r in rows}), "sequences": len(effects),
           **test, "responds": test["p"] is not None and test["p"] < ALPHA, "effects": effects}  # fmt: skip
    base = fig.find_run_dir(root / "eval_base")
    out.update(base_expectation(effects, base / "episodes.jsonl" if base and (base / "episodes.jsonl").is_file() else None))
    return out


def reach_or_none(root: Path) -> dict[str, Any] | None:
    """`judge_reach`, or None with a logged reason when the files cannot be read."""
    try:
        return judge_reach(root)
    except (MascotError, OSError, ValueError) as exc:
        log.warning("how far the Director's choices move the group judge: not measured: %s", exc)
        return None


# --------------------------------------------------------------------------- the report's lines


def reach_lines(reach: dict[str, Any] | None) -> list[str]:
    """report.md's paragraph and table on how far the Director's choices move the group judge."""
    if not reach or not reach["conversations"]:
        return []
    lines = ["", "### How far the Director's choices move the group judge", reach_sentence(reach)]
    effects = reach["effects"]
    shown = effects if len(effects) <= SHOWN_SEQUENCES else effects[: SHOWN_SEQUENCES // 2] + effects[-SHOWN_SEQUENCES // 2 :]
    lines += ["", "| companions, in order | score relative to its context | conversations |", "|---|---|---|"]
    lines += [f"| {e['sequence']} | {e['mean']:+.2f} | {e['n']} |" for e in shown]
    if len(shown) < len(effects):
        lines.append(f"({len(effects) - len(shown)} sequences between these left out.)")
    return lines


def reach_sentence(reach: dict[str, Any]) -> str:
    """The finding in words: does the judge respond to whom the Director picks, and how much is there to gain."""
    head = (f"On the Stage-2 episodes ({reach['conversations']} conversations of {reach['contexts']} training contexts, "
            f"{reach['sequences']} companion sequences), ")  # fmt: skip
    if reach["p"] is None:
        return head + "the companion sequence's effect on the group judge cannot be tested (too few conversations per sequence and context)."
    share = f"{reach['explained']:.0%}" if reach["explained"] >= 0.1 else f"{reach['explained']:.1%}"
    f = f"{reach['f']:.2f}" if reach["f"] < 1e4 else f"{reach['f']:.1e}"
    how = f"{share} of the judge's variation within a context (F = {f}, p = {_p(reach['p'])})"
    if reach["responds"]:
        words = head + f"the companion sequence explains {how}: the group judge responds to whom the Director picks."
    else:
        words = (head + f"the companion sequence explains {how}: the group judge does not respond to whom the Director picks. "
                 "A Director that learns by choosing companions cannot be shown to gain under it, and its group reward model "
                 "can only learn the Speaker's words; gains under this judge need directives the Speaker follows.")  # fmt: skip
    if reach.get("best_gain_over_base") is not None:
        best = reach["effects"][0]
        coverage = "" if reach["base_coverage"] == 1 else f" ({reach['base_coverage']:.0%} of whose episodes have a sequence estimated here)"
        words += (f" Always taking the best sequence ({best['sequence']}, {best['mean']:+.2f}) would score at most "
                  f"{reach['best_gain_over_base']:+.2f} above the base Director's choices on the held-out contexts{coverage}.")  # fmt: skip
    return words


def _p(value: float) -> str:
    if value == 0:
        return "0 to float precision"
    return f"{value:.3f}" if value >= 0.001 else f"{value:.1e}"

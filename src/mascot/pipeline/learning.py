"""Did training help on the held-out contexts? Paired statistics of the evaluation systems.

Every evaluation system runs on the same contexts with the same seeds, so its episodes pair up
with the base system's by (context id, episode index): the episode id itself names the system
(`<context>:<system tag>:e<index>`) and differs between them. Per system: the Speaker's score (mean
agent-scope `overall` of an episode's turns), the collective score (collective-scope `overall`),
per-persona means and the Director's choices; how far the Director's choices can move the group
judge at all, from the Stage-2 episodes (`judge_reach`); per comparison with the base system: a paired
bootstrap interval and a sign-flip permutation test of the mean difference. Everything is written
to `<root>/learning.json` and shown as one section of report.md.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mascot.dialogue.turn_taking import runs as speaker_runs
from mascot.errors import MascotError
from mascot.eval.stats import paired_test
from mascot.pipeline import figures as fig
from mascot.pipeline.judge_reach import reach_lines, reach_or_none
from mascot.runs.record import settings_view

log = logging.getLogger(__name__)

LEARNING_FILE = "learning.json"
JUDGMENTS_FILE = "judgments_episodes.jsonl"
SYSTEMS = ("base", "trained", "speaker_only", "director_only")
# (system, score) compared with the base system: each ablation on the score its trained role moves
COMPARISONS = (("trained", "speaker"), ("trained", "collective"), ("speaker_only", "speaker"), ("director_only", "collective"))
SCORES = {"speaker": "Speaker score (agent scope, mean over an episode's turns)", "collective": "Collective score (collective scope, per episode)"}
SUBJECTS = {
    ("trained", "speaker"): "With the trained Speaker and Director, the Speaker's turns",
    ("trained", "collective"): "With the trained Speaker and Director, the conversations as a whole",
    ("speaker_only", "speaker"): "With the trained Speaker alone (base Director), the Speaker's turns",
    ("director_only", "collective"): "With the trained Director alone (base Speaker), the conversations as a whole",
}
SYSTEM_WORDS = {
    "trained": "trained Speaker and Director",
    "speaker_only": "trained Speaker, base Director",
    "director_only": "base Speaker, trained Director",
}
ALPHA = 0.05


# --------------------------------------------------------------------------- score readers


@dataclass
class Scores:
    """A score per pairing key, with the judgments left out because they failed (or had no score)."""

    by_key: dict[str, float] = field(default_factory=dict)
    judgments: int = 0
    failed: int = 0


def episode_key(episode) -> str:
    """`<context id>#e<episode index>`: the same for one context's n-th episode in every system
    (a branching episode adds where it forked, which the directed evaluation never does)."""
    branch = episode.metadata.branch
    where = f"d{branch.decision_round}k{branch.candidate_idx}" if branch else f"e{episode.metadata.episode_idx}"
    return f"{episode.context_id}#{where}"


def episode_keys(episodes_file: Path) -> dict[str, str]:
    """Episode id -> pairing key, from an episode file."""
    from mascot.episodes import load_episode_file

    return {e.episode_id: episode_key(e) for e in load_episode_file(episodes_file, fallback_dataset="unknown").episodes}


def _judgment_key(judgment, keys: dict[str, str]) -> str:
    """The pairing key of a judgment's episode: from the episode file when known, else from the
    recorded context id and the episode id's last part (`e<index>`)."""
    extra = judgment.model_extra or {}
    episode_id = str(extra.get("episode_id") or judgment.item_id.split("#", 1)[0])
    if episode_id in keys:
        return keys[episode_id]
    context_id = extra.get("context_id")
    return f"{context_id}#{episode_id.rsplit(':', 1)[-1]}" if context_id else episode_id


def read_judgments(judgments_file: Path) -> list:
    from mascot.files import read_jsonl
    from mascot.schema import Judgment

    return list(read_jsonl(Path(judgments_file), Judgment, drop_torn_tail=True))


def _scores(judgments_file: Path, scope: str, keys: dict[str, str] | None) -> Scores:
    out = Scores()
    collected: dict[str, list[float]] = {}
    for judgment in read_judgments(judgments_file):
        if judgment.scope != scope:
            continue
        out.judgments += 1
        if judgment.failed or judgment.overall is None:
            out.failed += 1
            continue
        collected.setdefault(_judgment_key(judgment, keys or {}), []).append(float(judgment.overall))
    out.by_key = {k: sum(v) / len(v) for k, v in collected.items()}
    return out


def speaker_scores(judgments_file: Path, keys: dict[str, str] | None = None) -> Scores:
    """Per pairing key, the mean agent-scope `overall` over the episode's Speaker turns."""
    return _scores(judgments_file, "agent", keys)


def collective_scores(judgments_file: Path, keys: dict[str, str] | None = None) -> Scores:
    """Per pairing key, the collective-scope `overall` (the mean where several judges or blocks scored it)."""
    return _scores(judgments_file, "collective", keys)


def persona_means(judgments_file: Path) -> dict[str, dict[str, Any]]:
    """Per persona, the mean agent-scope `overall` and the number of judgments it is taken over."""
    collected: dict[str, list[float]] = {}
    for judgment in read_judgments(judgments_file):
        if judgment.scope == "agent" and not judgment.failed and judgment.overall is not None:
            collected.setdefault(judgment.persona or "?", []).append(float(judgment.overall))
    return {p: {"mean": sum(v) / len(v), "judgments": len(v)} for p, v in sorted(collected.items())}


# --------------------------------------------------------------------------- the Director's choices


def director_choices(episodes_file: Path) -> dict[str, Any]:
    """Whom the Director picks, over a file's episodes: agent turns, each persona's share, the repeat
    rate (consecutive agent turns of one episode, user turns skipped, by the same persona), the
    mean run length of one persona, and the turns where the Director fell back to a random persona."""
    from mascot.episodes import load_episode_file

    episodes = load_episode_file(episodes_file, fallback_dataset="unknown").episodes
    counts: dict[str, int] = {}
    runs: list[int] = []
    fallbacks = 0
    for episode in episodes:
        names = [t.agent_name for t in episode.agent_turns]
        for name in names:
            counts[name] = counts.get(name, 0) + 1
        runs += speaker_runs(names)
        fallbacks += sum(1 for t in episode.agent_turns if t.director_fallback)
    turns = sum(counts.values())
    followers = turns - sum(1 for e in episodes if e.agent_turns)  # agent turns with another before them in their episode
    repeats = turns - len(runs)
    return {"episodes": len(episodes), "agent_turns": turns, "share": {p: counts[p] / turns for p in sorted(counts)},
            "repeat_rate": repeats / followers if followers else None, "mean_run_length": turns / len(runs) if runs else None,
            "fallbacks": fallbacks}  # fmt: skip


# --------------------------------------------------------------------------- all systems


def _present(root: Path, system: str) -> bool:
    return any((root / f"{kind}_{system}").is_dir() for kind in ("eval", "judge"))


def _episodes_file(root: Path, system: str) -> Path | None:
    run = fig.find_run_dir(root / f"eval_{system}")
    return run / "episodes.jsonl" if run and (run / "episodes.jsonl").is_file() else None


def system_figures(root: Path, system: str) -> dict[str, Any]:
    """One system's scores per key, per-persona means, failed judgments and Director choices."""
    episodes = _episodes_file(root, system)
    keys = episode_keys(episodes) if episodes else {}
    judgments = root / f"judge_{system}" / JUDGMENTS_FILE
    out: dict[str, Any] = {"split": settings_view(fig.run_config(root / f"eval_{system}").get("settings") or {}).get("split"),
                           "director": director_choices(episodes) if episodes else None}  # fmt: skip
    if judgments.is_file():
        speaker, collective = speaker_scores(judgments, keys), collective_scores(judgments, keys)
        out.update(speaker_scores=speaker.by_key, collective_scores=collective.by_key, persona_means=persona_means(judgments),
                   judgments={"agent": speaker.judgments, "collective": collective.judgments},
                   failed_judgments={"agent": speaker.failed, "collective": collective.failed})  # fmt: skip
    return out


def _compare(systems: dict[str, dict], system: str, score: str, seed: int) -> dict[str, Any]:
    base, other = systems["base"].get(f"{score}_scores") or {}, systems[system].get(f"{score}_scores") or {}
    result = paired_test(base, other, seed=seed)
    paired = set(base) & set(other)
    return {"system": system, "score": score, **result, "contexts": len({k.rsplit("#", 1)[0] for k in paired})}


def _identical_to_base(root: Path, systems: dict[str, dict]) -> list[str]:
    base = fig.conversations(root / "eval_base") if "base" in systems else None
    return [s for s in systems if s != "base" and base and fig.conversations(root / f"eval_{s}") == base]


def held_out_split(systems: dict[str, dict]) -> str | None:
    splits = list(dict.fromkeys(str(f["split"]) for f in systems.values() if f.get("split")))
    return ", ".join(splits) if splits else None


COLLAPSE_POINTS = 0.10  # a trained Director may give its top companion this much more of the turns than the base gives it


def director_collapse(systems: dict[str, dict]) -> dict[str, dict[str, Any]]:
    """Per system with a trained Director: its top companion's share of the turns against the base
    Director's share of that same companion, flagged when it exceeds it by more than COLLAPSE_POINTS
    (a Director that collapses onto one companion, unless the judge rewards that companion). Measured
    against the same companion, a Director that swaps the base's favourite for another is caught too.
    The base Director's own top companion is recorded beside it."""
    base = (systems.get("base") or {}).get("director") or {}
    if not base.get("share"):
        return {}
    base_share = base["share"]
    base_top = max(base_share, key=lambda p: base_share[p])
    out = {}
    for system in ("trained", "director_only"):
        shares = ((systems.get(system) or {}).get("director") or {}).get("share")
        if not shares:
            continue
        top = max(shares, key=lambda p: shares[p])
        excess = shares[top] - base_share.get(top, 0.0)
        out[system] = {"top": top, "share": shares[top], "base_share_of_top": base_share.get(top, 0.0), "base_top": base_top,
                       "base_share": base_share[base_top], "excess": excess, "flagged": excess > COLLAPSE_POINTS}  # fmt: skip
    return out


def learning_figures(root: Path, *, seed: int = 0) -> dict[str, Any]:
    """Every present system's figures and the paired comparisons with the base system, written to
    `<root>/learning.json`. A system whose files cannot be read is left out with a logged reason."""
    from mascot.files import write_json_atomic

    root = Path(root)
    systems: dict[str, dict] = {}
    unreadable: dict[str, str] = {}
    for system in SYSTEMS:
        if not _present(root, system):
            continue
        try:
            systems[system] = system_figures(root, system)
        except MascotError as exc:
            log.warning("learning figures: system %s left out: %s", system, exc)
            unreadable[system] = str(exc)
    comparisons = [_compare(systems, s, score, seed) for s, score in COMPARISONS if s in systems and "base" in systems]
    out = {"split": held_out_split(systems), "systems": systems, "comparisons": comparisons, "director_collapse": director_collapse(systems),
           "identical_to_base": _identical_to_base(root, systems), "unreadable": unreadable, "judge_reach": reach_or_none(root)}  # fmt: skip
    if systems or unreadable:  # a report before the evaluation (--until speaker) writes none
        write_json_atomic(root / LEARNING_FILE, out)
    return out


# --------------------------------------------------------------------------- the report section


def _num(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _p(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" if value >= 0.001 else f"{value:.1e}"


def _sample_words(c: dict) -> str:
    n, contexts = c["n"], c["contexts"]
    return f"n = {n} contexts" if n == contexts else f"n = {n} episode pairs from {contexts} contexts"


def comparison_sentence(c: dict) -> str:
    """One comparison in plain words."""
    subject = SUBJECTS[(c["system"], c["score"])]
    if not c["testable"]:
        return f"{subject}: cannot be tested, {c['n']} paired episode{'s' if c['n'] != 1 else ''} with the base system (2 needed)."
    diff = c["difference"]
    how = "the same as the base system's" if abs(diff) < 0.005 else f"{abs(diff):.2f} {'higher' if diff > 0 else 'lower'} than the base system's"
    smallest = 1 / 2 ** c["n"] if c["method"] == "exact" else 0.0  # the observed pattern alone
    if c["p_one_sided"] < ALPHA:
        verdict = "unlikely to be chance"
    elif smallest >= ALPHA:
        verdict = f"too few pairs for any difference to reach the 5% level (the smallest possible one-sided p is {_p(smallest)})"
    else:
        verdict = "no evidence of an improvement at the 5% level"
    return (f"{subject} score {how} on the judge's 1-5 scale (95% CI {c['ci_low']:.2f} to {c['ci_high']:.2f}, "
            f"one-sided p = {_p(c['p_one_sided'])}, {_sample_words(c)}): {verdict}.")  # fmt: skip


def _comparison_tables(comparisons: list[dict]) -> list[str]:
    lines: list[str] = []
    for score, title in SCORES.items():
        rows = [c for c in comparisons if c["score"] == score]
        if not rows:
            continue
        lines += ["", f"### {title}, vs base", "| system | n | base mean | system mean | difference | 95% CI | one-sided p | two-sided p |",
                  "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for c in rows:
            ci = "–" if c["ci_low"] is None else f"{c['ci_low']:+.2f} to {c['ci_high']:+.2f}"
            diff = "–" if c["difference"] is None else f"{c['difference']:+.2f}"
            lines.append(
                f"| {c['system']} | {c['n']} | {_num(c['base_mean'])} | {_num(c['trained_mean'])} | {diff} | {ci} | {_p(c['p_one_sided'])} | {_p(c['p_two_sided'])} |"
            )
    return lines


def _director_table(systems: dict[str, dict]) -> list[str]:
    choices = {s: f["director"] for s, f in systems.items() if f.get("director")}
    if not choices:
        return []
    personas = sorted({p for c in choices.values() for p in c["share"]})
    lines = ["", "### Director choices", f"| system | episodes | turns | {' | '.join(personas)} | repeat rate | mean run length | fallbacks |",
             "|---|---|---|" + "---|" * len(personas) + "---|---|---|"]  # fmt: skip
    for system, c in choices.items():
        shares = " | ".join(f"{c['share'].get(p, 0.0):.0%}" for p in personas)
        lines.append(
            f"| {system} | {c['episodes']} | {c['agent_turns']} | {shares} | {_num(c['repeat_rate'])} | {_num(c['mean_run_length'])} | {c['fallbacks']} |"
        )
    return lines + [
        "",
        "Shares: each persona's share of the agent turns; repeat rate: consecutive agent turns (user turns skipped) by the same persona.",
    ]


def _persona_table(systems: dict[str, dict]) -> list[str]:
    means = {s: f["persona_means"] for s, f in systems.items() if f.get("persona_means")}
    if not means:
        return []
    personas = sorted({p for m in means.values() for p in m})
    lines = ["", "### Speaker score per persona (mean agent-scope overall, 1-5)", f"| persona | {' | '.join(means)} |", "|---|" + "---|" * len(means)]
    for persona in personas:
        lines.append(f"| {persona} | " + " | ".join(_num((m.get(persona) or {}).get("mean")) for m in means.values()) + " |")
    return lines


def _notes(figures: dict) -> list[str]:
    lines = []
    for system, c in (figures.get("director_collapse") or {}).items():
        if c["flagged"]:
            lines.append(f"> **Collapse?** The {system} system's Director ({SYSTEM_WORDS.get(system, system)}) gives {c['top']} {c['share']:.0%} of the turns, "
                         f"{c['excess'] * 100:.0f} points more than the base Director gives it ({c['base_share_of_top']:.0%}; the base's top companion is "
                         f"{c['base_top']}, {c['base_share']:.0%}): "
                         "unless the judge rewards that companion, the Director has collapsed onto it.")  # fmt: skip
    for system in figures["identical_to_base"]:
        lines.append(f"> The {system} system's conversations ({SYSTEM_WORDS.get(system, system)}) are word for word the base system's: "
                     "training changed no sampled token, so its differences from the base are the judge's noise at most.")  # fmt: skip
    failed = {s: f["failed_judgments"] for s, f in figures["systems"].items() if any((f.get("failed_judgments") or {}).values())}
    if failed:
        lines.append(
            "Failed judgments, left out: " + "; ".join(f"{s} {c['agent']} agent, {c['collective']} collective" for s, c in failed.items()) + "."
        )
    lines += [f"System {s} left out: {reason}" for s, reason in figures["unreadable"].items()]
    return lines


def learning_section(root: Path) -> str:
    """report.md's section on learning: the paired comparisons, their sentences, the Director's
    choices and per-persona means ("" when no evaluation system ran)."""
    figures = learning_figures(root)
    if not figures["systems"]:
        return ""
    lines = [f"## Learning on held-out contexts (split {figures['split'] or 'unknown'})",
             "Each system's episodes are paired with the base system's by context and episode index; differences are system - base "
             "on the judge's 1-5 scale, with a 95% bootstrap interval over pairs and sign-flip permutation p-values "
             f"(one-sided: the system scores higher). Figures in `{LEARNING_FILE}`."]  # fmt: skip
    comparisons = figures["comparisons"]
    if comparisons:
        lines += ["", *(f"- {comparison_sentence(c)}" for c in comparisons)]
    lines += (
        _comparison_tables(comparisons)
        + _director_table(figures["systems"])
        + reach_lines(figures["judge_reach"])
        + _persona_table(figures["systems"])
    )
    notes = _notes(figures)
    return "\n".join(lines + ([""] + notes if notes else []))

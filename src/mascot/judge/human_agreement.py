"""How far a judge agrees with the people of a blinded study, on the same episodes.

The people's side is the study's kept ratings (raters who failed an attention check left out, as
in `mascot study results`). A judge's side is what it said about the study's episodes:
- a rubric judge (`mascot judge`, judgments_episodes.jsonl): the collective `overall` (1-5) of each
  episode; its choice on a pair is the episode with the higher overall, equal overalls a tie;
- a head-to-head judge (`mascot eval compare`, verdicts.jsonl): its winner on "overall", its orders
  of one context pooled by the MT-Bench rule (the winner when every order names the same one, else
  a tie); a winner that is neither of the study's two episodes (a third system) is a tie between them.

Reported per judge, each figure with a one-line verdict:
- choice agreement, one unit per rating: accuracy without ties (of the ratings where both the
  person and the judge chose a side, the share where they chose the same one) with a Wilson
  interval, and Cohen's kappa over a / b / tie with its interval, read on the Landis-Koch bands;
- score agreement (rubric judges only): Spearman's rho between the judge's overall per episode and
  the people's mean score per episode of each study metric, and of the metrics' mean.
Pairs and episodes the judge did not score are counted and named in the verdict, never dropped
silently.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mascot.errors import MascotError
from mascot.judge.compare_checks import TIE, consistent_winner
from mascot.progress import plural
from mascot.study import METRICS

OVERALL = "overall"  # the criterion a head-to-head verdict names for the whole conversation
MEAN_OF_METRICS = "mean"
JUDGMENTS_FILE = "judgments_episodes.jsonl"
VERDICTS_FILE = "verdicts.jsonl"
METHODS = {
    "choice": "per rating: the person's choice (A / B / tie) against the judge's; accuracy without ties with a Wilson 95% interval, "
    "Cohen's kappa (nominal) with its asymptotic 95% interval, read on the Landis-Koch bands",
    "judge_choice": "a rubric judge: the episode with the higher collective overall (equal: tie); a head-to-head judge: its winner on "
    "overall when every order names the same one, else a tie (MT-Bench)",
    "scores": "Spearman's rho between the judge's collective overall per episode and the people's mean score per episode, "
    "with a bootstrap 95% interval over episodes",
}
# Landis & Koch (1977), the usual reading of kappa: upper bound of each band -> its name.
KAPPA_BANDS = ((0.0, "poor"), (0.20, "slight"), (0.40, "fair"), (0.60, "moderate"), (0.80, "substantial"), (1.0, "almost perfect"))
# Schober, Boer & Schwarte (2018), a common reading of a correlation's size: |rho| below -> name.
RHO_BANDS = ((0.10, "negligible"), (0.40, "weak"), (0.70, "moderate"), (0.90, "strong"), (1.01, "very strong"))


class AgreementInputError(MascotError):
    """A judge's file that cannot be set against the study: missing, unreadable or about other episodes."""


@dataclass
class JudgeOpinion:
    """What one judge said about episodes: a collective overall per episode id (a rubric judge)
    and/or a winner per pair of episode ids (a head-to-head judge: the winning id, or TIE)."""

    source: str
    scores: dict[str, float] = field(default_factory=dict)
    winners: dict[frozenset, str] = field(default_factory=dict)

    def choice(self, episode_a: str, episode_b: str) -> str | None:
        """ "a", "b" or "tie" on the pair; None where the judge said nothing about it."""
        if episode_a in self.scores and episode_b in self.scores:
            a, b = self.scores[episode_a], self.scores[episode_b]
            return TIE if a == b else ("a" if a > b else "b")
        winner = next((w for pair, w in self.winners.items() if {episode_a, episode_b} <= pair), None)
        if winner is None:
            return None
        return {episode_a: "a", episode_b: "b"}.get(winner, TIE)

    def episode_ids(self) -> set[str]:
        return set(self.scores) | {e for pair in self.winners for e in pair}


@dataclass
class StudyRatings:
    """The study's side: each real pair's two episode ids and the kept ratings."""

    pairs: dict[int, tuple[str, str]]
    ratings: list[dict[str, Any]]

    def episode_ids(self) -> set[str]:
        return {e for pair in self.pairs.values() for e in pair}


# --------------------------------------------------------------------------- the study's side


def load_study(path: Path) -> StudyRatings:
    from mascot.study.db import all_ratings, meta, opened
    from mascot.study.results import kept_ratings

    with opened(path) as conn:
        info, ratings = meta(conn), all_ratings(conn)
        contexts = {row["pair_id"]: row["context_id"] for row in conn.execute("SELECT pair_id, context_id FROM pairs WHERE kind = 'pair'")}
    ids = info.get("episode_ids") or episode_ids_from_sources(path, info)
    pairs = {pair_id: (ids[key]["a"], ids[key]["b"]) for pair_id, key in contexts.items() if key in ids}
    return StudyRatings(pairs, [r for r in kept_ratings(ratings) if r["pair_id"] in pairs])


def episode_ids_from_sources(path: Path, info: dict) -> dict[str, dict[str, str]]:
    """A study made before episode ids were recorded: the ids from its episode files, read as
    `mascot study create` read them (the first episode of each context)."""
    from mascot.study.create import episodes_by_context

    sources = [info.get("source_a"), info.get("source_b")]
    if not all(sources) or not all(Path(s).is_file() for s in sources):
        raise AgreementInputError(
            f"{path}: the study records no episode ids and its episode files ({', '.join(map(str, sources))}) "
            "are gone: put them back at those paths to match judges to its pairs"
        )
    a, b = episodes_by_context(Path(sources[0]), "--a"), episodes_by_context(Path(sources[1]), "--b")
    return {key: {"a": a[key].episode_id, "b": b[key].episode_id} for key in set(a) & set(b)}


def human_scores(study: StudyRatings) -> dict[str, dict[str, float]]:
    """Per metric (and MEAN_OF_METRICS), episode id -> the people's mean 1-5 score of it."""
    collected: dict[str, dict[str, list[float]]] = {m: defaultdict(list) for m in METRICS}
    for r in study.ratings:
        for side, episode in zip(("a", "b"), study.pairs[r["pair_id"]]):
            for metric, value in r["scores"].get(side, {}).items():
                if metric in collected:
                    collected[metric][episode].append(float(value))
    means = {m: {e: sum(v) / len(v) for e, v in by_episode.items()} for m, by_episode in collected.items()}
    episodes = set().union(*(set(v) for v in means.values()))
    means[MEAN_OF_METRICS] = {e: _mean([means[m][e] for m in METRICS if e in means[m]]) for e in episodes}
    return means


# --------------------------------------------------------------------------- agreement


def choice_agreement(label: str, study: StudyRatings, opinion: JudgeOpinion) -> dict[str, Any]:
    from mascot.stats import cohens_kappa, proportion_interval

    people, judge, unjudged_pairs = [], [], set()
    for r in study.ratings:
        said = opinion.choice(*study.pairs[r["pair_id"]])
        if said is None:
            unjudged_pairs.add(r["pair_id"])
            continue
        people.append(r["choice"])
        judge.append(said)
    decisive = [(p, j) for p, j in zip(people, judge) if TIE not in (p, j)]
    agree = sum(p == j for p, j in decisive)
    interval = proportion_interval(agree, len(decisive))
    kappa = cohens_kappa(people, judge) if people else None
    rated_pairs = {r["pair_id"] for r in study.ratings}
    out = {
        "ratings": len(study.ratings),
        "ratings_matched": len(people),
        "ratings_not_matched": len(study.ratings) - len(people),
        "pairs_rated": len(rated_pairs),
        "pairs_matched": len(rated_pairs - unjudged_pairs),
        "pairs_not_matched": len(unjudged_pairs),
        "decisive": len(decisive),
        "agree": agree,
        "person_ties": people.count(TIE),
        "judge_ties": judge.count(TIE),
        "accuracy": agree / len(decisive) if decisive else None,
        "accuracy_ci95": list(interval) if interval else None,
        "kappa": kappa["kappa"] if kappa else None,
        "kappa_ci95": _interval(kappa),
        "kappa_band": kappa_band(kappa["kappa"]) if kappa else None,
    }
    out["verdict"] = choice_verdict(label, out)
    return out


def score_agreement(label: str, study: StudyRatings, opinion: JudgeOpinion) -> dict[str, Any] | None:
    """None for a judge without scores (a head-to-head judge names winners only)."""
    if not opinion.scores:
        return None
    from mascot.stats import spearman

    people = human_scores(study)
    rated = sorted(people[MEAN_OF_METRICS])
    matched = [e for e in rated if e in opinion.scores]
    out: dict[str, Any] = {
        "episodes_rated": len(rated),
        "episodes_matched": len(matched),
        "episodes_not_matched": len(rated) - len(matched),
        "not_matched_examples": [e for e in rated if e not in opinion.scores][:3],
        "metrics": {},
    }
    for metric in (*METRICS, MEAN_OF_METRICS):
        both = [e for e in matched if e in people[metric]]
        rho = spearman([opinion.scores[e] for e in both], [people[metric][e] for e in both])
        entry = {"rho": rho["rho"], "rho_ci95": _interval(rho), "p_value": rho["p_value"], "n": rho["n"]}
        entry["verdict"] = score_verdict(label, metric, entry, out["episodes_not_matched"])
        out["metrics"][metric] = entry
    return out


def judge_agreement(study_path: Path | str, opinions: dict[str, JudgeOpinion]) -> dict[str, Any]:
    """The report: per judge label, its choice agreement and (with scores) its score agreement."""
    study = load_study(Path(study_path))
    judges = {}
    for label, opinion in opinions.items():
        judges[label] = {
            "source": opinion.source,
            "choice": choice_agreement(label, study, opinion),
            "scores": score_agreement(label, study, opinion),
        }
    return {
        "study": str(study_path),
        "ratings_used": len(study.ratings),
        "pairs": len(study.pairs),
        "episodes": len(study.episode_ids()),
        "methods": METHODS,
        "judges": judges,
    }


def agreement_with_scores(study_path: Path | str, scores: dict[str, dict[str, float]]) -> dict[str, Any]:
    """`judge_agreement` for judges given as {judge label: {episode id: collective overall}} (as
    `mascot eval` holds them)."""
    return judge_agreement(study_path, {label: JudgeOpinion("scores", scores=dict(s)) for label, s in scores.items()})


# --------------------------------------------------------------------------- verdicts in words


def kappa_band(kappa: float) -> str:
    return next(name for upper, name in KAPPA_BANDS if kappa <= upper)


def rho_band(rho: float) -> str:
    return next(name for upper, name in RHO_BANDS if abs(rho) < upper)


def _pct(value: float) -> str:
    return f"{100 * value:.0f} %"


def _ci(interval: list[float] | None, percent: bool = False) -> str:
    if not interval:
        return "95 % CI n/a"
    low, high = interval
    return f"95 % CI {_pct(low)}-{_pct(high)}" if percent else f"95 % CI {low:.2f} to {high:.2f}"


def choice_verdict(label: str, c: dict[str, Any]) -> str:
    missing = f"; {c['pairs_not_matched']} of {plural(c['pairs_rated'], 'rated pair')} not judged" if c["pairs_not_matched"] else ""
    if not c["ratings_matched"]:
        return f"judge {label} judged none of the {plural(c['pairs_rated'], 'rated pair')}: no choice agreement"
    if c["accuracy"] is None:
        ties = f"{c['judge_ties']} judge ties, {c['person_ties']} person ties"
        head = f"judge {label}: no rating where both the person and the judge chose a side ({ties})"
    else:
        head = f"judge {label} agrees with people on {_pct(c['accuracy'])} of decisive choices ({_ci(c['accuracy_ci95'], True)}, n = {c['decisive']})"
    kappa = "kappa n/a (one label throughout)" if c["kappa"] is None else f"kappa {c['kappa']:.2f} ({_ci(c['kappa_ci95'])}): {c['kappa_band']}"
    return f"{head}, {kappa}{missing}"


def score_verdict(label: str, metric: str, entry: dict[str, Any], not_matched: int) -> str:
    what = "the mean of the metrics" if metric == MEAN_OF_METRICS else metric
    missing = f"; {plural(not_matched, 'rated episode')} not scored by the judge" if not_matched else ""
    if entry["rho"] is None:
        return f"judge {label} vs people on {what}: rho n/a over {entry['n']} episodes (fewer than 3, or no variation){missing}"
    return (
        f"judge {label} ranks episodes like people on {what}: rho {entry['rho']:.2f} ({_ci(entry['rho_ci95'])}, n = {entry['n']}): "
        f"{rho_band(entry['rho'])}{missing}"
    )


def format_agreement(report: dict[str, Any]) -> list[str]:
    """The report as terminal lines: one per judge's choice agreement and per score correlation."""
    lines = [f"judges against people ({report['ratings_used']} ratings of {report['pairs']} pairs):"]
    for judge in report["judges"].values():
        lines.append(f"  {judge['choice']['verdict']}")
        if judge["scores"] is None:
            lines.append("    (names winners only: no scores to correlate)")
            continue
        lines.extend(f"    {m['verdict']}" for m in judge["scores"]["metrics"].values())
    return lines


def _interval(figure: dict[str, Any] | None) -> list[float] | None:
    if not figure or figure.get("ci_low") is None or figure.get("ci_high") is None:
        return None
    return [figure["ci_low"], figure["ci_high"]]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


# --------------------------------------------------------------------------- reading judges' files


def resolve_file(path: Path | str, name: str, flag: str) -> Path:
    """A file, or a folder holding `name`; a missing one is one line."""
    path = Path(path)
    if path.is_dir():
        if not (path / name).is_file():
            raise AgreementInputError(f"{flag} {path}: no {name} in this folder")
        return path / name
    if not path.is_file():
        raise AgreementInputError(f"{flag} {path}: no such file")
    return path


def _episode_of(item_id: str) -> str | None:
    """A whole-episode collective judgment's episode id (its item id is `<episode id>#collective`);
    None for any other item (a continuation judges a part of the episode, not what people rated)."""
    episode, _, suffix = item_id.rpartition("#")
    return episode if suffix == "collective" else None


def opinions_from_judgments(paths: list[Path]) -> tuple[dict[str, JudgeOpinion], dict[Path, set[str]]]:
    """Per judge model, its collective overall per episode (averaged where it scored one episode
    more than once); and per file, the episode ids it scored."""
    from mascot.files import RecordFormatError, read_jsonl
    from mascot.schema import Judgment

    collected: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    per_file: dict[Path, set[str]] = {}
    for path in paths:
        per_file[path] = set()
        try:
            judgments = list(read_jsonl(path, Judgment, drop_torn_tail=True))
        except RecordFormatError as exc:
            raise AgreementInputError(f"--judgments {exc}") from None
        for j in judgments:
            episode = _episode_of(j.item_id) if j.scope == "collective" else None
            if episode is None or j.failed or j.overall is None:
                continue
            collected[j.judge_model][episode].append(float(j.overall))
            per_file[path].add(episode)
    opinions = {label: JudgeOpinion("judgments", scores={e: _mean(v) for e, v in by_episode.items()}) for label, by_episode in collected.items()}
    return opinions, per_file


def opinions_from_verdicts(paths: list[Path]) -> tuple[dict[str, JudgeOpinion], dict[Path, set[str]]]:
    """Per judge label, its pooled winner on "overall" per compared set of episodes; and per file,
    the episode ids its verdicts compared."""
    from mascot.files import iter_json_objects

    said: dict[str, dict[frozenset, list[str]]] = defaultdict(lambda: defaultdict(list))
    per_file: dict[Path, set[str]] = {}
    for path in paths:
        per_file[path] = set()
        for number, record in iter_json_objects(path, AgreementInputError):
            if not isinstance(record.get("episodes"), dict) or "judge" not in record:
                raise AgreementInputError(f"--verdicts {path}:{number}: not a verdict record of `mascot eval compare` (no judge or episodes)")
            if record.get("failed") or OVERALL not in (record.get("winners") or {}):
                continue
            episodes = record["episodes"]
            winner = record["winners"][OVERALL]
            said[str(record["judge"])][frozenset(episodes.values())].append(episodes.get(winner, TIE))
            per_file[path].update(episodes.values())
    opinions = {
        label: JudgeOpinion("verdicts", winners={pair: consistent_winner(ws) for pair, ws in by_pair.items()}) for label, by_pair in said.items()
    }
    return opinions, per_file


def read_opinions(study_path: Path | str, judgments: list[str], verdicts: list[str]) -> dict[str, JudgeOpinion]:
    """Every judge of the given files, each file checked to be about the study's episodes. A judge
    named in both kinds of file is reported twice, the head-to-head one marked."""
    study = load_study(Path(study_path))
    found = study.episode_ids()
    scored, scored_files = opinions_from_judgments([resolve_file(p, JUDGMENTS_FILE, "--judgments") for p in judgments])
    compared, compared_files = opinions_from_verdicts([resolve_file(p, VERDICTS_FILE, "--verdicts") for p in verdicts])
    for flag, files in (("--judgments", scored_files), ("--verdicts", compared_files)):
        for path, episodes in files.items():
            if not episodes & found:
                raise AgreementInputError(
                    f"{flag} {path}: none of its {len(episodes)} judged episodes is in the study {study_path} "
                    f"(judge the episodes the study was made from)"
                )
    opinions = dict(scored)
    for label, opinion in compared.items():
        opinions[f"{label} (head-to-head)" if label in opinions else label] = opinion
    return opinions

"""Reading back what each cell's commands wrote: judged items (judges averaged) and automatic metrics.

A judged item's score on a criterion is the mean of the judges that scored it, on 0-100
((s - 1) / 4 * 100); "Overall" is the mean of its criteria. Failed judgments are left out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from mascot.errors import MascotError
from mascot.eval.plan import Cell
from mascot.files import read_jsonl
from mascot.rubrics import load_rubric_set, to_percent
from mascot.schema import Episode, Judgment

EPISODES = "episodes.jsonl"
JUDGMENTS = "judgments_episodes.jsonl"
JUDGE_REPORT = "metrics_episodes.json"
AUTO_REPORT = "metrics_auto.json"


@dataclass
class Item:
    """One judged item (an agent turn or a whole episode) of one cell."""

    cell: Cell
    context_id: str
    scope: str
    persona: str | None
    scores: dict[str, float]  # criterion name -> 0-100, Overall included
    episode_id: str = ""
    words: int | None = None  # the judged text's length: the turn's reply, or an episode's companion turns
    judge_overall: dict[str, float] = field(default_factory=dict)  # judge model -> its Overall, 0-100


@dataclass
class CellResult:
    cell: Cell
    run_dir: Path
    items: list[Item] = field(default_factory=list)
    auto: list[dict] = field(default_factory=list)  # per episode: context_id + metric values
    judges: list[str] = field(default_factory=list)
    rubric_versions: dict[str, set[str]] = field(default_factory=dict)  # judge -> versions seen
    prompt_version: str | None = None
    num_unscored: int = 0  # items every judge failed on: left out of the tables, asked again on a rerun
    generators: set[str] = field(default_factory=set)  # the models that wrote the companions' turns (self-preference)


def find_run_dir(folder: Path) -> Path:
    """The run `mascot generate` wrote under a cell's folder (the latest, if settings changed)."""
    configs = sorted(Path(folder).glob("*/run_config.json"), key=lambda p: p.stat().st_mtime)
    if not configs:
        raise MascotError(f"{folder}: no generated run here (run without --report-only first)")
    return configs[-1].parent


def criterion_names(rubric_version: str) -> dict[tuple[str, str], dict[str, str]]:
    rubric_set = load_rubric_set(rubric_version)
    return {(d, s): rubric_set.rubric(d, s).names for d, scopes in rubric_set.domains.items() for s in scopes}


def _average(judgments: list[Judgment], names: dict[str, str]) -> dict[str, float] | None:
    ok = [j for j in judgments if not j.failed and j.overall is not None]
    if not ok:
        return None
    scores = {names.get(k, k): to_percent(sum(j.scores[k] for j in ok) / len(ok)) for k in ok[0].scores}
    scores["Overall"] = to_percent(sum(j.overall for j in ok) / len(ok))  # type: ignore[misc]
    return scores


def item_lengths(episode: Episode) -> dict[str, int]:
    """item id -> words judged: each companion turn's reply, and the episode's companion turns together
    (`conversation_words`, the length head-to-heads use)."""
    from mascot.judge.compare import conversation_words

    lengths = {f"{episode.episode_id}#t{t.turn_idx}": len(t.response.split()) for t in episode.agent_turns}
    lengths[f"{episode.episode_id}#collective"] = conversation_words(episode)
    return lengths


def judge_overalls(judgments: list[Judgment]) -> dict[str, float]:
    return {j.judge_model: to_percent(j.overall) for j in judgments if not j.failed and j.overall is not None}


def read_cell(cell: Cell, rubric_version: str) -> CellResult:
    run_dir = find_run_dir(cell.folder)
    result = CellResult(cell, run_dir)
    episodes = list(read_jsonl(run_dir / EPISODES, Episode, drop_torn_tail=True))
    context_of = {e.episode_id: e.context_id for e in episodes}
    lengths = {k: v for e in episodes for k, v in item_lengths(e).items()}
    result.generators = {m for e in episodes for m in (e.metadata.speaker_model,) if m}
    judgments_path = run_dir / JUDGMENTS
    if not judgments_path.is_file():
        raise MascotError(f"{run_dir}: no {JUDGMENTS} (the run was not judged; rerun without --report-only)")
    by_item: dict[str, list[Judgment]] = {}
    for j in read_jsonl(judgments_path, Judgment):
        by_item.setdefault(j.item_id, []).append(j)
        result.rubric_versions.setdefault(j.judge_model, set()).add(j.rubric_version)
    names = criterion_names(_only_version(result) or rubric_version)
    for item_id, judgments in by_item.items():
        first = judgments[0]
        domain = (first.model_extra or {}).get("domain", "")
        scores = _average(judgments, names.get((domain, first.scope), {}))
        episode_id = item_id.split("#", 1)[0]
        if scores is None:
            result.num_unscored += 1
        elif episode_id in context_of:
            result.items.append(Item(cell, context_of[episode_id], first.scope, first.persona, scores, episode_id,
                                     lengths.get(item_id), judge_overalls(judgments)))  # fmt: skip
    _read_reports(result, context_of)
    return result


def _only_version(result: CellResult) -> str | None:
    versions = {v for vs in result.rubric_versions.values() for v in vs}
    return versions.pop() if len(versions) == 1 else None


def _read_reports(result: CellResult, context_of: dict[str, str]) -> None:
    judge_report = _read_json(result.run_dir / JUDGE_REPORT)
    result.judges = [j.get("name") or j.get("model") for j in judge_report.get("judges", [])]
    result.prompt_version = judge_report.get("prompt_version")
    auto_path = result.run_dir / AUTO_REPORT
    if auto_path.is_file():
        from mascot.metrics.auto import on_current_scale

        for row in on_current_scale(_read_json(auto_path)).get("per_episode", []):
            if row.get("episode_id") in context_of:
                result.auto.append({**row, "context_id": context_of[row["episode_id"]]})


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise MascotError(f"{path}: unreadable ({exc})") from None


def check_one_rubric(results: list[CellResult]) -> str:
    """Every judgment of an evaluation must come from one rubric version; otherwise one clear line."""
    seen: dict[str, str] = {}
    for result in results:
        for judge, versions in result.rubric_versions.items():
            for version in versions:
                seen.setdefault(version, f"judge {judge} in {result.run_dir}")
    if len(seen) > 1:
        shown = "; ".join(f"{v} ({where})" for v, where in sorted(seen.items()))
        raise MascotError(f"judges disagree on rubric versions: {shown}: judge every run with one --rubric-version")
    if not seen:
        raise MascotError("no judgments to report: every judgment failed or nothing was judged")
    return next(iter(seen))

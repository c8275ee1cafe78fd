"""`mascot judge` as a library call: judge an episode file, write judgments and the metrics report.

Each agent turn is judged with the agent rubric of the episode's domain (from metadata.dataset), in
context; each episode with the collective rubric. Outputs go next to the input (or to an output
directory): `judgments_<stem>.jsonl` (one Judgment per item and judge) and `metrics_<stem>.json`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from mascot.episodes import EpisodeFile, load_episode_file
from mascot.files import ensure_writable_dir, ensure_writable_file, write_json_atomic, write_jsonl
from mascot.judge.agreement import agreement
from mascot.judge.items import agent_items, collective_item
from mascot.judge.panel import JudgePanel
from mascot.judge.patterns import pattern_warning
from mascot.judge.prompt import JudgeItem
from mascot.judge.report import build_report
from mascot.rubrics import load_rubric_set
from mascot.schema import Context, Counters

log = logging.getLogger(__name__)


@dataclass
class JudgeRunResult:
    metrics_path: Path
    judgments_path: Path
    report: dict
    counters: Counters


def items_for(episodes: EpisodeFile, scopes: tuple[str, ...], contexts: dict[str, Context] | None) -> list[JudgeItem]:
    items: list[JudgeItem] = []
    for episode in episodes.episodes:
        if "agent" in scopes:
            items.extend(agent_items(episode, contexts))
        if "collective" in scopes:
            items.append(collective_item(episode, contexts))
    return items


def output_paths(input_file: Path, output_dir: Path | None) -> tuple[Path, Path]:
    folder = ensure_writable_dir(Path(output_dir) if output_dir else Path(input_file).parent)
    stem = Path(input_file).stem
    return folder / f"metrics_{stem}.json", folder / f"judgments_{stem}.jsonl"


def _criteria(rubric_version: str, scopes: tuple[str, ...]) -> list[str]:
    rubric_set = load_rubric_set(rubric_version)
    keys: list[str] = []
    for scopes_of_domain in rubric_set.domains.values():
        for scope, criteria in scopes_of_domain.items():
            if scope in scopes:
                keys.extend(c.key for c in criteria if c.key not in keys)
    return keys


async def judge_episode_file(
    input_file: Path,
    panel: JudgePanel,
    *,
    rubric_version: str,
    dataset: str | None = None,
    contexts: dict[str, Context] | None = None,
    scopes: tuple[str, ...] = ("agent", "collective"),
    output_dir: Path | None = None,
    limit: int | None = None,
    loaded: EpisodeFile | None = None,
) -> JudgeRunResult:
    """Judges every item of an episode file (`loaded`: the file already read, e.g. to refuse a bad
    file before any server is contacted)."""
    episodes = loaded if loaded is not None else load_episode_file(input_file, dataset=dataset)
    metrics_path, judgments_path = output_paths(input_file, output_dir)  # writable before any model call
    for path in (metrics_path, judgments_path):
        ensure_writable_file(path)
    if limit is not None:
        episodes.episodes = episodes.episodes[:limit]
    missing_context = sum(1 for e in episodes.episodes if e.context_id not in (contexts or {}) and e.context is None)
    if missing_context:
        log.warning("%d episodes have no dataset context (pass --data-file/--split to add it): judged on the conversation alone", missing_context)
    items = items_for(episodes, scopes, contexts)
    per_judge = await panel.judge_many(items)
    write_jsonl(judgments_path, [j for judgments in per_judge.values() for j in judgments])
    counters = panel.judges[0].counters if panel.judges else Counters()
    pattern_lines = [line for j in panel.judges if (line := pattern_warning(j.label, j.patterns))]
    for line in pattern_lines:
        log.warning("%s", line)
    report = {
        "input_file": str(input_file),
        "rubric_version": rubric_version,
        "prompt_version": panel.judges[0].template_version if panel.judges else None,
        "judges": [{"name": j.label, "model": j.model} for j in panel.judges],
        "num_episodes": len(episodes.episodes),
        "num_legacy_records": episodes.legacy_records,
        "num_episodes_without_context": missing_context,
        **({"num_skipped_lines": len(episodes.skipped_lines)} if episodes.skipped_lines else {}),  # malformed lines, named in `warnings`
        "warnings": [*episodes.warnings, *pattern_lines],
        **build_report(per_judge, rubric_version, scopes),
        "counters": _report_counters(panel, counters, len(items), per_judge),
        "judge_patterns": {j.label: j.patterns.to_dict() for j in panel.judges},  # judge/patterns.py
        "usage": panel.usage(),
    }
    if len(per_judge) > 1:
        report["agreement"] = agreement(per_judge, _criteria(rubric_version, scopes))
    write_json_atomic(metrics_path, report)
    return JudgeRunResult(metrics_path, judgments_path, report, counters)


def _report_counters(panel, counters: Counters, num_items: int, per_judge: dict) -> dict:
    judges = panel.judges
    return {
        **counters.model_dump(),
        "num_items": num_items,
        "num_judgments": sum(len(v) for v in per_judge.values()),
        "num_model_calls": panel.calls,
        "num_function_calls": sum(getattr(j, "function_calls", 0) for j in judges),  # plug-in judges (mascot.judge.plugin)
        "num_cached": sum(j.stats.cached for j in judges),
        "num_corrective_retries": sum(j.stats.retries for j in judges),
        "num_structured_replies": sum(j.stats.structured for j in judges),
        "num_free_text_replies": sum(j.stats.free for j in judges),
        "num_logprob_scored_items": sum(j.stats.logprob_items for j in judges),
        "num_logprob_fallbacks": sum(j.stats.logprob_fallbacks for j in judges),
        "num_fixed_pattern_judgments": sum(j.patterns.patterned for j in judges),
    }

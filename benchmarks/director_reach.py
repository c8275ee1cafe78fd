"""How far a Director that picks companions can move each group judge, before any Director trains.

For each pipeline folder given, reads its Stage-2 episodes and their group judgments and prints
what the report's "How far the Director's choices move the group judge" says
(`mascot.pipeline.judge_reach`): the F test of the companion sequence within contexts, the share of
the judge's within-context variation it explains, each sequence's score relative to its context,
and (with a base evaluation, in the folder or from --base-from) the most a Director could gain over
the base Director's choices.

With --stage-words it also measures whether the Director's directive steers the Speaker's words the
way the frozen second judge (`mascot.judge.stages`) reads them: how often a turn reaches that
judge's action stage when its directive's action names an action word, and when it does not.
Equal rates mean the directive's words do not steer the Speaker: a Director can only move that
judge by whom it picks.

    python benchmarks/director_reach.py DIR [DIR ...] [--base-from DIR] [--stage-words]

Seconds on the CPU (no model runs).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def print_reach(root: Path, base_from: Path | None) -> None:
    from mascot.pipeline import figures as fig
    from mascot.pipeline.judge_reach import base_expectation, judge_reach, reach_lines

    reach = judge_reach(root)
    if reach is None:
        raise SystemExit(f"{root}: no judged Stage-2 episodes (episodes/ and group_pairs/group_pairs_judgments.jsonl)")
    base = fig.find_run_dir(base_from / "eval_base") if base_from else None
    if base is not None:
        reach.update(base_expectation(reach["effects"], base / "episodes.jsonl"))
    print(f"## {root}")
    print("\n".join(reach_lines(reach)).strip())
    print()


def print_stage_steering(root: Path) -> None:
    from mascot.episodes import load_episode_file
    from mascot.judge.stages import STAGES, stage_of
    from mascot.pipeline import figures as fig

    episodes = load_episode_file(fig.find_run_dir(root / "episodes") / "episodes.jsonl", fallback_dataset="unknown").episodes
    counts = {True: [0, 0], False: [0, 0]}  # directive names an action word -> [turns, turns at the action stage]
    for episode in episodes:
        domain = episode.metadata.roster if episode.metadata.roster in STAGES else "emotional_support"
        action = dict(STAGES[domain])["action"]
        for turn in episode.agent_turns:
            asked = bool(turn.directive and action.search(turn.directive.action or ""))
            counts[asked][0] += 1
            counts[asked][1] += stage_of(domain, turn.response) == len(STAGES[domain]) - 1
    for asked, (turns, at_action) in counts.items():
        rate = f"{at_action / turns:.2f}" if turns else "-"
        print(f"directive {'names' if asked else 'names no'} action word: {turns} turns, {rate} of them at the action stage")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="`mascot pipeline` output folders with judged Stage-2 episodes")
    parser.add_argument("--base-from", type=Path, help="a folder whose base evaluation (eval_base/) stands for folders without one")
    parser.add_argument("--stage-words", action="store_true", help="also measure whether directives steer the words the stage judge reads")
    args = parser.parse_args()
    for root in args.runs:
        has_base = (root / "eval_base").is_dir()
        print_reach(root, None if has_base else args.base_from)
        if args.stage_words:
            print_stage_steering(root)


if __name__ == "__main__":
    main()

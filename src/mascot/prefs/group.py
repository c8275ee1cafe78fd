"""Stage-2 preference data from group episodes, scored with the collective rubric.

- mode "episode" (independent-mode episodes: several full episodes per context, records share
  `context_id` and differ in `metadata.episode_idx`): every pair of episodes of one context whose
  collective Overall differs by at least the margin is a pair for the group reward model. The prompt
  is the context (`group_rm_prompt`); chosen and rejected are the two trajectories rendered as text
  (`render_trajectory`), kind "episode". The group reward model must be fed the same rendering when
  it scores rollouts, so trainers import both functions from here.
- mode "directive" (branching episodes: records share `metadata.branch.group_id` and the prefix
  `turns[:prefix_turns]`): each branch's continuation (the turns after the prefix) is judged with
  the collective rubric, the prefix shown as earlier conversation. Every pair of branches of one
  decision point whose scores differ by at least the margin is a pair for Director DPO: the prompt
  is the Director's own prompt at the decision point, chosen and rejected are the two parsed
  directives in their one canonical form (the `<directive>` block the prompt asks for), so that two
  spellings of one directive (JSON whitespace, field order) are the same text and never a pair;
  kind "directive". A branch whose directive was the fallback (no Director answer could be used:
  none parsed, or it copied the prompt's worked example) is neither judged nor a pair side: those
  pairs are counted in `num_dropped_director_fallbacks`. A fallback's neutral directive is no text
  the Director wrote, so no pair and no rendered trajectory carries it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from mascot.dialogue.director import NEUTRAL_ACTION, NEUTRAL_TONE, render_directive
from mascot.dialogue.examples import copies_example
from mascot.dialogue.prompts import director_messages
from mascot.episodes import episode_context, episode_domain, episode_roster
from mascot.files import read_jsonl
from mascot.judge.items import collective_item, opening_lines, render_context, user_label
from mascot.judge.panel import JudgePanel, mean_scores
from mascot.judge.prompt import JudgeItem
from mascot.llm.base import Message
from mascot.prefs.pairs import PairStats, max_pairs, preference_index_pairs
from mascot.prompt_text import Trusted, render_prompt, transcript_text
from mascot.rosters import roster_for_dataset
from mascot.schema import Context, Directive, Episode, Judgment, PreferencePair, Turn
from mascot.vocab import PROMPT_VERSION

log = logging.getLogger(__name__)

GroupMode = Literal["episode", "trajectory", "directive"]
GROUP_RM_INSTRUCTION = "Here is a conversation between a group of companions and a person. How good is the group's conversation?"


# How a trajectory is written for the group reward model, recorded on each episode pair and in the
# reward model's metadata so that its rollouts are scored as it was trained:
# 1: each companion's name carries the directive it followed (pairs written before the field);
# 2: the conversation as the group judge reads it, names and replies. The judge never sees the
#    directives, so their words could only add noise, and at small scale they filled the reward
#    model's window (benchmarks/README.md, "What the group reward model reads").
TRAJECTORY_FORMATS = (1, 2)
TRAJECTORY_FORMAT = 2


def trajectory_lines(turns: list[Turn], domain: str, trajectory_format: int = TRAJECTORY_FORMAT) -> list[tuple[str, str]]:
    """(speaker, text) of a trajectory. In format 1 an agent's speaker carries the directive it
    followed, unless the turn ran on the fallback or its directive only copies the Director prompt's
    worked example (no instruction the Director wrote, only words that would hide who spoke and
    what they said from a reward model)."""
    who = user_label(domain)
    lines = []
    for t in turns:
        d = t.directive
        real = trajectory_format == 1 and not t.is_user and d is not None and bool(d.action or d.tone) and not is_fallback_turn(t)
        steer = f" [{d.action}; {d.tone}]" if real else ""  # type: ignore[union-attr]
        lines.append((who if t.is_user else f"{t.agent_name}{steer}", t.response))
    return lines


def render_trajectory(turns: list[Turn], domain: str, trajectory_format: int = TRAJECTORY_FORMAT) -> str:
    """A trajectory as text (`transcript.j2`): one line per turn."""
    return transcript_text(trajectory_lines(turns, domain, trajectory_format))


def group_rm_prompt(context: Context | None, domain: str) -> list[Message]:
    """The prompt of an episode-level pair (`group_rm_user.j2`): the context and opening lines as
    the judge reads them, then the question the reward model answers."""
    opening = transcript_text(opening_lines(context, domain))
    content = render_prompt("group_rm_user.j2", context=render_context(context), opening=opening, instruction=Trusted(GROUP_RM_INSTRUCTION))
    return [{"role": "user", "content": content}]


def is_fallback_turn(turn: Turn) -> bool:
    """Whether a turn ran on the Director's fallback rather than on a directive it wrote. Files
    written before turns recorded it are recognised by the fallback's neutral directive after a
    corrective exchange, and by a directive that copies the prompt's worked example (the Director
    has treated such an answer as unusable since)."""
    if turn.director_fallback:
        return True
    d = turn.directive
    if d is None or turn.is_user:
        return False
    legacy = bool(turn.directive_output and "\n\n[correction]\n" in turn.directive_output)
    return (legacy and (d.action, d.tone) == (NEUTRAL_ACTION, NEUTRAL_TONE)) or copies_example(d.action, d.tone)


def directive_text(turn: Turn) -> str:
    """The directive a turn followed, in its canonical form (whatever the Director's spelling)."""
    return render_directive(turn.directive or Directive(agent_name=turn.agent_name))


def director_prompt(episode: Episode, prefix: list[Turn], contexts: dict[str, Context] | None) -> list[Message]:
    context = episode_context(episode, contexts) or Context(context_id=episode.context_id or episode.episode_id, dataset=episode.metadata.dataset)
    roster = episode_roster(episode) or roster_for_dataset(episode.metadata.dataset)
    return director_messages(roster, context, prefix, episode.metadata.prompt_version or PROMPT_VERSION)


# --------------------------------------------------------------------------- grouping


def is_branch(episode: Episode) -> bool:
    return episode.metadata.branch is not None


def run_of(episode: Episode) -> tuple[str, str]:
    """(system, run) an episode belongs to: only episodes of one run of one system are compared."""
    return episode.metadata.system, episode.metadata.run_id or ""


def episode_groups(episodes: list[Episode]) -> dict[str, list[Episode]]:
    """Full (non-branch) episodes by context, ordered by episode_idx; one group per context and run
    (the key is the context id, prefixed with `<system>/<run>:` when the file holds several runs)."""
    runs = {run_of(e) for e in episodes if not is_branch(e)}
    groups: dict[str, list[Episode]] = defaultdict(list)
    for e in episodes:
        if not is_branch(e):
            context = e.context_id or e.episode_id
            groups[context if len(runs) == 1 else "{}/{}:{}".format(*run_of(e), context)].append(e)
    return {k: sorted(v, key=lambda e: e.metadata.episode_idx) for k, v in groups.items()}


def _trajectory_order(episode: Episode) -> tuple[int, int, int]:
    branch = episode.metadata.branch
    return (1, branch.decision_round, branch.candidate_idx) if branch else (0, episode.metadata.episode_idx, 0)


def trajectory_groups(episodes: list[Episode]) -> dict[str, list[Episode]]:
    """Every record of one context - independent episodes, spines and branches alike, each a whole
    conversation - by context and run (keyed as `episode_groups` keys them)."""
    runs = {run_of(e) for e in episodes}
    groups: dict[str, list[Episode]] = defaultdict(list)
    for e in episodes:
        context = e.context_id or e.episode_id
        groups[context if len(runs) == 1 else "{}/{}:{}".format(*run_of(e), context)].append(e)
    return {k: sorted(v, key=_trajectory_order) for k, v in groups.items()}


def shared_turns(a: Episode, b: Episode) -> int:
    """How many turns two records of one context open with alike (speaker and words)."""
    count = 0
    for x, y in zip(a.turns, b.turns):
        if (x.agent_name, x.response) != (y.agent_name, y.response):
            break
        count += 1
    return count


def branch_groups(episodes: list[Episode]) -> dict[str, list[Episode]]:
    runs = {run_of(e) for e in episodes if is_branch(e)}
    groups: dict[str, list[Episode]] = defaultdict(list)
    for e in episodes:
        if is_branch(e):
            group_id = e.metadata.branch.group_id  # type: ignore[union-attr]
            groups[group_id if len(runs) == 1 else "{}/{}:{}".format(*run_of(e), group_id)].append(e)
    return {k: sorted(v, key=lambda e: e.metadata.branch.candidate_idx) for k, v in groups.items()}  # type: ignore[union-attr]


def decision_turn(branch: Episode) -> Turn | None:
    """The turn a branch's candidate directive produced (the first after the shared prefix)."""
    prefix_len = branch.metadata.branch.prefix_turns  # type: ignore[union-attr]
    return branch.turns[prefix_len] if len(branch.turns) > prefix_len else None


def ran_on_fallback(branch: Episode) -> bool:
    turn = decision_turn(branch)
    return turn is not None and is_fallback_turn(turn)


def items_for_mode(episodes: list[Episode], mode: GroupMode, contexts: dict[str, Context] | None) -> list[JudgeItem]:
    if mode in ("episode", "trajectory"):
        groups = episode_groups(episodes) if mode == "episode" else trajectory_groups(episodes)
        return [collective_item(e, contexts) for group in groups.values() for e in group]
    branches = [e for group in branch_groups(episodes).values() for e in group]
    skipped = sum(1 for e in branches if ran_on_fallback(e))
    if skipped:
        log.warning(
            "%d of %d branches ran on the Director's fallback (no usable directive): they are not judged and make no directive pair",
            skipped,
            len(branches),
        )
    return [collective_item(e, contexts, prefix_turns=e.metadata.branch.prefix_turns) for e in branches if not ran_on_fallback(e)]  # type: ignore[union-attr]


# --------------------------------------------------------------------------- pairs


def episode_pairs(
    episodes: list[Episode], scores: dict[str, float | None], margin: float, contexts: dict[str, Context] | None = None, *, branches: bool = False
) -> tuple[list[PreferencePair], PairStats]:
    """`scores`: collective Overall (1-5) by episode_id. With `branches`, the records of a branching
    run count too, each judged whole (mode "trajectory"): a branch against its siblings or its spine
    differs only after their shared turns, against another context's record in everything."""
    stats = PairStats(score_margin=margin)
    pairs: list[PreferencePair] = []
    for query, group in (trajectory_groups(episodes) if branches else episode_groups(episodes)).items():
        domain = episode_domain(group[0])
        texts = [render_trajectory(e.turns, domain) for e in group]
        index_pairs, counts = preference_index_pairs([scores.get(e.episode_id) for e in group], margin, texts)
        stats.add_query(query, index_pairs, counts)
        prompt = group_rm_prompt(episode_context(group[0], contexts), domain)
        for p in index_pairs:
            chosen, rejected = group[p.chosen], group[p.rejected]
            pairs.append(
                PreferencePair(
                    prompt=prompt,
                    chosen=[{"role": "assistant", "content": texts[p.chosen]}],
                    rejected=[{"role": "assistant", "content": texts[p.rejected]}],
                    margin=p.margin,
                    context_id=chosen.context_id or chosen.episode_id,
                    chosen_score=scores[chosen.episode_id],
                    rejected_score=scores[rejected.episode_id],
                    kind="episode",
                    trajectory_format=TRAJECTORY_FORMAT,
                    shared_turns=shared_turns(chosen, rejected),
                    pair_id=f"{chosen.episode_id}>{rejected.episode_id}",
                    roster=chosen.metadata.roster,
                    roster_version=chosen.metadata.roster_version,
                    rubric_version=chosen.metadata.rubric_version,
                    system=chosen.metadata.system,
                )
            )
    return pairs, stats


def directive_pairs(
    episodes: list[Episode], scores: dict[str, float | None], margin: float, contexts: dict[str, Context] | None = None
) -> tuple[list[PreferencePair], PairStats]:
    """`scores`: collective Overall (1-5) of each branch's continuation, by episode_id."""
    stats = PairStats(score_margin=margin, dropped_director_fallbacks=0)
    pairs: list[PreferencePair] = []
    for group_id, group in branch_groups(episodes).items():
        prefix_len = group[0].metadata.branch.prefix_turns  # type: ignore[union-attr]
        decided = [e for e in group if decision_turn(e) is not None]
        usable = [e for e in decided if not ran_on_fallback(e)]
        texts = [directive_text(e.turns[prefix_len]) for e in usable]
        index_pairs, counts = preference_index_pairs([scores.get(e.episode_id) for e in usable], margin, texts)
        with_fallback = max_pairs(len(decided)) - max_pairs(len(usable))  # pairs with a fallback side
        counts.candidate_pairs += with_fallback
        stats.dropped_director_fallbacks += with_fallback  # type: ignore[operator]
        stats.add_query(group_id, index_pairs, counts)
        if not index_pairs:
            continue
        prompt = director_prompt(usable[0], usable[0].turns[:prefix_len], contexts)
        for p in index_pairs:
            chosen, rejected = usable[p.chosen], usable[p.rejected]
            pairs.append(
                PreferencePair(
                    prompt=prompt,
                    chosen=[{"role": "assistant", "content": texts[p.chosen]}],
                    rejected=[{"role": "assistant", "content": texts[p.rejected]}],
                    margin=p.margin,
                    persona=chosen.turns[prefix_len].agent_name,
                    context_id=chosen.context_id,
                    chosen_score=scores[chosen.episode_id],
                    rejected_score=scores[rejected.episode_id],
                    kind="directive",
                    pair_id=f"{chosen.episode_id}>{rejected.episode_id}",
                    roster=chosen.metadata.roster,
                    roster_version=chosen.metadata.roster_version,
                    rubric_version=chosen.metadata.rubric_version,
                    group_id=chosen.metadata.branch.group_id,  # type: ignore[union-attr]
                    system=chosen.metadata.system,
                    decision_round=chosen.metadata.branch.decision_round,  # type: ignore[union-attr]
                )
            )
    return pairs, stats


@dataclass
class GroupPreferences:
    pairs: list[PreferencePair]
    stats: PairStats
    judgments: list[Judgment]
    usage: dict[str, dict] = field(default_factory=dict)  # requests and tokens per judge


def resolve_mode(episodes: list[Episode], mode: str) -> GroupMode:
    if mode in ("episode", "trajectory", "directive"):
        return mode  # type: ignore[return-value]
    return "directive" if any(is_branch(e) for e in episodes) else "episode"


def judgments_by_judge(judgments: list[Judgment]) -> dict[str, list[Judgment]]:
    """Judgments as a panel returns them: by judge label (the `judge` field; else the model)."""
    per_judge: dict[str, list[Judgment]] = defaultdict(list)
    for j in judgments:
        per_judge[str((j.model_extra or {}).get("judge") or j.judge_model)].append(j)
    return dict(per_judge)


def read_judgments(path: Path, items: list[JudgeItem]) -> tuple[dict[str, list[Judgment]], list[str]]:
    """The judgments of `items` in a judgments file (`mascot judge` writes one), by judge, and the
    ids of the items it has none for; the file's other judgments (agent scope) are left out."""

    wanted = {item.item_id for item in items}
    kept = [j for j in read_jsonl(Path(path), Judgment) if j.item_id in wanted]
    return judgments_by_judge(kept), sorted(wanted - {j.item_id for j in kept})


def pairs_from_judgments(
    episodes: list[Episode],
    per_judge: dict[str, list[Judgment]],
    *,
    mode: GroupMode,
    margin: float,
    contexts: dict[str, Context] | None = None,
    usage: dict[str, dict] | None = None,
) -> GroupPreferences:
    """The pairs that collective judgments (by judge) make of the episodes."""
    scores = {s.provenance.get("episode_id", s.item_id): s.overall for s in mean_scores(per_judge)}
    if mode == "directive":
        pairs, stats = directive_pairs(episodes, scores, margin, contexts)
    else:
        pairs, stats = episode_pairs(episodes, scores, margin, contexts, branches=mode == "trajectory")
    judgments = [j for js in per_judge.values() for j in js]
    if judgments:  # the pairs were made with the judges' rubric, whatever the episodes intended
        for pair in pairs:
            pair.rubric_version = judgments[0].rubric_version
    return GroupPreferences(pairs, stats, judgments, usage or {})


async def group_preferences(
    episodes: list[Episode],
    panel: JudgePanel,
    *,
    mode: str = "auto",
    margin: float = 0.5,
    contexts: dict[str, Context] | None = None,
) -> GroupPreferences:
    """Judges what `mode` compares with the collective rubric and builds the pairs."""
    resolved = resolve_mode(episodes, mode)
    per_judge = await panel.judge_many(items_for_mode(episodes, resolved, contexts))
    return pairs_from_judgments(episodes, per_judge, mode=resolved, margin=margin, contexts=contexts, usage=panel.usage())

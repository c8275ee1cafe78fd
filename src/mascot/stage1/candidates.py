"""Stage-1 candidates on disk: judgments written into them, failed ones repaired by --resume.

A candidate whose judgment failed keeps its text; `--resume` judges that text again and appends the
repaired candidate under the same id, so the file is never rewritten while records may still be
lost: a later line of an id supersedes the earlier ones when the file is read. Once the run has
written everything, the file is rewritten (a temporary file renamed over it) with one record per
id, in the order the ids first appeared. A run killed before that leaves both lines; the next
`--resume` reads the later one and compacts the file.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from mascot.files import read_jsonl, write_jsonl
from mascot.judge.patterns import PatternTally, pattern_warning
from mascot.judge.plugin import is_plugin
from mascot.judge.rubric_judge import failure_kind
from mascot.schema import Candidate, Judgment

EMPTY_REPLY = "empty reply: not judged"


def judgment_failed(candidate: Candidate) -> bool:
    """The candidate has a reply but no scores because judging it failed (an empty reply is never
    judged, so it does not count)."""
    error = getattr(candidate, "judgment_error", None)
    return bool(error) and error != EMPTY_REPLY and candidate.overall is None


def apply_judgment(candidate: Candidate, judgment: Judgment | None) -> Candidate:
    """Writes a judgment's outcome into the candidate (None: the reply was empty, never judged)."""
    if judgment is None:
        candidate.judgment_error = EMPTY_REPLY
        return candidate
    if judgment.failed:
        candidate.judgment_error = judgment.error
    else:
        candidate.scores = judgment.scores
        candidate.overall = judgment.overall
        candidate.reasons = judgment.reasons
    candidate.judge_model = judgment.judge_model
    candidate.rubric_version = judgment.rubric_version
    return candidate


def rejudged(candidate: Candidate, judgment: Judgment) -> Candidate | None:
    """The candidate with its new scores, or None when judging it failed again (it stays as it is)."""
    if judgment.failed:
        return None
    repaired = candidate.model_copy(deep=True)
    if repaired.model_extra is not None:
        repaired.model_extra.pop("judgment_error", None)
    return apply_judgment(repaired, judgment)


def latest_candidates(path: Path) -> tuple[list[Candidate], int]:
    """The file's candidates, the last line of each id winning, in first-appearance order; and how
    many lines were superseded."""
    latest: dict[str, Candidate] = {}
    lines = 0
    for candidate in read_jsonl(path, Candidate, drop_torn_tail=True):
        lines += 1
        latest[candidate.candidate_id] = candidate  # a re-assigned key keeps its first position
    return list(latest.values()), lines - len(latest)


def compact_candidates(path: Path) -> None:
    """One record per candidate id (the latest), written atomically over the file."""
    candidates, _ = latest_candidates(path)
    write_jsonl(path, candidates)


def unjudged_failures(candidates: Iterable[Candidate]) -> dict[str, str]:
    """Candidate id -> "judge-backend: error" (or judge-unparseable) for each failed judgment."""
    return {c.candidate_id: f"{failure_kind(c.judgment_error)}: {c.judgment_error}" for c in candidates if judgment_failed(c)}


def judging_summary(candidates: list[Candidate], scale_min: int = 1) -> dict:
    """run_summary.json's `judging` block over every candidate, with one warning line per judge
    whose scores follow a fixed pattern (mascot.judge.patterns)."""
    tallies: dict[str, PatternTally] = {}
    for c in candidates:
        if is_plugin(getattr(c, "judge_model", None)):  # a rule may well give every criterion one score: that is its verdict, not a lapse
            continue
        if c.scores and not any(isinstance(v, float) and v != int(v) for v in c.scores.values()):
            tallies.setdefault(str(getattr(c, "judge_model", None) or "?"), PatternTally()).add(list(c.scores.values()), scale_min)
    failed = [c for c in candidates if judgment_failed(c)]
    block = {
        "num_judged": sum(1 for c in candidates if c.overall is not None),
        "num_failed": len(failed),
        "num_failed_backend": sum(1 for c in failed if failure_kind(c.judgment_error) == "judge-backend"),
        "num_fixed_pattern": sum(t.patterned for t in tallies.values()),
        "fixed_patterns": {label: dict(t.patterns.most_common()) for label, t in tallies.items() if t.patterns},
    }
    warnings = [line for label, t in tallies.items() if (line := pattern_warning(label, t))]
    return {**block, "warnings": warnings} if warnings else block

"""Judgments whose scores follow a fixed pattern instead of the judged text.

A small judge can fill the rubric's JSON without reading the reply: every criterion scored with its
position on the scale (1, 2, 3, 4, 5 in criterion order), or every criterion the same score. One
such judgment says little (a lenient judge may well give a good reply 4 on every criterion); a judge
whose judgments mostly repeat one pattern gives scores that carry no information, and every Stage-1
Overall it gives is the same, so no pair clears the margin.

Such judgments are kept as the judge gave them (they are its answers, and judging again at
temperature 0 gives them again): they are counted per pattern, and a judge is named on screen when
one pattern makes up at least `PATTERN_SHARE` of at least `MIN_JUDGMENTS` of its judgments.
Only integer verdicts (JSON scoring) are looked at; expected scores (logprobs) are left alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

PATTERN_SHARE = 0.5  # one pattern in at least half of a judge's judgments...
MIN_JUDGMENTS = 5  # ...of at least this many: a single lenient item is no verdict on the judge


def score_pattern(scores: Sequence[float], scale_min: int = 1) -> str | None:
    """The fixed pattern `scores` (in criterion order) follow, or None. Needs two criteria or more."""
    if len(scores) < 2 or any(isinstance(s, bool) or float(s) != int(s) for s in scores):
        return None
    values = [int(s) for s in scores]
    if values == list(range(scale_min, scale_min + len(values))):
        return f"scores {','.join(map(str, values))} in criterion order"
    if len(set(values)) == 1:
        return f"every criterion {values[0]}"
    return None


@dataclass
class PatternTally:
    """Judgments seen and how many follow each fixed pattern, for one judge."""

    judged: int = 0
    patterns: Counter = field(default_factory=Counter)

    def add(self, scores: Sequence[float], scale_min: int = 1) -> None:
        self.judged += 1
        pattern = score_pattern(scores, scale_min)
        if pattern:
            self.patterns[pattern] += 1

    @property
    def patterned(self) -> int:
        return sum(self.patterns.values())

    def dominant(self) -> tuple[str, int] | None:
        """The most frequent pattern when it marks the judge as giving no information."""
        if not self.patterns or self.judged < MIN_JUDGMENTS:
            return None
        pattern, count = self.patterns.most_common(1)[0]
        return (pattern, count) if count >= PATTERN_SHARE * self.judged else None

    def to_dict(self) -> dict:
        return {"num_judged": self.judged, "num_fixed_pattern": self.patterned, "fixed_patterns": dict(self.patterns.most_common())}


def pattern_warning(label: str, tally: PatternTally) -> str | None:
    """'judge M: 8 of 9 judgments follow a fixed pattern (...); its scores carry no information'."""
    found = tally.dominant()
    if found is None:
        return None
    pattern, count = found
    return f"judge {label}: {count} of {tally.judged} judgments follow a fixed pattern ({pattern}); its scores carry no information"

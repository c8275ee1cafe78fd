"""Preference pairs from scored candidates.

Every unordered pair of candidates of one query whose score gap (difference of Overall on the 1-5
mean scale) is at least the margin becomes one pair, the higher score chosen; so a query with K
candidates yields at most K(K-1)/2 pairs. Pairs with an unscored candidate (failed judgment), with
equal scores or with identical texts are never made (there is nothing to prefer).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from itertools import combinations

from mascot.progress import plural

MARGIN_TOLERANCE = 1e-9  # 4.2 - 3.7 must pass a 0.5 margin despite binary floating point


@dataclass
class PairCounts:
    candidate_pairs: int = 0  # unordered pairs considered
    kept: int = 0
    dropped_by_margin: int = 0  # 0 < gap < margin
    dropped_ties: int = 0  # gap == 0
    dropped_unscored: int = 0  # a candidate without a score
    dropped_identical: int = 0  # the same text twice
    largest_gap: float = 0.0  # over every scored pair of different texts, kept or not

    def add(self, other: PairCounts) -> None:
        for name in self.__dataclass_fields__:
            if name != "largest_gap":
                setattr(self, name, getattr(self, name) + getattr(other, name))
        self.largest_gap = max(self.largest_gap, other.largest_gap)


@dataclass(frozen=True)
class IndexPair:
    chosen: int
    rejected: int
    margin: float


def preference_index_pairs(scores: list[float | None], margin: float, texts: list[str] | None = None) -> tuple[list[IndexPair], PairCounts]:
    """Index pairs (chosen, rejected, gap) over one query's candidates."""
    counts = PairCounts()
    pairs: list[IndexPair] = []
    for i, j in combinations(range(len(scores)), 2):
        counts.candidate_pairs += 1
        si, sj = scores[i], scores[j]
        if si is None or sj is None:
            counts.dropped_unscored += 1
            continue
        if texts is not None and texts[i].strip() == texts[j].strip():
            counts.dropped_identical += 1
            continue
        gap = abs(si - sj)
        counts.largest_gap = max(counts.largest_gap, round(gap, 6))
        if gap == 0:
            counts.dropped_ties += 1
            continue
        if gap < margin - MARGIN_TOLERANCE:
            counts.dropped_by_margin += 1
            continue
        chosen, rejected = (i, j) if si > sj else (j, i)
        pairs.append(IndexPair(chosen, rejected, round(gap, 6)))
        counts.kept += 1
    return pairs, counts


def max_pairs(num_candidates: int) -> int:
    return num_candidates * (num_candidates - 1) // 2


@dataclass
class PairStats:
    """What `pairs_stats.json` reports: pairs per query, the margin distribution, what was dropped."""

    score_margin: float
    num_candidates: int | None = None
    pairs_per_query: dict[str, int] = field(default_factory=dict)
    margins: list[float] = field(default_factory=list)
    counts: PairCounts = field(default_factory=PairCounts)
    # Directive pairs: pairs not made because a side's directive was the Director's fallback (no
    # usable answer, or a copy of the prompt's example; None, and absent from the stats, elsewhere).
    dropped_director_fallbacks: int | None = None
    # --cross-persona-pairs: pairs of an own and a borrowed reply (None, and absent, when off)
    cross_persona_pairs: int | None = None

    def add_query(self, query_id: str, pairs: list[IndexPair], counts: PairCounts) -> None:
        self.pairs_per_query[query_id] = len(pairs)
        self.margins.extend(p.margin for p in pairs)
        self.counts.add(counts)

    def to_dict(self) -> dict:
        per_query = list(self.pairs_per_query.values())
        stats = {
            "score_margin": self.score_margin,
            "score_scale": "Overall = mean of the rubric's criteria on the 1-5 scale; margin = difference of Overall",
            "num_candidates": self.num_candidates,
            "max_pairs_per_query": max_pairs(self.num_candidates) if self.num_candidates else None,
            "num_queries": len(per_query),
            "num_pairs": sum(per_query),
            "pairs_per_query": {
                "mean": round(statistics.fmean(per_query), 4) if per_query else 0.0,
                "min": min(per_query, default=0),
                "max": max(per_query, default=0),
                "queries_without_pairs": sum(1 for n in per_query if n == 0),
                "by_query": self.pairs_per_query,
            },
            "margin_distribution": margin_distribution(self.margins),
            "num_candidate_pairs": self.counts.candidate_pairs,
            "num_dropped_by_margin": self.counts.dropped_by_margin,
            "num_dropped_ties": self.counts.dropped_ties,
            "num_dropped_unscored": self.counts.dropped_unscored,
            "num_dropped_identical": self.counts.dropped_identical,
            "largest_gap": self.counts.largest_gap,  # what --score-margin could be at most for any pair
        }
        if self.dropped_director_fallbacks is not None:
            stats["num_dropped_director_fallbacks"] = self.dropped_director_fallbacks
        if self.cross_persona_pairs is not None:  # not in num_pairs: those are the queries' own
            stats["num_cross_persona_pairs"] = self.cross_persona_pairs
        return stats

    def pairs_line(self) -> str:
        """'12 pairs (margin 0.5; 3 ties, 7 below the margin)' for a run's closing line."""
        c = self.counts

        cross = f" and {plural(self.cross_persona_pairs, 'cross-persona pair')}" if self.cross_persona_pairs is not None else ""
        return (
            f"{plural(c.kept, 'pair')}{cross} (margin {self.score_margin}; {plural(c.dropped_ties, 'tie')}, {c.dropped_by_margin} below the margin)"
        )

    def no_pairs_reason(self) -> str:
        """Why a run made no pair, naming the setting to change and the figure that would have worked."""
        c = self.counts
        if c.largest_gap > 0:
            return (
                f"no preference pair: {c.dropped_ties} ties, {c.dropped_by_margin} gaps below --score-margin {self.score_margin}; "
                f"the largest gap seen is {c.largest_gap:g}: set --score-margin {c.largest_gap:g} or lower (with --overwrite)"
            )
        if c.dropped_ties:
            return (
                f"no preference pair: all {c.dropped_ties} scored pairs are ties (every candidate of a query got the same Overall), "
                "so no --score-margin makes pairs: use a judge that tells the candidates apart"
            )
        return "no preference pair: no query has two scored candidates with different texts (see the judgment failures and empty replies above)"


def margin_distribution(margins: list[float]) -> dict:
    if not margins:
        return {"n": 0}
    ordered = sorted(margins)
    quartiles = statistics.quantiles(ordered, n=4, method="inclusive") if len(ordered) > 1 else [ordered[0]] * 3
    histogram: dict[str, int] = {}
    for m in ordered:  # bins of 0.5 on the 1-5 scale: [0.5, 1.0) -> "0.5-1.0"
        low = int(m * 2 + MARGIN_TOLERANCE) / 2
        label = f"{low:.1f}-{low + 0.5:.1f}"
        histogram[label] = histogram.get(label, 0) + 1
    return {
        "n": len(ordered),
        "mean": round(statistics.fmean(ordered), 4),
        "min": round(ordered[0], 4),
        "p25": round(quartiles[0], 4),
        "median": round(quartiles[1], 4),
        "p75": round(quartiles[2], 4),
        "max": round(ordered[-1], 4),
        "histogram": histogram,
    }

"""Making a version current for its role, and walking that back.

`promote` asks for evidence: where its role already has a current version, the candidate must have
been compared with that version (`mascot adapters compare`), and a candidate that compared worse
(a lower mean on the same contexts) is refused. `--force` overrides both, and the event records it
was forced. `rollback` makes the version current before the last promotion current again.
"""

from __future__ import annotations

from dataclasses import dataclass

from mascot.adapter_registry import ROLE_WORDS, Comparison, Event, Registry, RegistryError, State, check_unchanged, find_version


@dataclass
class Promotion:
    role: str
    current: str | None
    previous: str | None
    forced: bool = False
    reason: str = ""
    changed: bool = True


def _comparison_with(state: State, candidate: str, current: str) -> Comparison | None:
    """The newest comparison of candidate against current, turned to read from the candidate's side."""
    found = state.latest_comparison(candidate, current)
    if found is None:
        return None
    comparison, flipped = found
    if not flipped:
        return comparison
    verdict = {"better": "worse", "worse": "better"}.get(comparison.verdict, comparison.verdict)
    negate = lambda v: None if v is None else -v
    return comparison.model_copy(update={
        "candidate": candidate, "reference": current, "verdict": verdict, "difference": negate(comparison.difference),
        "candidate_mean": comparison.reference_mean, "reference_mean": comparison.candidate_mean,
        "ci_low": negate(comparison.ci_high), "ci_high": negate(comparison.ci_low), "p_better": comparison.p_worse, "p_worse": comparison.p_better,
    })  # fmt: skip


def evidence(state: State, candidate: str, current: str) -> tuple[bool, str]:
    """Whether the candidate may replace current without --force, and the sentence that says why."""
    comparison = _comparison_with(state, candidate, current)
    if comparison is None:
        return False, f"{candidate} has not been compared with the current {current}: run `mascot adapters compare {candidate} {current}` first"
    said = describe_comparison(comparison)
    if comparison.difference is not None and comparison.difference < 0:
        return False, f"{said}; a version that compares worse than the current one is not promoted"
    return True, said


def describe_comparison(c: Comparison) -> str:
    if c.difference is None:
        return f"{c.candidate} against {c.reference}: {c.verdict} ({c.n} paired {c.figure})"
    if c.ci_low is None or c.ci_high is None:  # no spread to test (every paired difference the same): the means, no interval
        return (f"{c.candidate} against {c.reference}: {c.candidate_mean:.3f} vs {c.reference_mean:.3f} {c.figure} "
                f"(difference {c.difference:+.3f}, no interval: every one of the {c.n} paired differences is the same): {c.verdict}")  # fmt: skip
    p = c.p_better if c.difference >= 0 else c.p_worse
    return (f"{c.candidate} against {c.reference}: {c.candidate_mean:.3f} vs {c.reference_mean:.3f} {c.figure} "
            f"(difference {c.difference:+.3f}, 95% CI {c.ci_low:+.3f} to {c.ci_high:+.3f}, one-sided p = {p:.3g}, n = {c.n}): {c.verdict}")  # fmt: skip


def promote(registry: Registry, reference: str, *, force: bool = False) -> Promotion:
    with registry.locked() as state:
        version = find_version(state, reference)
        check_unchanged(version)
        current = state.current.get(version.role)
        if current == version.id:
            return Promotion(version.role, current, current, reason=f"{version.id} is already the current {ROLE_WORDS[version.role]}", changed=False)
        allowed, reason = (True, f"the first current {ROLE_WORDS[version.role]}") if current is None else evidence(state, version.id, current)
        if not allowed and not force:
            raise RegistryError(f"{version.id} not promoted: {reason} (--force promotes it anyway)")
        registry.append(Event(event="promoted", role=version.role, current=version.id, previous=current, forced=not allowed, reason=reason))
    return Promotion(version.role, version.id, current, forced=not allowed, reason=reason)


def rollback(registry: Registry, role: str) -> Promotion:
    if role not in ROLE_WORDS:
        raise RegistryError(f"unknown role {role!r}: choose from {', '.join(ROLE_WORDS)}")
    with registry.locked() as state:
        stack = state.promotions.get(role, [])
        if len(stack) < 2:
            what = "nothing was promoted" if not stack else f"{stack[-1]} is the only {ROLE_WORDS[role]} ever promoted"
            raise RegistryError(f"no previous {ROLE_WORDS[role]} to roll back to: {what}")
        current, previous = stack[-1], stack[-2]
        check_unchanged(state.versions[previous])
        registry.append(Event(event="rolled_back", role=role, current=previous, previous=current, reason=f"rolled back from {current}"))
    return Promotion(role, previous, current, reason=f"rolled back from {current}")

"""Which system wrote a run's episodes, in words, and the labels that tell runs apart.

A run is recorded under a label (`metadata.system`: "mascot" unless `--system` or `mascot eval`
names it) and by what sets its system apart, each in its episodes' metadata: the turn policy, the
prompt family and version, the replies sampled per Speaker turn, each role's adapter and model.
`study create` and `eval compare` show runs under their labels; two runs under one label are told
apart by the first of those traits that differs ("mascot (directed)" and "mascot (round-robin)"),
and two runs alike in every trait are refused by the caller, which names its own option for labels.
"""

from __future__ import annotations

from pathlib import Path

from mascot.schema import EpisodeMetadata, RoleIdentity

# How a turn policy reads in a label.
POLICY_WORDS = {"director": "directed", "round-robin": "round-robin", "random": "random order", "multiagentesc": "MultiAgentESC"}
UNRECORDED = "unrecorded"  # a trait a record from before it was written does not carry


def _basename(name: str) -> str:
    return Path(name.rstrip("/")).name or name


def _adapter_words(role: str, identity: RoleIdentity | None) -> str:
    adapter = identity.adapter if identity else None
    return f"{role} adapter {_basename(adapter)}" if adapter else f"untrained {role}"


def _model(identity: RoleIdentity | None, recorded: str | None) -> str | None:
    model = (identity.base_model or identity.served_model) if identity else None
    return _basename(model or recorded) if (model or recorded) else None


def system_traits(metadata: EpisodeMetadata) -> dict[str, str]:
    """What sets the system of an episode apart, trait by trait in the order labels use them."""
    policy = metadata.turn_policy
    directed = policy in (None, "director")
    family = metadata.prompt_family or "persona"
    version = metadata.prompt_version or UNRECORDED
    director, speaker = metadata.roles.get("director"), metadata.roles.get("speaker")
    speaker_model = _model(speaker, metadata.speaker_model)
    director_model = _model(director, metadata.director_model) if directed else None
    models = speaker_model or UNRECORDED
    if director_model and director_model != speaker_model:
        models += f", Director {director_model}"
    samples = metadata.self_consistency_samples or 1
    return {
        "turn policy": POLICY_WORDS.get(policy, policy) if policy else f"turn policy {UNRECORDED}",
        "prompts": f"prompts {version}" if family == "persona" else f"{family} prompts",
        "samples": f"{samples} replies sampled per turn" if samples > 1 else "one reply per turn",
        "Director": _adapter_words("Director", director) if directed else "no Director",
        "Speakers": _adapter_words("Speaker", speaker),
        "models": models,
    }


def describe_system(label: str, traits: dict[str, str]) -> str:
    """`mascot: directed, prompts v2, one reply per turn, ...`: a system in full, for messages."""
    return f"{label}: {', '.join(traits.values())}"


def distinct_labels(runs: list[tuple[str, dict[str, str] | None]]) -> list[str] | None:
    """A label per run: its own, or where runs share one, that label with the traits that tell them
    apart in brackets (fewest traits first, in reading order). None when two runs share a label and
    no trait tells them apart. `runs`: (label, traits or None where the run's system is not known)."""
    labels = [label for label, _ in runs]
    for label in {lab for lab in labels if labels.count(lab) > 1}:
        group = [i for i, lab in enumerate(labels) if lab == label]
        told = _told_apart(label, [runs[i][1] for i in group])
        if told is None:
            return None
        for i, text in zip(group, told):
            labels[i] = text
    return labels if len(set(labels)) == len(labels) else None


def _told_apart(label: str, traits: list[dict[str, str] | None]) -> list[str] | None:
    if any(t is None for t in traits):
        return None
    used: list[str] = []
    for key in traits[0]:  # type: ignore[union-attr]
        if len({t[key] for t in traits}) > 1:  # type: ignore[index]
            used.append(key)
            told = [f"{label} ({', '.join(t[k] for k in used)})" for t in traits]  # type: ignore[index]
            if len(set(told)) == len(told):
                return told
    return None

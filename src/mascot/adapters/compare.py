"""`mascot adapters compare A B`: two versions of one role on the same held-out data, one verdict.

- A Speaker or a Director: directed group episodes with each version on the same contexts and seeds
  (the other role runs the base model), judged by the same judge; the Speaker's turns are compared
  on the agent-scope score, a Director's conversations on the collective score. The runs are
  `mascot generate` and `mascot judge` on the settings a user would type, written under the
  comparison's folder (a rerun resumes the episodes already written).
- A reward model: the pairs of `--pairs` (a file neither version trained on) scored by both; each
  pair is right or wrong for each version, and the versions' accuracies are compared pair by pair.

Either way the test is paired (`mascot.eval.stats.paired_test`: bootstrap interval, sign-flip
permutation p-values, one per tail). The verdict is "better" when the candidate's mean is higher at one-sided
p < 0.05, "worse" when it is lower at one-sided p < 0.05, else "no clear difference". The outcome
is written to `comparison.json` in the folder and recorded in the registry, where `promote` reads it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mascot.adapter_registry import ROLE_WORDS, Comparison, Event, Registry, RegistryError, Version, check_unchanged, find_version
from mascot.errors import MascotError

log = logging.getLogger(__name__)

ALPHA = 0.05
POLICY_ROLES = ("speaker", "director")
PAIR_KINDS = {"persona_reward_model": "persona", "group_reward_model": "episode"}


@dataclass
class CompareRequest:
    """What `mascot adapters compare` was asked (see `mascot.commands.adapters.CompareSettings`)."""

    dataset: str = "ESConv"
    data_file: str | None = None
    split: str = "test"
    limit: int | None = 8
    seed: int = 0
    judge_model: str | None = None
    judge_server_url: list[str] | None = None
    vllm_server_url: list[str] | None = None
    pairs: Path | None = None
    output_dir: Path | None = None
    episodes_settings: dict[str, Any] = field(default_factory=dict)  # `mascot generate` settings both versions' episodes run with


def versions_to_compare(registry: Registry, candidate: str, reference: str) -> tuple[Version, Version]:
    state = registry.state()
    first = find_version(state, candidate)
    second = find_version(state, reference, first.role)
    if first.id == second.id:
        raise RegistryError(f"{first.id} and {reference} are the same version: nothing to compare")
    for version in (first, second):
        check_unchanged(version)
    return first, second


def paired(reference: dict[str, float], candidate: dict[str, float], seed: int) -> dict[str, Any]:
    """The paired test from the candidate's side, with both one-sided p-values (each tail's own
    sign-flip test, so that the observed pattern counts in each)."""
    from mascot.eval.stats import paired_test

    result = paired_test(reference, candidate, seed=seed)
    result["p_worse"] = paired_test(candidate, reference, seed=seed)["p_one_sided"]
    return result


def verdict_of(result: dict[str, Any]) -> str:
    if not result["testable"]:
        return "untestable"
    if result["difference"] > 0 and result["p_one_sided"] < ALPHA:
        return "better"
    if result["difference"] < 0 and result["p_worse"] < ALPHA:
        return "worse"
    return "no clear difference"


def _rounded(value: Any, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


def comparison_record(candidate: Version, reference: Version, result: dict[str, Any], figure: str, folder: Path) -> Comparison:
    """The paired test's outcome (`paired(reference scores, candidate scores)`) as the registry records it."""
    return Comparison(
        candidate=candidate.id, reference=reference.id, figure=figure, verdict=verdict_of(result), n=result["n"],
        candidate_mean=_rounded(result["trained_mean"]), reference_mean=_rounded(result["base_mean"]), difference=_rounded(result["difference"]),
        ci_low=_rounded(result["ci_low"]), ci_high=_rounded(result["ci_high"]), p_better=_rounded(result["p_one_sided"], 6),
        p_worse=_rounded(result["p_worse"], 6), folder=str(folder),
    )  # fmt: skip


def comparison_folder(registry: Registry, candidate: Version, reference: Version, request: CompareRequest) -> Path:
    return Path(request.output_dir) if request.output_dir else registry.folder / "comparisons" / f"{candidate.id}_vs_{reference.id}"


def compare_plan(registry: Registry, candidate_ref: str, reference_ref: str, request: CompareRequest) -> dict[str, Any]:
    """What `compare` would run, checked (versions, settings of its steps, pairs) with nothing written."""
    import tempfile

    candidate, reference = versions_to_compare(registry, candidate_ref, reference_ref)
    folder = comparison_folder(registry, candidate, reference, request)
    plan: dict[str, Any] = {"role": candidate.role, "candidate": f"{candidate.id} ({candidate.folder})", "reference": f"{reference.id} ({reference.folder})",
                            "output_dir": str(folder)}  # fmt: skip
    if candidate.role in PAIR_KINDS:
        from mascot.train import data

        if request.pairs is None:
            raise RegistryError(f"comparing {ROLE_WORDS[candidate.role]}s needs --pairs FILE: preference pairs neither version trained on")
        plan["pairs"] = len(data.load_pairs(request.pairs, PAIR_KINDS[candidate.role])[1])
        return plan
    from mascot.pipeline.steps import pipeline_data_file

    with tempfile.TemporaryDirectory() as scratch:  # the shipped contexts are written out to be read: not into the output folder
        data_file = pipeline_data_file(request.dataset, request.data_file, Path(scratch))
        plan["episodes"] = [_episodes_step(v, request, folder, data_file).command_line() for v in (reference, candidate)]
    plan["then"] = f"`mascot judge` on each version's episodes with {request.judge_model or 'the local model'}, then the paired test"
    return plan


def compare_versions(registry: Registry, candidate_ref: str, reference_ref: str, request: CompareRequest) -> Comparison:
    candidate, reference = versions_to_compare(registry, candidate_ref, reference_ref)
    folder = comparison_folder(registry, candidate, reference, request)
    if candidate.role in POLICY_ROLES:
        comparison = compare_policies(candidate, reference, request, folder)
    elif candidate.role in PAIR_KINDS:
        comparison = compare_reward_models(candidate, reference, request, folder)
    else:
        raise RegistryError(f"{candidate.id}: versions of role {candidate.role!r} cannot be compared")
    from mascot.files import write_json_atomic

    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / "comparison.json", comparison.model_dump(exclude_none=True))
    with registry.locked():
        registry.append(Event(event="compared", comparison=comparison))
    return comparison


# --------------------------------------------------------------------------- Speaker and Director


def _episodes_step(version: Version, request: CompareRequest, folder: Path, data_file: Path | None):
    from mascot.pipeline.steps import make_step

    flags: dict[str, Any] = {
        **{key.lstrip("-").replace("-", "_"): value for key, value in request.episodes_settings.items()},
        "mode": "group", "generation_mode": "directed", "system": version.id, "dataset": request.dataset, "data_file": data_file,
        "split": request.split, "limit": request.limit, "seed": request.seed, "model_name": version.base_model,
        f"{version.role}_adapter": version.folder, "vllm_server_url": request.vllm_server_url, "output_dir": folder / f"eval_{version.id}",
    }  # fmt: skip
    return make_step(f"eval_{version.id}", "generation", ("generate",), flags, folder / f"eval_{version.id}")


def _judge_step(version: Version, request: CompareRequest, folder: Path, episodes: Path, data_file: Path | None):
    from mascot.pipeline.steps import make_step

    flags = {"input_file": episodes, "judge": request.judge_model, "judge_server_url": request.judge_server_url, "dataset": request.dataset,
             "data_file": data_file, "split": request.split, "output_dir": folder / f"judge_{version.id}"}  # fmt: skip
    return make_step(f"judge_{version.id}", "judging", ("judge",), flags, folder / f"judge_{version.id}")


def policy_scores(version: Version, request: CompareRequest, folder: Path, data_file: Path | None) -> dict[str, float]:
    """The version's per-episode scores on the request's contexts (episodes generated, then judged)."""
    from mascot.pipeline.learning import JUDGMENTS_FILE, collective_scores, episode_keys, speaker_scores
    from mascot.pipeline.steps import find_run_dir

    generation = _episodes_step(version, request, folder, data_file)
    generation.run(resume=find_run_dir(generation.folder) is not None)
    run_dir = find_run_dir(generation.folder)
    episodes = run_dir / "episodes.jsonl" if run_dir else None
    if episodes is None or not episodes.is_file():
        raise MascotError(f"{version.id}: generation wrote no episodes under {generation.folder}")
    judging = _judge_step(version, request, folder, episodes, data_file)
    judging.run()
    read = speaker_scores if version.role == "speaker" else collective_scores
    scores = read(judging.folder / JUDGMENTS_FILE, episode_keys(episodes))
    if scores.failed:
        log.warning("%s: %d of %d judgments failed and are left out of the comparison", version.id, scores.failed, scores.judgments)
    return scores.by_key


def compare_policies(candidate: Version, reference: Version, request: CompareRequest, folder: Path) -> Comparison:
    from mascot.pipeline.steps import pipeline_data_file

    folder.mkdir(parents=True, exist_ok=True)
    data_file = pipeline_data_file(request.dataset, request.data_file, folder)
    scores = {v.id: policy_scores(v, request, folder, data_file) for v in (reference, candidate)}
    result = paired(scores[reference.id], scores[candidate.id], request.seed)
    figure = "Speaker score (agent scope)" if candidate.role == "speaker" else "collective score"
    return comparison_record(candidate, reference, result, figure, folder)


# --------------------------------------------------------------------------- reward models


def compare_reward_models(candidate: Version, reference: Version, request: CompareRequest, folder: Path) -> Comparison:
    from mascot.train import data

    if request.pairs is None:
        raise RegistryError(f"comparing {ROLE_WORDS[candidate.role]}s needs --pairs FILE: preference pairs neither version trained on")
    _, pairs = data.load_pairs(request.pairs, PAIR_KINDS[candidate.role])
    trained_on = {str(Path(p).resolve()) for v in (candidate, reference) for p in v.data_files}
    if str(Path(request.pairs).resolve()) in trained_on:
        log.warning("%s is a file a version trained on (its held-out share included): the comparison favours what was memorised", request.pairs)
    right = {v.id: pairs_ranked_right(v, pairs) for v in (reference, candidate)}
    result = paired(right[reference.id], right[candidate.id], request.seed)
    return comparison_record(candidate, reference, result, "held-out pairwise accuracy", folder)


def pairs_ranked_right(version: Version, pairs: list) -> dict[str, float]:
    """Per pair (by its index), 1 where the version scores the chosen side above the rejected one."""
    from mascot.train.artefact import read_metadata
    from mascot.train.scoring import RewardModelScorer, score_pair_sides

    meta = read_metadata(Path(version.folder))
    max_length = int((meta.hyperparameters if meta else {}).get("max_length") or 1024)
    scorer = RewardModelScorer.from_path(version.folder, max_length=max_length)
    chosen, rejected = score_pair_sides(scorer, pairs)
    return {str(i): float(c > r) for i, (c, r) in enumerate(zip(chosen, rejected, strict=True))}

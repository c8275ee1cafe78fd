"""The learning evidence of the pipeline report: the paired test, the score readers, the Director's
choices, and learning.json / the report section on fake pipeline folders of two and four systems."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mascot.eval.stats import paired_test
from mascot.pipeline import learning
from mascot.pipeline.learning import (
    collective_scores,
    director_choices,
    learning_figures,
    learning_section,
    persona_means,
    speaker_scores,
)
from mascot.schema import Episode, EpisodeMetadata, Judgment, Turn

# --------------------------------------------------------------------------- paired_test


def test_a_clear_positive_shift_on_ten_pairs_gives_a_small_p_and_an_interval_above_zero():
    base = {f"c{i}": float(i % 5) for i in range(10)}
    trained = {k: v + 1.0 + 0.1 * (i % 3) for i, (k, v) in enumerate(base.items())}
    result = paired_test(base, trained)
    assert result["n"] == 10 and result["method"] == "exact"
    assert result["difference"] == pytest.approx(1.09)
    # every difference is positive: of the 2**10 sign patterns only the observed one reaches its sum
    assert result["p_one_sided"] == pytest.approx(1 / 1024)
    assert result["p_two_sided"] == pytest.approx(2 / 1024)
    assert 1.0 <= result["ci_low"] < result["difference"] < result["ci_high"] <= 1.2


def test_the_exact_p_values_match_a_hand_enumeration():
    # differences 1, 2, -1 (sum 2): flipped sums 2, 4, -2, 0, 0, 2, -4, -2
    result = paired_test({"a": 0.0, "b": 0.0, "c": 1.0}, {"a": 1.0, "b": 2.0, "c": 0.0})
    assert result["difference"] == pytest.approx(2 / 3)
    assert result["p_one_sided"] == pytest.approx(3 / 8)
    assert result["p_two_sided"] == pytest.approx(6 / 8)
    assert result["base_mean"] == pytest.approx(1 / 3) and result["trained_mean"] == pytest.approx(1.0)


def test_identical_inputs_give_no_difference_and_p_one():
    scores = {f"c{i}": 3.0 + 0.25 * i for i in range(8)}
    result = paired_test(scores, dict(scores))
    assert result["difference"] == 0.0 and result["ci_low"] == 0.0 and result["ci_high"] == 0.0
    assert result["p_one_sided"] == 1.0 and result["p_two_sided"] == 1.0
    many = {f"c{i}": 1.0 for i in range(40)}  # beyond the enumerable patterns too
    sampled = paired_test(many, dict(many), resamples=500)
    assert sampled["p_one_sided"] == 1.0 and sampled["p_two_sided"] == 1.0


def test_a_zero_mean_difference_never_has_a_small_one_sided_p():
    result = paired_test({k: 0.0 for k in "abcd"}, {"a": 1.0, "b": -1.0, "c": 2.0, "d": -2.0})
    assert result["difference"] == 0.0
    assert result["p_one_sided"] >= 0.5 and result["p_two_sided"] == 1.0


def test_fewer_than_two_pairs_say_they_cannot_test():
    one = paired_test({"a": 2.0, "b": 5.0}, {"a": 3.5, "z": 1.0})  # only "a" is in both
    assert one["n"] == 1 and not one["testable"] and one["difference"] == 1.5
    assert one["p_one_sided"] is None and one["p_two_sided"] is None and one["ci_low"] is None
    none = paired_test({}, {"a": 1.0})
    assert none["n"] == 0 and none["difference"] is None and none["base_mean"] is None


def test_the_exact_and_the_sampled_branch_agree():
    base = {f"c{i}": 3.0 for i in range(12)}
    trained = {k: 3.0 + d for k, d in zip(base, [0.5, -0.25, 0.75, 0.1, -0.5, 0.3, 0.2, -0.1, 0.6, 0.0, 0.4, -0.3])}
    exact = paired_test(base, trained)  # 2**12 sign patterns fit in the default resamples
    sampled = paired_test(base, trained, resamples=4000, seed=3)  # they do not fit in 4000
    assert exact["method"] == "exact" and sampled["method"] == "sampled" and sampled["resamples"] == 4000
    assert 0.0 < exact["p_one_sided"] < 0.2
    assert sampled["p_one_sided"] == pytest.approx(exact["p_one_sided"], abs=0.015)
    assert sampled["p_two_sided"] == pytest.approx(exact["p_two_sided"], abs=0.02)
    assert sampled["difference"] == exact["difference"]


# --------------------------------------------------------------------------- files built from the schema's models


def judgment(
    episode_id: str,
    context_id: str,
    *,
    scope: str = "agent",
    persona: str | None = "The Anchor",
    overall: float | None = 3.0,
    turn_idx: int = 0,
    failed: bool = False,
) -> Judgment:
    suffix = f"#t{turn_idx}" if scope == "agent" else "#collective"
    extra = {"turn_idx": turn_idx} if scope == "agent" else {}
    return Judgment(item_id=f"{episode_id}{suffix}", judge_model="stub-judge", rubric_version="paper_v1", scope=scope,
                    persona=persona if scope == "agent" else None, overall=None if failed else overall, failed=failed,
                    error="unparseable" if failed else None, episode_id=episode_id, context_id=context_id, **extra)  # fmt: skip


def write_lines(path: Path, records) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(r.to_json() + "\n" for r in records), encoding="utf-8")
    return path


def episode(
    context_id: str, names: list[str], *, tag: str = "mascot-aaaaaa", idx: int = 0, fallbacks: tuple[int, ...] = (), voice: str = ""
) -> Episode:
    """An episode whose turns are spoken by `names` ("user" for a user turn)."""
    turns = [Turn(turn_idx=i, round_id=i, agent_name=n, response=f"{n} says {i} to {context_id} {voice}", turn_type="user" if n == "user" else None,
                  director_fallback=True if i in fallbacks else None) for i, n in enumerate(names)]  # fmt: skip
    return Episode(episode_id=f"{context_id}:{tag}:e{idx}", context_id=context_id, turns=turns,
                   metadata=EpisodeMetadata(dataset="ESConv", system="mascot", episode_idx=idx))  # fmt: skip


def test_the_score_readers_average_a_keys_turns_and_count_failed_judgments(tmp_path):
    path = write_lines(tmp_path / "judgments_episodes.jsonl", [
        judgment("c1:base-111111:e0", "c1", overall=2.0, turn_idx=0),
        judgment("c1:base-111111:e0", "c1", overall=4.0, turn_idx=2, persona="The Guide"),
        judgment("c1:base-111111:e0", "c1", turn_idx=3, failed=True),
        judgment("c1:base-111111:e1", "c1", overall=5.0),
        judgment("c2:base-111111:e0", "c2", overall=3.0, persona="The Guide"),
        judgment("c1:base-111111:e0", "c1", scope="collective", overall=3.5),
        judgment("c2:base-111111:e0", "c2", scope="collective", failed=True),
    ])  # fmt: skip
    speaker = speaker_scores(path)
    assert speaker.by_key == {"c1#e0": 3.0, "c1#e1": 5.0, "c2#e0": 3.0}
    assert speaker.judgments == 5 and speaker.failed == 1
    collective = collective_scores(path)
    assert collective.by_key == {"c1#e0": 3.5} and collective.failed == 1
    assert persona_means(path) == {"The Anchor": {"mean": 3.5, "judgments": 2}, "The Guide": {"mean": 3.5, "judgments": 2}}
    # with the episode file's keys (context id and metadata.episode_idx), whatever the id says
    assert speaker_scores(path, {"c1:base-111111:e0": "c1#e7"}).by_key["c1#e7"] == 3.0


def test_the_same_context_and_episode_index_pair_up_across_systems(tmp_path):
    base = write_lines(tmp_path / "base.jsonl", [judgment("c1:base-111111:e0", "c1", overall=2.0)])
    trained = write_lines(tmp_path / "trained.jsonl", [judgment("c1:mascot-222222:e0", "c1", overall=4.0)])
    assert speaker_scores(base).by_key.keys() == speaker_scores(trained).by_key.keys() == {"c1#e0"}


def test_director_choices_count_shares_repeats_runs_and_fallbacks(tmp_path):
    path = write_lines(tmp_path / "episodes.jsonl", [
        episode("c1", ["A", "user", "A", "B", "B", "user", "B", "A"], fallbacks=(3,)),  # agent turns A A B B B A: runs 2, 3, 1
        episode("c2", ["user", "B"]),
    ])  # fmt: skip
    choices = director_choices(path)
    assert choices["episodes"] == 2 and choices["agent_turns"] == 7 and choices["fallbacks"] == 1
    assert choices["share"] == pytest.approx({"A": 3 / 7, "B": 4 / 7})
    assert choices["repeat_rate"] == pytest.approx(3 / 5)  # A-A, B-B, B-B of the 5 turns that follow another agent turn in their episode
    assert choices["mean_run_length"] == pytest.approx(7 / 4)


# --------------------------------------------------------------------------- a fake pipeline folder


SPEAKER = {  # per system and context: the Speaker's turn scores; collective score
    "base": {"c1": ([2.0, 3.0], 2.0), "c2": ([3.0], 3.0), "c3": ([2.0], 2.5)},
    "trained": {"c1": ([3.0, 4.0], 3.0), "c2": ([4.0], 3.5), "c3": ([3.0], 3.5)},
    "speaker_only": {"c1": ([3.0, 3.0], 2.0), "c2": ([3.5], 3.0), "c3": ([2.5], 2.0)},
    "director_only": {"c1": ([2.0, 3.0], 3.0), "c2": ([3.0], 4.0), "c3": ([2.0], 2.5)},
}
TAGS = {"base": "base-111111", "trained": "mascot-222222", "speaker_only": "mascot-333333", "director_only": "mascot-444444"}


def fake_system(root: Path, system: str, *, same_words_as: str | None = None, names: list[str] | None = None) -> None:
    run = root / f"eval_{system}" / "group_ESConv_tiny"
    run.mkdir(parents=True)
    (run / "run_config.json").write_text(json.dumps({"run_id": "group_ESConv_tiny", "settings": {"split": "test"}}), encoding="utf-8")
    # the trained Director lets The Anchor speak twice in a row; the base one alternates
    names = names or (
        ["The Anchor", "user", "The Anchor", "The Guide"]
        if system in ("trained", "director_only")
        else ["The Anchor", "user", "The Guide", "The Anchor"]
    )
    voice = same_words_as or system  # the same words as another system's: the same text, this system's ids
    write_lines(run / "episodes.jsonl", [episode(c, names, tag=TAGS[system], voice=voice) for c in SPEAKER[system]])
    records = []
    for context, (turns, collective) in SPEAKER[system].items():
        episode_id = f"{context}:{TAGS[system]}:e0"
        records += [judgment(episode_id, context, overall=s, turn_idx=i) for i, s in enumerate(turns)]
        records.append(judgment(episode_id, context, scope="collective", overall=collective))
    write_lines(root / f"judge_{system}" / "judgments_episodes.jsonl", records)


def by_name(figures: dict) -> dict[tuple[str, str], dict]:
    return {(c["system"], c["score"]): c for c in figures["comparisons"]}


def test_two_systems_give_the_trained_comparisons_only(tmp_path):
    for system in ("base", "trained"):
        fake_system(tmp_path, system)
    figures = learning_figures(tmp_path)
    assert set(figures["systems"]) == {"base", "trained"} and figures["split"] == "test"
    comparisons = by_name(figures)
    assert set(comparisons) == {("trained", "speaker"), ("trained", "collective")}
    speaker = comparisons[("trained", "speaker")]
    assert speaker["n"] == 3 and speaker["contexts"] == 3 and speaker["difference"] == pytest.approx(1.0)
    assert speaker["base_mean"] == pytest.approx((2.5 + 3.0 + 2.0) / 3)
    assert speaker["p_one_sided"] == pytest.approx(1 / 8)  # three positive differences: 1 of 8 sign patterns
    assert comparisons[("trained", "collective")]["difference"] == pytest.approx(2.5 / 3)
    assert figures["systems"]["trained"]["director"]["repeat_rate"] == pytest.approx(1 / 2)
    assert json.loads((tmp_path / "learning.json").read_text()) == json.loads(json.dumps(figures))

    section = learning_section(tmp_path)
    assert section.startswith("## Learning on held-out contexts (split test)")
    assert (
        "the Speaker's turns score 1.00 higher than the base system's on the judge's 1-5 scale (95% CI 1.00 to 1.00, one-sided p = 0.125, n = 3 contexts)"
        in section
    )
    assert "too few pairs for any difference to reach the 5% level (the smallest possible one-sided p is 0.125)" in section
    assert "speaker_only" not in section and "director_only" not in section
    assert "| trained | 3 | 2.50 | 3.50 | +1.00 |" in section
    assert "word for word" not in section


def test_four_systems_give_each_ablation_on_the_score_its_role_moves(tmp_path):
    for system in SPEAKER:
        fake_system(tmp_path, system)
    figures = learning_figures(tmp_path)
    assert [(c["system"], c["score"]) for c in figures["comparisons"]] == list(learning.COMPARISONS)
    comparisons = by_name(figures)
    assert comparisons[("speaker_only", "speaker")]["difference"] == pytest.approx((0.5 + 0.5 + 0.5) / 3)
    assert comparisons[("director_only", "collective")]["difference"] == pytest.approx((1.0 + 1.0 + 0.0) / 3)
    assert figures["systems"]["speaker_only"]["persona_means"]["The Anchor"]["judgments"] == 4
    section = learning_section(tmp_path)
    assert "With the trained Director alone (base Speaker), the conversations as a whole score 0.67 higher" in section
    assert "| director_only | 3 |" in section and "| speaker_only | 3 |" in section
    assert "### Director choices" in section and "| base | 3 | 9 | 67% | 33% | 0.00 | 1.00 | 0 |" in section


def test_a_trained_director_whose_top_companion_gains_over_ten_points_is_flagged(tmp_path):
    fake_system(tmp_path, "base")  # The Anchor 67%, The Guide 33%
    fake_system(tmp_path, "trained")  # the same shares: not flagged
    fake_system(tmp_path, "director_only", names=["The Guide", "user", "The Guide", "The Guide"])  # The Guide on every turn
    collapse = learning_figures(tmp_path)["director_collapse"]
    assert collapse["trained"]["flagged"] is False and collapse["trained"]["excess"] == pytest.approx(0.0)
    assert collapse["director_only"] == pytest.approx({"top": "The Guide", "share": 1.0, "base_share_of_top": 1 / 3, "base_top": "The Anchor",
                                                       "base_share": 2 / 3, "excess": 2 / 3, "flagged": True})  # fmt: skip
    section = learning_section(tmp_path)
    assert (
        "**Collapse?** The director_only system's Director (base Speaker, trained Director) gives The Guide 100% of the turns, 67 points more"
        " than the base Director gives it (33%; the base's top companion is The Anchor, 67%)" in section
    )
    assert "The trained system's Director" not in section


def test_a_trained_director_that_swaps_the_base_favourite_for_another_is_flagged(tmp_path):
    fake_system(tmp_path, "base")  # The Anchor 67%, The Guide 33%
    fake_system(tmp_path, "trained", names=["The Guide", "user", "The Guide", "The Anchor"])  # The Guide 67%: the same top share
    collapse = learning_figures(tmp_path)["director_collapse"]["trained"]
    assert collapse["top"] == "The Guide" and collapse["share"] == pytest.approx(collapse["base_share"])
    assert collapse["excess"] == pytest.approx(1 / 3) and collapse["flagged"] is True


def test_a_system_missing_is_left_out_and_a_copy_of_the_base_is_said_plainly(tmp_path):
    fake_system(tmp_path, "base")
    fake_system(tmp_path, "speaker_only", same_words_as="base")
    figures = learning_figures(tmp_path)
    assert set(figures["systems"]) == {"base", "speaker_only"}
    assert [(c["system"], c["score"]) for c in figures["comparisons"]] == [("speaker_only", "speaker")]
    assert figures["identical_to_base"] == ["speaker_only"]
    assert "The speaker_only system's conversations (trained Speaker, base Director) are word for word the base system's" in learning_section(
        tmp_path
    )


def test_without_an_evaluation_the_report_has_no_learning_section(tmp_path):
    from mascot.pipeline.report import write_report

    assert learning_section(tmp_path) == "" and not (tmp_path / "learning.json").exists()
    for system in ("base", "trained"):
        fake_system(tmp_path, system)
    report = write_report(tmp_path, {"settings": {}, "steps": {}}).read_text(encoding="utf-8")
    assert "## Learning on held-out contexts (split test)" in report


def test_an_unreadable_judgments_file_leaves_its_system_out_with_the_reason(tmp_path):
    for system in ("base", "trained"):
        fake_system(tmp_path, system)
    (tmp_path / "judge_trained" / "judgments_episodes.jsonl").write_text('{"item_id": 3}\n{"scope": "agent"}\n', encoding="utf-8")
    figures = learning_figures(tmp_path)
    assert set(figures["systems"]) == {"base"} and figures["comparisons"] == []
    assert "judgments_episodes.jsonl:1" in figures["unreadable"]["trained"]
    assert "System trained left out" in learning_section(tmp_path)


def test_the_sentence_says_whether_a_difference_is_unlikely_to_be_chance():
    base = {f"c{i}": 2.0 + 0.1 * i for i in range(10)}
    shifted = {k: v + 0.8 + 0.1 * (i % 2) for i, (k, v) in enumerate(base.items())}
    comparison = {"system": "speaker_only", "score": "speaker", "contexts": 10, **paired_test(base, shifted)}
    sentence = learning.comparison_sentence(comparison)
    assert sentence.startswith("With the trained Speaker alone (base Director), the Speaker's turns score 0.85 higher")
    assert "one-sided p = 9.8e-04, n = 10 contexts): unlikely to be chance." in sentence
    lower = {"system": "trained", "score": "collective", "contexts": 5, **paired_test(shifted, base)}
    assert "0.85 lower" in learning.comparison_sentence(lower) and "no evidence of an improvement" in learning.comparison_sentence(lower)
    untested = {"system": "trained", "score": "speaker", "contexts": 1, **paired_test({"a": 1.0}, {"a": 2.0})}
    assert "cannot be tested, 1 paired episode with the base system" in learning.comparison_sentence(untested)


def test_the_report_names_the_versions_its_artefacts_were_registered_as(tmp_path):
    from mascot.pipeline.report import write_report

    for name, version in (("speaker", "speaker-v4"), ("director", None)):
        (tmp_path / name).mkdir()
        meta = {"role": name, "base_model": "m", "trainer": "grpo", **({"registered_as": version} if version else {})}
        (tmp_path / name / "mascot_metadata.json").write_text(json.dumps(meta))
    report = write_report(tmp_path, {"settings": {}, "steps": {}}).read_text(encoding="utf-8")
    assert "## Versions" in report and "- speaker: `speaker-v4` (`mascot adapters compare speaker-v4`" in report
    assert "- director:" not in report  # registered nowhere: nothing to say


# --------------------------------------------------------------------------- how far the Director's choices move the judge


def stage_2_folder(root: Path, score) -> Path:
    """A pipeline folder's Stage-2 episodes: for 12 contexts, every two-turn sequence of A and B,
    judged by `score(context index, sequence, index of the episode within its context)`."""
    sequences = [["A", "A"], ["A", "B"], ["B", "A"], ["B", "B"]]
    episodes, records = [], []
    for c in range(12):
        for i, names in enumerate(sequences):
            e = episode(f"c{c}", [names[0], "user", names[1]], tag="mascot-c50894", idx=i)
            episodes.append(e)
            records.append(judgment(e.episode_id, e.context_id, scope="collective", overall=score(c, " > ".join(names), i)))
    run_folder(root / "episodes" / "tree_ESConv_tiny", episodes)
    write_lines(root / "group_pairs" / "group_pairs_judgments.jsonl", records)
    return root


def run_folder(run: Path, episodes: list) -> None:
    """A generation run's folder as a pipeline step leaves it: its episodes and its run config."""
    write_lines(run / "episodes.jsonl", episodes)
    (run / "run_config.json").write_text(json.dumps({"run_id": run.name, "settings": {"split": "train"}}), encoding="utf-8")


def test_a_judge_that_rewards_taking_turns_responds_to_the_directors_choices(tmp_path):
    from mascot.pipeline.judge_reach import judge_reach, reach_lines

    noise = [0.1, -0.2, 0.15, -0.05, 0.0, 0.2, -0.1, 0.05, -0.15, 0.1, 0.0, -0.1]
    root = stage_2_folder(tmp_path, lambda c, seq, i: 2.0 + c * 0.1 + (1.5 if seq in ("A > B", "B > A") else 0.0) + noise[(c + i) % 12])
    run_folder(root / "eval_base" / "group_ESConv_tiny", [episode(f"t{c}", ["A", "user", "A"]) for c in range(4)])
    reach = judge_reach(root)
    assert reach["conversations"] == 48 and reach["contexts"] == 12 and reach["sequences"] == 4 and reach["unscored"] == 0
    assert reach["responds"] and reach["p"] < 1e-6 and reach["explained"] > 0.9 and reach["df_factor"] == 3
    assert {reach["effects"][0]["sequence"], reach["effects"][1]["sequence"]} == {"A > B", "B > A"}
    # the base Director always repeats A: the best sequence gains about the 1.5 the judge pays for taking turns
    assert reach["base_coverage"] == 1.0 and reach["best_gain_over_base"] == pytest.approx(1.5, abs=0.25)
    text = "\n".join(reach_lines(reach))
    assert "responds to whom the Director picks" in text and "| A > B |" in text and "above the base Director's choices" in text


def test_a_judge_of_the_speakers_words_alone_is_said_not_to_respond(tmp_path):
    from mascot.pipeline.judge_reach import judge_reach, reach_sentence

    words = [1.0, 3.0, 2.0, 5.0, 4.0, 1.5, 2.5, 3.5]  # what each episode's words happen to earn, whoever speaks
    root = stage_2_folder(tmp_path, lambda c, seq, i: words[(c * 3 + i) % 8])
    reach = judge_reach(root)
    assert not reach["responds"] and reach["p"] > 0.05 and reach["explained"] < 0.2
    assert "best_gain_over_base" not in reach  # no base evaluation in this folder
    assert "does not respond to whom the Director picks" in reach_sentence(reach)


def test_the_learning_figures_carry_the_judges_reach_and_none_before_stage_2(tmp_path):
    for system in ("base", "trained"):
        fake_system(tmp_path, system)
    assert learning_figures(tmp_path)["judge_reach"] is None  # no Stage-2 episodes judged here
    stage_2_folder(tmp_path, lambda c, seq, i: 3.0 + (seq == "A > B"))
    (tmp_path / "group_pairs" / "group_pairs_judgments.jsonl").write_text("{not json\n", encoding="utf-8")
    assert learning_figures(tmp_path)["judge_reach"] is None  # unreadable: left out with a logged reason
    stage_2_folder(tmp_path / "again", lambda c, seq, i: 3.0 + (seq == "A > B") + 0.1 * (i % 2))
    for system in ("base", "trained"):
        fake_system(tmp_path / "again", system)
    assert "### How far the Director's choices move the group judge" in learning_section(tmp_path / "again")

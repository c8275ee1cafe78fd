"""The judge checks of `mascot eval` on simulated judged items with planted biases: each check names
the bias that was planted and stays quiet where none was."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np

from mascot.eval.collect import CellResult, Item
from mascot.eval.judge_checks import check_lines, judge_checks, length_bias, panel_agreement, self_preference


def cell_result(system: str, generator: str, items: list[tuple[int, dict[str, float]]]) -> CellResult:
    """items: (words, judge -> Overall on 0-100), one context each."""
    cell = SimpleNamespace(system=system, split="test", study="main")
    result = CellResult(cell, Path("."), generators={generator})
    for n, (words, by_judge) in enumerate(items):
        result.items.append(Item(cell, f"c{n}", "agent", "The Anchor", {"Overall": float(np.mean(list(by_judge.values())))},
                                 f"{system}-e{n}", words, by_judge))  # fmt: skip
    return result


def simulated(rng, *, length_slope: float = 0.0, self_bonus: float = 0.0, noise: float = 5.0) -> list[CellResult]:
    """Three systems; judges "qwen" (wrote system a) and "llama"; both see the same true quality."""
    results = []
    for system, generator in (("a", "org/qwen"), ("b", "org/mistral"), ("c", "org/mistral")):
        items = []
        for _ in range(60):
            quality, words = rng.normal(60, 10), int(rng.integers(10, 120))
            qwen = quality + length_slope * words + (self_bonus if system == "a" else 0.0) + rng.normal(0, noise)
            llama = quality + length_slope * words + rng.normal(0, noise)
            items.append((words, {"org/qwen": qwen, "org/llama": llama}))
        results.append(cell_result(system, generator, items))
    return results


def test_a_planted_length_bias_is_named_and_an_absent_one_is_not():
    rng = np.random.default_rng(1)
    biased = length_bias(simulated(rng, length_slope=0.4), "org/qwen", "agent")
    assert biased["ci_low"] > 0 and biased["verdict"].startswith("longer texts score higher")
    fair = length_bias(simulated(rng), "org/qwen", "agent")
    assert fair["verdict"].startswith("no length bias detected")


def test_a_planted_self_preference_is_named_and_an_absent_one_is_not():
    rng = np.random.default_rng(2)
    judges = ["org/llama", "org/qwen"]
    planted = self_preference(simulated(rng, self_bonus=8.0), "org/qwen", judges)
    assert planted["systems"] == ["a"] and planted["difference"] > 5 and planted["verdict"].startswith("prefers its own model's turns")
    clean = self_preference(simulated(rng), "org/qwen", judges)
    assert clean["verdict"].startswith("no self-preference detected")
    assert self_preference(simulated(rng), "org/llama", judges) is None  # llama wrote nothing
    alone = self_preference(simulated(rng), "org/qwen", ["org/qwen"])
    assert "cannot be measured with one judge" in alone["verdict"]


def test_panel_agreement_is_ordinal_alpha_with_krippendorffs_bands():
    rng = np.random.default_rng(3)
    close = panel_agreement(simulated(rng, noise=1.0), ["org/llama", "org/qwen"], "agent")
    assert close["level"] == "ordinal" and close["alpha"] > 0.8 and close["verdict"].endswith("reliable")
    loose = panel_agreement(simulated(rng, noise=25.0), ["org/llama", "org/qwen"], "agent")
    assert loose["alpha"] < 0.667 and "too low" in loose["verdict"] and loose["ci_low"] < loose["alpha"] < loose["ci_high"]


def test_every_judge_gets_its_lines():
    rows = judge_checks(simulated(np.random.default_rng(4), length_slope=0.4, self_bonus=8.0))
    checks = {(r["check"], r["judge"]) for r in rows}
    assert checks == {
        ("length bias", "org/llama"),
        ("length bias", "org/qwen"),
        ("panel agreement", "org/llama + org/qwen"),
        ("self-preference", "org/qwen"),
    }
    text = "\n".join(check_lines(rows))
    assert "**org/qwen**" in text and "prefers its own model's turns" in text and "Position bias does not apply" in text

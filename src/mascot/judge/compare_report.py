"""The numbers of a head-to-head comparison, from its verdict records, and the files they are
written to (verdicts.jsonl, compare.json, compare.csv, compare_pairwise.csv, compare.md and a plot).

Per criterion (and overall):
- per context, the verdicts of every order and judge are pooled: the system named best most often
  wins that context; no verdict or a draw at the top is a tie. So a judge that always prefers the
  first position gives one win to each system over a swapped pair, and the context is a tie.
- win rate of each system over contexts (tie rate shared), with a 95% Wilson interval;
- pairwise wins vs losses over contexts (X won vs Y won; contexts won by a third system or tied
  are left out) and a two-sided exact binomial test against 0.5 (scipy.stats.binomtest);
- order agreement: the share of (context, judge) whose verdicts name the same winner in every
  order; first-position rate: the share of decisive verdicts that chose the conversation shown
  first (0.5 for a judge without position bias, over all orders);
- judge agreement (several judges): the share of (context, order) where every judge names the
  same winner.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter, defaultdict
from itertools import combinations
from pathlib import Path

from mascot.store import write_json_atomic

TIE = "tie"  # a verdict or a context without a single best system
Z95 = 1.959963984540054


def wilson_interval(successes: int, n: int) -> tuple[float | None, float | None]:
    if n == 0:
        return None, None
    p = successes / n
    denom = 1 + Z95**2 / n
    centre = (p + Z95**2 / (2 * n)) / denom
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / denom
    return round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)


def binomial_p(wins: int, losses: int) -> float | None:
    if wins + losses == 0:
        return None
    from scipy.stats import binomtest

    return float(binomtest(wins, wins + losses, 0.5, alternative="two-sided").pvalue)


def context_winners(records: list[dict], criterion: str) -> dict[str, str]:
    """matchup -> winning system or "tie", pooling every successful verdict of the context."""
    votes: dict[str, Counter] = defaultdict(Counter)
    for r in records:
        if not r["failed"]:
            votes[r["matchup"]][r["winners"][criterion]] += 1
    winners = {}
    for matchup, counter in votes.items():
        counter.pop(TIE, None)
        ranked = counter.most_common()
        unique_top = ranked and (len(ranked) == 1 or ranked[0][1] > ranked[1][1])
        winners[matchup] = ranked[0][0] if unique_top else TIE
    return winners


def agreement(groups: dict[tuple, list[str]], size: int) -> dict:
    complete = [v for v in groups.values() if len(v) == size]
    same = sum(1 for v in complete if len(set(v)) == 1)
    return {"rate": round(same / len(complete), 4) if complete else None, "n": len(complete)}


def criterion_summary(records: list[dict], criterion: str, names: list[str], num_orders: int, num_judges: int) -> dict:
    winners = context_winners(records, criterion)
    n = len(winners)
    counts = Counter(winners.values())
    systems = {}
    for name in names:
        low, high = wilson_interval(counts[name], n)
        systems[name] = {"wins": counts[name], "win_rate": round(counts[name] / n, 4) if n else None, "win_ci95": [low, high]}
    pairwise = []
    for a, b in combinations(names, 2):
        pairwise.append({"system": a, "opponent": b, "wins": counts[a], "losses": counts[b], "p_value": binomial_p(counts[a], counts[b])})
    ok = [r for r in records if not r["failed"]]
    decisive = [r for r in ok if r["positions"][criterion] != TIE]
    by_order: dict[tuple, list[str]] = defaultdict(list)
    by_judge: dict[tuple, list[str]] = defaultdict(list)
    for r in ok:
        by_order[(r["matchup"], r["judge"])].append(r["winners"][criterion])
        by_judge[(r["matchup"], tuple(r["order"]))].append(r["winners"][criterion])
    return {
        "num_contexts": n,
        "ties": counts[TIE],
        "tie_rate": round(counts[TIE] / n, 4) if n else None,
        "systems": systems,
        "pairwise": pairwise,
        "verdicts": {"n": len(ok), **{name: sum(1 for r in ok if r["winners"][criterion] == name) for name in [*names, TIE]}},
        "order_agreement": agreement(by_order, num_orders),
        "first_position_rate": round(sum(1 for r in decisive if r["positions"][criterion] == "1") / len(decisive), 4) if decisive else None,
        "judge_agreement": agreement(by_judge, num_judges) if num_judges > 1 else None,
    }


def summarize(records: list[dict], names: list[str], criteria: list[str], judges: list[str], orders: list[list[str]]) -> dict:
    failed = sum(1 for r in records if r["failed"])
    return {
        "systems": names,
        "judges": judges,
        "orders": orders,
        "num_verdicts": len(records),
        "num_failed_verdicts": failed,
        "criteria": {c: criterion_summary(records, c, names, len(orders), len(judges)) for c in criteria},
    }


# --------------------------------------------------------------------------- outputs


def write_outputs(output: Path, records: list[dict], report: dict) -> None:
    with open(output / "verdicts.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    write_json_atomic(output / "compare.json", report)
    write_csvs(output, report)
    (output / "compare.md").write_text(markdown(report), encoding="utf-8")
    plot_win_rates(report, output / "compare_win_rates.png")


def write_csvs(output: Path, report: dict) -> None:
    with open(output / "compare.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["criterion", "system", "wins", "win_rate", "win_ci95_low", "win_ci95_high", "ties", "tie_rate", "num_contexts", "order_agreement", "first_position_rate", "judge_agreement"])
        for key, c in report["criteria"].items():
            for name, s in c["systems"].items():
                judges = c["judge_agreement"]["rate"] if c["judge_agreement"] else ""
                writer.writerow([key, name, s["wins"], s["win_rate"], *s["win_ci95"], c["ties"], c["tie_rate"], c["num_contexts"], c["order_agreement"]["rate"], c["first_position_rate"], judges])
    with open(output / "compare_pairwise.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["criterion", "system", "opponent", "wins", "losses", "p_value"])
        for key, c in report["criteria"].items():
            for p in c["pairwise"]:
                writer.writerow([key, p["system"], p["opponent"], p["wins"], p["losses"], p["p_value"]])


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def judges_read(report: dict) -> str:
    """Each judge with what it read: an LLM judge its prompt version, a plug-in its function and no
    prompt (a report written before `judge_reads` existed: every judge with the report's prompt)."""
    reads = report.get("judge_reads") or {label: {"prompt_version": report.get("prompt_version")} for label in report["judges"]}
    shown = []
    for label in report["judges"]:
        read = reads.get(label) or {}
        if read.get("plugin"):
            function = "" if read["plugin"] == label else f" {read['plugin']}"
            version = f", version {read['version']}" if read.get("version") else ""
            shown.append(f"{label} (plug-in{function}{version}; reads no prompt)")
        else:
            shown.append(f"{label} (prompt {read.get('prompt_version')})")
    return ", ".join(shown)


def markdown(report: dict) -> str:
    names = report["systems"]
    lines = [f"# Head to head: {' vs '.join(names)}", "",
             f"Judges: {judges_read(report)}; rubric {report['rubric_version']} ({report['domain']}, collective criteria + overall); "
             f"{len(report['orders'])} orders per context; {report['num_verdicts']} verdicts, {report['num_failed_verdicts']} failed.", "",
             "Win rates over contexts (verdicts of every order and judge pooled per context), % with 95% Wilson interval.", "",
             "| criterion | " + " | ".join(f"{n} wins" for n in names) + " | ties | n | p (binomial) | order agreement | first-position rate |",
             "|---" * (len(names) + 6) + "|"]
    for key, c in report["criteria"].items():
        wins = [f"{_pct(s['win_rate'])} [{_pct(s['win_ci95'][0])}, {_pct(s['win_ci95'][1])}]" for s in c["systems"].values()]
        p_values = "; ".join(f"{p['system']}/{p['opponent']} {p['p_value']:.3g}" if p["p_value"] is not None else f"{p['system']}/{p['opponent']} -" for p in c["pairwise"])
        name = report["criterion_names"].get(key, key)
        lines.append(f"| {name} | " + " | ".join(wins) + f" | {_pct(c['tie_rate'])} | {c['num_contexts']} | {p_values} | {_pct(c['order_agreement']['rate'])} | {_pct(c['first_position_rate'])} |")
    if len(report["judges"]) > 1:
        lines += ["", "Agreement between judges (same winner from every judge, per context and order): "
                  + ", ".join(f"{report['criterion_names'].get(k, k)} {_pct(c['judge_agreement']['rate'])}%" for k, c in report["criteria"].items())]
    return "\n".join(lines) + "\n"


def plot_win_rates(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    criteria = list(report["criteria"])
    names = report["systems"]
    width = 0.8 / (len(names) + 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(criteria)), 4))
    for i, name in enumerate([*names, "tie"]):
        xs = [k + (i - len(names) / 2) * width for k in range(len(criteria))]
        if name == "tie":
            ax.bar(xs, [report["criteria"][c]["tie_rate"] or 0 for c in criteria], width, label="tie", color="lightgray")
            continue
        stats = [report["criteria"][c]["systems"][name] for c in criteria]
        rates = [s["win_rate"] or 0 for s in stats]
        errors = [[r - (s["win_ci95"][0] or 0) for r, s in zip(rates, stats)], [(s["win_ci95"][1] or 0) - r for r, s in zip(rates, stats)]]
        ax.bar(xs, rates, width, yerr=errors, capsize=3, label=f"{name} wins")
    ax.set_xticks(range(len(criteria)), [report["criterion_names"].get(c, c) for c in criteria], rotation=20, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of contexts (95% Wilson interval)")
    ax.set_title(" vs ".join(names))
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

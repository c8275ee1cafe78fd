"""The numbers of a head-to-head comparison, from its verdict records, and the files they are
written to (verdicts.jsonl, compare.json, compare.csv, compare_pairwise.csv, compare.md and a plot).

Per criterion (and overall):
- per context, the verdicts the order rule counts are pooled (`compare_checks`: under
  `consistent`, a judge's verdict where its orders agree and a tie where they do not; under
  `majority`, every order's verdict): the system named best most often wins that context; no
  verdict or a draw at the top is a tie. So a judge that always prefers the first position gives
  a tie either way.
- win rate of each system over contexts (tie rate shared), with a 95% Wilson interval;
- pairwise wins vs losses over contexts (X won vs Y won; contexts won by a third system or tied
  are left out) and a two-sided exact binomial test against 0.5 (scipy.stats.binomtest);
- order agreement: the share of (context, judge) whose verdicts name the same winner in every
  order; first-position rate: the share of decisive verdicts that chose the conversation shown
  first (0.5 for a judge without position bias, over all orders);
- judge agreement (several judges): the share of (context, order) where every judge names the
  same winner;
- per judge, its position and length bias (`compare_checks`), and (in `run_compare`) the
  Bradley-Terry ranking on overall (`mascot.ranking`): compare_ranking.csv and compare_ranking.png.
"""

from __future__ import annotations

import csv
import json
from collections import Counter, defaultdict
from itertools import combinations
from pathlib import Path

from mascot.files import write_json_atomic
from mascot.judge.compare_checks import TIE, counted_verdicts, judge_checks, length_line, position_line
from mascot.stats import binomial_p as stats_binomial_p
from mascot.stats import proportion_interval


def wilson_interval(successes: int, n: int) -> tuple[float | None, float | None]:
    interval = proportion_interval(successes, n)
    return (None, None) if interval is None else (round(interval[0], 4), round(interval[1], 4))


def binomial_p(wins: int, losses: int) -> float | None:
    return stats_binomial_p(wins, wins + losses)


def context_winners(records: list[dict], criterion: str, rule: str = "majority") -> dict[str, str]:
    """matchup -> winning system or "tie", pooling the verdicts the order rule counts
    (`compare_checks.counted_verdicts`: every order's under majority, one per judge under consistent)."""
    votes: dict[str, Counter] = defaultdict(Counter)
    for matchup, winner in counted_verdicts(records, criterion, rule):
        votes[matchup][winner] += 1
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


def criterion_summary(records: list[dict], criterion: str, names: list[str], num_orders: int, judges: list[str], rule: str = "majority") -> dict:
    num_judges = len(judges)
    winners = context_winners(records, criterion, rule)
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
        "judge_checks": judge_checks(records, criterion, judges),
    }


def summarize(records: list[dict], names: list[str], criteria: list[str], judges: list[str], orders: list[list[str]], rule: str = "majority") -> dict:
    failed = sum(1 for r in records if r["failed"])
    return {
        "systems": names,
        "judges": judges,
        "orders": orders,
        "order_rule": rule,
        "num_verdicts": len(records),
        "num_failed_verdicts": failed,
        "criteria": {c: criterion_summary(records, c, names, len(orders), judges, rule) for c in criteria},
    }


# --------------------------------------------------------------------------- outputs


def write_outputs(output: Path, records: list[dict], report: dict) -> None:
    with open(output / "verdicts.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    write_json_atomic(output / "compare.json", report)
    write_csvs(output, report)
    (output / "compare.md").write_text(markdown(report), encoding="utf-8")
    plot_win_rates(report, output / "compare_win_rates.png")
    if report.get("ranking"):
        write_ranking_csv(report["ranking"], output / "compare_ranking.csv")
        plot_ranking(report["ranking"], output / "compare_ranking.png")


def write_csvs(output: Path, report: dict) -> None:
    with open(output / "compare.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(
            [
                "criterion",
                "system",
                "wins",
                "win_rate",
                "win_ci95_low",
                "win_ci95_high",
                "ties",
                "tie_rate",
                "num_contexts",
                "order_agreement",
                "first_position_rate",
                "judge_agreement",
            ]
        )
        for key, c in report["criteria"].items():
            for name, s in c["systems"].items():
                judges = c["judge_agreement"]["rate"] if c["judge_agreement"] else ""
                writer.writerow(
                    [
                        key,
                        name,
                        s["wins"],
                        s["win_rate"],
                        *s["win_ci95"],
                        c["ties"],
                        c["tie_rate"],
                        c["num_contexts"],
                        c["order_agreement"]["rate"],
                        c["first_position_rate"],
                        judges,
                    ]
                )
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
    lines = [
        f"# Head to head: {' vs '.join(names)}",
        "",
        f"Judges: {judges_read(report)}; rubric {report['rubric_version']} ({report['domain']}, collective criteria + overall); "
        f"{len(report['orders'])} orders per context; {report['num_verdicts']} verdicts, {report['num_failed_verdicts']} failed.",
        "",
        f"Win rates over contexts ({RULES.get(report.get('order_rule', 'majority'))}), % with 95% Wilson interval.",
        "",
        "| criterion | " + " | ".join(f"{n} wins" for n in names) + " | ties | n | p (binomial) | order agreement | first-position rate |",
        "|---" * (len(names) + 6) + "|",
    ]
    for key, c in report["criteria"].items():
        wins = [f"{_pct(s['win_rate'])} [{_pct(s['win_ci95'][0])}, {_pct(s['win_ci95'][1])}]" for s in c["systems"].values()]
        p_values = "; ".join(
            f"{p['system']}/{p['opponent']} {p['p_value']:.3g}" if p["p_value"] is not None else f"{p['system']}/{p['opponent']} -"
            for p in c["pairwise"]
        )
        name = report["criterion_names"].get(key, key)
        lines.append(
            f"| {name} | "
            + " | ".join(wins)
            + f" | {_pct(c['tie_rate'])} | {c['num_contexts']} | {p_values} | {_pct(c['order_agreement']['rate'])} | {_pct(c['first_position_rate'])} |"
        )
    if len(report["judges"]) > 1:
        lines += [
            "",
            "Agreement between judges (same winner from every judge, per context and order): "
            + ", ".join(f"{report['criterion_names'].get(k, k)} {_pct(c['judge_agreement']['rate'])}%" for k, c in report["criteria"].items()),
        ]
    lines += judge_check_lines(report)
    if report.get("ranking"):
        lines += ranking_lines(report["ranking"], report["criterion_names"])
    return "\n".join(lines) + "\n"


RULES = {
    "consistent": "order rule consistent: a judge's verdicts on a context count only where every order names the same winner, "
    "a tie otherwise; the judges' verdicts pooled per context",
    "majority": "order rule majority: the verdicts of every order and judge pooled per context",
}


def _share_cell(check: dict) -> str:
    if not check["n"]:
        return "-"
    mark = " (bias)" if check["biased"] else ""
    return f"{_pct(check['rate'])} [{_pct(check['ci95'][0])}, {_pct(check['ci95'][1])}], p {check['p_value']:.2g}, n {check['n']}{mark}"


def judge_check_lines(report: dict) -> list[str]:
    """Per judge a one-line verdict on position and length bias (overall), then every criterion."""
    criteria = report["criteria"]
    if not criteria or not all("judge_checks" in c for c in criteria.values()):
        return []
    headline = "overall" if "overall" in criteria else next(iter(criteria))
    count = len(report["systems"])
    lines = ["", f"## Judges checked ({report['criterion_names'].get(headline, headline)})", ""]
    for judge, check in criteria[headline]["judge_checks"].items():
        lines += [f"- {position_line(judge, check['position'])}", f"- {length_line(judge, check['length'], count)}"]
    which = "longer" if count == 2 else "longest"
    lines += [
        "",
        f"Per criterion, % with 95% Wilson interval and binomial p against {_pct(1 / count)}% (no bias):",
        "",
        f"| criterion | judge | first position chosen | flips (orders disagree) | {which} chosen |",
        "|---" * 5 + "|",
    ]
    for key, c in criteria.items():
        for judge, check in c["judge_checks"].items():
            position, length = check["position"], check["length"]
            lines.append(
                f"| {report['criterion_names'].get(key, key)} | {judge} | {_share_cell(position)} | {_pct(position['flip_rate'])} % of {position['swapped_contexts']} contexts | {_share_cell(length)} |"
            )
    return lines


def _ranking_table(result: dict) -> list[str]:
    lines = ["| rank | system | rating | 95% interval | rank range | battles | W/T/L |", "|---" * 7 + "|"]
    for row in result["systems"]:
        interval = "-" if row["ci_low"] is None else f"{row['ci_low']:.0f} to {row['ci_high']:.0f}"
        ranks = "-" if row["rank_low"] is None else f"{row['rank_low']}-{row['rank_high']}"
        lines.append(
            f"| {row['rank']} | {row['system']} | {row['rating']:.0f} | {interval} | {ranks} | {row['battles']} | {row['wins']}/{row['ties']}/{row['losses']} |"
        )
    return lines


def ranking_lines(ranking: dict, criterion_names: dict) -> list[str]:
    """The Bradley-Terry section: the plain ranking, then the length-controlled one."""
    plain, controlled = ranking["plain"], ranking["length_controlled"]
    lines = [
        "",
        f"## Ranking (Bradley-Terry, {criterion_names.get(ranking['criterion'], ranking['criterion'])}, order rule {ranking['order_rule']})",
        "",
        f"{plain['num_battles']} battles on {plain['num_contexts']} contexts; ratings on the Arena scale (mean 1000, 400/ln 10 points per "
        f"logit), 95% percentile intervals and rank ranges from {plain['resamples']} bootstrap resamples of the contexts.",
        "",
        *_ranking_table(plain),
    ]
    if controlled:
        coefficient = controlled["length_coefficient"]
        interval = "" if coefficient["ci_low"] is None else f" (95% interval {coefficient['ci_low']:.2f} to {coefficient['ci_high']:.2f})"
        lines += [
            "",
            "Length-controlled (one more coefficient on (len_a - len_b) / (len_a + len_b), agent words per conversation): "
            f"length coefficient {coefficient['value']:.2f} log-odds{interval}.",
            "",
            *_ranking_table(controlled),
        ]
    return lines


RANKING_COLUMNS = ["rank", "system", "rating", "ci_low", "ci_high", "rank_low", "rank_high", "battles", "wins", "ties", "losses"]


def write_ranking_csv(ranking: dict, path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["criterion", "variant", *RANKING_COLUMNS, "length_coefficient", "length_coefficient_ci_low", "length_coefficient_ci_high"])
        for variant in ("plain", "length_controlled"):
            result = ranking[variant]
            coefficient = (result or {}).get("length_coefficient") or {}
            for row in (result or {}).get("systems", []):
                writer.writerow([ranking["criterion"], variant, *(row[c] for c in RANKING_COLUMNS),
                                 coefficient.get("value"), coefficient.get("ci_low"), coefficient.get("ci_high")])  # fmt: skip


def plot_ranking(ranking: dict, path: Path) -> None:
    """Each system's rating with its 95% interval, plain and length-controlled side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = [row["system"] for row in ranking["plain"]["systems"]]
    variants = [(v, ranking[v]) for v in ("plain", "length_controlled") if ranking[v]]
    fig, ax = plt.subplots(figsize=(6, 1.2 + 0.6 * len(order)))
    for k, (variant, result) in enumerate(variants):
        rows = {row["system"]: row for row in result["systems"]}
        ys = [i + 0.15 * (k - (len(variants) - 1) / 2) for i in range(len(order))]
        ratings = [rows[n]["rating"] for n in order]
        low = [r - (rows[n]["ci_low"] if rows[n]["ci_low"] is not None else r) for n, r in zip(order, ratings)]
        high = [(rows[n]["ci_high"] if rows[n]["ci_high"] is not None else r) - r for n, r in zip(order, ratings)]
        ax.errorbar(ratings, ys, xerr=[low, high], fmt="o", capsize=3, label=variant.replace("_", "-"))
    ax.set_yticks(range(len(order)), order)
    ax.invert_yaxis()
    ax.axvline(1000, color="lightgray", linewidth=1)
    ax.set_xlabel("Bradley-Terry rating (mean 1000), 95% bootstrap interval")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


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

"""`mascot eval compare`: load, judge in every order, summarise, write JSON + CSV + markdown + PNG."""

from __future__ import annotations

import asyncio
import csv
import json
from dataclasses import dataclass
from pathlib import Path

from mascot.errors import MascotError
from mascot.judge.compare import COMPARE_PROMPT_VERSION, OVERALL, CompareJudge, episode_domain, judge_matchups, load_matchups, orders_for
from mascot.judge.compare_report import summarize
from mascot.judge.compare_settings import DEFAULT_COMPARE_ROOT, CompareSettings
from mascot.rubrics import rubric_for


@dataclass
class CompareResult:
    output_dir: Path
    report: dict


def judge_specs(settings: CompareSettings) -> list:
    from mascot.judge.panel import JudgeSpec, load_judges_file
    from mascot.llm.base import DEFAULT_LOCAL_MODEL

    if settings.judges_file:
        return load_judges_file(Path(settings.judges_file))
    provider = "openai-compatible" if settings.provider == "vllm" else settings.provider
    url = ",".join(settings.judge_server_url) if settings.judge_server_url else None
    try:
        return [JudgeSpec(model=m, url=url, provider=provider) for m in settings.judge or [DEFAULT_LOCAL_MODEL]]  # type: ignore[arg-type]
    except ValueError:
        raise MascotError(f"unknown --provider {settings.provider!r}: use openai-compatible, vllm, openai, anthropic or gemini") from None


def default_output_dir(names: list[str]) -> Path:
    return Path(DEFAULT_COMPARE_ROOT) / "_vs_".join(names)


def run_compare(settings: CompareSettings, *, clients: dict | None = None) -> CompareResult:
    """`clients` (judge label -> ChatClient) replaces the endpoints (tests, embedded judges)."""
    names, matchups, unmatched = load_matchups([Path(p) for p in settings.systems], settings.label_list, settings.limit)
    output = Path(settings.output_dir) if settings.output_dir else default_output_dir(names)
    from mascot.store import ensure_writable_dir

    ensure_writable_dir(output, "--output-dir")  # refused before any model call
    rubric = rubric_for(episode_domain(next(iter(matchups[0].episodes.values()))), "collective", settings.rubric_version)
    records, judges = asyncio.run(_judge_all(settings, names, matchups, clients))
    orders = [[names[i] for i in order] for order in orders_for(len(names), settings.orders)]
    report = summarize(records, names, [*rubric.keys, OVERALL], [j.label for j in judges], orders)
    report.update(
        inputs={n: str(p) for n, p in zip(names, settings.systems)}, rubric_version=settings.rubric_version, prompt_version=COMPARE_PROMPT_VERSION,
        domain=rubric.domain, criterion_names={**rubric.names, OVERALL: "Overall"}, unmatched_episodes=unmatched,
        judge_stats={j.label: dict(j.stats) for j in judges},
    )
    write_outputs(output, records, report)
    if records and report["num_failed_verdicts"] == len(records):
        raise MascotError(f"every verdict failed ({len(records)}); see the warnings above and {output / 'verdicts.jsonl'}")
    return CompareResult(output, report)


async def _judge_all(settings: CompareSettings, names: list[str], matchups: list, clients: dict | None):
    from mascot.judge.cache import JudgmentCache
    from mascot.judge.panel import build_judge_backends
    from mascot.llm.limits import ClientLimits

    specs = judge_specs(settings)
    options = ClientLimits(max_in_flight=settings.max_in_flight, request_timeout=settings.request_timeout)
    backends = build_judge_backends(specs, options, overrides=clients)
    cache = None if settings.no_cache else JudgmentCache(settings.cache_dir)
    try:
        await backends.preflight()
        judges = [CompareJudge(client, label, settings.rubric_version, cache, settings.judge_max_tokens) for label, client in backends.clients.items()]
        return await judge_matchups(judges, matchups, names, settings.orders), judges
    finally:
        await backends.aclose()
        if cache:
            cache.close()


# --------------------------------------------------------------------------- outputs


def write_outputs(output: Path, records: list[dict], report: dict) -> None:
    from mascot.store import write_json_atomic

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


def markdown(report: dict) -> str:
    names = report["systems"]
    lines = [f"# Head to head: {' vs '.join(names)}", "",
             f"Judges: {', '.join(report['judges'])}; rubric {report['rubric_version']} ({report['domain']}, collective criteria + overall); "
             f"prompt {report['prompt_version']}; {len(report['orders'])} orders per context; {report['num_verdicts']} verdicts, {report['num_failed_verdicts']} failed.", "",
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

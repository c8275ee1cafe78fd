"""Conversation checks before and after: the first prompts without a turn limit
(`--prompt-version v1 --max-consecutive-turns 0`) against the defaults (prompts v2, at most 2 turns
in a row), and the defaults with `--repetition-penalty 1.15`, on the same contexts and seeds, with
the embedded model in process or a served one.

Each variant is one `mascot generate --mode group` run; the checks (`mascot.metrics.conversation`)
are counted over its episodes and printed side by side, as counts over their units.

    .venv/bin/python benchmarks/conversation_checks.py [--data-file ../shared/data/esconv/test.jsonl] \\
        [--limit 8] [--num-turns 4] [--seed 7] [--server-url http://127.0.0.1:8931/v1 --model DIR] \\
        [--output-dir runs/conversation_checks] [--json]

Without --data-file it reads the test split of the contexts shipped for the learning preset
(`mascot/samples/learn`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

SHIPPED_CONTEXTS = Path(__file__).resolve().parent.parent / "src" / "mascot" / "samples" / "learn"
VARIANTS = {
    "v1, no limit": ["--prompt-version", "v1", "--max-consecutive-turns", "0"],
    "v2, limit 2": ["--prompt-version", "v2", "--max-consecutive-turns", "2"],
    "v2, limit 2, repetition 1.15": ["--prompt-version", "v2", "--max-consecutive-turns", "2", "--repetition-penalty", "1.15"],
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-file", default=None, help="ESConv contexts (the hub export's JSONL; default: the shipped learn contexts)")
    parser.add_argument("--split", default="test", help="the split read from the data (default: test)")
    parser.add_argument("--dataset", default="ESConv")
    parser.add_argument("--limit", type=int, default=8, help="contexts")
    parser.add_argument("--num-turns", type=int, default=4, help="rounds per episode")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--max-tokens", type=int, default=80)
    parser.add_argument("--user-max-tokens", type=int, default=60)
    parser.add_argument("--server-url", default=None, help="an OpenAI-compatible server (default: the in-process embedded model)")
    parser.add_argument("--model", default=None, help="the served model's name (with --server-url)")
    parser.add_argument("--output-dir", type=Path, default=Path("runs/conversation_checks"))
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    return parser.parse_args()


def run_variant(args: argparse.Namespace, name: str, flags: list[str]) -> tuple[Path, float]:
    """Generates (or resumes) one variant's episodes; returns their file and the wall time."""
    out = args.output_dir / name.replace(", ", "_").replace(" ", "_")
    data_file = args.data_file or str(SHIPPED_CONTEXTS)
    command = [sys.executable, "-m", "mascot", "generate", "--mode", "group", "--dataset", args.dataset, "--data-file", data_file, "--split", args.split,
               "--limit", str(args.limit), "--num-turns", str(args.num_turns), "--seed", str(args.seed), "--max-tokens", str(args.max_tokens),
               "--user-max-tokens", str(args.user_max_tokens), "--output-dir", str(out), "--resume", *flags]  # fmt: skip
    if args.server_url:
        command += ["--vllm-server-url", args.server_url] + (["--model", args.model] if args.model else [])
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name}: mascot generate exited {done.returncode}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ''}")
    [episodes] = out.glob("*/episodes.jsonl")  # one run folder per variant
    return episodes, time.perf_counter() - started


def checks_of(episodes_file: Path) -> dict:
    from mascot.metrics.conversation import conversation_report
    from mascot.schema import Episode

    episodes = [Episode.model_validate_json(line) for line in episodes_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    report, _ = conversation_report(episodes)
    return {"episodes": len(episodes), **report}


def table(results: dict[str, dict]) -> str:
    names = list(results)
    first = results[names[0]]
    lines = ["| check (unit) | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for check, row in first["checks"].items():
        cells = [f"{r['checks'][check]['rate']:.0%} ({r['checks'][check]['count']}/{r['checks'][check]['of']})" if r["checks"][check]["of"] else "-"
                 for r in results.values()]  # fmt: skip
        lines.append(f"| `{check}` ({row['unit']}) | " + " | ".join(cells) + " |")
    for figure in ("mean_top_speaker_share", "max_longest_speaker_run"):
        lines.append(f"| {figure} | " + " | ".join(str(r["speaker_balance"][figure]) for r in results.values()) + " |")
    lines.append("| episodes, wall time | " + " | ".join(f"{r['episodes']}, {r['wall_s']:.0f} s" for r in results.values()) + " |")
    return "\n".join(lines)


def main() -> None:
    args = parse_args()
    results = {}
    for name, flags in VARIANTS.items():
        episodes_file, wall_s = run_variant(args, name, flags)
        results[name] = {**checks_of(episodes_file), "wall_s": round(wall_s, 1), "episodes_file": str(episodes_file)}
    where = f"served at {args.server_url}" if args.server_url else "the embedded model in process"
    if args.json:
        print(json.dumps({"backend": where, "limit": args.limit, "num_turns": args.num_turns, "seed": args.seed, "variants": results}, indent=2))
        return
    print(f"conversation checks, {where}: {args.limit} contexts, {args.num_turns} rounds, seed {args.seed}")
    print(table(results))


if __name__ == "__main__":
    main()

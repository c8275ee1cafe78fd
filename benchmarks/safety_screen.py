"""Precision and recall of the safety screen on its labelled set, overall and per category, for the
rules alone and for rules + the embedding check (all-MiniLM-L6-v2, offline).

An item counts as caught when the screen flags it with any crisis category (a crisis message
flagged under another crisis category still reaches the safety reply); per-category figures need
the right category. Also printed: the false positives on benign look-alikes and ordinary messages.

    .venv/bin/python benchmarks/safety_screen.py [--data benchmarks/data/safety_labelled_v1.jsonl] [--no-embeddings] [--threshold T]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from mascot.safety import SafetyScreen

DEFAULT_DATA = Path(__file__).parent / "data" / "safety_labelled_v1.jsonl"


def read_items(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def ratio(num: int, den: int) -> str:
    return f"{num / den:.3f} ({num}/{den})" if den else "n/a"


def evaluate(screen: SafetyScreen, items: list[dict]) -> dict:
    predicted = []
    for item in items:
        finding = screen.check(item["text"])
        predicted.append(finding.category if finding else "none")
    crisis = [i for i, item in enumerate(items) if item["label"] != "none"]
    flagged = [i for i, p in enumerate(predicted) if p != "none"]
    caught = [i for i in flagged if items[i]["label"] != "none"]
    by_category = {}
    for category in sorted({item["label"] for item in items} - {"none"}):
        true = {i for i, item in enumerate(items) if item["label"] == category}
        said = {i for i, p in enumerate(predicted) if p == category}
        by_category[category] = (len(true & said), len(said), len(true))
    by_kind = Counter((items[i]["kind"], items[i]["label"] != "none") for i in flagged)
    totals = Counter((item["kind"], item["label"] != "none") for item in items)
    misses = [items[i]["text"] for i in crisis if predicted[i] == "none"]
    false_alarms = [items[i]["text"] for i in flagged if items[i]["label"] == "none"]
    return {"caught": len(caught), "flagged": len(flagged), "crisis": len(crisis), "by_category": by_category,
            "by_kind": by_kind, "totals": totals, "misses": misses, "false_alarms": false_alarms}


def report(name: str, result: dict) -> None:
    print(f"== {name}")
    print(f"  any crisis: precision {ratio(result['caught'], result['flagged'])}, recall {ratio(result['caught'], result['crisis'])}")
    for category, (hit, said, true) in result["by_category"].items():
        print(f"  {category}: precision {ratio(hit, said)}, recall {ratio(hit, true)}")
    for (kind, is_crisis), total in sorted(result["totals"].items()):
        print(f"  flagged {kind} {'crisis' if is_crisis else 'benign'} items: {result['by_kind'][(kind, is_crisis)]}/{total}")
    print(f"  missed: {result['misses']}")
    print(f"  false alarms: {result['false_alarms']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--no-embeddings", action="store_true")
    parser.add_argument("--threshold", type=float, default=None, help="override the rules' embedding threshold")
    parser.add_argument("--sweep", action="store_true", help="also print any-crisis precision/recall at several thresholds")
    args = parser.parse_args()
    items = read_items(args.data)
    print(f"{len(items)} labelled items from {args.data}")
    report("rules only", evaluate(SafetyScreen(), items))
    if not args.no_embeddings:
        screen = SafetyScreen(embeddings=True)
        if args.threshold is not None:
            from dataclasses import replace

            screen.similarity.rules = replace(screen.rules, embedding_threshold=args.threshold)
        report(f"rules + embeddings (threshold {screen.similarity.rules.embedding_threshold})", evaluate(screen, items))
        if args.sweep:
            sweep(screen, items)


def sweep(screen: SafetyScreen, items: list[dict]) -> None:
    """The trade-off the threshold sets (chosen on this same set, so read it as optimistic)."""
    from dataclasses import replace

    print("== threshold sweep (rules + embeddings, any crisis)")
    base = screen.rules
    for threshold in (0.40, 0.45, 0.50, 0.55, 0.60, 0.65, 0.70):
        screen.similarity.rules = replace(base, embedding_threshold=threshold)
        result = evaluate(screen, items)
        print(f"  {threshold:.2f}: precision {ratio(result['caught'], result['flagged'])}, recall {ratio(result['caught'], result['crisis'])}")
    screen.similarity.rules = base


if __name__ == "__main__":
    main()

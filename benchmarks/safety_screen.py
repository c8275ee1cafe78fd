"""The safety screen measured on held-out phrasings: precision, recall on crisis messages and the
look-alike false-positive rate, overall, per category and per source (the taxonomy category each
held-out item was written from), for rules v1, v2 and v3 (the default) alone and v3 + the embedding
check (all-MiniLM-L6-v2, offline); with --model-url, rules v3 + embeddings + a served model asked about
the messages the first stages leave unsure, and asked about every message they do not flag
(`--safety-model-scope all`). The tuning sets (the rules' labelled set and the
development set) are reported too, as what the rules were tuned on.

An item counts as caught when the screen flags it with any crisis category (a crisis message
flagged under another crisis category still reaches the safety reply); per-category figures need
the right category.

    .venv/bin/python benchmarks/safety_screen.py [--data FILE ...] [--no-embeddings] [--show-misses]
        [--model-url http://127.0.0.1:8000/v1 --model NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from pathlib import Path

from mascot.errors import MascotError
from mascot.safety import SafetyScreen

DATA = Path(__file__).parent / "data"
HELDOUT = DATA / "safety_heldout_v1.jsonl"
TUNING = (DATA / "safety_labelled_v1.jsonl", DATA / "safety_dev_v1.jsonl")


def read_items(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def ratio(num: int, den: int) -> str:
    return f"{num / den:.3f} ({num}/{den})" if den else "n/a"


async def predict(screen: SafetyScreen, items: list[dict]) -> list[tuple[str, str]]:
    """(category or "none", the stage that caught it or "") per item."""
    out = []
    for item in items:
        finding = await screen.check_async(item["text"])
        out.append((finding.category, finding.method) if finding else ("none", ""))
    return out


def evaluate(items: list[dict], predicted: list[tuple[str, str]]) -> dict:
    crisis = [i for i, item in enumerate(items) if item["label"] != "none"]
    flagged = [i for i, (p, _) in enumerate(predicted) if p != "none"]
    caught = [i for i in flagged if items[i]["label"] != "none"]
    by_category = {}
    for category in sorted({item["label"] for item in items} - {"none"}):
        true = {i for i, item in enumerate(items) if item["label"] == category}
        said = {i for i, (p, _) in enumerate(predicted) if p == category}
        by_category[category] = (len(true & said), len(said), len(true))
    kinds = Counter(item["kind"] for item in items)
    flagged_kinds = Counter(items[i]["kind"] for i in flagged)
    return {
        "caught": len(caught),
        "flagged": len(flagged),
        "crisis": len(crisis),
        "benign": len(items) - len(crisis),
        "false_alarms": [items[i]["text"] for i in flagged if items[i]["label"] == "none"],
        "misses": [items[i]["text"] for i in crisis if predicted[i][0] == "none"],
        "by_category": by_category,
        "kinds": [(k, items[[j["kind"] for j in items].index(k)]["label"] != "none", flagged_kinds[k], n) for k, n in kinds.items()],
        "stages": Counter(predicted[i][1] for i in caught),
    }


def model_stage_reach(screen: SafetyScreen, items: list[dict]) -> str:
    """Which messages the first stages do not flag a model stage would be asked about, per scope:
    the bound each scope puts on recall, whatever the model."""
    screenings = screen.assess_many([item["text"] for item in items])
    unflagged = [(item["label"] != "none", s.unsure is not None) for item, s in zip(items, screenings) if s.finding is None]
    missed, benign = [u for crisis, u in unflagged if crisis], [u for crisis, u in unflagged if not crisis]
    return (
        f"  a model stage would be asked about: scope unsure {sum(missed)} of the {len(missed)} crisis messages missed "
        f"and {sum(benign)} of {len(benign)} benign ones; scope all every one of them"
    )


def report(name: str, result: dict, show_misses: bool) -> None:
    print(f"== {name}")
    print(
        f"  crisis messages: precision {ratio(result['caught'], result['flagged'])}, recall {ratio(result['caught'], result['crisis'])}; "
        f"look-alikes and benign flagged {ratio(len(result['false_alarms']), result['benign'])}"
    )
    for category, (hit, said, true) in result["by_category"].items():
        print(f"  {category}: precision {ratio(hit, said)}, recall {ratio(hit, true)}")
    print(
        "  per source kind (crisis: share caught; benign: share flagged): "
        + ", ".join(f"{kind} {flagged}/{n}" + ("" if crisis else " benign") for kind, crisis, flagged, n in result["kinds"])
    )
    print(f"  caught by stage: {dict(result['stages'])}")
    if show_misses:
        print(f"  missed: {result['misses']}")
    print(f"  false alarms: {result['false_alarms']}")


def screens(args, backends) -> list[tuple[str, SafetyScreen]]:
    default = SafetyScreen()
    version = default.rules.version.removeprefix("rules_")
    out = [
        ("rules v1 (before)", SafetyScreen(rules_file="rules_v1.yaml")),
        ("rules v2", SafetyScreen(rules_file="rules_v2.yaml")),
        (f"rules {version} (default)", default),
    ]
    if not args.no_embeddings:
        with_embeddings = SafetyScreen(embeddings=True)
        rules = with_embeddings.rules
        out.append((f"rules {version} + embeddings (threshold {rules.embedding_threshold}, margin {rules.embedding_margin})", with_embeddings))
    if backends is not None:
        from mascot.safety.model_check import ModelCheck

        for scope, what in (("unsure", "unsure messages"), ("all", "every message the first stages do not flag")):
            out.append(
                (
                    f"rules {version}{'' if args.no_embeddings else ' + embeddings'} + model {args.model} on {what}",
                    SafetyScreen(embeddings=not args.no_embeddings, model_check=ModelCheck(backends["safety"]), model_scope=scope),
                )
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, nargs="+", default=[HELDOUT, *TUNING])
    parser.add_argument("--no-embeddings", action="store_true")
    parser.add_argument("--show-misses", action="store_true", help="print the missed crisis messages too")
    parser.add_argument("--model-url", default=None, help="an OpenAI-compatible endpoint for the second stage")
    parser.add_argument("--model", default="default", help="the served model's name (with --model-url)")
    args = parser.parse_args()
    try:
        asyncio.run(measure(args))
    except MascotError as exc:  # LLMError included: a server that does not answer is one line
        raise SystemExit(f"error: {exc}") from None


async def measure(args) -> None:
    """Every data file through every screen, in one event loop (the served model's client lives in
    it), after a run's preflight: a wrong URL or model fails here, and the label is constrained only
    where the server honours structured outputs."""
    backends = None
    if args.model_url:
        from mascot.llm.providers import RoleEndpoint, build_backends

        backends = build_backends({"safety": RoleEndpoint(role="safety", model=args.model, url=args.model_url)})
    try:
        if backends is not None:
            await backends.preflight()
        built = screens(args, backends)
        for path in args.data:
            items = read_items(path)
            sources = Counter(item.get("source", "") for item in items if item.get("source"))
            print(
                f"\n#### {len(items)} items from {path.name}: {sum(i['label'] != 'none' for i in items)} crisis, "
                f"{sum(i['label'] == 'none' for i in items)} benign" + (f"; {len(sources)} sources" if sources else "")
            )
            for name, screen in built:
                report(name, evaluate(items, await predict(screen, items)), args.show_misses)
                if screen.model_check is None and screen.similarity is not None:
                    print(model_stage_reach(screen, items))
                if screen.model_check is not None:
                    check = screen.model_check
                    print(f"  second stage: asked {check.asked}, caught {check.caught}, fallbacks {check.fallbacks}")
                    check.asked = check.caught = check.fallbacks = 0
    finally:
        if backends is not None:
            await backends.aclose()


if __name__ == "__main__":
    main()

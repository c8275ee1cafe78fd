"""The safety screen on messages real people wrote: every seeker turn of ESConv and every utterance
of Empathetic Dialogues, read from their hub exports (../shared/data by default; the data is never
shipped with MASCOT). Nobody wrote these for the screen, so they show what it does in a real
conversation: how often it interrupts one for nothing, and which real crisis messages it misses.

The labels (`benchmarks/data/safety_real_labels_v1.jsonl`) hold references only
(`esconv/<split>/<line>/<turn>`, `ed/<split>/<conv_id>/<utterance_idx>`) and a hand label for each
message reviewed: a crisis category, `none`, or `unclear` (left out of every figure). The 685
reviewed are every message that rules v2 (with embeddings) flagged, every message a broad keyword
search found, and the 300 messages closest to the rules' crisis examples; a crisis message none of
those found is not labelled, so recall is over the crisis messages found that way.

Two parts: `dev` (ESConv train and valid, ED valid), whose false alarms the rules v3 were corrected
on, and `test` (ESConv test, ED test), kept apart. Per screen and part: messages, flagged (crisis,
false alarms, unclear, not reviewed), recall on the labelled crisis messages, and the share left
unsure (what a second-stage model would be asked about).

    .venv/bin/python benchmarks/safety_real_messages.py [--data-dir ../shared/data] [--no-embeddings] [--show]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from mascot.data.empathetic import csv_rows, decode_text
from mascot.errors import MascotError
from mascot.safety import SafetyScreen

ROOT = Path(__file__).resolve().parents[1]
LABELS = Path(__file__).parent / "data" / "safety_real_labels_v1.jsonl"
DEFAULT_DATA = ROOT.parent / "shared" / "data"
CRISIS = ("suicide", "self_harm", "abuse", "danger_to_others")


def esconv_messages(folder: Path) -> list[tuple[str, str]]:
    out = []
    for split in ("train", "valid", "test"):
        path = folder / f"{split}.jsonl"
        for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            for turn_no, turn in enumerate(json.loads(line)["dialog"]) if line.strip() else ():
                if turn.get("speaker") == "usr" and turn.get("text", "").strip():
                    out.append((f"esconv/{split}/{line_no}/{turn_no}", turn["text"].strip()))
    return out


def ed_messages(folder: Path) -> list[tuple[str, str]]:
    return [
        (f"ed/{split}/{row['conv_id']}/{row['utterance_idx']}", decode_text(row["utterance"]))
        for split in ("valid", "test")
        for _, row in csv_rows(folder / f"{split}.csv")
    ]


def part_of(ref: str) -> str:
    return "test" if ref.split("/")[1] == "test" else "dev"


def read_labels(path: Path) -> dict[str, str]:
    return {row["ref"]: row["label"] for row in map(json.loads, path.read_text(encoding="utf-8").splitlines()) if row}


def measure(screen: SafetyScreen, messages: list[tuple[str, str]], labels: dict[str, str]) -> dict[str, dict]:
    screenings = screen.assess_many([text for _, text in messages])
    parts: dict[str, dict] = {}
    for (ref, text), screening in zip(messages, screenings):
        part = parts.setdefault(
            part_of(ref), {"messages": 0, "flagged": Counter(), "unsure": 0, "crisis": 0, "caught": 0, "false_alarms": [], "misses": []}
        )
        part["messages"] += 1
        label = labels.get(ref)
        crisis = label in CRISIS
        part["crisis"] += crisis
        if screening.finding is None:
            part["unsure"] += screening.unsure is not None
            if crisis:
                part["misses"].append((ref, text))
            continue
        kind = "crisis" if crisis else {"none": "false alarm", "unclear": "unclear", None: "not reviewed"}[label]
        part["flagged"][kind] += 1
        part["caught"] += crisis
        if kind in ("false alarm", "not reviewed"):
            part["false_alarms"].append((ref, kind, screening.finding.method, text))
    return parts


def report(name: str, parts: dict[str, dict], show: bool) -> None:
    print(f"== {name}")
    for part in ("dev", "test"):
        p = parts.get(part)
        if not p:
            continue
        flagged = sum(p["flagged"].values())
        alarms = p["flagged"]["false alarm"] + p["flagged"]["not reviewed"]
        print(
            f"  {part}: {p['messages']} messages, flagged {flagged} ({flagged / p['messages']:.2%}): "
            + ", ".join(f"{kind} {p['flagged'][kind]}" for kind in ("crisis", "false alarm", "unclear", "not reviewed"))
            + f"; one false alarm per {p['messages'] // alarms if alarms else p['messages']}+ messages; "
            f"recall {p['caught']}/{p['crisis']}"
            + (f" ({p['caught'] / p['crisis']:.3f})" if p["crisis"] else "")
            + f"; left unsure {p['unsure']} ({p['unsure'] / p['messages']:.2%})"
        )
        if show:
            for ref, kind, method, text in p["false_alarms"]:
                print(f"    {kind} [{method}] {ref}: {text[:140]!r}")
            for ref, text in p["misses"]:
                print(f"    missed {ref}: {text[:140]!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="the folder holding esconv/ and ed/ in their hub export formats (default: ../shared/data, skipped when absent)",
    )
    parser.add_argument("--labels", type=Path, default=LABELS)
    parser.add_argument("--no-embeddings", action="store_true")
    parser.add_argument("--show", action="store_true", help="print each false alarm and each missed crisis message")
    args = parser.parse_args()
    if args.data_dir is None:
        args.data_dir = DEFAULT_DATA
        if not (DEFAULT_DATA / "esconv").is_dir():  # `make bench` on a machine without the data
            print(f"skipped: no ESConv copy under {DEFAULT_DATA} (pass --data-dir)")
            return
    try:
        messages = esconv_messages(args.data_dir / "esconv") + ed_messages(args.data_dir / "ed")
    except (OSError, KeyError, ValueError, MascotError) as exc:
        raise SystemExit(f"error: cannot read ESConv and Empathetic Dialogues under {args.data_dir}: {exc}") from None
    if not messages:
        raise SystemExit(f"error: no message in the ESConv and Empathetic Dialogues files under {args.data_dir}")
    try:
        labels = read_labels(args.labels)
    except KeyError as exc:
        raise SystemExit(f"error: cannot read the labels {args.labels}: a row has no {exc} field") from None
    except (OSError, ValueError, TypeError) as exc:
        raise SystemExit(f"error: cannot read the labels {args.labels}: {exc}") from None
    counts = Counter(part_of(ref) for ref, _ in messages)
    crisis = Counter(part_of(ref) for ref, label in labels.items() if label in CRISIS)
    print(
        f"{len(messages)} real messages (dev {counts['dev']}, test {counts['test']}); {len(labels)} reviewed by hand, "
        f"{sum(crisis.values())} of them crisis messages (dev {crisis['dev']}, test {crisis['test']})"
    )
    screens = [
        ("rules v1", SafetyScreen(rules_file="rules_v1.yaml")),
        ("rules v2", SafetyScreen(rules_file="rules_v2.yaml")),
        (f"rules {SafetyScreen().rules.version.removeprefix('rules_')} (default)", SafetyScreen()),
    ]
    if not args.no_embeddings:
        screens.append(("default rules + embeddings", SafetyScreen(embeddings=True)))
    for name, screen in screens:
        started = time.perf_counter()
        parts = measure(screen, messages, labels)
        report(f"{name} ({time.perf_counter() - started:.0f} s)", parts, args.show)


if __name__ == "__main__":
    main()

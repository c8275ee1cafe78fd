"""`mascot study create`: pair two systems' episodes on the same contexts into a blinded study.

Every rater rates every pair, in their own order, each pair with its own left/right placement; all
of it drawn from one seed and recorded in the file. Attention checks are pairs whose one side is
an obviously broken copy of a real conversation (every companion reply replaced by a canned
error line): a rater who does not prefer the intact side fails the check.
"""

from __future__ import annotations

import hashlib
import json
import random
import secrets
from dataclasses import dataclass
from pathlib import Path

from mascot.episodes import load_episode_file
from mascot.errors import MascotError
from mascot.schema import Episode, utc_now
from mascot.study.db import StudyError, opened, transaction
from mascot.system_labels import describe_system, distinct_labels, system_traits

BROKEN_REPLIES = (
    "ERROR 0x3F: reply unavailable. Please enter your order number to continue.",
    "asdf asdf lorem ipsum the the the",
    "Our office hours are Monday to Friday, 9am to 5pm. Press 1 for billing.",
)

# What datasets and the engine call the person seeking help: replaced by a label a rater reads.
GENERIC_USER_NAMES = frozenset({"user", "usr", "seeker", "person", "you"})


@dataclass(frozen=True)
class BuiltStudy:
    path: Path
    num_pairs: int
    num_attention_checks: int
    rater_tokens: list[str]
    owner_token: str
    system_a: str = ""
    system_b: str = ""


def episodes_by_context(path: Path, flag: str) -> dict[str, Episode]:
    """The first episode of each context in a file (later ones for the same context are ignored)."""

    try:
        loaded = load_episode_file(Path(path), fallback_dataset="unknown")
    except MascotError as exc:
        raise StudyError(f"{flag} {exc}") from None
    found: dict[str, Episode] = {}
    for episode in loaded.episodes:
        key = episode.context_id or episode.conv_id or episode.episode_id
        found.setdefault(key, episode)
    if not found:
        raise StudyError(f"{flag} {path}: no episodes")
    return found


def refuse_identical(a_path: Path, b_path: Path) -> None:
    """Two systems are compared: the same file twice (by path or by content) would be a study of
    nothing, every preference a coin toss."""
    a_path, b_path = Path(a_path), Path(b_path)
    if not (a_path.is_file() and b_path.is_file()):
        return  # a missing file gets its own error when it is read
    if a_path.resolve() == b_path.resolve():
        raise StudyError(f"--a and --b are the same file ({a_path}): give the episodes of two different systems")
    if file_digest(a_path) == file_digest(b_path):
        raise StudyError(f"--a {a_path} and --b {b_path} have the same content: give the episodes of two different systems")


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def system_names(a: dict[str, Episode], b: dict[str, Episode], system_a: str | None = None, system_b: str | None = None) -> tuple[str, str]:
    """The names the results give the two systems: --system-a/--system-b where given, else each
    run's recorded label, told apart by what its system ran with where both share one ("mascot
    (directed)", "mascot (round-robin)"); two runs of one system under one name are refused."""
    first_a, first_b = next(iter(a.values())).metadata, next(iter(b.values())).metadata
    runs = [
        (system_a, None) if system_a else (first_a.system, system_traits(first_a)),
        (system_b, None) if system_b else (first_b.system, system_traits(first_b)),
    ]
    names = distinct_labels(runs)
    if names is not None:
        return names[0], names[1]
    if system_a and system_b:
        raise StudyError(f"--system-a and --system-b are both {system_a!r}: give the two systems different names")
    if system_a or system_b:
        given, other = ("a", "b") if system_a else ("b", "a")
        raise StudyError(f"--system-{given} {system_a or system_b!r} is also --{other}'s system: name it with --system-{other}")
    shown = describe_system(first_a.system, system_traits(first_a))
    raise StudyError(f"--a and --b are runs of one system ({shown}): to compare them, name them with --system-a and --system-b")


def matched_contexts(a: dict[str, Episode], b: dict[str, Episode]) -> list[str]:
    only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    if only_a or only_b:
        raise StudyError(
            f"--a and --b must cover the same contexts: {len(only_a)} only in --a ({', '.join(only_a[:3]) or '-'}), "
            f"{len(only_b)} only in --b ({', '.join(only_b[:3]) or '-'})"
        )
    return sorted(a)


def situation_of(episode: Episode) -> str:
    """The breakdown key: the context's emotion, else its problem type, else its dataset."""
    ctx = episode.context
    if ctx is None:
        return episode.initial_emotion or episode.metadata.dataset or "unknown"
    return ctx.emotion or ctx.problem_type or ctx.dataset or "unknown"


def context_view(episode: Episode) -> dict:
    """What a rater sees of the context: the situation and the opening lines (no system names)."""
    ctx = episode.context
    if ctx is None:
        return {"situation": "", "opening": []}
    situation = ctx.situation or ctx.query or ""
    lines = [line for line in (ctx.opening_turns or ctx.transcript) if line.text.strip() != situation.strip()]
    person = person_label(episode)
    opening = [{"speaker": person if line.speaker.lower() in GENERIC_USER_NAMES else line.speaker, "text": line.text} for line in lines]
    return {"situation": situation, "emotion": ctx.emotion, "opening": opening}


def conversation_view(episode: Episode) -> list[dict]:
    """The turns a rater sees: speaker and text only (no directives, models or ids). The rater is
    not the person in the conversation, so the person's lines are not labelled "You"."""
    person = person_label(episode)
    return [{"speaker": person if t.is_user else t.agent_name, "is_user": t.is_user, "text": t.response} for t in episode.turns]


def person_label(episode: Episode) -> str:
    """What a rater reads beside the person's lines: the situation's own name for them when the
    record gives one (a named user turn), else "The participant" in a meeting, "The person" elsewhere."""
    named = {t.agent_name.strip() for t in episode.turns if t.is_user and t.agent_name.strip().lower() not in GENERIC_USER_NAMES}
    if len(named) == 1:
        return named.pop()
    return "The participant" if episode.context is not None and episode.context.is_meeting else "The person"


def broken_copy(conversation: list[dict], rng: random.Random) -> list[dict]:
    return [turn if turn["is_user"] else {**turn, "text": rng.choice(BROKEN_REPLIES)} for turn in conversation]


def _pair_rows(contexts: list[str], a: dict[str, Episode], b: dict[str, Episode], attention_checks: int, rng: random.Random) -> list[tuple]:
    rows = []
    for key in contexts:
        ep_a, ep_b = a[key], b[key]
        rows.append((key, situation_of(ep_a), context_view(ep_a), conversation_view(ep_a), conversation_view(ep_b), "pair", None))
    for key in rng.sample(contexts, min(attention_checks, len(contexts))) if attention_checks else []:
        intact_side = rng.choice("ab")
        source = conversation_view(a[key] if intact_side == "a" else b[key])
        broken = broken_copy(source, rng)
        sides = (source, broken) if intact_side == "a" else (broken, source)
        rows.append((key, situation_of(a[key]), context_view(a[key]), *sides, "attention", intact_side))
    return rows


def _insert(conn, rows: list[tuple], num_raters: int, rng: random.Random) -> list[str]:
    for pair_id, (key, situation, context, conv_a, conv_b, kind, expected) in enumerate(rows):
        conn.execute(
            "INSERT INTO pairs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (pair_id, key, situation, json.dumps(context), json.dumps(conv_a), json.dumps(conv_b), kind, expected),
        )
    tokens = []
    for rater_id in range(num_raters):
        token = secrets.token_urlsafe(24)
        tokens.append(token)
        conn.execute("INSERT INTO raters VALUES (?, ?)", (rater_id, token))
        order = list(range(len(rows)))
        rng.shuffle(order)
        for position, pair_id in enumerate(order):
            conn.execute(
                "INSERT INTO items (rater_id, pair_id, position, left_side) VALUES (?, ?, ?, ?)", (rater_id, pair_id, position, rng.choice("ab"))
            )
    return tokens


def create_study(
    a_path: Path,
    b_path: Path,
    out: Path,
    *,
    raters: int,
    attention_checks: int = 0,
    seed: int = 0,
    system_a: str | None = None,
    system_b: str | None = None,
    overwrite: bool = False,
) -> BuiltStudy:
    refuse_identical(a_path, b_path)
    a, b = episodes_by_context(a_path, "--a"), episodes_by_context(b_path, "--b")
    contexts = matched_contexts(a, b)
    system_a, system_b = system_names(a, b, system_a, system_b)
    out = Path(out)
    if out.exists() and not overwrite:
        raise StudyError(f"--out {out} exists: pick another path or pass --overwrite")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{out}{suffix}").unlink(missing_ok=True)
    rng = random.Random(seed)
    rows = _pair_rows(contexts, a, b, attention_checks, rng)
    owner = secrets.token_urlsafe(24)
    info = {
        "created_at": utc_now(),
        "seed": seed,
        "owner_token": owner,
        "csrf_secret": secrets.token_hex(32),
        "system_a": system_a,
        "system_b": system_b,
        "source_a": str(a_path),
        "source_b": str(b_path),
        "num_raters": raters,
        "attention_checks": attention_checks,
        # Never shown to raters: lets judges' files on the same episodes be matched to the pairs.
        "episode_ids": {key: {"a": a[key].episode_id, "b": b[key].episode_id} for key in contexts},
    }
    with opened(out, create=True) as conn, transaction(conn):
        conn.executemany("INSERT INTO meta VALUES (?, ?)", [(k, json.dumps(v)) for k, v in info.items()])
        tokens = _insert(conn, rows, raters, rng)
    return BuiltStudy(out, len(contexts), len(rows) - len(contexts), tokens, owner, system_a, system_b)

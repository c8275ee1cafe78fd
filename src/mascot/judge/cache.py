"""On-disk cache of judgments, keyed by (judge model, rubric version, prompt version, content,
scoring mode).

A re-run over the same items costs no model call. One small sqlite file (WAL mode, so several
processes can share it); within a process, concurrent requests for the same key wait for the first
one instead of calling the model twice. Only successful judgments are stored: a failed one is
retried on the next run.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

from mascot.files import cache_root

CACHE_FILE = "judge_cache.sqlite"


def default_cache_dir() -> Path:
    """The judgment cache: $MASCOT_JUDGE_CACHE_DIR, else the mascot cache folder."""
    if os.environ.get("MASCOT_JUDGE_CACHE_DIR"):
        return Path(os.environ["MASCOT_JUDGE_CACHE_DIR"]).expanduser()
    return cache_root()


def cache_key(judge_model: str, rubric_version: str, template_version: str, content: str, scoring: str = "json") -> str:
    """`content` is the item's fingerprint (what reaches the prompt), so a cache hit needs no
    rendering; `scoring` is the judge's mode (json verdicts or answer probabilities)."""
    payload = "\x1f".join((judge_model, rubric_version, template_version, content, scoring))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class JudgmentCache:
    def __init__(self, cache_dir: Path | str | None = None) -> None:
        self.dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / CACHE_FILE
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS judgments (key TEXT PRIMARY KEY, judge_model TEXT, rubric_version TEXT, "
            "template_version TEXT, value TEXT NOT NULL, created_at TEXT DEFAULT CURRENT_TIMESTAMP)"
        )
        self._pending: dict[str, asyncio.Future] = {}
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> dict | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM judgments WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def get_many(self, keys: list[str]) -> dict[str, dict]:
        """Cached values of many keys in a few queries (the cheap path of a re-run)."""
        found: dict[str, dict] = {}
        unique = list(dict.fromkeys(keys))
        with self._lock:
            for start in range(0, len(unique), 500):  # SQLite's host-parameter limit
                chunk = unique[start : start + 500]
                rows = self._db.execute(f"SELECT key, value FROM judgments WHERE key IN ({','.join('?' * len(chunk))})", chunk).fetchall()
                found.update((key, json.loads(value)) for key, value in rows)
        self.hits += len(found)
        return found

    def put(self, key: str, value: dict, *, judge_model: str = "", rubric_version: str = "", template_version: str = "") -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO judgments (key, judge_model, rubric_version, template_version, value) VALUES (?, ?, ?, ?, ?)",
                (key, judge_model, rubric_version, template_version, json.dumps(value, ensure_ascii=False)),
            )

    async def get_or_compute(self, key: str, compute: Callable[[], Awaitable[dict]], **labels: str) -> tuple[dict, bool]:
        """The cached value, or `compute()`'s (stored unless it has "failed"). Returns (value, was_cached)."""
        cached = self.get(key)
        if cached is not None:
            self.hits += 1
            return cached, True
        pending = self._pending.get(key)
        if pending is not None:  # the same content is being judged right now: share that call
            value = await asyncio.shield(pending)
            if value.get("failed"):
                return value, False
            self.hits += 1
            return value, True
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        self.misses += 1
        try:
            value = await compute()
            if not value.get("failed"):
                self.put(key, value, **labels)
            future.set_result(value)
            return value, False
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it, nobody else has to
            raise
        finally:
            self._pending.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM judgments").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()

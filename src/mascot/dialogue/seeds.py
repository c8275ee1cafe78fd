"""Seeds derived from (run seed, context, episode, round, purpose), so that every random choice of
an episode is the same whether episodes run one by one or sixty-four at a time."""

from __future__ import annotations

import hashlib
import random


def derive_seed(*parts: object) -> int:
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def derived_rng(*parts: object) -> random.Random:
    return random.Random(derive_seed(*parts))
